//! Every agent of a node: the actor host. One actor per configured agent, each with one
//! bounded inbox; messages between agents of this node are delivered here, messages to
//! and from other nodes go through the [`Mesh`] port the node implements over the
//! network.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use murmur_protocol::NodeId;
use murmur_protocol::agent::{
    AgentAddress, AgentCheck, AgentMessage, AgentResponse, AgentStatus, CLIENT_SENDER,
};
use murmur_runtime::Runtime;
use murmur_runtime::ports::PortFuture;
use murmur_store::ArtifactStore;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::agent::{Agent, AgentConfig};
use crate::endpoint::{Endpoints, OpenError, Session};
use crate::logs::Logs;
use crate::memory::Memory;
use murmur_protocol::model::{ChatDelta, ChatRequest};

/// Where a message to an agent went, as the mesh decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// The agent runs on this node: deliver it here.
    Local,
    /// Another node took it.
    Remote,
}

/// Why a message to an agent went nowhere: its kind (for the HTTP API's status codes) and
/// what to tell the sender.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SendError {
    pub kind: SendErrorKind,
    pub message: String,
}

/// The kinds of [`SendError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendErrorKind {
    /// Not a valid address or message.
    Invalid,
    /// No agent of that name (at that node).
    Unknown,
    /// More than one node runs it: name one (`NAME@PEER`).
    Ambiguous,
    /// Its inbox is full.
    InboxFull,
    /// Its node refused it for another reason.
    Refused,
    /// Its node could not be reached (the message may or may not have arrived).
    Unreachable,
}

impl SendError {
    #[must_use]
    pub fn new(kind: SendErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }
}

/// The kind of a refusal named by its check.
#[must_use]
pub fn refusal_kind(check: &str) -> SendErrorKind {
    match check {
        c if c == AgentCheck::InboxFull.as_str() => SendErrorKind::InboxFull,
        c if c == AgentCheck::UnknownAgent.as_str() => SendErrorKind::Unknown,
        _ => SendErrorKind::Refused,
    }
}

/// How a node's agents reach agents of other nodes: the node implements it over its
/// network (`/murmur/agent/1`), resolving names against its directory.
pub trait Mesh: Send + Sync + std::fmt::Debug {
    /// Resolves `to` (`local_runs`: this node runs an agent of that name) and, for
    /// another node's agent, sends `message` there.
    fn send(
        &self,
        to: AgentAddress,
        local_runs: bool,
        message: AgentMessage,
    ) -> PortFuture<'_, Result<Delivery, SendError>>;

    /// This node's id, if it has a network.
    fn local(&self) -> Option<NodeId>;

    /// Opens a chat stream for agent `agent`: against upstream `provider` configured for
    /// it, or (none) against `model` of another node of the mesh. Models this node
    /// serves never come here: the brain host opens those itself.
    fn open_chat(
        &self,
        agent: &str,
        provider: Option<String>,
        model: String,
        request: ChatRequest,
    ) -> PortFuture<'_, Result<Box<dyn ChatStream>, String>>;
}

/// An open chat stream: deltas in order, then `Err` with the end (none: completed).
pub trait ChatStream: Send {
    fn next(&mut self) -> PortFuture<'_, Result<ChatDelta, Option<String>>>;
}

impl ChatStream for Session {
    fn next(&mut self) -> PortFuture<'_, Result<ChatDelta, Option<String>>> {
        Box::pin(Session::next(self))
    }
}

/// A node without a network: only its own agents exist.
#[derive(Debug, Default)]
pub struct NoMesh;

impl Mesh for NoMesh {
    fn send(
        &self,
        to: AgentAddress,
        local_runs: bool,
        _message: AgentMessage,
    ) -> PortFuture<'_, Result<Delivery, SendError>> {
        Box::pin(async move {
            if local_runs && to.node.is_none() {
                Ok(Delivery::Local)
            } else {
                Err(SendError::new(
                    SendErrorKind::Unknown,
                    format!("no agent named `{to}` runs on this node, and it has no network"),
                ))
            }
        })
    }

    fn local(&self) -> Option<NodeId> {
        None
    }

    fn open_chat(
        &self,
        _agent: &str,
        provider: Option<String>,
        model: String,
        _request: ChatRequest,
    ) -> PortFuture<'_, Result<Box<dyn ChatStream>, String>> {
        Box::pin(async move {
            Err(match provider {
                Some(p) => format!("no provider `{p}` is configured for this agent"),
                None => format!("no agent of this node serves model `{model}`, and the node has no network"),
            })
        })
    }
}

