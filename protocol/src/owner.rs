//! The owner of tasks: the node that accepted a task decides here whether it takes it,
//! when it runs, what each state change means and what must be on disk first.
//!
//! Sans-IO, like the router. The owner's driver (`murnode`'s task manager, the simulator's
//! model of it) asks [`Owner::admit`] for every delivery, reports what its writes and runs
//! did, and carries out the outputs: [`Output::Store`] a state (synchronously, before
//! anything else is said about the task, or in the background), [`Output::Start`] a task
//! on a free worker, [`Output::Forget`] a finished task from memory. Task text, results and
//! event logs are the driver's; the machine keeps what its decisions need (capsule, state,
//! acceptance order) for the tasks in memory.
//!
//! # Decisions
//!
//! - **Idempotency**: a task id names one message of one sender (`TaskId::derive`), so a
//!   second delivery of a held task is answered with the task as it is; it never runs
//!   twice.
//! - **Admission**, by the capsule's declared [`Policy`]: not hosted or `task_acceptance =
//!   none` refuses (the router tries another node); `single` refuses while the capsule has
//!   an unfinished task (`busy`); `queue` refuses when [`OwnerConfig::queue_max`] tasks wait
//!   (`overloaded`).
//! - **Durability**: the acceptance, a question for input and every terminal state are
//!   stored before anything else is said about the task ([`Write::Sync`]); the start and the
//!   return from a question are stored in the background ([`Write::Background`]).
//! - **Workers**: a capsule runs at most `workers` tasks at once (`single`: one), in
//!   acceptance order.
//! - **Recovery**: after a restart, a task that was running or waiting for input failed
//!   with the node ("the node restarted while the task was running"); a queued one is
//!   queued again, in acceptance order.
//! - **Memory**: at most [`OwnerConfig::finished_max`] finished tasks are held, and at most
//!   [`OwnerConfig::live_max`] tasks in all; past either, the task that finished first is
//!   forgotten ([`Output::Forget`]; the database keeps it). Finished tasks are kept in the
//!   order they finished, so forgetting one costs no scan.
//! - **Settle budget** ([`settle_wait_ms`]): how long an owner may wait for a task to settle
//!   before answering a sender that asked to wait.
//!
//! # Call order
//!
//! ```text
//! owner.admit(now, &submit, policy)?;                 // Store { Submitted, Sync }
//! … write it …; owner.stored(now, task)?;             // Start, when a worker is free
//! … run it …;   owner.finished(now, task, Completed)  // Store { Completed, Sync }, next Start
//! while let Some(out) = owner.poll_output() { carry it out }
//! ```

use std::collections::{BTreeMap, VecDeque};

use crate::limits::{OWNER_FINISHED_MAX, OWNER_LIVE_MAX, OWNER_QUEUE_MAX, OWNER_WAIT_MAX_MS};
use crate::plant::{Plant, Plants};
use crate::task::{Sender, Submit, TaskId, TaskState};
use crate::time::Millis;

/// How a capsule takes tasks (its manifest's `lifecycle.task_acceptance`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Acceptance {
    /// Takes no tasks: they are refused (`not_accepting`).
    None,
    /// One task at a time: while one is unfinished, another is refused as busy (and the
    /// router tries another node).
    Single,
    /// Tasks queue and run in order, `workers` at a time.
    #[default]
    Queue,
}

/// Whose tasks a capsule takes (its manifest's `lifecycle.audience`, else the node's
/// `runtime.audience`). Each includes the one before it.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Audience {
    /// Only tasks that entered at this node: its own API clients and its own capsules.
    Local,
    /// Those, and tasks from capsules of other nodes that hold a grant allowing this
    /// capsule (checked by `check_incoming` before the owner sees them). Clients of other
    /// nodes are refused: a host on the LAN that runs `murnode` cannot run this capsule.
    #[default]
    Granted,
    /// Those, and the clients of every node of the mesh (a lab mesh, or a closed mesh whose
    /// every node is certified).
    Mesh,
}

