//! The handle the rest of the node holds: bounded channels to the driver, with one method
//! per question or command. A handle exists before the driver runs ([`crate::handle`]), so
//! whatever needs the network can be built first; its requests wait in the channels until
//! the driver starts, which happens before the node serves anything.

use crate::bulk::{LaneAnswer, Lanes, Queued};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use murmur_api::views::{CapsulesView, PeersView};
use std::collections::BTreeMap;

use murmur_protocol::agent::{AddressError, AgentAddress, AgentMessage, AgentStatus};
use murmur_protocol::artifact::{ArtifactRequest, ArtifactResponse};
use murmur_protocol::exchange::Placement;
use murmur_protocol::revocation::{RevocationRefusal, Revocations, Taken};
use murmur_protocol::task::{Submit, TaskId, TaskRequest, TaskResponse};
use murmur_protocol::{Digest, NodeId};
use tokio::sync::{mpsc, oneshot, watch};

use murmur_config::limits::{
    AGENT_REQUEST_TIMEOUT, ARTIFACT_REQUEST_TIMEOUT, QUERY_TIMEOUT, TASK_REQUEST_TIMEOUT,
};

/// Queries from the API to the driver, each with its reply channel.
#[derive(Debug)]
pub enum Query {
    Peers(oneshot::Sender<PeersView>),
    Capsules(oneshot::Sender<CapsulesView>),
    Metrics(oneshot::Sender<NetMetrics>),
    /// Replace the capsules this node advertises (config reload).
    SetHosted(Vec<murmur_protocol::HostedCapsule>, oneshot::Sender<()>),
    /// Take a revocation list and spread it: what it revokes, or why it was refused.
    Revoke(murmur_protocol::Envelope, oneshot::Sender<Result<Taken, RevocationRefusal>>),
}

/// Task work for the driver: placing tasks and asking their owners.
#[derive(Debug)]
pub enum TaskQuery {
    /// Place a task (`mesh://NAME`, or pinned to one node) and report where it went.
    Route { request: Submit, pin: Option<NodeId>, reply: oneshot::Sender<Placement> },
    /// Send a request to the node that owns a task.
    Ask { owner: NodeId, request: TaskRequest, reply: oneshot::Sender<Result<TaskResponse, String>> },
    /// The owner of a task this node placed, if it remembers.
    Owner { task: TaskId, reply: oneshot::Sender<Option<NodeId>> },
}

/// Artifact work for the driver: carrying `/murmur/artifact/1` requests for a pull.
#[derive(Debug)]
pub enum ArtifactQuery {
    /// Send `request` to `peer`; the answer, or why there is none.
    Ask { peer: NodeId, request: ArtifactRequest, reply: oneshot::Sender<Result<ArtifactResponse, String>> },
    /// Nodes whose advert lists `digest` (any artifact when `None`), connected ones first.
    Providers { digest: Option<Digest>, reply: oneshot::Sender<Vec<NodeId>> },
    /// The manifests this node serves, for its advert.
    SetProvided(Vec<Digest>),
    /// Every node with a live advert in the directory, this one included.
    Members(oneshot::Sender<Vec<NodeId>>),
}

/// Agent work for the driver: messages to agents of other nodes, and what the mesh runs.
#[derive(Debug)]
pub enum AgentQuery {
    /// Resolve `to` against the directory and, for another node's agent, send `message`
    /// there; `local_runs` says whether this node runs the agent named.
    Send {
        to: AgentAddress,
        local_runs: bool,
        message: AgentMessage,
        reply: oneshot::Sender<Result<Sent, SendError>>,
    },
    /// Ask `node` how its agents are doing.
    Status { node: NodeId, reply: oneshot::Sender<Result<Vec<AgentStatus>, String>> },
    /// Every agent the directory lists, with the nodes that run it.
    Directory(oneshot::Sender<BTreeMap<String, Vec<NodeId>>>),
    /// Replace the agents this node advertises.
    SetAgents(Vec<String>, oneshot::Sender<()>),
    /// Replace the models this node's agents serve.
    SetModels(Vec<String>, oneshot::Sender<()>),
    /// Every model the directory lists, with the nodes that serve it.
    Models(oneshot::Sender<BTreeMap<String, Vec<NodeId>>>),
    /// The nodes to try for a request for `model`, best first
    /// ([`murmur_protocol::model::candidates`]).
    ModelCandidates { ask: ModelAsk, reply: oneshot::Sender<Vec<NodeId>> },
    /// Whether `peer` may open a model stream here ([`murmur_protocol::model::check_caller`]).
    ModelCaller { peer: NodeId, reply: oneshot::Sender<Result<(), murmur_protocol::model::ModelCheck>> },
}

