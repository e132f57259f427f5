//! Tasks: what this node owns ([`TaskManager`], run by the [`TaskRunner`]) and the node's
//! task service ([`TaskService`]): every task it placed or runs, whoever owns it.
//!
//! A task sent here (by a client or a capsule) gets its id from its sender and message id,
//! is placed by the mesh's task router (local first, else the best provider), and lives
//! with its **owner**, the node that accepted it. Questions about a task (get, cancel,
//! reply, events) go to its owner: answered here when this node owns it, otherwise over
//! `/murmur/task/1`.

mod db;
mod manager;
mod messages;
mod owner;
mod record;
mod runner;

use std::time::Duration;

use murmur_protocol::NodeId;
use murmur_protocol::task::{
    Sender, Submit, TaskEvent, TaskId, TaskRequest, TaskResponse, TaskSnapshot, TaskState,
};

pub use self::db::TaskDb;
pub use self::manager::{
    CHANGES_MAX, DiskCursor, FINISHED_MAX, LIVE_MAX, Pruned, QUEUE_MAX, Retention, TaskChange, TaskError,
    TaskManager,
};
pub use self::messages::NodeMessages;
pub use self::owner::OwnerPort;
pub use self::record::{Origin, RouteRecord, TaskRecord, artifact_seq};
pub use self::runner::TaskRunner;
use murmur_config::clock;
use murmur_config::limits::{TASK_LIST_REMOTE_MAX, TASK_LIST_REMOTE_WAIT};
use murmur_net::{NetHandle, Placement};
use murmur_protocol::task::Check;

/// A new task, as the API or a capsule submits it.
#[derive(Clone, Debug)]
pub struct NewTask {
    pub capsule: String,
    /// `mesh://NAME@PEER`: only this node may run it.
    pub pin: Option<NodeId>,
    pub text: String,
    pub message_id: String,
    pub context: Option<String>,
    /// Who sent it, with this node, the message id, names the task
    /// ([`TaskId::placed`]): the same message id from the same sender names the same task.
    pub sender: Sender,
    /// The API client that sends it, when one does (its name; `message_id` is scoped to it).
    pub client: Option<String>,
    pub traceparent: Option<String>,
    /// When not zero, an owner on another node answers once the task settles (terminal or
    /// asking for input) or this long after accepting it, whichever is first, so a caller
    /// that waits for the outcome saves a round trip. The answer may still be unsettled.
    pub settle_wait: Duration,
}

/// A task and the node that owns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskView {
    pub snapshot: TaskSnapshot,
    pub owner: NodeId,
}

/// Why a task call failed; each says what failed, and the message what to do.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Refused by a check (grant, policy, capsule); nothing ran.
    #[error("refused ({check}): {reason}")]
    Refused { check: Check, reason: String },
    #[error("task {0} not found")]
    NotFound(TaskId),
    #[error("{reason}")]
    NotCancelable { reason: String },
    #[error("{reason}")]
    NotWaiting { reason: String },
    /// Could not be placed or its owner could not be reached.
    #[error("{0}")]
    Unavailable(String),
}

impl CallError {
    /// The failed check's stable name.
    #[must_use]
    pub fn check(&self) -> &str {
        match self {
            Self::Refused { check, .. } => check.as_str(),
            Self::NotFound(_) => "not_found",
            Self::NotCancelable { .. } => "not_cancelable",
            Self::NotWaiting { .. } => "not_waiting",
            Self::Unavailable(_) => "unavailable",
        }
    }
}

impl From<TaskError> for CallError {
    fn from(err: TaskError) -> Self {
        match err {
            TaskError::NotFound(task) => Self::NotFound(task),
            TaskError::NotCancelable { .. } => Self::NotCancelable { reason: err.to_string() },
            TaskError::NotWaiting { .. } => Self::NotWaiting { reason: err.to_string() },
            other => Self::Refused { check: other.check(), reason: other.to_string() },
        }
    }
}

/// The node's task service: every task its clients and capsules send, wherever it runs.
/// Cheap to clone.
#[derive(Clone, Debug)]
pub struct TaskService {
    manager: TaskManager,
    net: NetHandle,
}

impl TaskService {
    #[must_use]
    pub const fn new(manager: TaskManager, net: NetHandle) -> Self {
        Self { manager, net }
    }

    /// This node's id.
    #[must_use]
    pub const fn local(&self) -> NodeId {
        self.net.local()
    }

    /// The tasks this node owns.
    #[must_use]
    pub const fn manager(&self) -> &TaskManager {
        &self.manager
    }

