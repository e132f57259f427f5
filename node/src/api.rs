//! The node's HTTP API (axum): health, peers, capsules, Prometheus metrics, the A2A
//! endpoint and agent cards.
//!
//! Who may call is the node's [`ClientPolicy`]: loopback clients by default, others with a
//! bearer token from the config. `/healthz` and agent cards are open to all.
//!
//! Errors are a status plus `{"error":{"code":"…","message":"…"}}`. Build the router with
//! [`app`] and test it in process with `tower::ServiceExt::oneshot`.

pub mod a2a;
pub mod artifacts;
mod cards;
mod metrics;
pub mod runtime;
mod traces;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Instant;

use axum::extract::{ConnectInfo, DefaultBodyLimit, Request, State};
use axum::http::{Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use murmur_config::ClientPolicy;
use murmur_net::NetHandle;
use murmur_runtime::Runtime;

use crate::tasks::TaskService;

/// What the HTTP handlers read.
#[derive(Debug)]
pub struct ApiState {
    pub peer_id: String,
    pub api_addr: SocketAddr,
    pub started: Instant,
    pub net: NetHandle,
    pub runtime: Runtime,
    pub tasks: TaskService,
    pub policy: ClientPolicy,
    /// SSE streams open now.
    pub streams: AtomicUsize,
    /// Pulls artifacts from the mesh.
    pub puller: crate::artifacts::Puller,
    /// Where `mur install` pins and writes capsule manifests.
    pub install: artifacts::InstallTarget,
}

/// The router, with every route the node serves.
pub fn app(state: Arc<ApiState>) -> Router {
    let guarded = Router::new()
        .route("/v1/peers", get(peers))
        .route("/v1/capsules", get(capsules))
        .route("/metrics", get(prometheus))
        .route("/v1/runtime/capsules", get(runtime::installed))
        .route("/v1/tools/{name}/run", post(runtime::run_tool))
        .route("/v1/capsules/{name}/run", post(runtime::run_capsule))
        .route("/v1/artifacts/pull", post(artifacts::pull))
        .route("/v1/tasks/{id}/trace", get(traces::task_trace))
        .route("/", post(a2a::rpc_node))
        .route("/a2a", post(a2a::rpc_node))
        .route("/a2a/{capsule}", post(a2a::rpc_capsule))
        .layer(DefaultBodyLimit::max(murmur_config::limits::A2A_REQUEST_BYTES_MAX))
        .route_layer(middleware::from_fn_with_state(state.clone(), admit));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/.well-known/agent-card.json", get(cards::node_card))
        .route("/.well-known/agent.json", get(cards::node_card))
        .route("/a2a/{capsule}/.well-known/agent-card.json", get(cards::capsule_card))
        .merge(guarded)
        .fallback(not_found)
        .with_state(state)
}

/// The client policy: loopback callers (by default) and holders of a configured token.
async fn admit(State(state): State<Arc<ApiState>>, request: Request, next: Next) -> Response {
    // In-process callers (tests) have no socket address: they are this process.
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
    let bearer = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    let admitted = peer.is_none_or(|ip| state.policy.admits(ip, bearer));
    if !admitted {
        let message = if bearer.is_some() {
            "the bearer token is not one this node accepts"
        } else if peer.is_some_and(|ip| ip.is_loopback()) {
            "this node needs `Authorization: Bearer TOKEN` from every client, on this machine too (api.loopback_open = false; mur: --token or MURMUR_TOKEN)"
        } else {
            "clients from other machines need `Authorization: Bearer TOKEN` (api.tokens in the node's config; mur: --token or MURMUR_TOKEN)"
        };
        let mut response = error(StatusCode::UNAUTHORIZED, "unauthorized", message);
        response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        return response;
    }
    next.run(request).await
}

async fn healthz(State(state): State<Arc<ApiState>>) -> Json<serde_json::Value> {
    Json(json!({
        "status": "ok",
        "peer_id": state.peer_id,
        "uptime_secs": state.started.elapsed().as_secs(),
    }))
}

async fn peers(State(state): State<Arc<ApiState>>) -> Response {
    match state.net.peers().await {
        Ok(view) => Json(view).into_response(),
        Err(err) => unavailable(&err),
    }
}

async fn capsules(State(state): State<Arc<ApiState>>) -> Response {
    match state.net.capsules().await {
        Ok(view) => Json(view).into_response(),
        Err(err) => unavailable(&err),
    }
}

async fn prometheus(State(state): State<Arc<ApiState>>) -> Response {
    match state.net.metrics().await {
        Ok(m) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], metrics::render(&m)).into_response(),
        Err(err) => unavailable(&err),
    }
}

