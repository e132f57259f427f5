//! The node's HTTP API (axum): health now; peers, capsules and metrics with the mesh.
//!
//! Errors are a status plus `{"error":{"code":"…","message":"…"}}`. Build the router with
//! [`app`] and test it in process with `tower::ServiceExt::oneshot`.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

/// What the HTTP handlers read.
#[derive(Debug)]
pub struct ApiState {
    pub peer_id: String,
    pub started: Instant,
}

/// The router, with every route the node serves.
pub fn app(state: Arc<ApiState>) -> Router {
    Router::new().route("/healthz", get(healthz)).fallback(not_found).with_state(state)
}

async fn healthz(State(state): State<Arc<ApiState>>) -> Json<serde_json::Value> {
    Json(json!({
        "status": "ok",
        "peer_id": state.peer_id,
        "uptime_secs": state.started.elapsed().as_secs(),
    }))
}

async fn not_found(method: Method, uri: Uri) -> Response {
    error(StatusCode::NOT_FOUND, "not_found", &format!("no route for {method} {}", uri.path()))
}

/// An error response in the API's one error shape.
pub fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (status, Json(json!({ "error": { "code": code, "message": message } }))).into_response()
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    use super::*;

    fn state() -> Arc<ApiState> {
        Arc::new(ApiState { peer_id: "12D3KooWtest".into(), started: Instant::now() })
    }

    async fn get_json(uri: &str) -> (StatusCode, serde_json::Value) {
        let response = app(state()).oneshot(Request::get(uri).body(Body::empty()).unwrap()).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn healthz_reports_ok_and_the_peer_id() {
        let (status, body) = get_json("/healthz").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["status"], "ok");
        assert_eq!(body["peer_id"], "12D3KooWtest");
    }

    #[tokio::test]
    async fn unknown_routes_get_the_error_shape() {
        let (status, body) = get_json("/nope").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(body["error"]["code"], "not_found");
        assert_eq!(body["error"]["message"], "no route for GET /nope");
    }
}