/// What the actor host shares with its actors and runs.
#[derive(Debug)]
pub struct Inner {
    agents: std::sync::RwLock<BTreeMap<String, Arc<Agent>>>,
    pub(crate) mesh: Arc<dyn Mesh>,
    pub(crate) mcp: Arc<dyn crate::tooling::McpPort>,
    pub(crate) memory: Memory,
    pub(crate) runtime: Runtime,
    pub(crate) store: Arc<ArtifactStore>,
    pub(crate) shutdown: watch::Sender<bool>,
    pub(crate) endpoints: Endpoints,
    /// The runtime the host started on: script brains run on threads of their own and
    /// spawn host tasks (chat streams) here.
    pub(crate) tasks: tokio::runtime::Handle,
}

impl Inner {
    pub(crate) fn agent(&self, name: &str) -> Option<Arc<Agent>> {
        self.agents.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(name).cloned()
    }

    pub(crate) fn all(&self) -> Vec<Arc<Agent>> {
        self.agents.read().unwrap_or_else(std::sync::PoisonError::into_inner).values().cloned().collect()
    }

    /// Sends `text` from local agent (or client) `from` to `to` (`NAME` or `NAME@PEER`),
    /// wherever it runs: the one send path of brains and clients.
    pub(crate) async fn send(&self, from: &str, to: &str, text: String) -> Result<(), SendError> {
        let address: AgentAddress =
            to.parse().map_err(|e: String| SendError::new(SendErrorKind::Invalid, e))?;
        let max = murmur_protocol::limits::AGENT_MESSAGE_BYTES_MAX;
        if text.len() > max {
            return Err(SendError::new(
                SendErrorKind::Invalid,
                format!("a message is at most {max} bytes, this one {}", text.len()),
            ));
        }
        let message = AgentMessage { to: address.name.clone(), from: from.to_owned(), text };
        let local_runs = self.agent(&address.name).is_some();
        match self.mesh.send(address, local_runs, message.clone()).await? {
            Delivery::Remote => Ok(()),
            Delivery::Local => self.deliver_local(from, message),
        }
    }

    /// A message from local agent (or client) `from` to a local agent.
    pub(crate) fn deliver_local(&self, from: &str, message: AgentMessage) -> Result<(), SendError> {
        match self.deliver(from, self.mesh.local(), message) {
            AgentResponse::Delivered | AgentResponse::Status { .. } => Ok(()),
            AgentResponse::Refused { check, reason } => Err(SendError::new(refusal_kind(&check), reason)),
        }
    }

    fn deliver(&self, from: &str, node: Option<NodeId>, message: AgentMessage) -> AgentResponse {
        let Some(agent) = self.agent(&message.to) else {
            return AgentResponse::Refused {
                check: AgentCheck::UnknownAgent.as_str().into(),
                reason: format!("no agent named `{}` runs on this node", message.to),
            };
        };
        match agent.message(from, node, message.text) {
            Ok(()) => AgentResponse::Delivered,
            Err(full) => AgentResponse::Refused {
                check: AgentCheck::InboxFull.as_str().into(),
                reason: format!("agent `{}`: {full}; it is not reading", message.to),
            },
        }
    }
}

/// A node's agents. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Brains {
    inner: Arc<Inner>,
    actors: Arc<std::sync::Mutex<Vec<JoinHandle<()>>>>,
}

/// Counters of every agent, for `/metrics`.
#[derive(Clone, Debug, Default)]
pub struct BrainMetrics {
    /// Per agent: events delivered by kind, dropped by reason, inbox depth, timers
    /// pending, restarts.
    pub agents: Vec<AgentMetrics>,
}

/// One agent's counters.
#[derive(Clone, Debug, Default)]
pub struct AgentMetrics {
    pub name: String,
    pub delivered: BTreeMap<&'static str, u64>,
    pub dropped: BTreeMap<&'static str, u64>,
    pub inbox_depth: usize,
    pub timers: usize,
    pub restarts: u32,
}

impl Brains {
    /// Starts an actor for each of `configs` (names must be unique); memory in the
    /// database at `memory_path`, logs under `logs_dir/<name>/`; other nodes through
    /// `mesh`, the node's MCP servers through `mcp`.
    pub fn start(
        configs: Vec<AgentConfig>,
        runtime: Runtime,
        store: Arc<ArtifactStore>,
        memory_path: &Path,
        logs_dir: &Path,
        mesh: Arc<dyn Mesh>,
        mcp: Arc<dyn crate::tooling::McpPort>,
    ) -> anyhow::Result<Self> {
        let memory = Memory::open(memory_path)?;
        let (shutdown, _) = watch::channel(false);
        let inner = Arc::new(Inner {
            agents: std::sync::RwLock::default(),
            mesh,
            mcp,
            memory,
            runtime,
            store,
            shutdown,
            endpoints: Endpoints::default(),
            tasks: tokio::runtime::Handle::current(),
        });
        let mut agents = BTreeMap::new();
        for config in configs {
            anyhow::ensure!(
                !agents.contains_key(&config.name),
                "agent `{}` is configured twice",
                config.name
            );
            let dir = logs_dir.join(&config.name);
            murmur_store::file::create_dir_all_durable(&dir)?;
            let logs = Logs::new(&config.name, dir);
            agents.insert(config.name.clone(), Agent::new(config, logs, Arc::downgrade(&inner)));
        }
        *inner.agents.write().unwrap_or_else(std::sync::PoisonError::into_inner) = agents;
        let mut actors: Vec<JoinHandle<()>> = inner
            .all()
            .into_iter()
            .map(|agent| tokio::spawn(crate::actor::supervise(agent, inner.clone())))
            .collect();
        actors.push(tokio::spawn(crate::actor::watch_sources(inner.clone())));
        Ok(Self { inner, actors: Arc::new(std::sync::Mutex::new(actors)) })
    }