async fn not_found(method: Method, uri: Uri) -> Response {
    error(StatusCode::NOT_FOUND, "not_found", &format!("no route for {method} {}", uri.path()))
}

pub(crate) fn unavailable(err: &anyhow::Error) -> Response {
    error(StatusCode::SERVICE_UNAVAILABLE, "mesh_unavailable", &format!("{err:#}"))
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
    use murmur_api::views::{CapsuleView, CapsulesView, PeersView};
    use murmur_net::Query;

    /// A state whose mesh is a stub task answering queries with fixed views.
    async fn state() -> Arc<ApiState> {
        let (tx, mut rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            while let Some(query) = rx.recv().await {
                match query {
                    Query::Peers(reply) => {
                        let _ = reply.send(PeersView { local_peer_id: "me".into(), peers: vec![] });
                    }
                    Query::Capsules(reply) => {
                        let _ = reply.send(CapsulesView {
                            capsules: vec![CapsuleView { name: "echo".into(), providers: vec![] }],
                        });
                    }
                    Query::Metrics(reply) => {
                        let _ = reply.send(murmur_net::NetMetrics::default());
                    }
                    Query::SetHosted(_, reply) => {
                        let _ = reply.send(());
                    }
                }
            }
        });
        // The directory lives for the rest of the test process (a few KiB in /tmp).
        let dir = tempfile::tempdir().unwrap().keep();
        let store = Arc::new(murmur_store::ArtifactStore::open(&dir.join("store")).unwrap());
        let runtime = Runtime::new(
            murmur_runtime::RuntimeOptions { data_dir: dir.clone(), pooling: false },
            store,
            murmur_runtime::ports::Ports::standalone().unwrap(),
        )
        .unwrap();
        let manager = crate::tasks::TaskManager::open(&dir.join("tasks.redb")).await.unwrap();
        let net = NetHandle::for_tests(tx);
        Arc::new(ApiState {
            peer_id: "12D3KooWtest".into(),
            api_addr: "127.0.0.1:7420".parse().unwrap(),
            started: Instant::now(),
            tasks: TaskService::new(manager, net.clone()),
            puller: crate::artifacts::Puller::new(
                net.clone(),
                runtime.store().clone(),
                vec![],
                crate::artifacts::Advertiser::new(net.clone(), runtime.store().clone()),
            ),
            install: artifacts::InstallTarget::new(&dir, &dir.join("capsules"), vec![]),
            net,
            runtime,
            policy: ClientPolicy { loopback_open: true, tokens: vec![] },
            streams: AtomicUsize::new(0),
        })
    }

    async fn get(uri: &str) -> (StatusCode, String) {
        let response =
            app(state().await).oneshot(Request::get(uri).body(Body::empty()).unwrap()).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn healthz_reports_ok_and_the_peer_id() {
        let (status, body) = get("/healthz").await;
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(status, StatusCode::OK);
        assert_eq!((body["status"].as_str(), body["peer_id"].as_str()), (Some("ok"), Some("12D3KooWtest")));
    }

    #[tokio::test]
    async fn peers_and_capsules_are_json_views() {
        let (status, body) = get("/v1/capsules").await;
        assert_eq!(status, StatusCode::OK);
        let view: CapsulesView = serde_json::from_str(&body).unwrap();
        assert_eq!(view.capsules[0].name, "echo");
        let (_, body) = get("/v1/peers").await;
        assert_eq!(serde_json::from_str::<PeersView>(&body).unwrap().local_peer_id, "me");
    }

    #[tokio::test]
    async fn metrics_are_prometheus_text() {
        let (status, body) = get("/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("# TYPE murmur_peers_connected gauge"), "{body}");
        assert!(body.contains("murmur_adverts_refused_total{reason=\"bad_signature\"} 0"), "{body}");
    }

    #[tokio::test]
    async fn running_an_unknown_tool_is_a_404_in_the_error_shape() {
        let response = app(state().await)
            .oneshot(
                Request::post("/v1/tools/nope/run")
                    .header("content-type", "application/json")
                    .body(Body::from(r#"{"data":"x"}"#))
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(body["error"]["message"], "no capsule or tool named `nope` runs on this node");
        let (status, body) = get("/v1/runtime/capsules").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "[]"));
    }

    #[tokio::test]
    async fn unknown_routes_get_the_error_shape() {
        let (status, body) = get("/nope").await;
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(body["error"]["code"], "not_found");
        assert_eq!(body["error"]["message"], "no route for GET /nope");
    }
}
