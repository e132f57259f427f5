//! One agent's state that outlives its runs: its inbox, its timers, the current run's
//! subscriptions, its counters and its status. Runs come and go (reloads, restarts); the
//! agent stays, and so do its name, memory and log.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use murmur_protocol::NodeId;
use murmur_protocol::agent::{AgentAddress, CLIENT_SENDER};
use murmur_runtime::brain::{Event, EventEnvelope};
use tokio::sync::Notify;

use crate::inbox::{Full, Inbox};
use crate::logs::Logs;
use crate::source::{Language, Source};
use crate::timers::Timers;

/// How an agent is configured (`[[agents]]` in `murnode.toml`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentConfig {
    pub name: String,
    pub source: Source,
    /// The config's `language`, else what the source says.
    pub language: Option<Language>,
    /// How long `recv` waits for an event before it errs.
    pub recv_timeout: Duration,
    /// Events the inbox holds.
    pub inbox_max: usize,
    /// Work without waiting after which a run is stopped (an infinite loop).
    pub busy: Duration,
    /// Memory of a JavaScript context or a component instance.
    pub memory_bytes: u64,
    /// How long a brain that was told `reload` or `shutdown` may take to exit.
    pub grace: Duration,
    /// Tool capsules it may call: names, or prefixes ending in `*`.
    pub tools: Vec<String>,
    /// MCP servers of the node it may use.
    pub mcp: Vec<String>,
}

impl AgentConfig {
    /// `name` running `source`, with the default bounds.
    #[must_use]
    pub fn new(name: &str, source: Source) -> Self {
        Self {
            name: name.to_owned(),
            source,
            language: None,
            recv_timeout: Duration::from_secs(60),
            inbox_max: 256,
            busy: Duration::from_secs(5),
            memory_bytes: 64 << 20,
            grace: Duration::from_secs(5),
            tools: Vec::new(),
            mcp: Vec::new(),
        }
    }
}

/// Where an agent is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    Starting,
    Running,
    /// Waiting to start again after a trap or an exit.
    Restarting,
    /// Its source does not load; it waits for a fix.
    Failed(String),
    /// Shut down.
    Stopped,
}

impl State {
    #[must_use]
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Running => "running",
            Self::Restarting => "restarting",
            Self::Failed(_) => "failed",
            Self::Stopped => "stopped",
        }
    }
}

/// The current run's subscriptions, by UUID.
#[derive(Debug, Default)]
pub(crate) struct Subscriptions {
    /// Sender (`NAME`, `NAME@PEER`, `mur`, `mur@PEER`) → UUID.
    pub(crate) agents: BTreeMap<String, String>,
    pub(crate) lifecycle: Option<String>,
    /// Whether this run subscribed to lifecycle events (once per run, even after an
    /// unsubscribe).
    pub(crate) lifecycle_used: bool,
}

/// What a [`Job`] does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JobKind {
    ChatStream,
    ToolCall,
    ResourceWatch,
}

impl JobKind {
    const fn plural(self) -> &'static str {
        match self {
            Self::ChatStream => "chat streams",
            Self::ToolCall => "tool calls",
            Self::ResourceWatch => "resource subscriptions",
        }
    }
}

/// Host work for a run, in a task of its own.
#[derive(Debug)]
pub(crate) struct Job {
    pub(crate) kind: JobKind,
    handle: tokio::task::AbortHandle,
}

/// Senders one run may subscribe to.
pub const SUBSCRIPTIONS_MAX: usize = 1024;

/// Counters of one agent.
#[derive(Debug, Default)]
pub struct Stats {
    delivered: Mutex<BTreeMap<&'static str, u64>>,
    dropped: Mutex<BTreeMap<&'static str, u64>>,
    pub(crate) restarts: AtomicU32,
    pub(crate) runs: AtomicU64,
}

impl Stats {
    pub(crate) fn delivered(&self, kind: &'static str) {
        *self.delivered.lock().unwrap_or_else(PoisonError::into_inner).entry(kind).or_default() += 1;
    }

    pub(crate) fn dropped(&self, why: &'static str) {
        *self.dropped.lock().unwrap_or_else(PoisonError::into_inner).entry(why).or_default() += 1;
    }