impl Audience {
    /// The manifest and config spelling.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Granted => "granted",
            Self::Mesh => "mesh",
        }
    }

    /// Whether a task from `sender`, arriving as `arrival`, is in this audience.
    #[must_use]
    pub const fn admits(self, arrival: Arrival, sender: &Sender) -> bool {
        match (arrival, self, sender) {
            (Arrival::Local, _, _) | (Arrival::Remote, Self::Mesh, _) => true,
            (Arrival::Remote, Self::Granted, Sender::Capsule { .. }) => true,
            (Arrival::Remote, Self::Granted, Sender::Client) | (Arrival::Remote, Self::Local, _) => false,
        }
    }
}

/// Where a delivery comes from: this node's own router (its clients and capsules), or
/// another node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    Local,
    Remote,
}

/// A hosted capsule's declared way of taking tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Whose tasks it takes.
    pub audience: Audience,
    pub acceptance: Acceptance,
    /// Tasks run at once (queue mode; a single-task capsule runs one).
    pub workers: usize,
    /// Whether a `working` task may be canceled: its run can be stopped between steps
    /// (an agent's loop, between turns and calls). A tool's single call cannot.
    pub interruptible: bool,
}

impl Policy {
    /// A capsule that takes no tasks (not a tool, or `task_acceptance = none`).
    pub const CLOSED: Self =
        Self { audience: Audience::Local, acceptance: Acceptance::None, workers: 0, interruptible: false };

    const fn slots(self) -> usize {
        match self.acceptance {
            Acceptance::None => 0,
            Acceptance::Single => 1,
            Acceptance::Queue => self.workers,
        }
    }
}

/// How the owner holds tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnerConfig {
    /// Tasks waiting in one capsule's queue at most.
    pub queue_max: usize,
    /// Tasks held in memory at most, finished or not.
    pub live_max: usize,
    /// Finished tasks held in memory at most (for answers without a disk read).
    pub finished_max: usize,
    pub plants: Plants,
}

impl Default for OwnerConfig {
    fn default() -> Self {
        Self {
            queue_max: OWNER_QUEUE_MAX,
            live_max: OWNER_LIVE_MAX,
            finished_max: OWNER_FINISHED_MAX,
            plants: Plants::NONE,
        }
    }
}

/// Why a delivery was refused; nothing was stored or run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("this node does not run capsule `{capsule}`")]
    NotHosted { capsule: String },
    #[error("capsule `{capsule}` does not accept tasks (task_acceptance = none)")]
    NotAccepting { capsule: String },
    #[error("capsule `{capsule}` is busy with another task (task_acceptance = single)")]
    Busy { capsule: String },
    #[error("capsule `{capsule}` has {queued} tasks queued, its limit")]
    Overloaded { capsule: String, queued: usize },
    #[error("capsule `{capsule}` {}", audience_says(*.audience))]
    NotInAudience { capsule: String, audience: Audience },
    /// The node is shutting down ([`Owner::drain`]): it finishes what it holds and takes
    /// nothing new. On the wire a `not_accepting` refusal, so every sender (older ones
    /// too) tries the next node hosting the capsule.
    #[error(
        "this node is shutting down and takes no new tasks; capsule `{capsule}` runs on other nodes of the mesh, if any"
    )]
    Draining { capsule: String },
}

/// What a refusal for `audience` tells the sender.
const fn audience_says(audience: Audience) -> &'static str {
    match audience {
        Audience::Local => {
            "takes tasks only from its own node's clients and capsules (audience = local); send it through that node"
        }
        Audience::Granted | Audience::Mesh => {
            "takes tasks from other nodes only from capsules with a grant for it (audience = granted); clients of other nodes are refused: send through its own node, or its operator sets audience = \"mesh\""
        }
    }
}

impl Refusal {
    /// The failed check's stable name (`/murmur/task/1`, JSON-RPC `data.check`).
    #[must_use]
    pub const fn check(&self) -> &'static str {
        match self {
            Self::NotHosted { .. } => "not_hosted",
            Self::NotAccepting { .. } => "not_accepting",
            Self::Busy { .. } => "busy",
            Self::Overloaded { .. } => "overloaded",
            Self::NotInAudience { .. } => "not_in_audience",
            Self::Draining { .. } => "not_accepting",
        }
    }
}

