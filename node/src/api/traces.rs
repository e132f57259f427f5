//! `GET /v1/tasks/{id}/trace`: the session trace of an agent task this node owns (what
//! `mur trace TASK_ID` reads). A task owned by another node is answered with where to ask.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use murmur_api::views::TaskTraceView;
use murmur_config::limits::TRACE_FILE_BYTES_MAX;
use murmur_protocol::task::TaskId;

use super::{ApiState, error};

pub(super) async fn task_trace(
    State(state): State<Arc<ApiState>>,
    client: Option<axum::Extension<murmur_config::ApiClient>>,
    Path(id): Path<String>,
) -> Response {
    let Ok(task) = id.parse::<TaskId>() else {
        return error(StatusCode::BAD_REQUEST, "invalid_task_id", &format!("`{id}` is not a task id"));
    };
    // Another client's task does not exist for this one (as in A2A's GetTask).
    if let Some(axum::Extension(client)) = &client
        && !super::a2a::visible(&state, client, &task)
    {
        return error(
            StatusCode::NOT_FOUND,
            "not_found",
            &format!("no task {task} of client `{}` here", client.name),
        );
    }
    let Ok(record) = state.tasks.manager().record(&task) else {
        return error(
            StatusCode::NOT_FOUND,
            "not_owned_here",
            &format!(
                "task {task} is not owned by this node; its trace is on its owner (`metadata.murmur.owner` of the task): ask that node with --node"
            ),
        );
    };
    let Some(agent) = state.runtime.agent(&record.capsule) else {
        return error(
            StatusCode::NOT_FOUND,
            "not_an_agent_task",
            &format!(
                "task {task} ran `{}`, which is not an agent on this node: only agent tasks have a session trace",
                record.capsule
            ),
        );
    };
    let Some((session_id, path)) =
        murmur_agent::runner::session_of(&agent.manifest.workdir, &task.to_string())
    else {
        return error(
            StatusCode::NOT_FOUND,
            "no_session",
            &format!(
                "task {task} has no session trace yet (it has not started, or its session could not be written)"
            ),
        );
    };
    let read = tokio::task::spawn_blocking(move || -> std::io::Result<String> {
        let len = std::fs::metadata(&path)?.len();
        if len > TRACE_FILE_BYTES_MAX {
            return Err(std::io::Error::other(format!(
                "the trace is {len} bytes, more than {TRACE_FILE_BYTES_MAX}"
            )));
        }
        std::fs::read_to_string(&path)
    })
    .await;
    match read {
        Ok(Ok(trace)) => {
            Json(TaskTraceView { task_id: task.to_string(), capsule: record.capsule, session_id, trace })
                .into_response()
        }
        Ok(Err(err)) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "trace_unreadable",
            &format!("cannot read the trace: {err}"),
        ),
        Err(err) => error(StatusCode::INTERNAL_SERVER_ERROR, "trace_unreadable", &err.to_string()),
    }
}
