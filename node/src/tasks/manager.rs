//! The tasks this node owns: their records in memory and in the task database, and the
//! protocol's [`Owner`] machine deciding on them (admission, idempotency, queues and
//! workers, what must be on disk first, recovery after a restart, what is forgotten).
//!
//! The manager carries out the machine's decisions on the records (an event per state
//! change, watchers woken) and on the database (synchronous writes awaited, background
//! ones queued). It runs nothing: a decision to start a task is handed to its caller, the
//! [`TaskRunner`](super::runner::TaskRunner), which owns the runtime.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use dashmap::DashMap;
use murmur_config::clock;
use murmur_protocol::owner::{
    Admitted, Arrival, Output, Owner, OwnerConfig, Policy, Refusal, Refused, Write,
};
use murmur_protocol::task::{Check, Submit, TaskEvent, TaskId, TaskRefusal, TaskSnapshot, TaskState};
use tokio::sync::{oneshot, watch};

use super::db::TaskDb;
use super::record::{Origin, RouteRecord, TaskRecord};

pub use super::db::{Pruned, Retention};
/// Routes (tasks placed on other nodes) kept in memory for listing, newest first.
pub use murmur_config::limits::RECENT_ROUTES_MAX;
/// Finished tasks kept in memory (the database keeps all; the first finished is dropped
/// first), and what a start-up loads of them.
pub use murmur_protocol::limits::OWNER_FINISHED_MAX as FINISHED_MAX;
/// Tasks kept in memory, finished or not.
pub use murmur_protocol::limits::OWNER_LIVE_MAX as LIVE_MAX;
/// Tasks waiting in one capsule's queue.
pub use murmur_protocol::limits::OWNER_QUEUE_MAX as QUEUE_MAX;

/// A task in memory, with what its waiters need.
#[derive(Debug)]
pub(super) struct Live {
    record: Mutex<TaskRecord>,
    changed: watch::Sender<u64>,
    /// Where a reply goes while the task waits for input.
    pub(super) input: Mutex<Option<oneshot::Sender<String>>>,
    /// Whether its acceptance is on disk: `None` while the write is under way.
    stored: watch::Sender<Option<bool>>,
}

impl Live {
    fn new(record: TaskRecord, stored: Option<bool>) -> Arc<Self> {
        let (changed, _) = watch::channel(record.seq);
        let (stored, _) = watch::channel(stored);
        Arc::new(Self { record: Mutex::new(record), changed, input: Mutex::new(None), stored })
    }

    /// Waits until the acceptance is on disk; false when storing it failed.
    async fn wait_stored(&self) -> bool {
        let mut stored = self.stored.subscribe();
        match stored.wait_for(Option::is_some).await {
            Ok(state) => *state == Some(true),
            Err(_) => false,
        }
    }