/// A state change the owner refused: the task is not in a state that allows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("task {0} is not held here")]
    Unknown(TaskId),
    #[error("task {task} is {state}")]
    WrongState { task: TaskId, state: TaskState },
}

/// What [`Owner::admit`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admitted {
    /// A new task, `ticket`-th in acceptance order: store its acceptance, then report
    /// [`Owner::stored`].
    New { ticket: u64 },
    /// Held already (a repeated delivery): answer with it as it is.
    Existing(TaskState),
}

/// How a state must reach the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// On disk before anything else is said about the task.
    Sync,
    /// With the next commit; the driver goes on at once.
    Background,
}

/// What the owner asks its driver to do.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum Output {
    /// Store the task's new `state`.
    Store { task: TaskId, state: TaskState, write: Write },
    /// Run the task now (it is working): a worker of its capsule is free.
    Start { task: TaskId },
    /// The task left memory; the database keeps it.
    Forget { task: TaskId },
}

/// Counters for metrics and the simulator's reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnerStats {
    pub accepted: u64,
    pub repeated: u64,
    pub refused: BTreeMap<&'static str, u64>,
    pub failed_on_restart: u64,
    pub requeued: u64,
    pub forgotten: u64,
}

#[derive(Clone, Debug)]
struct Entry {
    capsule: String,
    state: TaskState,
    updated: Millis,
    /// The acceptance is on disk (or the task was recovered from it).
    stored: bool,
}

#[derive(Clone, Debug, Default)]
struct Slot {
    queue: VecDeque<TaskId>,
    running: usize,
    /// Tasks not yet terminal (admitted, queued, running, waiting for input).
    unfinished: usize,
    workers: usize,
    /// The capsule's runs can be stopped while working ([`Policy::interruptible`]).
    interruptible: bool,
}

/// The owner side of one node. See the [module docs](self) for the call order.
#[derive(Debug)]
pub struct Owner {
    config: OwnerConfig,
    tasks: BTreeMap<TaskId, Entry>,
    capsules: BTreeMap<String, Slot>,
    next_ticket: u64,
    /// The finished tasks held, in the order they finished: the first is forgotten first.
    finished: VecDeque<TaskId>,
    /// A finished task was forgotten: an unknown id may still be in the database.
    forgot: bool,
    outputs: VecDeque<Output>,
    stats: OwnerStats,
    /// Shutting down: new deliveries are refused ([`Refusal::Draining`]).
    draining: bool,
}

impl Owner {
    #[must_use]
    pub fn new(config: OwnerConfig) -> Self {
        Self {
            config: OwnerConfig { live_max: config.live_max.max(1), ..config },
            tasks: BTreeMap::new(),
            capsules: BTreeMap::new(),
            next_ticket: 0,
            finished: VecDeque::new(),
            forgot: false,
            outputs: VecDeque::new(),
            stats: OwnerStats::default(),
            draining: false,
        }
    }

    /// Takes back what the database holds after a restart, in acceptance order: running
    /// and waiting tasks fail ([`Output::Store`] `Failed`), queued ones wait for
    /// [`Owner::resume`]. `tasks`: (id, capsule, state, ticket).
    pub fn recover(
        &mut self,
        now: Millis,
        tasks: impl IntoIterator<Item = (TaskId, String, TaskState, u64)>,
    ) {
        let mut tasks: Vec<_> = tasks.into_iter().collect();
        tasks.sort_by_key(|&(task, _, _, ticket)| (ticket, task));
        for (task, capsule, state, ticket) in tasks {
            self.next_ticket = self.next_ticket.max(ticket);
            let state = match state {
                TaskState::Working | TaskState::InputRequired => {
                    self.stats.failed_on_restart += 1;
                    self.outputs.push_back(Output::Store {
                        task,
                        state: TaskState::Failed,
                        write: Write::Sync,
                    });
                    TaskState::Failed
                }
                other => other,
            };
            let slot = self.capsules.entry(capsule.clone()).or_default();
            if state == TaskState::Submitted {
                self.stats.requeued += 1;
                slot.queue.push_back(task);
                slot.unfinished += 1;
            }
            let entry = Entry { capsule, state, updated: now, stored: true };
            self.insert(task, entry);
            if state.is_terminal() {
                self.settled(task);
            }
        }
    }

