//! Runtime routes: what the node runs, and running a tool or capsule once.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use murmur_api::runtime::{InstalledView, ToolInputJson};
use murmur_runtime::{RunError, ToolInput};

use super::{ApiState, error};

pub(super) async fn installed(State(state): State<Arc<ApiState>>) -> Json<Vec<InstalledView>> {
    Json(state.runtime.installed().iter().map(|i| i.view()).collect())
}

pub(super) async fn run_tool(
    State(state): State<Arc<ApiState>>,
    Path(name): Path<String>,
    Json(input): Json<ToolInputJson>,
) -> Response {
    let input = ToolInput { data: input.data, log_path: input.log_path };
    match state.runtime.run_tool(&name, input).await {
        Ok(run) => Json(run).into_response(),
        Err(err) => call_error(&err),
    }
}

pub(super) async fn run_capsule(State(state): State<Arc<ApiState>>, Path(name): Path<String>) -> Response {
    match state.runtime.run_capsule(&name).await {
        Ok(run) => Json(run).into_response(),
        Err(err) => call_error(&err),
    }
}

fn call_error(err: &RunError) -> Response {
    let (status, code) = match err {
        RunError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
        RunError::WrongKind { .. } => (StatusCode::CONFLICT, "wrong_kind"),
        RunError::Deadline { .. } => (StatusCode::GATEWAY_TIMEOUT, "deadline_exceeded"),
        RunError::Limit { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "limit_exceeded"),
        RunError::Trap { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "trapped"),
        RunError::Start { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "start_failed"),
    };
    error(status, code, &err.to_string())
}