    /// Places a new task (idempotent: the same sender and message id return the task as
    /// it is). Returns once its owner accepted it durably.
    pub async fn submit(&self, new: NewTask) -> Result<TaskView, CallError> {
        let task = TaskId::placed(&self.local(), &new.sender, &new.message_id);
        if self.manager.holds(&task) {
            return Ok(TaskView { snapshot: self.manager.get(&task)?, owner: self.local() });
        }
        if self.manager.route_of(&task).is_some() {
            // Sent before (perhaps before a restart that emptied the router's memory): the
            // same message is the same task, at the owner it went to.
            return self.get(&task).await;
        }
        let request = Submit {
            task,
            text: new.text,
            sender: new.sender,
            capsule: new.capsule.clone(),
            context: new.context,
            message: new.message_id,
            traceparent: new.traceparent,
            settle_wait_ms: u32::try_from(new.settle_wait.as_millis()).unwrap_or(u32::MAX),
        };
        let outcome =
            self.net.route(request, new.pin).await.map_err(|e| CallError::Unavailable(format!("{e:#}")))?;
        match outcome {
            Placement::Routed { owner, snapshot } => {
                if owner != self.local() {
                    let route = RouteRecord {
                        task,
                        owner: owner.to_string(),
                        capsule: new.capsule,
                        created_ms: clock::now().0,
                        client: new.client,
                    };
                    // Told only once it is on disk: after a crash here the client still
                    // finds its task.
                    self.manager.remember_route(route).await.map_err(|e| {
                        CallError::Unavailable(format!(
                            "the task was placed on {owner} but this node could not store where: {e:#}"
                        ))
                    })?;
                }
                let snapshot = match snapshot {
                    Some(snapshot) => snapshot,
                    None => self.get(&task).await?.snapshot,
                };
                Ok(TaskView { snapshot, owner })
            }
            Placement::Rejected { check, reason } => Err(CallError::Refused { check, reason }),
            Placement::Failed { reason } => Err(CallError::Unavailable(reason)),
        }
    }

    /// The owner of `task`: this node, the router's memory, or the stored route.
    async fn owner(&self, task: &TaskId) -> Result<NodeId, CallError> {
        if self.manager.get(task).is_ok() {
            return Ok(self.local());
        }
        if let Some(owner) = self.net.owner(*task).await {
            return Ok(owner);
        }
        self.manager.route_of(task).and_then(|r| r.owner.parse().ok()).ok_or(CallError::NotFound(*task))
    }

    async fn ask(&self, owner: NodeId, request: TaskRequest) -> Result<TaskResponse, CallError> {
        let task = match &request {
            TaskRequest::Get { task }
            | TaskRequest::Cancel { task }
            | TaskRequest::Reply { task, .. }
            | TaskRequest::Events { task, .. } => *task,
            TaskRequest::Submit(s) => s.task,
        };
        match self.net.ask_owner(owner, request).await {
            Ok(TaskResponse::NotFound) => Err(CallError::NotFound(task)),
            Ok(TaskResponse::Refused { check, reason }) => Err(match Check::named(&check) {
                Check::NotCancelable => CallError::NotCancelable { reason },
                Check::NotWaiting => CallError::NotWaiting { reason },
                Check::NotFound => CallError::NotFound(task),
                check => CallError::Refused { check, reason },
            }),
            Ok(other) => Ok(other),
            Err(reason) => Err(CallError::Unavailable(format!(
                "the owner of task {task} ({owner}) did not answer: {reason}"
            ))),
        }
    }

    /// The task now, from its owner.
    pub async fn get(&self, task: &TaskId) -> Result<TaskView, CallError> {
        let owner = self.owner(task).await?;
        if owner == self.local() {
            return Ok(TaskView { snapshot: self.manager.get(task)?, owner });
        }
        match self.ask(owner, TaskRequest::Get { task: *task }).await? {
            TaskResponse::Snapshot(snapshot) | TaskResponse::Accepted(snapshot) => {
                Ok(TaskView { snapshot, owner })
            }
            other => Err(CallError::Unavailable(format!("unexpected answer from {owner}: {other:?}"))),
        }
    }

    /// Cancels a task that has not started or waits for input.
    pub async fn cancel(&self, task: &TaskId) -> Result<TaskView, CallError> {
        let owner = self.owner(task).await?;
        if owner == self.local() {
            return Ok(TaskView { snapshot: self.manager.cancel(task).await?, owner });
        }
        match self.ask(owner, TaskRequest::Cancel { task: *task }).await? {
            TaskResponse::Snapshot(snapshot) => Ok(TaskView { snapshot, owner }),
            other => Err(CallError::Unavailable(format!("unexpected answer from {owner}: {other:?}"))),
        }
    }

    /// Delivers a follow-up message to a task waiting for input.
    pub async fn reply(&self, task: &TaskId, text: String) -> Result<TaskView, CallError> {
        let owner = self.owner(task).await?;
        if owner == self.local() {
            return Ok(TaskView { snapshot: self.manager.reply(task, text)?, owner });
        }
        match self.ask(owner, TaskRequest::Reply { task: *task, text }).await? {
            TaskResponse::Snapshot(snapshot) => Ok(TaskView { snapshot, owner }),
            other => Err(CallError::Unavailable(format!("unexpected answer from {owner}: {other:?}"))),
        }
    }

