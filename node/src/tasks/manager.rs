//! The tasks this node owns: acceptance, queues, execution, input, cancel, events.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use murmur_protocol::task::{Submit, TaskEvent, TaskId, TaskRefusal, TaskSnapshot, TaskState};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::Instrument;

use murmur_config::clock;
use murmur_runtime::manifest::TaskAcceptance;
use murmur_runtime::ports::{PortFuture, TaskPort};
use murmur_runtime::{Runtime, ToolInput};

use super::db::TaskDb;
use super::record::{Origin, RouteRecord, TaskRecord};

/// Tasks kept in memory (the database keeps all; older finished ones are dropped first).
pub const LIVE_MAX: usize = 100_000;
/// Routes (tasks placed on other nodes) kept in memory for listing, newest first.
pub const RECENT_ROUTES_MAX: usize = 1024;
/// Tasks waiting in one capsule's queue.
pub const QUEUE_MAX: usize = 4096;

/// What [`TaskManager::insert_checked`] did.
enum Insert {
    Inserted,
    Existing(Arc<Live>),
    Busy,
}

/// A task in memory, with what its waiters need.
#[derive(Debug)]
struct Live {
    record: Mutex<TaskRecord>,
    changed: watch::Sender<u64>,
    input: Mutex<Option<oneshot::Sender<String>>>,
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

    fn record(&self) -> std::sync::MutexGuard<'_, TaskRecord> {
        self.record.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
    #[error("capsule `{capsule}` is busy with another task (task_acceptance = single)")]
    Busy { capsule: String },
    #[error("capsule `{capsule}` has {QUEUE_MAX} tasks queued, its limit")]
    Overloaded { capsule: String },
    #[error("{0}")]
    Internal(String),
}

impl TaskError {
    /// The failed check, as a stable name (JSON-RPC `data.check`, `/murmur/task/1`).
    #[must_use]
    pub const fn check(&self) -> &'static str {
        match self {
            Self::NotFound(_) => "not_found",
            Self::NotCancelable { .. } => "not_cancelable",
            Self::NotWaiting { .. } => "not_waiting",
            Self::Refused(refusal) => refusal.check(),
            Self::Busy { .. } => "busy",
            Self::Overloaded { .. } => "overloaded",
            Self::Internal(_) => "internal",
        }
    }
}

/// The owner side of tasks. Cheap to clone.
#[derive(Clone, Debug)]
pub struct TaskManager {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    db: TaskDb,
    runtime: Runtime,
    live: Mutex<BTreeMap<TaskId, Arc<Live>>>,
    queues: Mutex<BTreeMap<String, mpsc::Sender<Arc<Live>>>>,
    running: Mutex<BTreeMap<String, usize>>,
    tickets: std::sync::atomic::AtomicU64,
    /// Whether a finished task was ever dropped from `live` (then an unknown task id may
    /// still be in the database).
    evicted: std::sync::atomic::AtomicBool,
    /// Tasks held in memory at most ([`LIVE_MAX`] but in tests).
    live_max: usize,
    /// Size of `live` at which the next eviction pass runs (at least `live_max`).
    scan_at: std::sync::atomic::AtomicUsize,
    /// The newest routes, newest first (for listing without reading every route).
    recent_routes: Mutex<std::collections::VecDeque<RouteRecord>>,
}

impl TaskManager {
    /// Opens the task database and recovers: tasks that were running fail (the node
    /// restarted under them), queued tasks are queued again.
    pub async fn open(path: &std::path::Path, runtime: Runtime) -> anyhow::Result<Self> {
        Self::open_with_live_max(path, runtime, LIVE_MAX).await
    }