/// What the router needs to know of one model request, besides the directory.
#[derive(Debug, Clone, Default)]
pub struct ModelAsk {
    pub model: String,
    /// Whether an agent of this node serves it.
    pub local_serves: bool,
    /// Nodes that provably refused it already.
    pub tried: Vec<NodeId>,
    /// Sessions this node has open to other nodes now.
    pub open: BTreeMap<NodeId, u32>,
    /// A counter the caller increments per request (equal candidates take turns).
    pub turn: u64,
}

/// Where a message to an agent went.
#[derive(Debug, PartialEq, Eq)]
pub enum Sent {
    /// The agent runs here: the caller delivers it.
    Local,
    /// Another node took it.
    Delivered(NodeId),
}

/// Why a message to an agent went nowhere.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error(transparent)]
    Address(#[from] AddressError),
    /// The recipient's node refused it.
    #[error("{node} refused it ({check}): {reason}")]
    Refused { node: NodeId, check: String, reason: String },
    /// No answer (it may or may not have arrived; it is not sent again).
    #[error("no answer from {node}: {reason}")]
    Unreachable { node: NodeId, reason: String },
    #[error("this node has {0} agent messages in flight, its limit; try again")]
    Overloaded(usize),
    #[error("the mesh stopped")]
    Stopped,
}

/// Counters and gauges for `/metrics`.
#[derive(Clone, Debug, Default)]
pub struct NetMetrics {
    pub peers_connected: usize,
    pub directory_nodes: usize,
    pub directory_capsules: usize,
    pub mesh: murmur_protocol::mesh::MeshStats,
    pub directory: murmur_protocol::directory::DirectoryStats,
    pub router: murmur_protocol::route::RouterStats,
    /// Task deliveries refused at this node, by failed check.
    pub task_refusals: std::collections::BTreeMap<String, u64>,
    /// Artifact requests served to peers, and refused as busy.
    pub artifact_served: u64,
    pub artifact_busy: u64,
    /// Chunks answered on `/murmur/artifact-bulk/1` streams, and bulk streams refused.
    pub artifact_bulk_served: u64,
    pub artifact_bulk_refused: u64,
    /// Connections closed because a ping went unanswered (`network.ping_timeout_secs`).
    pub ping_failures: u64,
    /// Peers refused at identify for their wire version, by reason (`other_major`,
    /// `not_murmur`).
    pub version_refusals: std::collections::BTreeMap<&'static str, u64>,
    /// Inbound requests failed for overrunning a budget of request bytes in flight, by
    /// scope (`connection`, whose peer was cut off, or `node`).
    pub request_overruns: std::collections::BTreeMap<&'static str, u64>,
    /// Agent messages from peers refused at this node, by check.
    pub agent_refusals: std::collections::BTreeMap<&'static str, u64>,
    /// Agent messages from peers taken into an inbox (or dropped by its rule).
    pub agent_delivered: u64,
    /// Revocation lists held (one per authority at most).
    pub revocation_lists: usize,
}

/// The node's way to reach the network and the mesh machines its driver runs.
#[derive(Clone)]
pub struct NetHandle {
    queries: mpsc::Sender<Query>,
    tasks: mpsc::Sender<TaskQuery>,
    artifacts: mpsc::Sender<ArtifactQuery>,
    agents: mpsc::Sender<AgentQuery>,
    /// The revocation lists the mesh holds, as the driver last published them.
    revocations: watch::Receiver<Arc<Revocations>>,
    local: NodeId,
    /// Opens and accepts raw streams (`/murmur/model/1`) beside the driver.
    streams: libp2p_stream::Control,
    /// Bulk chunk streams to providers (`/murmur/artifact-bulk/1`), one per provider.
    lanes: Lanes,
}