    /// The names of this node's agents (what its advert lists).
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        self.inner.all().iter().map(|a| a.name().to_owned()).collect()
    }

    /// Agent `name` of this node.
    #[must_use]
    pub fn agent(&self, name: &str) -> Option<Arc<Agent>> {
        self.inner.agent(name)
    }

    /// A message that peer `from` delivered (its sender checked by the network).
    #[must_use]
    pub fn deliver(&self, from: NodeId, message: AgentMessage) -> AgentResponse {
        let sender = message.from.clone();
        self.inner.deliver(&sender, Some(from), message)
    }

    /// Sends `text` to agent `to` as this node's clients (`mur`), wherever it runs.
    pub async fn send_as_client(&self, to: &str, text: String) -> Result<(), SendError> {
        self.inner.send(CLIENT_SENDER, to, text).await
    }

    /// Opens an endpoint session on `model` (served by an agent of this node) for
    /// `request`: the agent has the request when this returns.
    pub fn open_session(&self, model: &str, request: ChatRequest) -> Result<Session, OpenError> {
        self.inner.endpoints.open(&self.inner, model, request)
    }

    /// Whether an agent of this node serves `model`.
    #[must_use]
    pub fn serves(&self, model: &str) -> bool {
        self.inner.endpoints.serves(model)
    }

    /// The endpoint: models served here, their changes, counters.
    #[must_use]
    pub fn endpoints(&self) -> &Endpoints {
        &self.inner.endpoints
    }

    /// How this node's agents are doing.
    #[must_use]
    pub fn status(&self) -> Vec<AgentStatus> {
        self.inner
            .all()
            .iter()
            .map(|agent| AgentStatus {
                name: agent.name().to_owned(),
                brain: agent.config.source.public_name(),
                state: agent.state().as_str().to_owned(),
                language: agent.language().map_or("unknown", |l| l.as_str()).to_owned(),
                restarts: agent.stats.restarts(),
            })
            .collect()
    }

    /// The value agent `name` keeps under `key`.
    pub fn memory_get(&self, name: &str, key: &str) -> Result<Option<String>, String> {
        if self.inner.agent(name).is_none() {
            return Err(format!("no agent named `{name}` runs on this node"));
        }
        self.inner.memory.get(name, key)
    }

    /// Every key and value agent `name` keeps.
    pub fn memory(&self, name: &str) -> Result<Vec<(String, String)>, String> {
        if self.inner.agent(name).is_none() {
            return Err(format!("no agent named `{name}` runs on this node"));
        }
        self.inner.memory.list(name)
    }

    /// Counters of every agent.
    #[must_use]
    pub fn metrics(&self) -> BrainMetrics {
        let agents = self
            .inner
            .all()
            .iter()
            .map(|agent| AgentMetrics {
                name: agent.name().to_owned(),
                delivered: agent.stats.delivered_by_kind(),
                dropped: agent.stats.dropped_by_reason(),
                inbox_depth: agent.inbox.depth(),
                timers: agent.timers().len(),
                restarts: agent.stats.restarts(),
            })
            .collect();
        BrainMetrics { agents }
    }

    /// Shuts every agent down: subscribed runs get `shutdown` and their grace to exit,
    /// the others stop at once. Returns when all have stopped, or `wait_max` passed.
    pub async fn shutdown(&self, wait_max: Duration) {
        let _ = self.inner.shutdown.send(true);
        let actors: Vec<JoinHandle<()>> =
            std::mem::take(&mut *self.actors.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        let all = futures_join(actors);
        if tokio::time::timeout(wait_max, all).await.is_err() {
            tracing::warn!("some agents did not stop within {} s", wait_max.as_secs());
        }
    }
}

async fn futures_join(handles: Vec<JoinHandle<()>>) {
    for handle in handles {
        let _ = handle.await;
    }
}