    /// Starts what recovered queues hold, as `policy` (of each capsule, `None` when it is
    /// no longer hosted) allows. Call once the capsules can run. A queued task whose
    /// capsule is gone or takes no more tasks still gets one worker: it runs (and fails,
    /// where the capsule is missing) rather than stay queued forever.
    pub fn resume(&mut self, now: Millis, policy: &dyn Fn(&str) -> Option<Policy>) {
        let names: Vec<String> = self.capsules.keys().cloned().collect();
        for name in names {
            let policy = policy(&name);
            let workers = policy.map_or(1, |p| p.slots().max(1));
            if let Some(slot) = self.capsules.get_mut(&name) {
                slot.workers = workers;
                slot.interruptible = policy.is_some_and(|p| p.interruptible);
            }
            self.start_ready(now, &name);
        }
    }

    /// Decides on a delivery of `submit` for a capsule hosted with `policy` (`None`: not
    /// hosted). A new task is held as submitted and must be stored ([`Output::Store`],
    /// synchronously) before [`Owner::stored`] queues it.
    pub fn admit(
        &mut self,
        now: Millis,
        submit: &Submit,
        policy: Option<Policy>,
        arrival: Arrival,
    ) -> Result<Admitted, Refusal> {
        if let Some(entry) = self.tasks.get(&submit.task) {
            self.stats.repeated += 1;
            return Ok(Admitted::Existing(entry.state));
        }
        let capsule = &submit.capsule;
        let refusal = match policy {
            None => Some(Refusal::NotHosted { capsule: capsule.clone() }),
            Some(_) if self.draining => Some(Refusal::Draining { capsule: capsule.clone() }),
            Some(p) if !p.audience.admits(arrival, &submit.sender) => {
                Some(Refusal::NotInAudience { capsule: capsule.clone(), audience: p.audience })
            }
            Some(p) if p.slots() == 0 => Some(Refusal::NotAccepting { capsule: capsule.clone() }),
            Some(p) => {
                let slot = self.capsules.get(capsule);
                let unfinished = slot.map_or(0, |s| s.unfinished);
                let queued = slot.map_or(0, |s| s.queue.len());
                if p.acceptance == Acceptance::Single && unfinished > 0 {
                    Some(Refusal::Busy { capsule: capsule.clone() })
                } else if queued >= self.config.queue_max {
                    Some(Refusal::Overloaded { capsule: capsule.clone(), queued: self.config.queue_max })
                } else {
                    None
                }
            }
        };
        if let Some(refusal) = refusal {
            *self.stats.refused.entry(refusal.check()).or_default() += 1;
            return Err(refusal);
        }
        let workers = policy.map_or(0, Policy::slots);
        let slot = self.capsules.entry(capsule.clone()).or_default();
        slot.workers = workers;
        slot.interruptible = policy.is_some_and(|p| p.interruptible);
        slot.unfinished += 1;
        self.next_ticket += 1;
        let entry =
            Entry { capsule: capsule.clone(), state: TaskState::Submitted, updated: now, stored: false };
        self.insert(submit.task, entry);
        self.stats.accepted += 1;
        let write =
            if self.config.plants.has(Plant::VolatileAccept) { Write::Background } else { Write::Sync };
        self.outputs.push_back(Output::Store { task: submit.task, state: TaskState::Submitted, write });
        Ok(Admitted::New { ticket: self.next_ticket })
    }

    /// The acceptance of `task` is stored: it joins its capsule's queue (and starts if a
    /// worker is free).
    pub fn stored(&mut self, now: Millis, task: TaskId) -> Result<(), Refused> {
        let entry = self.tasks.get_mut(&task).ok_or(Refused::Unknown(task))?;
        if entry.stored {
            return Ok(());
        }
        entry.stored = true;
        let capsule = entry.capsule.clone();
        if entry.state == TaskState::Submitted {
            self.capsules.entry(capsule.clone()).or_default().queue.push_back(task);
            self.start_ready(now, &capsule);
        }
        Ok(())
    }