    pub(super) fn record(&self) -> MutexGuard<'_, TaskRecord> {
        self.record.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Resolves once the task is canceled (at once if it already is).
    pub(super) async fn canceled(&self) {
        let mut changed = self.changed.subscribe();
        loop {
            if self.record().state == TaskState::Canceled {
                return;
            }
            if changed.changed().await.is_err() {
                // The task is gone from memory: nothing will cancel it any more.
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Why a task operation failed (A2A's error kinds).
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("task {0} not found")]
    NotFound(TaskId),
    #[error("task {task} cannot be canceled: it is {state}")]
    NotCancelable { task: TaskId, state: TaskState },
    #[error("task {task} is not waiting for input (it is {state})")]
    NotWaiting { task: TaskId, state: TaskState },
    #[error(transparent)]
    Refused(#[from] TaskRefusal),
    #[error(transparent)]
    Admission(#[from] Refusal),
    #[error("{0}")]
    Internal(String),
}

impl TaskError {
    /// The failed check (JSON-RPC `data.check`, `/murmur/task/1`).
    #[must_use]
    pub fn check(&self) -> Check {
        match self {
            Self::NotFound(_) => Check::NotFound,
            Self::NotCancelable { .. } => Check::NotCancelable,
            Self::NotWaiting { .. } => Check::NotWaiting,
            Self::Refused(refusal) => Check::named(refusal.check()),
            Self::Admission(refusal) => Check::named(refusal.check()),
            Self::Internal(_) => Check::Internal,
        }
    }
}

/// What a decision left to do once the machine's lock is released.
#[derive(Debug, Default)]
#[must_use]
pub(super) struct Effects {
    writes: Vec<(TaskRecord, Write)>,
    /// Tasks to run now.
    pub(super) starts: Vec<Arc<Live>>,
}

/// The owner side of tasks. Cheap to clone.
#[derive(Clone, Debug)]
pub struct TaskManager {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    db: TaskDb,
    owner: Mutex<Owner>,
    /// Every task in memory, read by every request and stream: a sharded map, since one
    /// lock over all of them was the contention point (`benches/live_map.rs`: 2.5 times
    /// faster at 4 threads, 3.6 times at 16). Changed only under `owner`'s lock.
    live: DashMap<TaskId, Arc<Live>>,
    /// The newest routes, newest first (for listing without reading every route).
    recent_routes: Mutex<std::collections::VecDeque<RouteRecord>>,
    /// The start-up left finished tasks on disk only: `holds` must look there.
    left_on_disk: std::sync::atomic::AtomicBool,
    /// Every change of a task's state, for live views (`GET /v1/tasks/events`). Bounded:
    /// a receiver that falls [`CHANGES_MAX`] behind is told it lagged, and re-lists.
    changes: tokio::sync::broadcast::Sender<TaskChange>,
}

/// Changes a live view may fall behind before it is told it lagged.
pub const CHANGES_MAX: usize = 1024;

/// A task this node owns changed state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskChange {
    pub task: TaskId,
    pub capsule: String,
    pub state: TaskState,
    pub seq: u64,
    pub updated_ms: u64,
}

/// Where a listing of the finished tasks only the database holds goes on: the index entry
/// (finish time, task) it stopped at. Travels as a page token, `d` and 48 hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskCursor([u8; 24]);

impl std::fmt::Display for DiskCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "d{}", hex::encode(self.0))
    }
}

impl std::str::FromStr for DiskCursor {
    type Err = String;

    fn from_str(token: &str) -> Result<Self, Self::Err> {
        let mut key = [0u8; 24];
        token
            .strip_prefix('d')
            .and_then(|digits| hex::decode_to_slice(digits, &mut key).ok())
            .ok_or_else(|| format!("`{token}` is not a page token this node issued"))?;
        Ok(Self(key))
    }
}

impl TaskManager {
    /// Opens the task database and recovers: tasks that were running fail (the node
    /// restarted under them); queued tasks wait for [`TaskManager::resume`].
    pub async fn open(path: &std::path::Path) -> anyhow::Result<Self> {
        Self::open_with(path, OwnerConfig::default()).await
    }

    /// [`TaskManager::open`] with the owner's bounds in `config` (tests use small ones to
    /// exercise forgetting).
    pub async fn open_with(path: &std::path::Path, config: OwnerConfig) -> anyhow::Result<Self> {
        let db = TaskDb::open(path)?;
        let manager = Self {
            inner: Arc::new(Inner {
                db,
                owner: Mutex::new(Owner::new(config)),
                live: DashMap::new(),
                recent_routes: Mutex::new(std::collections::VecDeque::new()),
                left_on_disk: std::sync::atomic::AtomicBool::new(false),
                changes: tokio::sync::broadcast::channel(CHANGES_MAX).0,
            }),
        };
        // Bounded whatever the file holds: the newest routes, the tasks not finished and
        // the newest finished ones; the rest stay on disk for `get`.
        let routes = manager.inner.db.newest_routes(RECENT_ROUTES_MAX)?;
        *lock(&manager.inner.recent_routes) = routes.into();
        let (records, left) =
            manager.inner.db.startup_records(config.finished_max.min(config.live_max / 2))?;
        manager.inner.left_on_disk.store(left, std::sync::atomic::Ordering::Relaxed);
        let recovered: Vec<(TaskId, String, TaskState, u64)> =
            records.iter().map(|r| (r.task, r.capsule.clone(), r.state, r.ticket)).collect();
        {
            let live = &manager.inner.live;
            for record in records {
                live.insert(record.task, Live::new(record, Some(true)));
            }
        }
        let restarted = Some("the node restarted while the task was running".to_owned());
        let effects = manager.decide(None, restarted, |owner, now| owner.recover(now, recovered));
        manager.write(effects.writes).await?;
        debug_assert!(effects.starts.is_empty(), "recovery starts nothing before resume");
        Ok(manager)
    }