    /// Events put in the inbox, by kind.
    #[must_use]
    pub fn delivered_by_kind(&self) -> BTreeMap<&'static str, u64> {
        self.delivered.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Events that never reached the inbox, by reason (`not_subscribed`, `inbox_full`,
    /// `timer_inbox_full`).
    #[must_use]
    pub fn dropped_by_reason(&self) -> BTreeMap<&'static str, u64> {
        self.dropped.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Runs restarted after a trap or an unexpected exit.
    #[must_use]
    pub fn restarts(&self) -> u32 {
        self.restarts.load(Ordering::Relaxed)
    }
}

/// The kind of an event, for counters.
#[must_use]
pub const fn kind_of(event: &Event) -> &'static str {
    match event {
        Event::Message(_) => "message",
        Event::Error(_) => "error",
        Event::Timer => "timer",
        Event::Reload => "reload",
        Event::Shutdown => "shutdown",
        Event::ChatDelta(_) => "chat_delta",
        Event::ChatEnd => "chat_end",
        Event::ToolResult(_) => "tool_result",
        Event::ResourceListUpdated(_) => "resource_list_updated",
        Event::ResourceUpdated(_) => "resource_updated",
        Event::EndpointMessage(_) => "endpoint_message",
        Event::EndpointSessionEnd(_) => "endpoint_session_end",
    }
}

/// One agent.
#[derive(Debug)]
pub struct Agent {
    pub config: AgentConfig,
    pub inbox: Inbox,
    pub(crate) timers: Mutex<Timers>,
    pub(crate) timers_changed: Notify,
    /// Told when the file behind the agent's source changed.
    pub(crate) source_changed: Notify,
    pub(crate) subscriptions: Mutex<Subscriptions>,
    /// What the host does for the current run in tasks of its own (chat streams, tool
    /// calls, resource watches), by the UUID their events are tagged with.
    pub(crate) jobs: Mutex<BTreeMap<String, Job>>,
    pub logs: Logs,
    pub stats: Stats,
    state: Mutex<State>,
    /// Its language, once its source was read.
    language: Mutex<Option<Language>>,
    /// The node's agents, for local delivery and the mesh.
    pub(crate) node: Weak<crate::brains::Inner>,
}

impl Agent {
    pub(crate) fn new(config: AgentConfig, logs: Logs, node: Weak<crate::brains::Inner>) -> Arc<Self> {
        Arc::new(Self {
            inbox: Inbox::new(config.inbox_max),
            config,
            timers: Mutex::default(),
            timers_changed: Notify::new(),
            source_changed: Notify::new(),
            subscriptions: Mutex::default(),
            jobs: Mutex::default(),
            logs,
            stats: Stats::default(),
            state: Mutex::new(State::Starting),
            language: Mutex::new(None),
            node,
        })
    }

    #[must_use]
    pub fn name(&self) -> &str {
        &self.config.name
    }

    #[must_use]
    pub fn state(&self) -> State {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub(crate) fn set_state(&self, state: State) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = state;
    }

