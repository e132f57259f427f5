//! Runtime routes: what the node runs, and running a tool or capsule once.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::{ApiState, error};
use crate::runtime::bindings::murmur::tool::run::ToolInput;
use crate::runtime::{CallError, Installed};

/// One capsule the node runs (`GET /v1/runtime/capsules`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct InstalledView {
    pub name: String,
    pub version: String,
    pub kind: String,
    pub digest: String,
    pub description: String,
    pub tools_allow: Vec<String>,
    pub shell_allow: Vec<String>,
    pub network_allow: Vec<String>,
    pub memory_mb: u64,
    pub deadline_ms: u64,
    pub workdir: String,
}

impl From<&Installed> for InstalledView {
    fn from(i: &Installed) -> Self {
        let m = &i.manifest;
        Self {
            name: m.name.clone(),
            version: m.version.clone(),
            kind: m.kind.as_str().into(),
            digest: i.loaded.digest.to_string(),
            description: m.description.clone(),
            tools_allow: m.capabilities.tools.clone(),
            shell_allow: m.capabilities.shell.clone(),
            network_allow: m.capabilities.network.iter().map(ToString::to_string).collect(),
            memory_mb: m.memory_bytes >> 20,
            deadline_ms: m.deadline.as_millis() as u64,
            workdir: m.workdir.display().to_string(),
        }
    }
}

/// A tool's input as JSON (`murmur:tool/run`'s `tool-input`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolInputJson {
    #[serde(default)]
    pub data: Option<String>,
    #[serde(default)]
    pub log_path: Option<String>,
}

pub(super) async fn installed(State(state): State<Arc<ApiState>>) -> Json<Vec<InstalledView>> {
    Json(state.runtime.installed().iter().map(|i| InstalledView::from(i.as_ref())).collect())
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

fn call_error(err: &CallError) -> Response {
    let (status, code) = match err {
        CallError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
        CallError::WrongKind { .. } => (StatusCode::CONFLICT, "wrong_kind"),
        CallError::Deadline { .. } => (StatusCode::GATEWAY_TIMEOUT, "deadline_exceeded"),
        CallError::Limit { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "limit_exceeded"),
        CallError::Trap { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "trapped"),
        CallError::Start { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "start_failed"),
    };
    error(status, code, &err.to_string())
}
