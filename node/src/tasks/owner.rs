//! This node as the owner of tasks, for the network: the [`TaskOwner`] port the driver hands
//! task requests to once they passed the receiving checks. Acceptance and every question
//! about an owned task go to the [`TaskManager`]; a submit that asks to wait for its
//! outcome is answered when the task settles, within the settle budget.

use std::time::{Duration, Instant};

use murmur_net::{OwnerFuture, TASK_REQUEST_TIMEOUT, TaskOwner};
use murmur_protocol::NodeId;
use murmur_protocol::task::{Sender, Submit, TaskRequest, TaskResponse, TaskSnapshot};
use tracing::Instrument;

use super::{Origin, TaskError, TaskManager};
use crate::telemetry;

/// Longest an `Events` request waits for a new event at the owner. Well inside the
/// request timeout, so a quiet task never looks like a dead owner.
pub const EVENTS_WAIT_MAX: Duration = Duration::from_secs(5);

/// The task manager behind the network's [`TaskOwner`] port.
#[derive(Clone, Debug)]
pub struct OwnerPort {
    manager: TaskManager,
    local: NodeId,
}

impl OwnerPort {
    #[must_use]
    pub const fn new(manager: TaskManager, local: NodeId) -> Self {
        Self { manager, local }
    }
}

impl TaskOwner for OwnerPort {
    fn accept(&self, submit: Submit) -> OwnerFuture<Result<TaskSnapshot, (String, String)>> {
        let manager = self.manager.clone();
        let origin = match &submit.sender {
            Sender::Client => Origin::Client,
            Sender::Capsule { name, .. } => {
                Origin::Peer { node: self.local.to_string(), capsule: Some(name.clone()) }
            }
        };
        let span = telemetry::task_span(
            "task.accept",
            &submit.task.to_string(),
            &submit.capsule,
            submit.traceparent.as_deref(),
        );
        Box::pin(
            async move {
                manager.accept(&submit, origin).await.map_err(|err| (err.check().to_owned(), err.to_string()))
            }
            .instrument(span),
        )
    }

    fn answer(&self, from: NodeId, request: TaskRequest, arrived: Instant) -> OwnerFuture<TaskResponse> {
        let manager = self.manager.clone();
        let span = match &request {
            TaskRequest::Submit(s) => {
                telemetry::task_span("task.accept", &s.task.to_string(), &s.capsule, s.traceparent.as_deref())
            }
            _ => tracing::Span::none(),
        };
        Box::pin(async move { answer(&manager, from, request, arrived).await }.instrument(span))
    }

    fn load_permille(&self) -> u16 {
        self.manager.load_permille()
    }
}

/// The owner's answer to a peer's task request, which arrived at `arrived`.
async fn answer(manager: &TaskManager, from: NodeId, request: TaskRequest, arrived: Instant) -> TaskResponse {
    let refused = |err: TaskError| match err {
        TaskError::NotFound(_) => TaskResponse::NotFound,
        other => TaskResponse::Refused { check: other.check().to_owned(), reason: other.to_string() },
    };
    match request {
        TaskRequest::Submit(submit) => {
            let capsule = match &submit.sender {
                murmur_protocol::task::Sender::Capsule { name, .. } => Some(name.clone()),
                murmur_protocol::task::Sender::Client => None,
            };
            let accepted =
                match manager.accept(&submit, Origin::Peer { node: from.to_string(), capsule }).await {
                    Ok(snapshot) => snapshot,
                    Err(err) => return refused(err),
                };
            if submit.settle_wait_ms == 0 || accepted.state.is_terminal() {
                return TaskResponse::Accepted(accepted);
            }
            // The sender waits for the outcome: answer when the task settles (or the wait
            // ends), in this one round trip. Accepted either way. The wait ends a second
            // before the sender's request timeout, counted from the request's arrival (the
            // durable acceptance may have taken a while): an accepted task must never
            // look lost.
            let budget =
                TASK_REQUEST_TIMEOUT.saturating_sub(arrived.elapsed()).saturating_sub(Duration::from_secs(1));
            let wait =
                Duration::from_millis(u64::from(submit.settle_wait_ms)).min(EVENTS_WAIT_MAX).min(budget);
            if wait.is_zero() {
                return TaskResponse::Accepted(accepted);
            }
            match manager.events(&submit.task, 0, wait, true).await {
                Ok((_, settled, _)) => TaskResponse::Accepted(settled),
                Err(_) => TaskResponse::Accepted(accepted),
            }
        }
        TaskRequest::Get { task } => manager.get(&task).map_or_else(refused, TaskResponse::Snapshot),
        TaskRequest::Cancel { task } => {
            manager.cancel(&task).await.map_or_else(refused, TaskResponse::Snapshot)
        }
        TaskRequest::Reply { task, text } => {
            manager.reply(&task, text).map_or_else(refused, TaskResponse::Snapshot)
        }
        TaskRequest::Events { task, after, wait_ms, settled } => {
            let wait = Duration::from_millis(u64::from(wait_ms)).min(EVENTS_WAIT_MAX);
            match manager.events(&task, after, wait, settled).await {
                Ok((mut events, snapshot, gap)) => {
                    events.truncate(murmur_protocol::task::TASK_EVENTS_MAX);
                    TaskResponse::Events { events, snapshot, gap }
                }
                Err(err) => refused(err),
            }
        }
    }
}
