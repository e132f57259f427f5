//! What the dashboard (`/ui`) and scripts watch: `GET /v1/tasks/events`, every state change
//! of the tasks this node owns as server-sent events, and `GET /v1/artifacts`, the store
//! with the pulls under way.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use murmur_api::views::{ArtifactView, ArtifactsView, TaskChangeView};
use tokio::sync::broadcast::error::RecvError;

use super::a2a::StreamSlot;
use super::{ApiState, error};
use crate::tasks::TaskChange;
use murmur_config::limits::A2A_STREAMS_MAX;

/// `GET /v1/tasks/events`: an SSE stream of `task` events ([`TaskChangeView`]), one per
/// state change of a task this node owns, in order, from the moment it opens (list the
/// tasks first for what came before). A client that fell more than
/// [`CHANGES_MAX`](crate::tasks::CHANGES_MAX) changes behind gets one `lagged` event
/// (`{"missed": N}`) and should list again. Counts against the node's SSE streams.
pub(super) async fn task_events(State(state): State<Arc<ApiState>>) -> Response {
    let Some(slot) = StreamSlot::take(&state) else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_streams",
            &format!("more than {A2A_STREAMS_MAX} streams are open on this node; close one or try later"),
        );
    };
    let changes = state.tasks.manager().changes();
    let events = futures::stream::unfold((changes, slot), |(mut changes, slot)| async move {
        let event = match changes.recv().await {
            Ok(change) => task_event(&change),
            Err(RecvError::Lagged(missed)) => {
                Event::default().event("lagged").data(serde_json::json!({ "missed": missed }).to_string())
            }
            Err(RecvError::Closed) => return None,
        };
        Some((Ok::<_, Infallible>(event), (changes, slot)))
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response()
}

fn task_event(change: &TaskChange) -> Event {
    let view = TaskChangeView {
        task_id: change.task.to_string(),
        capsule: change.capsule.clone(),
        state: change.state.as_str().to_owned(),
        seq: change.seq,
        updated_ms: change.updated_ms,
    };
    Event::default().event("task").data(serde_json::to_string(&view).unwrap_or_default())
}

/// `GET /v1/artifacts`: every artifact in the node's store and the pulls under way.
pub(super) async fn artifacts(State(state): State<Arc<ApiState>>) -> Response {
    let puller = state.puller.clone();
    let listed = tokio::task::spawn_blocking(move || puller.store().list()).await;
    let stored = match listed {
        Ok(Ok(stored)) => stored,
        Ok(Err(err)) => {
            return error(StatusCode::INTERNAL_SERVER_ERROR, "store_unreadable", &format!("{err:#}"));
        }
        Err(err) => return error(StatusCode::INTERNAL_SERVER_ERROR, "store_unreadable", &err.to_string()),
    };
    let mut artifacts: Vec<ArtifactView> = stored
        .into_iter()
        .map(|s| ArtifactView {
            name: s.meta.name,
            version: s.meta.version,
            kind: s.meta.kind.as_str().to_owned(),
            manifest: s.manifest.to_string(),
            content: s.content.to_string(),
            size: s.size,
        })
        .collect();
    artifacts.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.version.cmp(&b.version)));
    Json(ArtifactsView { artifacts, pulls: state.puller.under_way() }).into_response()
}