    /// Events after sequence number `after`, waiting up to `wait` for one (with
    /// `settled`, until the task is terminal or asks for input); with the task now.
    pub async fn events(
        &self,
        task: &TaskId,
        after: u64,
        wait: Duration,
        settled: bool,
    ) -> Result<(Vec<TaskEvent>, TaskView), CallError> {
        let owner = self.owner(task).await?;
        self.events_at(owner, task, after, wait, settled).await
    }

    async fn events_at(
        &self,
        owner: NodeId,
        task: &TaskId,
        after: u64,
        wait: Duration,
        settled: bool,
    ) -> Result<(Vec<TaskEvent>, TaskView), CallError> {
        if owner == self.local() {
            let (events, snapshot, _gap) = self.manager.events(task, after, wait, settled).await?;
            return Ok((events, TaskView { snapshot, owner }));
        }
        let wait_ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX);
        match self.ask(owner, TaskRequest::Events { task: *task, after, wait_ms, settled }).await? {
            TaskResponse::Events { events, snapshot, .. } => Ok((events, TaskView { snapshot, owner })),
            other => Err(CallError::Unavailable(format!("unexpected answer from {owner}: {other:?}"))),
        }
    }

    /// Waits until the task is terminal or asks for input, or `wait` passes; returns it then.
    pub async fn settle(&self, task: &TaskId, wait: Duration) -> Result<TaskView, CallError> {
        let owner = self.owner(task).await?;
        self.settle_at(owner, task, wait).await
    }

    /// [`TaskService::settle`] for a task whose owner is known.
    pub async fn settle_at(
        &self,
        owner: NodeId,
        task: &TaskId,
        wait: Duration,
    ) -> Result<TaskView, CallError> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut after = 0;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let (events, view) =
                self.events_at(owner, task, after, left.min(Duration::from_secs(5)), true).await?;
            after = events.last().map_or(after, |e| e.seq).max(after);
            let state = view.snapshot.state;
            if state.is_terminal() || state == TaskState::InputRequired || left.is_zero() {
                return Ok(view);
            }
        }
    }

    /// How many tasks this node owns in each state, of those in memory (every unfinished
    /// one, the newest [`FINISHED_MAX`] finished), asking no other node.
    #[must_use]
    pub fn owned_by_state(&self) -> std::collections::BTreeMap<String, u64> {
        let mut counts = std::collections::BTreeMap::new();
        for (_, snapshot) in self.manager.list(None) {
            *counts.entry(snapshot.state.as_str().to_owned()).or_default() += 1;
        }
        counts
    }

    /// Whether this node's database holds finished tasks that [`Tasks::list`] leaves out.
    #[must_use]
    pub fn has_disk_only(&self) -> bool {
        self.manager.has_disk_only()
    }

    /// Finished tasks this node owns that only its database holds, past the ones
    /// [`Tasks::list`] shows: see [`TaskManager::list_on_disk`].
    pub fn list_on_disk(
        &self,
        after: Option<&DiskCursor>,
        want: usize,
        read_max: usize,
        keep: impl FnMut(&TaskSnapshot) -> bool,
    ) -> Result<(Vec<TaskView>, Option<DiskCursor>), CallError> {
        let owner = self.local();
        let (snapshots, next) = self.manager.list_on_disk(after, want, read_max, keep)?;
        Ok((snapshots.into_iter().map(|snapshot| TaskView { snapshot, owner }).collect(), next))
    }

    /// Tasks this node owns, then those it placed elsewhere (their state asked of their
    /// owners, at most [`TASK_LIST_REMOTE_MAX`]), newest first, optionally in one state.
    pub async fn list(&self, state: Option<TaskState>) -> Vec<TaskView> {
        let local = self.local();
        let mut views: Vec<(u64, TaskView)> = self
            .manager
            .list(state)
            .into_iter()
            .map(|(created, snapshot)| (created, TaskView { snapshot, owner: local }))
            .collect();
        let routes = self.manager.routes(TASK_LIST_REMOTE_MAX);
        let asks = routes.iter().map(|route| async move {
            let answer = tokio::time::timeout(TASK_LIST_REMOTE_WAIT, self.get(&route.task)).await;
            (route.created_ms, answer)
        });
        for (created, answer) in futures::future::join_all(asks).await {
            if let Ok(Ok(view)) = answer
                && state.is_none_or(|s| s == view.snapshot.state)
            {
                views.push((created, view));
            }
        }
        views.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.snapshot.task.cmp(&b.1.snapshot.task)));
        views.into_iter().map(|(_, v)| v).collect()
    }
}