    /// Storing the acceptance of `task` failed: it is dropped as if never delivered.
    pub fn abandon(&mut self, task: TaskId) {
        let Some(entry) = self.tasks.remove(&task) else { return };
        if entry.state.is_terminal() {
            // Canceled while its acceptance was being written: already counted as finished.
            self.finished.retain(|t| *t != task);
        } else if let Some(slot) = self.capsules.get_mut(&entry.capsule) {
            slot.unfinished = slot.unfinished.saturating_sub(1);
            slot.queue.retain(|t| *t != task);
        }
    }

    /// Whether the acceptance of `task` is stored (`None`: not held).
    #[must_use]
    pub fn is_stored(&self, task: &TaskId) -> Option<bool> {
        self.tasks.get(task).map(|e| e.stored)
    }

    /// The running `task` finished in `state` (completed or failed); its worker takes the
    /// next queued task. A task canceled meanwhile stays canceled.
    pub fn finished(&mut self, now: Millis, task: TaskId, state: TaskState) {
        debug_assert!(state.is_terminal());
        let Some(entry) = self.tasks.get_mut(&task) else { return };
        let capsule = entry.capsule.clone();
        let was = entry.state;
        if let Some(slot) = self.capsules.get_mut(&capsule) {
            slot.running = slot.running.saturating_sub(1);
        }
        if !was.is_terminal() {
            self.set(now, task, state, Write::Sync);
        }
        self.start_ready(now, &capsule);
    }

    /// Cancels `task` if it has not started or waits for input, or works for an
    /// interruptible capsule. A waiting or working task's run is stopped by the driver; its
    /// worker frees when the run ends ([`Owner::finished`]).
    pub fn cancel(&mut self, now: Millis, task: TaskId) -> Result<(), Refused> {
        let entry = self.tasks.get(&task).ok_or(Refused::Unknown(task))?;
        let state = entry.state;
        let interruptible = self.capsules.get(&entry.capsule).is_some_and(|slot| slot.interruptible);
        let cancelable = match state {
            TaskState::Submitted | TaskState::InputRequired => true,
            TaskState::Working => interruptible,
            _ => false,
        };
        if !cancelable {
            return Err(Refused::WrongState { task, state });
        }
        if state == TaskState::Submitted
            && let Some(slot) = self.capsules.get_mut(&entry.capsule)
        {
            slot.queue.retain(|t| *t != task);
        }
        self.set(now, task, TaskState::Canceled, Write::Sync);
        Ok(())
    }

    /// The running `task` asks for input.
    pub fn ask(&mut self, now: Millis, task: TaskId) -> Result<(), Refused> {
        self.change(now, task, TaskState::Working, TaskState::InputRequired, Write::Sync)
    }

    /// A reply reached `task`, waiting for input: it works again.
    pub fn reply(&mut self, now: Millis, task: TaskId) -> Result<(), Refused> {
        self.change(now, task, TaskState::InputRequired, TaskState::Working, Write::Background)
    }

    /// The state of `task`, if held in memory.
    #[must_use]
    pub fn state(&self, task: &TaskId) -> Option<TaskState> {
        self.tasks.get(task).map(|e| e.state)
    }

    /// Whether a finished task was ever forgotten (then an id not held may still be in the
    /// database).
    #[must_use]
    pub const fn forgot_any(&self) -> bool {
        self.forgot
    }

    /// Stops taking new tasks: every new delivery is refused from now on, while the tasks
    /// held run on (queued ones start as before) and may still be answered, replied to and
    /// canceled. A repeated delivery of a task held is still answered with it. The node
    /// calls this when it is told to stop, then waits until [`Owner::busy`] is 0 (or its
    /// drain time is up).
    pub fn drain(&mut self) {
        self.draining = true;
    }

    #[must_use]
    pub const fn is_draining(&self) -> bool {
        self.draining
    }

