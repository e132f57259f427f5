//! The libp2p adapter: a swarm that carries out what the protocol's [`MeshNode`] decides.
//!
//! The swarm moves bytes and reports events; every decision (which adverts to believe and
//! relay, when to republish, what a peer lacks, whom to dial or drop) is the state
//! machine's. The driver runs as one tokio task that owns both, so no locks are needed;
//! the API talks to it through a bounded query channel.

mod addrs;
mod behaviour;
mod codec;
mod driver;

use std::time::Duration;

use anyhow::Context;
use libp2p::{Multiaddr, SwarmBuilder, noise, tcp, yamux};
use murmur_protocol::artifact::{ArtifactRequest, ArtifactResponse};
use murmur_protocol::directory::{Admission, DirectoryConfig};
use murmur_protocol::mesh::{MeshConfig, MeshNode};
use murmur_protocol::task::{Submit, TaskId, TaskRequest, TaskResponse, TaskSnapshot};
use murmur_protocol::{Digest, NodeId, SecretKey};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

pub use behaviour::{
    ARTIFACT_PROTOCOL, ARTIFACT_REQUEST_TIMEOUT, IDENTIFY_PROTOCOL, KAD_PROTOCOL, SYNC_PROTOCOL,
    TASK_PROTOCOL, TASK_REQUEST_TIMEOUT,
};
use driver::Driver;

use crate::clock;
use crate::config::Config;
use crate::views::{CapsulesView, PeersView};

/// Queries from the API to the driver, each with its reply channel.
#[derive(Debug)]
pub enum Query {
    Peers(oneshot::Sender<PeersView>),
    Capsules(oneshot::Sender<CapsulesView>),
    Metrics(oneshot::Sender<MeshMetrics>),
    /// Replace the capsules this node advertises (config reload).
    SetHosted(Vec<murmur_protocol::HostedCapsule>, oneshot::Sender<()>),
}