impl std::fmt::Debug for NetHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetHandle").field("local", &self.local).finish_non_exhaustive()
    }
}

impl NetHandle {
    pub(crate) fn new(
        queries: mpsc::Sender<Query>,
        tasks: mpsc::Sender<TaskQuery>,
        artifacts: mpsc::Sender<ArtifactQuery>,
        agents: mpsc::Sender<AgentQuery>,
        revocations: watch::Receiver<Arc<Revocations>>,
        local: NodeId,
        streams: libp2p_stream::Control,
    ) -> Self {
        let lanes = Lanes::new(streams.clone());
        Self { queries, tasks, artifacts, agents, revocations, local, streams, lanes }
    }

    /// A handle for opening and accepting raw streams (works once the driver runs; each
    /// caller takes its own clone: one opens one stream at a time).
    #[must_use]
    pub fn stream_control(&self) -> libp2p_stream::Control {
        self.streams.clone()
    }

    /// The revocation lists held now (for the sending end's grant check).
    #[must_use]
    pub fn revocations(&self) -> Arc<Revocations> {
        self.revocations.borrow().clone()
    }

    /// A receiver that sees every change of the lists held (for storing them).
    #[must_use]
    pub fn watch_revocations(&self) -> watch::Receiver<Arc<Revocations>> {
        self.revocations.clone()
    }

    /// Hands the mesh a revocation list: it is checked (trusted authority, signature,
    /// newer than the list held), taken and gossiped. `Err` outside: the mesh did not
    /// answer; inside: why the list was refused (nothing changed).
    pub async fn revoke(
        &self,
        envelope: murmur_protocol::Envelope,
    ) -> anyhow::Result<Result<Taken, RevocationRefusal>> {
        self.ask(|reply| Query::Revoke(envelope, reply)).await
    }