    /// Tasks running and queued over every capsule.
    #[must_use]
    pub fn busy(&self) -> usize {
        self.capsules.values().map(|s| s.running + s.queue.len()).sum()
    }

    /// The load a node advertises: tasks running and queued, in thousandths of its
    /// `workers` (every worker of every capsule it hosts), capped at 1,000.
    #[must_use]
    pub fn load_permille(&self, workers: usize) -> u16 {
        u16::try_from((self.busy() * 1000 / workers.max(1)).min(1000)).unwrap_or(1000)
    }

    /// Tasks held in memory.
    #[must_use]
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether no task is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    #[must_use]
    pub const fn stats(&self) -> &OwnerStats {
        &self.stats
    }

    /// The next thing to do.
    pub fn poll_output(&mut self) -> Option<Output> {
        crate::limits::pop_output(&mut self.outputs)
    }

    /// `task` from `from` to `to`, or why not.
    fn change(
        &mut self,
        now: Millis,
        task: TaskId,
        from: TaskState,
        to: TaskState,
        write: Write,
    ) -> Result<(), Refused> {
        let state = self.tasks.get(&task).ok_or(Refused::Unknown(task))?.state;
        if state != from {
            return Err(Refused::WrongState { task, state });
        }
        self.set(now, task, to, write);
        Ok(())
    }

    fn set(&mut self, now: Millis, task: TaskId, state: TaskState, write: Write) {
        let Some(entry) = self.tasks.get_mut(&task) else { return };
        entry.state = state;
        entry.updated = now;
        let terminal = state.is_terminal();
        if terminal && let Some(slot) = self.capsules.get_mut(&entry.capsule) {
            slot.unfinished = slot.unfinished.saturating_sub(1);
        }
        self.outputs.push_back(Output::Store { task, state, write });
        if terminal {
            self.settled(task);
        }
    }

    /// Starts queued tasks of `capsule` while it has free workers.
    fn start_ready(&mut self, now: Millis, capsule: &str) {
        loop {
            let Some(slot) = self.capsules.get_mut(capsule) else { return };
            if slot.running >= slot.workers {
                return;
            }
            let Some(task) = slot.queue.pop_front() else { return };
            if self.tasks.get(&task).is_none_or(|e| e.state != TaskState::Submitted) {
                continue;
            }
            slot.running += 1;
            self.set(now, task, TaskState::Working, Write::Background);
            self.outputs.push_back(Output::Start { task });
        }
    }

    /// Holds `entry`; at the memory bound, forgets the task that finished first.
    fn insert(&mut self, task: TaskId, entry: Entry) {
        while self.tasks.len() >= self.config.live_max && self.forget_oldest() {}
        self.tasks.insert(task, entry);
    }

    /// `task` (held) is finished: it joins the finished ones, and past their bound the one
    /// that finished first is forgotten.
    fn settled(&mut self, task: TaskId) {
        self.finished.push_back(task);
        while self.finished.len() > self.config.finished_max && self.forget_oldest() {}
    }

    /// Forgets the task that finished first; false when none is held.
    fn forget_oldest(&mut self) -> bool {
        let Some(old) = self.finished.pop_front() else { return false };
        self.tasks.remove(&old);
        self.outputs.push_back(Output::Forget { task: old });
        self.forgot = true;
        self.stats.forgotten += 1;
        true
    }
}

/// How long an owner may wait for a task to settle before answering a sender that asked
/// to wait `settle_wait_ms`: at most [`OWNER_WAIT_MAX_MS`], and ending a second before
/// the sender's request times out (`request_timeout_ms` after it sent it; the request
/// arrived `waited_ms` ago and the acceptance may have taken a while): an accepted task
/// must never look lost. Zero: answer at once.
#[must_use]
pub fn settle_wait_ms(settle_wait_ms: u32, waited_ms: u64, request_timeout_ms: u64) -> u64 {
    let budget = request_timeout_ms.saturating_sub(waited_ms).saturating_sub(1000);
    u64::from(settle_wait_ms).min(OWNER_WAIT_MAX_MS).min(budget)
}

#[cfg(test)]
mod tests;