    #[must_use]
    pub fn language(&self) -> Option<Language> {
        *self.language.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn set_language(&self, language: Language) {
        *self.language.lock().unwrap_or_else(PoisonError::into_inner) = Some(language);
    }

    pub(crate) fn subscriptions(&self) -> MutexGuard<'_, Subscriptions> {
        self.subscriptions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn timers(&self) -> MutexGuard<'_, Timers> {
        self.timers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new run begins: the old run's handles (subscriptions, timers, queued events) end
    /// with it.
    pub(crate) fn begin_run(&self) {
        self.end_run();
    }

    /// The run ended: its subscriptions, timers and queued events go with it, so nothing
    /// meant for it reaches the next run (a message arriving in between finds no
    /// subscription and is dropped by the rule).
    pub(crate) fn end_run(&self) {
        // Subscriptions first: a producer looks its subscription up and pushes under
        // this lock, so once it is cleared nothing tagged for the old run is pushed.
        let mut subscriptions = self.subscriptions();
        *subscriptions = Subscriptions::default();
        {
            let mut timers = self.timers();
            timers.clear();
        }
        self.inbox.clear();
        drop(subscriptions);
        self.timers_changed.notify_one();
        for (_, job) in std::mem::take(&mut *self.jobs()) {
            job.handle.abort();
        }
        if let Some(node) = self.node.upgrade() {
            node.endpoints.end_run(&node, self.name());
        }
    }

    pub(crate) fn jobs(&self) -> MutexGuard<'_, BTreeMap<String, Job>> {
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `work(id)` for the current run as job `kind` under a fresh UUID `id` (its
    /// events' tag), unless the run holds `max` jobs of that kind already; the job leaves
    /// the table when `work` ends, and is aborted when the run ends first.
    pub(crate) fn spawn_job<F>(
        self: &Arc<Self>,
        node: &crate::brains::Inner,
        kind: JobKind,
        max: usize,
        work: impl FnOnce(String) -> F,
    ) -> Result<String, String>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut jobs = self.jobs();
        if jobs.values().filter(|job| job.kind == kind).count() >= max {
            return Err(format!("this run has {max} {} open, its limit", kind.plural()));
        }
        let id = uuid::Uuid::new_v4().to_string();
        let (agent, tag, work) = (self.clone(), id.clone(), work(id.clone()));
        let task = node.tasks.spawn(async move {
            work.await;
            agent.jobs().remove(&tag);
        });
        jobs.insert(id.clone(), Job { kind, handle: task.abort_handle() });
        Ok(id)
    }

    /// Aborts job `id` if it is of `kind`; true when it was running.
    pub(crate) fn cancel_job(&self, id: &str, kind: JobKind) -> bool {
        let mut jobs = self.jobs();
        if jobs.get(id).is_none_or(|job| job.kind != kind) {
            return false;
        }
        jobs.remove(id).inspect(|job| job.handle.abort()).is_some()
    }

    /// Puts `event` in the inbox, waiting while it is full (a producer that the brain's
    /// reading paces: chat streams); gives up when the run ends.
    pub(crate) async fn push_paced(&self, id: String, event: Event) {
        let kind = kind_of(&event);
        let mut envelope = EventEnvelope { id, event };
        loop {
            match self.inbox.offer(envelope) {
                Ok(()) => {
                    self.stats.delivered(kind);
                    return;
                }
                Err(back) => envelope = *back,
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    /// Puts `event` in the inbox, counting it.
    pub(crate) fn push(&self, id: String, event: Event) -> Result<(), Full> {
        let kind = kind_of(&event);
        match self.inbox.push(EventEnvelope { id, event }) {
            Ok(()) => {
                self.stats.delivered(kind);
                Ok(())
            }
            Err(full) => {
                self.stats.dropped(if kind == "timer" { "timer_inbox_full" } else { "inbox_full" });
                Err(full)
            }
        }
    }

    /// A lifecycle event for the current run, if it subscribed; true when delivered.
    pub(crate) fn lifecycle(&self, event: Event) -> bool {
        let Some(id) = self.subscriptions().lifecycle.clone() else { return false };
        self.stats.delivered(kind_of(&event));
        self.inbox.push_lifecycle(EventEnvelope { id, event });
        true
    }

    /// A message from agent `from` (of node `node`, when known): it lands only when the
    /// current run subscribed to that sender (`from@node` or `from`), tagged with that
    /// subscription's UUID. Ok when it landed or was dropped by that rule.
    pub(crate) fn message(&self, from: &str, node: Option<NodeId>, text: String) -> Result<(), Full> {
        // Looked up and pushed under one lock: a run that ends in between cannot receive
        // an event tagged for its successor, nor its successor one tagged for it.
        let subscriptions = self.subscriptions();
        let local = self.node.upgrade().and_then(|n| n.mesh.local());
        let pinned = node.map(|node| format!("{from}@{node}"));
        // Bare `mur` is this node's own clients only; another node's are `mur@PEER`.
        let bare_allowed = from != CLIENT_SENDER || node.is_none() || node == local;
        let subscription = pinned
            .and_then(|key| subscriptions.agents.get(&key).cloned())
            .or_else(|| if bare_allowed { subscriptions.agents.get(from).cloned() } else { None });
        match subscription {
            Some(id) => self.push(id, Event::Message(text)),
            None => {
                self.stats.dropped("not_subscribed");
                Ok(())
            }
        }
    }
}

/// A sender's subscription key: `NAME`, `NAME@PEER`, `mur` (this node's clients) or
/// `mur@PEER` (another node's).
pub(crate) fn sender_key(text: &str) -> Result<String, String> {
    if text == CLIENT_SENDER {
        return Ok(text.to_owned());
    }
    if let Some(peer) = text.strip_prefix("mur@") {
        let node: NodeId = peer.parse().map_err(|e| format!("`{peer}` is not a peer id: {e}"))?;
        return Ok(format!("{CLIENT_SENDER}@{node}"));
    }
    let address: AgentAddress = text.parse()?;
    Ok(address.to_string())
}