    /// [`TaskManager::open`] holding at most `live_max` tasks in memory (tests use a small
    /// number to exercise eviction).
    pub async fn open_with_live_max(
        path: &std::path::Path,
        runtime: Runtime,
        live_max: usize,
    ) -> anyhow::Result<Self> {
        let db = TaskDb::open(path)?;
        let manager = Self {
            inner: Arc::new(Inner {
                db,
                runtime,
                live: Mutex::new(BTreeMap::new()),
                queues: Mutex::new(BTreeMap::new()),
                running: Mutex::new(BTreeMap::new()),
                tickets: std::sync::atomic::AtomicU64::new(0),
                evicted: std::sync::atomic::AtomicBool::new(false),
                live_max: live_max.max(1),
                scan_at: std::sync::atomic::AtomicUsize::new(0),
                recent_routes: Mutex::new(std::collections::VecDeque::new()),
            }),
        };
        let mut routes = manager.inner.db.routes()?;
        routes.sort_by_key(|r| std::cmp::Reverse(r.created_ms));
        routes.truncate(RECENT_ROUTES_MAX);
        *manager.inner.recent_routes.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            routes.into();
        let mut records = manager.inner.db.all()?;
        records.sort_by_key(|r| (r.ticket, r.created_ms));
        let last = records.iter().map(|r| r.ticket).max().unwrap_or(0);
        manager.inner.tickets.store(last, std::sync::atomic::Ordering::Relaxed);
        let now = clock::now().0;
        for mut record in records {
            let requeue = match record.state {
                TaskState::Working | TaskState::InputRequired => {
                    record.transition(
                        TaskState::Failed,
                        Some("the node restarted while the task was running".into()),
                        now,
                    );
                    manager.inner.db.put(record.clone()).await?;
                    false
                }
                TaskState::Submitted => true,
                _ => false,
            };
            let live = Live::new(record, Some(true));
            manager.insert_live(live.clone());
            if requeue {
                manager.enqueue(live).await;
            }
        }
        Ok(manager)
    }

    /// Makes every task write so far durable (call when the node stops).
    pub async fn flush(&self) -> anyhow::Result<()> {
        self.inner.db.flush().await
    }

    /// Accepts a task for a capsule this node runs (idempotent: the same task id returns
    /// the task as it is). The acceptance is durable before this returns.
    pub async fn accept(&self, submit: &Submit, origin: Origin) -> Result<TaskSnapshot, TaskError> {
        if let Some(existing) = self.live(&submit.task) {
            return Self::accepted_already(&existing).await;
        }
        if self.inner.evicted.load(std::sync::atomic::Ordering::Relaxed)
            && let Some(record) = self
                .inner
                .db
                .get(&submit.task)
                .map_err(|e| TaskError::Internal(format!("task store: {e:#}")))?
        {
            // Finished long ago and no longer in memory: it ran once; it stays that way.
            return Ok(record.snapshot());
        }
        let installed = self
            .inner
            .runtime
            .installed()
            .into_iter()
            .find(|i| i.manifest.name == submit.capsule)
            .ok_or_else(|| TaskRefusal::NotHosted { capsule: submit.capsule.clone() })?;
        if !installed.manifest.kind.runs_as_tool() {
            return Err(TaskRefusal::NotAccepting { capsule: submit.capsule.clone() }.into());
        }
        let single = installed.manifest.lifecycle.task_acceptance == TaskAcceptance::Single;
        match installed.manifest.lifecycle.task_acceptance {
            TaskAcceptance::None => {
                return Err(TaskRefusal::NotAccepting { capsule: submit.capsule.clone() }.into());
            }
            TaskAcceptance::Single if self.running(&submit.capsule) + self.queued(&submit.capsule) > 0 => {
                return Err(TaskError::Busy { capsule: submit.capsule.clone() });
            }
            _ if self.queued(&submit.capsule) >= QUEUE_MAX => {
                return Err(TaskError::Overloaded { capsule: submit.capsule.clone() });
            }
            _ => {}
        }
        let mut record = TaskRecord::new(
            submit.task,
            &submit.capsule,
            &submit.message,
            submit.context.clone(),
            submit.text.clone(),
            origin,
            clock::now().0,
        );
        record.ticket = self.inner.tickets.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        record.trace_id = submit.traceparent.as_deref().and_then(crate::telemetry::trace_id_of);
        record.traceparent.clone_from(&submit.traceparent);
        let live = Live::new(record.clone(), None);
        // Check and insert under one lock: two deliveries of one task accept it once, and
        // a `single` capsule never holds two unfinished tasks.
        match self.insert_checked(live.clone(), single.then_some(submit.capsule.as_str())) {
            Insert::Inserted => {}
            Insert::Existing(existing) => return Self::accepted_already(&existing).await,
            Insert::Busy => return Err(TaskError::Busy { capsule: submit.capsule.clone() }),
        }
        if let Err(err) = self.inner.db.put(record).await {
            self.inner.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&submit.task);
            live.stored.send_replace(Some(false));
            return Err(TaskError::Internal(format!("{err:#}")));
        }
        live.stored.send_replace(Some(true));
        let snapshot = live.record().snapshot();
        self.enqueue(live).await;
        Ok(snapshot)
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

