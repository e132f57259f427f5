//! This node as the owner of tasks, for the network: the [`TaskOwner`] port the driver hands
//! task requests to once they passed the receiving checks. Acceptance goes to the
//! [`TaskRunner`], questions about an owned task to its [`TaskManager`]; a submit that asks
//! to wait for its outcome is answered when the task settles, within the protocol's settle
//! budget ([`settle_wait_ms`]).

use std::time::{Duration, Instant};

use murmur_config::limits::TASK_REQUEST_TIMEOUT;
use murmur_net::{OwnerFuture, TaskOwner};
use murmur_protocol::NodeId;
use murmur_protocol::limits::OWNER_WAIT_MAX_MS;
use murmur_protocol::owner::{Arrival, settle_wait_ms};
use murmur_protocol::task::{Sender, Submit, TaskRequest, TaskResponse, TaskSnapshot};
use tracing::Instrument;

use super::{Origin, TaskError, TaskRunner};
use crate::telemetry;

/// The task runner behind the network's [`TaskOwner`] port.
#[derive(Clone, Debug)]
pub struct OwnerPort {
    runner: TaskRunner,
    local: NodeId,
}

impl OwnerPort {
    #[must_use]
    pub const fn new(runner: TaskRunner, local: NodeId) -> Self {
        Self { runner, local }
    }
}

impl TaskOwner for OwnerPort {
    fn accept(&self, submit: Submit) -> OwnerFuture<Result<TaskSnapshot, (String, String)>> {
        let runner = self.runner.clone();
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
                runner
                    .accept(&submit, origin, Arrival::Local)
                    .await
                    .map_err(|err| (err.check().to_string(), err.to_string()))
            }
            .instrument(span),
        )
    }

    fn answer(&self, from: NodeId, request: TaskRequest, arrived: Instant) -> OwnerFuture<TaskResponse> {
        let runner = self.runner.clone();
        let span = match &request {
            TaskRequest::Submit(s) => {
                telemetry::task_span("task.accept", &s.task.to_string(), &s.capsule, s.traceparent.as_deref())
            }
            _ => tracing::Span::none(),
        };
        Box::pin(async move { answer(&runner, from, request, arrived).await }.instrument(span))
    }

    fn load_permille(&self) -> u16 {
        self.runner.load_permille()
    }
}

/// The owner's answer to a peer's task request, which arrived at `arrived`.
async fn answer(runner: &TaskRunner, from: NodeId, request: TaskRequest, arrived: Instant) -> TaskResponse {
    let manager = runner.manager();
    let refused = |err: TaskError| match err {
        TaskError::NotFound(_) => TaskResponse::NotFound,
        other => TaskResponse::Refused { check: other.check().to_string(), reason: other.to_string() },
    };
    match request {
        TaskRequest::Submit(submit) => {
            let capsule = match &submit.sender {
                Sender::Capsule { name, .. } => Some(name.clone()),
                Sender::Client => None,
            };
            let accepted = match runner
                .accept(&submit, Origin::Peer { node: from.to_string(), capsule }, Arrival::Remote)
                .await
            {
                Ok(snapshot) => snapshot,
                Err(err) => return refused(err),
            };
            if accepted.state.is_terminal() {
                return TaskResponse::Accepted(accepted);
            }
            // The sender waits for the outcome: answer when the task settles (or the
            // protocol's settle budget ends), in this one round trip. Accepted either way.
            let waited = u64::try_from(arrived.elapsed().as_millis()).unwrap_or(u64::MAX);
            let timeout = u64::try_from(TASK_REQUEST_TIMEOUT.as_millis()).unwrap_or(u64::MAX);
            let wait = Duration::from_millis(settle_wait_ms(submit.settle_wait_ms, waited, timeout));
            if wait.is_zero() {
                return TaskResponse::Accepted(accepted);
            }
            match manager.events(&submit.task, 0, wait, true).await {
                Ok((_, settled, _)) => TaskResponse::Accepted(settled),
                Err(_) => TaskResponse::Accepted(accepted),
            }
        }
        // Only the node that placed a task may act on it or read it: to any other peer the
        // task does not exist (its id was derived from the placing node: `TaskId::placed`).
        TaskRequest::Get { task }
        | TaskRequest::Cancel { task }
        | TaskRequest::Reply { task, .. }
        | TaskRequest::Events { task, .. }
            if !placed_by(manager, &task, &from) =>
        {
            tracing::debug!(peer = %from, task = %task, "a peer asked about a task it did not place");
            TaskResponse::NotFound
        }
        TaskRequest::Get { task } => manager.get(&task).map_or_else(refused, TaskResponse::Snapshot),
        TaskRequest::Cancel { task } => {
            manager.cancel(&task).await.map_or_else(refused, TaskResponse::Snapshot)
        }
        TaskRequest::Reply { task, text } => {
            manager.reply(&task, text).map_or_else(refused, TaskResponse::Snapshot)
        }
        TaskRequest::Events { task, after, wait_ms, settled } => {
            let wait = Duration::from_millis(u64::from(wait_ms).min(OWNER_WAIT_MAX_MS));
            match manager.events(&task, after, wait, settled).await {
                // The exchange cuts the event list to what one answer carries.
                Ok((events, snapshot, gap)) => TaskResponse::Events { events, snapshot, gap },
                Err(err) => refused(err),
            }
        }
    }
}

/// Whether peer `from` placed `task` on this node.
fn placed_by(manager: &super::TaskManager, task: &murmur_protocol::task::TaskId, from: &NodeId) -> bool {
    let from = from.to_string();
    manager.origin(task).is_ok_and(|origin| matches!(origin, Origin::Peer { node, .. } if node == from))
}