    /// Starts what recovery queued again, as each capsule's `policy` now allows; returns
    /// the tasks to run.
    pub(super) fn resume(&self, policy: &dyn Fn(&str) -> Option<Policy>) -> Vec<Arc<Live>> {
        let effects = self.decide(None, None, |owner, now| owner.resume(now, policy));
        self.write_background(effects)
    }

    /// Makes every task write so far durable (call when the node stops).
    pub async fn flush(&self) -> anyhow::Result<()> {
        self.inner.db.flush().await
    }

    /// Accepts a task for a capsule this node hosts with `policy` (`None`: not hosted),
    /// idempotently: the same task id returns the task as it is. The acceptance is durable
    /// before this returns; the tasks to run now come with it.
    pub(super) async fn accept(
        &self,
        submit: &Submit,
        origin: Origin,
        policy: Option<Policy>,
        arrival: Arrival,
    ) -> Result<(TaskSnapshot, Vec<Arc<Live>>), TaskError> {
        if let Some(existing) = self.live(&submit.task) {
            return Ok((Self::accepted_already(&existing).await?, Vec::new()));
        }
        if self.forgot_any()
            && let Some(record) = self
                .inner
                .db
                .get(&submit.task)
                .map_err(|e| TaskError::Internal(format!("task store: {e:#}")))?
        {
            // Finished long ago and no longer in memory: it ran once; it stays that way.
            return Ok((record.snapshot(), Vec::new()));
        }
        let now = clock::now().0;
        let mut record = TaskRecord::new(
            submit.task,
            &submit.capsule,
            &submit.message,
            submit.context.clone(),
            submit.text.clone(),
            origin,
            now,
        );
        record.trace_id = submit.traceparent.as_deref().and_then(crate::telemetry::trace_id_of);
        record.traceparent.clone_from(&submit.traceparent);
        // Decided and held under the machine's lock: two deliveries of one task accept it
        // once, and a `single` capsule never holds two unfinished tasks.
        let (admitted, effects) = {
            let mut owner = lock(&self.inner.owner);
            let admitted = owner.admit(clock::now(), submit, policy, arrival);
            match admitted {
                Ok(Admitted::New { ticket }) => {
                    record.ticket = ticket;
                    self.inner.live.insert(submit.task, Live::new(record, None));
                }
                Ok(Admitted::Existing(_)) | Err(_) => {}
            }
            let effects = self.apply(&mut owner, Some(submit.task), None);
            (admitted, effects)
        };
        match admitted? {
            Admitted::Existing(_) => {
                let existing = self.live(&submit.task).ok_or(TaskError::NotFound(submit.task))?;
                return Ok((Self::accepted_already(&existing).await?, Vec::new()));
            }
            Admitted::New { .. } => {}
        }
        let live = self.live(&submit.task).ok_or(TaskError::NotFound(submit.task))?;
        if let Err(err) = self.write(effects.writes).await {
            lock(&self.inner.owner).abandon(submit.task);
            self.inner.live.remove(&submit.task);
            live.stored.send_replace(Some(false));
            return Err(TaskError::Internal(format!("{err:#}")));
        }
        live.stored.send_replace(Some(true));
        let snapshot = live.record().snapshot();
        let effects = self.decide(Some(submit.task), None, |owner, now| {
            // Held since the admission, under the same machine: it cannot be unknown.
            let _ = owner.stored(now, submit.task);
        });
        Ok((snapshot, self.write_background(effects)))
    }

    /// The answer to a repeated delivery: the task as it is, once its acceptance is on
    /// disk (a repeat never hears "accepted" before the first delivery could).
    async fn accepted_already(existing: &Live) -> Result<TaskSnapshot, TaskError> {
        if !existing.wait_stored().await {
            return Err(TaskError::Internal(
                "this task's acceptance could not be stored; send it again".into(),
            ));
        }
        Ok(existing.record().snapshot())
    }