    /// Whether this node owns `task` (in memory: every task but the oldest finished ones
    /// past [`LIVE_MAX`]; no disk read, for hot paths).
    #[must_use]
    pub fn owns(&self, task: &TaskId) -> bool {
        self.live(task).is_some()
    }

    /// Whether this node holds `task`: in memory, or (once finished tasks were dropped from
    /// memory) in its database. A disk read only after an eviction.
    #[must_use]
    pub fn holds(&self, task: &TaskId) -> bool {
        self.owns(task)
            || (self.inner.evicted.load(std::sync::atomic::Ordering::Relaxed)
                && matches!(self.inner.db.get(task), Ok(Some(_))))
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
        let live: Vec<Arc<Live>> = self
            .inner
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
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

    /// Cancels a task that has not started, or that waits for input.
    pub async fn cancel(&self, task: &TaskId) -> Result<TaskSnapshot, TaskError> {
        let live = self.live(task).ok_or(TaskError::NotFound(*task))?;
        // Checked and changed under one lock: a worker starting the task at the same
        // moment either starts it (and the cancel is refused) or finds it canceled.
        let changed = self
            .update_if(
                &live,
                &[TaskState::Submitted, TaskState::InputRequired],
                TaskState::Canceled,
                Some("canceled by request".into()),
                true,
            )
            .await
            .map_err(|e| TaskError::Internal(format!("the cancel could not be stored: {e:#}")))?;
        if !changed {
            return Err(TaskError::NotCancelable { task: *task, state: live.record().state });
        }
        // A tool waiting for input is released (its wait fails and the run stops).
        live.input.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        Ok(live.record().snapshot())
    }

    /// Delivers a follow-up message to a task that asked for input.
    pub fn reply(&self, task: &TaskId, text: String) -> Result<TaskSnapshot, TaskError> {
        let live = self.live(task).ok_or(TaskError::NotFound(*task))?;
        let waiter = {
            let mut input = live.input.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let state = live.record().state;
            if state != TaskState::InputRequired || input.is_none() {
                return Err(TaskError::NotWaiting { task: *task, state });
            }
            // Working before the tool wakes, so whoever waits for the outcome next does
            // not see the stale input-required; checked and changed under the record's
            // lock, so a cancel in between wins and the reply is refused.
            if !self.update_now_if(&live, &[TaskState::InputRequired], TaskState::Working, None) {
                return Err(TaskError::NotWaiting { task: *task, state: live.record().state });
            }
            input.take()
        };
        if let Some(waiter) = waiter {
            let _ = waiter.send(text);
        }
        Ok(live.record().snapshot())
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
        let live = self.live(task).ok_or(TaskError::NotFound(*task))?;
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

    /// Tasks running now, over every capsule.
    #[must_use]
    pub fn running_total(&self) -> usize {
        self.inner.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner).values().sum()
    }

    /// The advertised load: tasks running and queued, in thousandths of the workers this
    /// node has (capped at 1,000).
    #[must_use]
    pub fn load_permille(&self) -> u16 {
        let workers: usize = self
            .inner
            .runtime
            .installed()
            .iter()
            .filter(|i| i.manifest.kind.runs_as_tool())
            .map(|i| i.manifest.lifecycle.workers)
            .sum();
        let queued: usize = {
            let queues = self.inner.queues.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            queues.values().map(|q| QUEUE_MAX - q.capacity()).sum()
        };
        let busy = self.running_total() + queued;
        u16::try_from((busy * 1000 / workers.max(1)).min(1000)).unwrap_or(1000)
    }

    /// Remembers that `task`, sent from here, is owned by `owner` (so `get`, `cancel` and
    /// streams reach it after a restart too).
    pub fn remember_route(&self, route: RouteRecord) {
        {
            let mut recent =
                self.inner.recent_routes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            recent.push_front(route.clone());
            recent.truncate(RECENT_ROUTES_MAX);
        }
        self.inner.db.put_route(route);
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
        let recent = self.inner.recent_routes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        recent.iter().take(limit).cloned().collect()
    }

    fn live(&self, task: &TaskId) -> Option<Arc<Live>> {
        self.inner.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(task).cloned()
    }

    /// Inserts `live` unless its task is there already, or (`single` names its capsule) the
    /// capsule has an unfinished task: checked and inserted under the map's lock. Past the
    /// memory limit, the oldest tenth of the finished tasks is dropped from memory first.
    fn insert_checked(&self, live: Arc<Live>, single: Option<&str>) -> Insert {
        let task = live.record().task;
        let mut all = self.inner.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(existing) = all.get(&task) {
            return Insert::Existing(existing.clone());
        }
        if let Some(capsule) = single
            && all.values().any(|l| {
                let record = l.record();
                record.capsule == capsule && !record.state.is_terminal()
            })
        {
            return Insert::Busy;
        }
        let scan_at = self.inner.live_max.max(self.inner.scan_at.load(std::sync::atomic::Ordering::Relaxed));
        if all.len() >= scan_at {
            // One pass drops the oldest tenth of the finished tasks. When few have
            // finished, the next pass waits until a tenth more tasks arrived, so the scan
            // is paid once per tenth of the limit, never on every insert.
            let mut finished: Vec<(u64, TaskId)> = all
                .iter()
                .filter_map(|(t, l)| {
                    let record = l.record();
                    record.state.is_terminal().then_some((record.updated_ms, *t))
                })
                .collect();
            let evict = (self.inner.live_max / 10).max(1).min(finished.len());
            if evict > 0 {
                finished.select_nth_unstable(evict - 1);
                for (_, task) in &finished[..evict] {
                    all.remove(task);
                }
                self.inner.evicted.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            let next = all.len() + (self.inner.live_max / 10).max(1);
            self.inner.scan_at.store(next, std::sync::atomic::Ordering::Relaxed);
        }
        all.insert(task, live);
        Insert::Inserted
    }

    /// Inserts a recovered task (at open; ids are unique on disk).
    fn insert_live(&self, live: Arc<Live>) {
        let _ = self.insert_checked(live, None);
    }

    fn running(&self, capsule: &str) -> usize {
        self.inner
            .running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(capsule)
            .copied()
            .unwrap_or(0)
    }

    fn queued(&self, capsule: &str) -> usize {
        let queues = self.inner.queues.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        queues.get(capsule).map_or(0, |q| QUEUE_MAX - q.capacity())
    }

    /// Moves the task on without waiting for the disk, to `state` only if it is in one of `from` (any non-terminal state
    /// when `from` is empty), checked and changed under the record's lock; stored with
    /// the next commit. Returns whether it moved.
    fn update_now_if(
        &self,
        live: &Live,
        from: &[TaskState],
        state: TaskState,
        message: Option<String>,
    ) -> bool {
        let record = {
            let mut record = live.record();
            if !from.is_empty() && !from.contains(&record.state) {
                return false;
            }
            if !record.transition(state, message, clock::now().0) {
                return false;
            }
            record.clone()
        };
        let seq = record.seq;
        self.inner.db.put_eventually(record);
        live.changed.send_replace(seq);
        true
    }

    /// [`TaskManager::update_now_if`], durable: returns once the change is on disk (or
    /// with the error that kept it off).
    async fn update_if(
        &self,
        live: &Live,
        from: &[TaskState],
        state: TaskState,
        message: Option<String>,
        durable: bool,
    ) -> anyhow::Result<bool> {
        if !durable {
            return Ok(self.update_now_if(live, from, state, message));
        }
        let record = {
            let mut record = live.record();
            if !from.is_empty() && !from.contains(&record.state) {
                return Ok(false);
            }
            if !record.transition(state, message, clock::now().0) {
                return Ok(false);
            }
            record.clone()
        };
        let seq = record.seq;
        let stored = self.inner.db.put(record).await;
        live.changed.send_replace(seq);
        stored.map(|()| true)
    }

    /// Moves the task to `state` from any non-terminal state, durably; a failed write is
    /// logged (the state stands in memory).
    async fn update(&self, live: &Live, state: TaskState, message: Option<String>) {
        if let Err(err) = self.update_if(live, &[], state, message, true).await {
            tracing::error!(error = %format!("{err:#}"), "cannot store a task state");
        }
    }

    /// Puts a task on its capsule's queue, starting the capsule's workers on first use.
    async fn enqueue(&self, live: Arc<Live>) {
        let capsule = live.record().capsule.clone();
        let sender = {
            let mut queues = self.inner.queues.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            queues
                .entry(capsule.clone())
                .or_insert_with(|| {
                    let workers =
                        self.inner.runtime.installed().iter().find(|i| i.manifest.name == capsule).map_or(
                            1,
                            |i| match i.manifest.lifecycle.task_acceptance {
                                TaskAcceptance::Queue => i.manifest.lifecycle.workers,
                                _ => 1,
                            },
                        );
                    let (tx, rx) = mpsc::channel(QUEUE_MAX);
                    let rx = Arc::new(tokio::sync::Mutex::new(rx));
                    for _ in 0..workers {
                        tokio::spawn(self.clone().worker(rx.clone()));
                    }
                    tx
                })
                .clone()
        };
        if sender.try_send(live.clone()).is_err() {
            self.update(&live, TaskState::Failed, Some("the capsule's queue is full or closed".into())).await;
        }
    }

    async fn worker(self, queue: Arc<tokio::sync::Mutex<mpsc::Receiver<Arc<Live>>>>) {
        loop {
            let next = queue.lock().await.recv().await;
            let Some(live) = next else { return };
            self.execute(&live).await;
        }
    }

    async fn execute(&self, live: &Arc<Live>) {
        let (capsule, input, span) = {
            let record = live.record();
            let span = crate::telemetry::task_span(
                "task.run",
                &record.task.to_string(),
                &record.capsule,
                record.traceparent.as_deref(),
            );
            (record.capsule.clone(), record.input.clone(), span)
        };
        // Submitted → working under the record's lock: a task canceled while queued (or at
        // this very moment) never starts.
        if !self.update_now_if(live, &[TaskState::Submitted], TaskState::Working, None) {
            return;
        }
        *self
            .inner
            .running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(capsule.clone())
            .or_default() += 1;
        let link: Arc<dyn TaskPort> = Arc::new(InputLink { manager: self.clone(), live: live.clone() });
        let outcome = self
            .inner
            .runtime
            .run_tool_for_task(&capsule, ToolInput { data: Some(input), log_path: None }, link)
            .instrument(span)
            .await;
        if let Some(count) =
            self.inner.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get_mut(&capsule)
        {
            *count = count.saturating_sub(1);
        }
        let (state, message) = match outcome {
            Ok(run) if run.result.status == "passed" => {
                (TaskState::Completed, run.result.data.or(run.result.summary).map(cut_result))
            }
            Ok(run) => (
                TaskState::Failed,
                run.result
                    .summary
                    .or(run.result.data)
                    .map(cut_result)
                    .or(Some(format!("the tool reported {}", run.result.status))),
            ),
            Err(err) => (TaskState::Failed, Some(err.to_string())),
        };
        self.update(live, state, message).await;
    }
}

/// Largest result or failure text a task keeps; longer text is cut (a terminal task's text
/// travels twice in an `events` answer, within `/murmur/task/1`'s 1 MiB frames).
pub const RESULT_BYTES_MAX: usize = 256 * 1024;

fn cut_result(mut text: String) -> String {
    if text.len() > RESULT_BYTES_MAX {
        let total = text.len();
        let cut = (0..=RESULT_BYTES_MAX).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        text.truncate(cut);
        text.push_str(&format!("… [cut: {total} bytes in all]"));
    }
    text
}

/// Connects a running tool's `request-input` to its task.
struct InputLink {
    manager: TaskManager,
    live: Arc<Live>,
}

impl TaskPort for InputLink {
    fn traceparent(&self) -> Option<String> {
        self.live.record().traceparent.clone()
    }

    fn request_input(&self, prompt: String, timeout: Duration) -> PortFuture<'_, Result<String, String>> {
        Box::pin(async move {
            let (tx, mut rx) = oneshot::channel();
            *self.live.input.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(tx);
            let asked = self
                .manager
                .update_if(&self.live, &[TaskState::Working], TaskState::InputRequired, Some(prompt), true)
                .await;
            if !matches!(asked, Ok(true)) {
                self.live.input.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
                return Err(
                    "the task is no longer running (canceled) or its question could not be stored".to_owned()
                );
            }
            tokio::select! {
                // `reply` already moved the task back to working.
                answer = &mut rx => answer.map_err(|_| "the task was canceled while waiting for input".to_owned()),
                () = tokio::time::sleep(timeout) => {
                    let waiting = self.live.input.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
                    if waiting.is_none() {
                        // A reply took the waiter just as the time ran out: it is on its way.
                        return rx.await.map_err(|_| "the task was canceled while waiting for input".to_owned());
                    }
                    Err(format!(
                        "no input arrived within lifecycle.input_timeout_secs ({} s)",
                        timeout.as_secs()
                    ))
                }
            }
        })
    }
}