    async fn agent_query<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> AgentQuery,
        wait: Duration,
    ) -> Option<T> {
        let (tx, rx) = oneshot::channel();
        self.agents.send(make(tx)).await.ok()?;
        tokio::time::timeout(wait, rx).await.ok()?.ok()
    }

    /// Sends `message` to agent `to` wherever it runs ([`Sent::Local`]: it runs here, and
    /// the caller delivers it). At most once: a message whose answer never came is not
    /// sent again.
    pub async fn send_agent(
        &self,
        to: AgentAddress,
        local_runs: bool,
        message: AgentMessage,
    ) -> Result<Sent, SendError> {
        // The driver answers every send within the request timeout (or refuses it at once).
        let wait = AGENT_REQUEST_TIMEOUT + Duration::from_secs(5);
        self.agent_query(|reply| AgentQuery::Send { to, local_runs, message, reply }, wait)
            .await
            .unwrap_or(Err(SendError::Stopped))
    }

    /// How `node`'s agents are doing.
    pub async fn agent_status(&self, node: NodeId) -> Result<Vec<AgentStatus>, String> {
        let wait = AGENT_REQUEST_TIMEOUT + Duration::from_secs(5);
        self.agent_query(|reply| AgentQuery::Status { node, reply }, wait)
            .await
            .unwrap_or_else(|| Err("the mesh stopped".into()))
    }

    /// Every agent the directory lists, with the nodes that run it.
    pub async fn agent_directory(&self) -> anyhow::Result<BTreeMap<String, Vec<NodeId>>> {
        self.agent_query(AgentQuery::Directory, QUERY_TIMEOUT)
            .await
            .context("the mesh did not answer in time")
    }

    /// Replaces the agents this node advertises; republishes at once.
    pub async fn set_agents(&self, agents: Vec<String>) -> anyhow::Result<()> {
        self.agent_query(|reply| AgentQuery::SetAgents(agents, reply), QUERY_TIMEOUT)
            .await
            .context("the mesh did not answer in time")
    }

    /// Replaces the models this node's agents serve; republishes at once.
    pub async fn set_models(&self, models: Vec<String>) -> anyhow::Result<()> {
        self.agent_query(|reply| AgentQuery::SetModels(models, reply), QUERY_TIMEOUT)
            .await
            .context("the mesh did not answer in time")
    }

    /// Every model the directory lists, with the nodes that serve it.
    pub async fn models(&self) -> anyhow::Result<BTreeMap<String, Vec<NodeId>>> {
        self.agent_query(AgentQuery::Models, QUERY_TIMEOUT).await.context("the mesh did not answer in time")
    }

    /// The nodes to try for a model request, best first.
    pub async fn model_candidates(&self, ask: ModelAsk) -> anyhow::Result<Vec<NodeId>> {
        self.agent_query(|reply| AgentQuery::ModelCandidates { ask, reply }, QUERY_TIMEOUT)
            .await
            .context("the mesh did not answer in time")
    }

    /// Whether `peer` may open a model stream here.
    pub async fn model_caller(&self, peer: NodeId) -> Result<(), murmur_protocol::model::ModelCheck> {
        self.agent_query(|reply| AgentQuery::ModelCaller { peer, reply }, QUERY_TIMEOUT)
            .await
            .unwrap_or(Err(murmur_protocol::model::ModelCheck::Busy))
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Query) -> anyhow::Result<T> {
        let (tx, rx) = oneshot::channel();
        self.queries.try_send(make(tx)).map_err(|_| anyhow::anyhow!("the mesh is busy; try again"))?;
        tokio::time::timeout(QUERY_TIMEOUT, rx)
            .await
            .context("the mesh did not answer in time")?
            .context("the mesh stopped")
    }

    /// Connected and known peers.
    pub async fn peers(&self) -> anyhow::Result<PeersView> {
        self.ask(Query::Peers).await
    }

    /// The capsule directory.
    pub async fn capsules(&self) -> anyhow::Result<CapsulesView> {
        self.ask(Query::Capsules).await
    }

    /// Counters for `/metrics`.
    pub async fn metrics(&self) -> anyhow::Result<NetMetrics> {
        self.ask(Query::Metrics).await
    }

    /// Replaces the capsules this node advertises; republishes at once.
    pub async fn set_hosted(&self, capsules: Vec<murmur_protocol::HostedCapsule>) -> anyhow::Result<()> {
        self.ask(|reply| Query::SetHosted(capsules, reply)).await
    }

    /// This node's id.
    #[must_use]
    pub const fn local(&self) -> NodeId {
        self.local
    }

    async fn task_query<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> TaskQuery,
        wait: Duration,
    ) -> anyhow::Result<T> {
        let (tx, rx) = oneshot::channel();
        self.tasks.send(make(tx)).await.map_err(|_| anyhow::anyhow!("the mesh stopped"))?;
        tokio::time::timeout(wait, rx)
            .await
            .context("the mesh did not answer in time")?
            .context("the mesh stopped")
    }

    /// Places a task; returns once its owner accepted it (or it was refused or failed).
    pub async fn route(&self, request: Submit, pin: Option<NodeId>) -> anyhow::Result<Placement> {
        // The router gives up on a provider after its acceptance timeout; wait a little longer.
        let wait = Duration::from_millis(murmur_protocol::route::RouterConfig::default().accept_timeout_ms)
            + QUERY_TIMEOUT;
        self.task_query(|reply| TaskQuery::Route { request, pin, reply }, wait).await
    }

    /// Sends `request` to `owner` over `/murmur/task/1`.
    pub async fn ask_owner(&self, owner: NodeId, request: TaskRequest) -> Result<TaskResponse, String> {
        let wait = TASK_REQUEST_TIMEOUT + QUERY_TIMEOUT;
        match self.task_query(|reply| TaskQuery::Ask { owner, request, reply }, wait).await {
            Ok(answer) => answer,
            Err(err) => Err(format!("{err:#}")),
        }
    }

    /// The owner of a task this node placed, if the router remembers it.
    pub async fn owner(&self, task: TaskId) -> Option<NodeId> {
        self.task_query(|reply| TaskQuery::Owner { task, reply }, QUERY_TIMEOUT).await.ok().flatten()
    }

    /// Sends `request` to `peer` over `/murmur/artifact/1`.
    /// Asks `peer` for a blob range of a pull: on the bulk stream to `peer`
    /// (`/murmur/artifact-bulk/1`), or as a request of its own (`/murmur/artifact/1`) where the
    /// peer does not speak it or has no stream to spare. The answer, or why there is none.
    pub async fn ask_chunk(
        &self,
        peer: NodeId,
        request: ArtifactRequest,
    ) -> Result<ArtifactResponse, String> {
        match self.lanes.send(peer, request) {
            Queued::Lane(answer) => match tokio::time::timeout(ARTIFACT_REQUEST_TIMEOUT, answer).await {
                Ok(Ok(LaneAnswer::Answer(answer))) => answer,
                Ok(Ok(LaneAnswer::Fallback(request))) => self.ask_artifact(peer, request).await,
                Ok(Err(_)) => Err(format!("the bulk stream to {peer} closed")),
                Err(_) => Err(format!("{peer} did not answer in time")),
            },
            Queued::Fallback(request) => self.ask_artifact(peer, request).await,
            Queued::Busy => Err(format!("too many chunk requests queued for {peer}")),
        }
    }

    pub async fn ask_artifact(
        &self,
        peer: NodeId,
        request: ArtifactRequest,
    ) -> Result<ArtifactResponse, String> {
        let (tx, rx) = oneshot::channel();
        let query = ArtifactQuery::Ask { peer, request, reply: tx };
        self.artifacts.send(query).await.map_err(|_| "the mesh stopped".to_owned())?;
        match tokio::time::timeout(ARTIFACT_REQUEST_TIMEOUT + QUERY_TIMEOUT, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err("the mesh stopped".into()),
            Err(_) => Err(format!("{peer} did not answer in time")),
        }
    }

    async fn artifact_query<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> ArtifactQuery,
    ) -> anyhow::Result<T> {
        let (tx, rx) = oneshot::channel();
        self.artifacts.send(make(tx)).await.map_err(|_| anyhow::anyhow!("the mesh stopped"))?;
        tokio::time::timeout(QUERY_TIMEOUT, rx)
            .await
            .context("the mesh did not answer in time")?
            .context("the mesh stopped")
    }

    /// Nodes that advertise `digest` (any artifact when `None`).
    pub async fn artifact_providers(&self, digest: Option<Digest>) -> anyhow::Result<Vec<NodeId>> {
        self.artifact_query(|reply| ArtifactQuery::Providers { digest, reply }).await
    }

    /// Every node with a live advert in this node's directory, itself included.
    pub async fn members(&self) -> anyhow::Result<Vec<NodeId>> {
        self.artifact_query(ArtifactQuery::Members).await
    }

    /// Advertises the manifests this node serves (republishes when they changed).
    pub async fn set_provided(&self, manifests: Vec<Digest>) -> anyhow::Result<()> {
        self.artifacts
            .send(ArtifactQuery::SetProvided(manifests))
            .await
            .map_err(|_| anyhow::anyhow!("the mesh stopped"))
    }

    /// A handle answering through `queries`, for API tests that stand in for the driver.
    #[doc(hidden)]
    #[must_use]
    pub fn for_tests(queries: mpsc::Sender<Query>) -> Self {
        let (tasks, _) = mpsc::channel(1);
        let (artifacts, _) = mpsc::channel(1);
        let (agents, _) = mpsc::channel(1);
        let (_, revocations) = watch::channel(Arc::default());
        let local = murmur_protocol::SecretKey::from_seed([7; 32]).node_id();
        Self::new(
            queries,
            tasks,
            artifacts,
            agents,
            revocations,
            local,
            libp2p_stream::Behaviour::new().new_control(),
        )
    }
}