    /// The run of `task` ended in `state` with `message`; returns the tasks to run next.
    pub(super) async fn finished(
        &self,
        task: TaskId,
        state: TaskState,
        message: Option<String>,
    ) -> Vec<Arc<Live>> {
        let Effects { writes, starts } =
            self.decide(Some(task), message, |owner, now| owner.finished(now, task, state));
        if let Err(err) = self.write(writes).await {
            tracing::error!(error = %format!("{err:#}"), task_id = %task, "cannot store a task state");
        }
        starts
    }

    /// The task now.
    pub fn get(&self, task: &TaskId) -> Result<TaskSnapshot, TaskError> {
        if let Some(live) = self.live(task) {
            return Ok(live.record().snapshot());
        }
        match self.inner.db.get(task) {
            Ok(Some(record)) => Ok(record.snapshot()),
            _ => Err(TaskError::NotFound(*task)),
        }
    }

    /// Whether this node owns `task` (in memory: every task but finished ones past
    /// [`FINISHED_MAX`]; no disk read, for hot paths).
    #[must_use]
    pub fn owns(&self, task: &TaskId) -> bool {
        self.live(task).is_some()
    }

    /// Whether this node holds `task`: in memory, or (once finished tasks were dropped from
    /// memory, or the start-up left some on disk) in its database. A disk read only once
    /// either happened.
    #[must_use]
    pub fn holds(&self, task: &TaskId) -> bool {
        self.owns(task) || self.on_disk_only(task).is_some()
    }

    /// `task` when only the database holds it (finished, and forgotten from memory or left
    /// there by the start-up); no disk read while nothing was ever left there.
    fn on_disk_only(&self, task: &TaskId) -> Option<TaskRecord> {
        if !self.forgot_any() {
            return None;
        }
        self.inner.db.get(task).ok().flatten()
    }

    /// Who sent `task` (no copy of its text or events while it is in memory).
    pub fn origin(&self, task: &TaskId) -> Result<Origin, TaskError> {
        if let Some(live) = self.live(task) {
            return Ok(live.record().origin.clone());
        }
        self.record(task).map(|record| record.origin)
    }

    /// The full record (for A2A answers with history).
    pub fn record(&self, task: &TaskId) -> Result<TaskRecord, TaskError> {
        if let Some(live) = self.live(task) {
            return Ok(live.record().clone());
        }
        self.inner.db.get(task).ok().flatten().ok_or(TaskError::NotFound(*task))
    }