/// Task work for the driver: placing tasks and asking their owners.
#[derive(Debug)]
pub enum TaskQuery {
    /// Place a task (`mesh://NAME`, or pinned to one node) and report where it went.
    Route { request: Submit, pin: Option<NodeId>, reply: oneshot::Sender<RouteOutcome> },
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

/// Artifact queries waiting for the driver; senders wait when it is full.
pub const ARTIFACT_QUERY_QUEUE_MAX: usize = 1024;

/// Where a task went.
#[derive(Clone, Debug)]
pub enum RouteOutcome {
    /// `owner` accepted it; `snapshot` is its state at acceptance when this call placed it
    /// (`None` when it had been placed before: ask the owner).
    Routed { owner: NodeId, snapshot: Option<TaskSnapshot> },
    /// Refused for good, naming the failed check; nothing ran.
    Rejected { check: String, reason: String },
    /// Not placed, or its fate is unknown.
    Failed { reason: String },
}

/// Task queries waiting for the driver; senders wait when it is full.
pub const TASK_QUERY_QUEUE_MAX: usize = 1024;

/// Counters and gauges for `/metrics`.
#[derive(Clone, Debug, Default)]
pub struct MeshMetrics {
    pub peers_connected: usize,
    pub directory_nodes: usize,
    pub directory_capsules: usize,
    pub mesh: murmur_protocol::mesh::MeshStats,
    pub directory: murmur_protocol::directory::DirectoryStats,
    pub router: murmur_protocol::route::RouterStats,
    /// Task requests refused at this node, by failed check.
    pub task_refusals: std::collections::BTreeMap<String, u64>,
    /// Artifact requests served to peers, and refused as busy.
    pub artifact_served: u64,
    pub artifact_busy: u64,
    /// Connections closed because a ping went unanswered (`network.ping_timeout_secs`).
    pub ping_failures: u64,
}

/// Queries waiting for the driver. The API answers 503 rather than queue more.
pub const QUERY_QUEUE_MAX: usize = 64;

/// How long the API waits for the driver to answer a query.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long start-up waits for every listener to report its address.
pub const LISTEN_TIMEOUT: Duration = Duration::from_secs(10);

/// The API's way to reach the running mesh.
#[derive(Clone, Debug)]
pub struct MeshHandle {
    queries: mpsc::Sender<Query>,
    tasks: mpsc::Sender<TaskQuery>,
    artifacts: mpsc::Sender<ArtifactQuery>,
    local: NodeId,
}

impl MeshHandle {
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
    pub async fn metrics(&self) -> anyhow::Result<MeshMetrics> {
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
    pub async fn route(&self, request: Submit, pin: Option<NodeId>) -> anyhow::Result<RouteOutcome> {
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
        Self { queries, tasks, artifacts, local: murmur_protocol::SecretKey::from_seed([7; 32]).node_id() }
    }
}

/// A started mesh: its handle, the resolved listen addresses, the driver task.
#[derive(Debug)]
pub struct Started {
    pub handle: MeshHandle,
    pub listen_addrs: Vec<Multiaddr>,
    pub task: JoinHandle<()>,
}

/// Builds the swarm, listens, dials bootstrap peers and spawns the driver. Returns once
/// every listener has reported its address.
pub async fn start(
    key: &SecretKey,
    config: &Config,
    hosted: Vec<murmur_protocol::HostedCapsule>,
    cert: Option<murmur_protocol::Envelope>,
    tasks: crate::tasks::TaskManager,
    store: std::sync::Arc<crate::store::ArtifactStore>,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<Started> {
    let keypair = libp2p::identity::Keypair::ed25519_from_bytes(key.to_seed()).context("node key")?;
    let network = config.network.clone();
    let mut swarm = SwarmBuilder::with_existing_identity(keypair)
        .with_tokio()
        .with_tcp(tcp::Config::default().nodelay(true), noise::Config::new, yamux::Config::default)
        .context("TCP transport")?
        .with_quic()
        .with_dns()
        .context("DNS resolver")?
        .with_behaviour(|keypair| behaviour::Behaviour::new(keypair, &network).map_err(Into::into))
        .context("libp2p behaviours")?
        .with_swarm_config(|c| c.with_idle_connection_timeout(network.idle_timeout))
        .build();

    let mut listeners = Vec::new();
    for addr in &network.listen {
        listeners.push(swarm.listen_on(addr.clone()).with_context(|| format!("cannot listen on {addr}"))?);
    }

    let mesh = MeshNode::new(key.clone(), mesh_config(config), clock::now());
    let (queries_tx, queries_rx) = mpsc::channel(QUERY_QUEUE_MAX);
    let (tasks_tx, tasks_rx) = mpsc::channel(TASK_QUERY_QUEUE_MAX);
    let task_side = driver::TaskSide::new(key.node_id(), config.trust.authorities.clone(), tasks, tasks_rx);
    let (artifacts_tx, artifacts_rx) = mpsc::channel(ARTIFACT_QUERY_QUEUE_MAX);
    let artifact_side = driver::ArtifactSide::new(store, artifacts_rx);
    let mut driver = Driver::new(swarm, mesh, queries_rx, task_side, artifact_side, shutdown);
    let listen_addrs = driver.wait_for_listeners(listeners, LISTEN_TIMEOUT).await?;
    driver.start(config, hosted, cert);
    let task = tokio::spawn(driver.run());
    Ok(Started {
        handle: MeshHandle {
            queries: queries_tx,
            tasks: tasks_tx,
            artifacts: artifacts_tx,
            local: key.node_id(),
        },
        listen_addrs,
        task,
    })
}

/// The protocol's mesh configuration from the node's validated config.
#[must_use]
pub fn mesh_config(config: &Config) -> MeshConfig {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let admission = if config.trust.closed {
        Admission::Closed { authorities: config.trust.authorities.clone() }
    } else {
        Admission::Open
    };
    MeshConfig {
        refresh_ms: ms(config.adverts.refresh),
        ttl_ms: ms(config.adverts.ttl),
        suspect_ms: ms(config.adverts.suspect),
        directory: DirectoryConfig { admission, ..DirectoryConfig::default() },
        ..MeshConfig::default()
    }
}