    /// Every task in memory as (created ms, snapshot), newest first, optionally in one
    /// state. Only the snapshot is copied (not the input text or the event log).
    #[must_use]
    pub fn list(&self, state: Option<TaskState>) -> Vec<(u64, TaskSnapshot)> {
        let live: Vec<Arc<Live>> = self.inner.live.iter().map(|entry| entry.value().clone()).collect();
        let mut found: Vec<(u64, TaskSnapshot)> = live
            .iter()
            .filter_map(|l| {
                let record = l.record();
                state.is_none_or(|s| record.state == s).then(|| (record.created_ms, record.snapshot()))
            })
            .collect();
        found.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.task.cmp(&b.1.task)));
        found
    }

    /// Whether the database holds finished tasks that memory does not (some were dropped
    /// from memory, or the start-up left them there).
    #[must_use]
    pub fn has_disk_only(&self) -> bool {
        self.forgot_any()
    }

    /// Finished tasks only the database holds (dropped from memory, or left there by the
    /// start-up), newest finish first, continuing after `after` (`None`: from the newest):
    /// up to `want` that `keep` accepts, reading at most `read_max` records. With the
    /// cursor to go on from, unless none are left. No disk read while none were left there.
    pub fn list_on_disk(
        &self,
        after: Option<&DiskCursor>,
        want: usize,
        read_max: usize,
        mut keep: impl FnMut(&TaskSnapshot) -> bool,
    ) -> Result<(Vec<TaskSnapshot>, Option<DiskCursor>), TaskError> {
        if !self.forgot_any() {
            return Ok((Vec::new(), None));
        }
        let (records, next) = self
            .inner
            .db
            .finished_page(
                after.map(|c| &c.0),
                want,
                read_max,
                |task| self.owns(task),
                |record| keep(&record.snapshot()),
            )
            .map_err(|e| {
                TaskError::Internal(format!("cannot read finished tasks from the task database: {e:#}"))
            })?;
        Ok((records.iter().map(TaskRecord::snapshot).collect(), next.map(DiskCursor)))
    }

    /// Cancels a task that has not started, or that waits for input.
    pub async fn cancel(&self, task: &TaskId) -> Result<TaskSnapshot, TaskError> {
        let live = self
            .live(task)
            .ok_or_else(|| self.not_live(task, |task, state| TaskError::NotCancelable { task, state }))?;
        let task = *task;
        // Decided by the machine under its lock: a worker starting the task at the same
        // moment either starts it (and the cancel is refused) or finds it canceled.
        let message = Some("canceled by request".to_owned());
        let (decided, effects) =
            self.decide_result(Some(task), message, |owner, now| owner.cancel(now, task));
        if let Err(refused) = decided {
            return Err(match refused {
                Refused::Unknown(_) => TaskError::NotFound(task),
                Refused::WrongState { state, .. } => TaskError::NotCancelable { task, state },
            });
        }
        self.write(effects.writes)
            .await
            .map_err(|e| TaskError::Internal(format!("the cancel could not be stored: {e:#}")))?;
        // A tool waiting for input is released (its wait fails and the run stops).
        lock(&live.input).take();
        Ok(live.record().snapshot())
    }

    /// Delivers a follow-up message to a task that asked for input.
    pub fn reply(&self, task: &TaskId, text: String) -> Result<TaskSnapshot, TaskError> {
        let live = self
            .live(task)
            .ok_or_else(|| self.not_live(task, |task, state| TaskError::NotWaiting { task, state }))?;
        let task = *task;
        let waiter = {
            let mut input = lock(&live.input);
            if input.is_none() {
                let state = live.record().state;
                return Err(TaskError::NotWaiting { task, state });
            }
            // Working before the tool wakes, so whoever waits for the outcome next does
            // not see the stale input-required; a cancel decided first wins and the reply
            // is refused.
            let (decided, effects) =
                self.decide_result(Some(task), None, |owner, now| owner.reply(now, task));
            if let Err(refused) = decided {
                let state = match refused {
                    Refused::WrongState { state, .. } => state,
                    Refused::Unknown(_) => live.record().state,
                };
                return Err(TaskError::NotWaiting { task, state });
            }
            let _ = self.write_background(effects);
            input.take()
        };
        if let Some(waiter) = waiter {
            let _ = waiter.send(text);
        }
        Ok(live.record().snapshot())
    }

    /// The running `task` asks for input with `prompt`: it is input-required once that is
    /// stored, and `reply` is where the answer goes. False when it was canceled meanwhile
    /// or the question could not be stored.
    pub(super) async fn ask(&self, live: &Live, prompt: String, reply: oneshot::Sender<String>) -> bool {
        let task = live.record().task;
        *lock(&live.input) = Some(reply);
        let (decided, effects) =
            self.decide_result(Some(task), Some(prompt), |owner, now| owner.ask(now, task));
        let asked = decided.is_ok() && self.write(effects.writes).await.is_ok();
        if !asked {
            lock(&live.input).take();
        }
        asked
    }

    /// Events after `after`, waiting up to `wait` for one (with `settled`: until the task
    /// is terminal or input-required); plus the snapshot and whether older events were
    /// already dropped.
    pub async fn events(
        &self,
        task: &TaskId,
        after: u64,
        wait: Duration,
        settled: bool,
    ) -> Result<(Vec<TaskEvent>, TaskSnapshot, bool), TaskError> {
        let Some(live) = self.live(task) else {
            // Finished and forgotten from memory: nothing more will happen to it.
            let record = self.on_disk_only(task).ok_or(TaskError::NotFound(*task))?;
            let (events, gap) = record.events_after(after);
            return Ok((events, record.snapshot(), gap));
        };
        let mut changed = live.changed.subscribe();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            {
                let record = live.record();
                let (events, gap) = record.events_after(after);
                let settled_now = record.state.is_terminal() || record.state == TaskState::InputRequired;
                if (settled && settled_now) || (!settled && !events.is_empty()) || record.state.is_terminal()
                {
                    return Ok((events, record.snapshot(), gap));
                }
            }
            if tokio::time::timeout_at(deadline, changed.changed()).await.is_err() {
                let record = live.record();
                let (events, gap) = record.events_after(after);
                return Ok((events, record.snapshot(), gap));
            }
        }
    }

    /// The advertised load: tasks running and queued, in thousandths of `workers` (every
    /// worker of every capsule that takes tasks), capped at 1,000.
    #[must_use]
    pub fn load_permille(&self, workers: usize) -> u16 {
        lock(&self.inner.owner).load_permille(workers)
    }

    /// Takes no new tasks from now on ([`Owner::drain`]); those held run on.
    pub fn drain(&self) {
        lock(&self.inner.owner).drain();
    }

    #[must_use]
    pub fn is_draining(&self) -> bool {
        lock(&self.inner.owner).is_draining()
    }

    /// Tasks running and queued here.
    #[must_use]
    pub fn busy(&self) -> usize {
        lock(&self.inner.owner).busy()
    }

    /// Remembers that `task`, sent from here, is owned by `owner` (so `get`, `cancel` and
    /// streams reach it after a restart too); returns once that is on disk.
    pub async fn remember_route(&self, route: RouteRecord) -> anyhow::Result<()> {
        {
            let mut recent = lock(&self.inner.recent_routes);
            recent.push_front(route.clone());
            recent.truncate(RECENT_ROUTES_MAX);
        }
        self.inner.db.put_route(route).await
    }

    /// Prunes finished tasks and routes past `retention` now (on a blocking thread); what
    /// went. Tasks still in memory stay there until the owner drops them.
    pub async fn prune(&self, retention: Retention) -> anyhow::Result<Pruned> {
        let manager = self.clone();
        let now = murmur_config::clock::now().0;
        tokio::task::spawn_blocking(move || manager.inner.db.prune(now, retention)).await?
    }

    /// Prunes every `every`, for as long as the node runs.
    pub async fn keep_pruning(self, retention: Retention, every: std::time::Duration) {
        loop {
            match self.prune(retention).await {
                Ok(pruned) if pruned != Pruned::default() => {
                    tracing::info!(
                        tasks = pruned.tasks,
                        routes = pruned.routes,
                        "pruned finished tasks and routes past their retention"
                    );
                }
                Ok(_) => {}
                Err(err) => tracing::error!(error = %format!("{err:#}"), "pruning the task database failed"),
            }
            tokio::time::sleep(every).await;
        }
    }

    /// Every change of a task's state from now on, in the order they happened.
    #[must_use]
    pub fn changes(&self) -> tokio::sync::broadcast::Receiver<TaskChange> {
        self.inner.changes.subscribe()
    }

    /// Task writes that found the database's queue full and waited for room.
    #[must_use]
    pub fn writes_waited(&self) -> u64 {
        self.inner.db.waited.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Where a task sent from here went.
    #[must_use]
    pub fn route_of(&self, task: &TaskId) -> Option<RouteRecord> {
        self.inner.db.route(task).ok().flatten()
    }

    /// Tasks sent from here to other nodes, newest first: at most `limit`, and at most the
    /// newest [`RECENT_ROUTES_MAX`] (kept in memory; older ones stay on disk for
    /// [`TaskManager::route_of`]).
    #[must_use]
    pub fn routes(&self, limit: usize) -> Vec<RouteRecord> {
        lock(&self.inner.recent_routes).iter().take(limit).cloned().collect()
    }

    pub(super) fn live(&self, task: &TaskId) -> Option<Arc<Live>> {
        self.inner.live.get(task).map(|entry| entry.value().clone())
    }

    /// Whether a finished task may be on disk only: one was forgotten from memory, or the
    /// start-up left older ones there.
    fn forgot_any(&self) -> bool {
        self.inner.left_on_disk.load(std::sync::atomic::Ordering::Relaxed)
            || lock(&self.inner.owner).forgot_any()
    }

    /// The error for an operation on `task` that only a task in memory allows: `finished`
    /// with its state when the database holds it (it finished), else not found.
    fn not_live(&self, task: &TaskId, finished: impl FnOnce(TaskId, TaskState) -> TaskError) -> TaskError {
        match self.on_disk_only(task) {
            Some(record) => finished(*task, record.state),
            None => TaskError::NotFound(*task),
        }
    }

    /// Runs `decide` on the machine and applies its outputs to the records (`message` goes
    /// with the state changes of `task`).
    fn decide(
        &self,
        task: Option<TaskId>,
        message: Option<String>,
        decide: impl FnOnce(&mut Owner, murmur_protocol::Millis),
    ) -> Effects {
        let mut owner = lock(&self.inner.owner);
        decide(&mut owner, clock::now());
        self.apply(&mut owner, task, message)
    }

    /// [`TaskManager::decide`] for a decision with an answer.
    fn decide_result<T>(
        &self,
        task: Option<TaskId>,
        message: Option<String>,
        decide: impl FnOnce(&mut Owner, murmur_protocol::Millis) -> T,
    ) -> (T, Effects) {
        let mut owner = lock(&self.inner.owner);
        let answer = decide(&mut owner, clock::now());
        let effects = self.apply(&mut owner, task, message);
        (answer, effects)
    }

    /// Applies the machine's outputs to the records in memory, under its lock (so records
    /// change in the order it decided); returns the writes and starts to carry out.
    fn apply(&self, owner: &mut Owner, task: Option<TaskId>, message: Option<String>) -> Effects {
        let now = clock::now().0;
        let mut effects = Effects::default();
        let live = &self.inner.live;
        // Watchers hear of a change once the whole decision is applied: one that sees a task
        // finish must also see the older finished task its finishing forgot.
        let mut changed = Vec::new();
        while let Some(output) = owner.poll_output() {
            match output {
                Output::Store { task: id, state, write } => {
                    // A clone, not the map's guard: nothing waits on a shard while a
                    // record is locked.
                    let Some(entry) = live.get(&id).map(|e| e.value().clone()) else { continue };
                    let mut record = entry.record();
                    if record.state != state || state != TaskState::Submitted {
                        // Recovery fails every interrupted task with the same message.
                        let text = if task.is_none_or(|t| t == id) { message.clone() } else { None };
                        let text = if state == TaskState::Working { None } else { text };
                        record.transition(state, text, now);
                    }
                    changed.push((Arc::clone(&entry), record.seq));
                    if self.inner.changes.receiver_count() > 0 {
                        // No one watching (the usual case) costs nothing.
                        let _ = self.inner.changes.send(TaskChange {
                            task: id,
                            capsule: record.capsule.clone(),
                            state: record.state,
                            seq: record.seq,
                            updated_ms: record.updated_ms,
                        });
                    }
                    effects.writes.push((record.clone(), write));
                }
                Output::Start { task: id } => {
                    if let Some(entry) = live.get(&id).map(|e| e.value().clone()) {
                        effects.starts.push(entry);
                    }
                }
                Output::Forget { task: id } => {
                    live.remove(&id);
                }
            }
        }
        for (entry, seq) in changed {
            entry.changed.send_replace(seq);
        }
        effects
    }

    /// Carries out writes: synchronous ones are on disk when this returns, background ones
    /// are queued.
    async fn write(&self, writes: Vec<(TaskRecord, Write)>) -> anyhow::Result<()> {
        for (record, write) in writes {
            match write {
                Write::Sync => self.inner.db.put(record).await?,
                Write::Background => self.inner.db.put_eventually(record),
            }
        }
        Ok(())
    }

    /// Queues `effects`' writes in the background (they hold no synchronous write: a start
    /// or a return from a question) and returns the tasks to run.
    fn write_background(&self, effects: Effects) -> Vec<Arc<Live>> {
        for (record, _) in effects.writes {
            self.inner.db.put_eventually(record);
        }
        effects.starts
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
