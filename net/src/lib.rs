//! Murmur's network: a libp2p swarm that carries out what the protocol's [`MeshNode`]
//! decides, for the mesh (adverts, anti-entropy, departures), for tasks (`/murmur/task/1`),
//! for artifacts (`/murmur/artifact/1`) and for agents' messages (`/murmur/agent/1`).
//!
//! The swarm moves bytes and reports events; every decision (which adverts to believe and
//! relay, when to republish, what a peer lacks, whom to dial or drop, where a task goes)
//! is a protocol state machine's. The driver runs as one tokio task that owns the swarm and
//! the machines, so no locks are needed; the rest of the node talks to it through a
//! [`NetHandle`] (bounded channels).
//!
//! This crate owns the libp2p behaviour, its codecs and the driver. It must not know what
//! happens to a task once it is accepted: task requests that passed the receiving checks
//! go to the [`TaskOwner`] port the node hands to [`start`], agent messages that passed
//! theirs to the [`AgentInbox`] port, and artifact requests are served from the store. No
//! wasmtime, no HTTP.
//!
//! ```text
//! let (handle, pending) = murmur_net::handle(key.node_id());   // usable at once
//! … build what needs the network (pulls, the runtime, the task owner) …
//! let started = murmur_net::start(pending, &key, &config, advertised, ports, store, stop).await?;
//! ```

mod addrs;
mod behaviour;
mod bulk;
mod codec;
mod driver;
pub mod frames;
mod handle;
mod inbox;
mod muxer;
mod owner;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use libp2p::{Multiaddr, SwarmBuilder, noise, tcp};
use murmur_config::{Config, clock};
use murmur_protocol::directory::{Admission, DirectoryConfig};
use murmur_protocol::mesh::{MeshConfig, MeshNode};
use murmur_protocol::{NodeId, SecretKey};
use murmur_store::ArtifactStore;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub use behaviour::{
    AGENT_PROTOCOL, ARTIFACT_PROTOCOL, KAD_PROTOCOL, MODEL_PROTOCOL, SYNC_PROTOCOL, TASK_PROTOCOL,
    WIRE_MINOR_VAR, wire_version,
};
pub use bulk::BULK_PROTOCOL;
use driver::Driver;
pub use handle::{
    AgentQuery, ArtifactQuery, ModelAsk, NetHandle, NetMetrics, Query, SendError, Sent, TaskQuery,
};
pub use inbox::{AgentInbox, NoAgents};
pub use libp2p::{PeerId, Stream};
pub use libp2p_stream::Control as StreamControl;
use murmur_config::limits::{
    AGENT_QUERY_QUEUE_MAX, ARTIFACT_QUERY_QUEUE_MAX, LISTEN_TIMEOUT, QUERY_QUEUE_MAX,
    REQUEST_OVERRUNS_PENDING_MAX, TASK_QUERY_QUEUE_MAX,
};
pub use murmur_protocol::exchange::Placement;
pub use owner::{OwnerFuture, TaskOwner};

/// The driver's ends of a handle's channels, until [`start`] gives them to the driver.
pub struct Pending {
    queries: mpsc::Receiver<Query>,
    tasks: mpsc::Receiver<TaskQuery>,
    artifacts: mpsc::Receiver<ArtifactQuery>,
    agents: mpsc::Receiver<AgentQuery>,
    revocations: watch::Sender<Arc<murmur_protocol::revocation::Revocations>>,
    streams: libp2p_stream::Behaviour,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending").finish_non_exhaustive()
    }
}

/// A handle for node `local` and the channels behind it. Requests made through the handle
/// wait (in bounded channels) until [`start`] runs the driver.
#[must_use]
pub fn handle(local: NodeId) -> (NetHandle, Pending) {
    let (queries_tx, queries) = mpsc::channel(QUERY_QUEUE_MAX);
    let (tasks_tx, tasks) = mpsc::channel(TASK_QUERY_QUEUE_MAX);
    let (artifacts_tx, artifacts) = mpsc::channel(ARTIFACT_QUERY_QUEUE_MAX);
    let (agents_tx, agents) = mpsc::channel(AGENT_QUERY_QUEUE_MAX);
    let (revocations, revocations_rx) = watch::channel(Arc::default());
    let streams = libp2p_stream::Behaviour::new();
    let control = streams.new_control();
    (
        NetHandle::new(queries_tx, tasks_tx, artifacts_tx, agents_tx, revocations_rx, local, control),
        Pending { queries, tasks, artifacts, agents, revocations, streams },
    )
}

/// A started network: the resolved listen addresses and the driver task.
#[derive(Debug)]
pub struct Started {
    pub listen_addrs: Vec<Multiaddr>,
    pub task: JoinHandle<()>,
}

/// What the node advertises when its network starts.
#[derive(Debug, Default)]
pub struct Advertised {
    pub capsules: Vec<murmur_protocol::HostedCapsule>,
    pub agents: Vec<String>,
    pub cert: Option<murmur_protocol::Envelope>,
    /// Revocation lists this node stored in earlier runs (see [`NetHandle::watch_revocations`]),
    /// taken again before anything connects.
    pub revocations: Vec<murmur_protocol::Envelope>,
}

/// Where what arrives from the network goes: task requests that passed the receiving
/// checks to `tasks`, agent messages that passed theirs to `agents`.
pub struct Ports {
    pub tasks: Arc<dyn TaskOwner>,
    pub agents: Arc<dyn AgentInbox>,
}

impl std::fmt::Debug for Ports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ports").finish_non_exhaustive()
    }
}

/// Builds the swarm, listens, dials bootstrap peers and spawns the driver on `pending`'s
/// channels, advertising `advertised`. Requests go to `ports`; artifact requests are
/// served from `store`. Returns once every listener has reported its address.
pub async fn start(
    pending: Pending,
    key: &SecretKey,
    config: &Config,
    advertised: Advertised,
    ports: Ports,
    store: Arc<ArtifactStore>,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<Started> {
    let keypair = libp2p::identity::Keypair::ed25519_from_bytes(key.to_seed()).context("node key")?;
    let network = config.network.clone();
    let wire = behaviour::wire_version()?;
    if wire != murmur_protocol::version::WireVersion::CURRENT {
        tracing::warn!(
            wire = %wire,
            build = %murmur_protocol::version::WireVersion::CURRENT,
            "announcing an older wire version ({}): this node behaves as that minor",
            behaviour::WIRE_MINOR_VAR
        );
    }
    let (overruns_tx, overruns) = tokio::sync::mpsc::channel(REQUEST_OVERRUNS_PENDING_MAX);
    let faults = driver::ServeFaults::from_env();
    let bulk_stats = Arc::new(bulk::BulkStats::default());
    bulk::serve(pending.streams.new_control(), Arc::clone(&store), faults, Arc::clone(&bulk_stats))?;
    let mut swarm = SwarmBuilder::with_existing_identity(keypair)
        .with_tokio()
        .with_tcp(tcp::Config::default().nodelay(true), noise::Config::new, muxer::Config::default)
        .context("TCP transport")?
        .with_quic()
        .with_dns()
        .context("DNS resolver")?
        .with_behaviour(|keypair| {
            behaviour::Behaviour::new(keypair, &network, wire, overruns_tx, pending.streams)
                .map_err(Into::into)
        })
        .context("libp2p behaviours")?
        .with_swarm_config(|c| c.with_idle_connection_timeout(network.idle_timeout))
        .build();

    let mut listeners = Vec::new();
    for addr in &network.listen {
        listeners.push(swarm.listen_on(addr.clone()).with_context(|| format!("cannot listen on {addr}"))?);
    }

    let mesh = MeshNode::new(key.clone(), mesh_config(config), clock::now());
    let task_transport = driver::TaskTransport::new(
        key.node_id(),
        config.trust.authorities.clone(),
        ports.tasks,
        pending.tasks,
    );
    let artifact_transport = driver::ArtifactTransport::new(store, pending.artifacts, faults, bulk_stats);
    let agent_transport = driver::AgentTransport::new(ports.agents, pending.agents);
    let mut driver = Driver::new(
        swarm,
        mesh,
        pending.queries,
        task_transport,
        artifact_transport,
        agent_transport,
        shutdown,
        wire,
        overruns,
        pending.revocations,
    );
    let listen_addrs = driver.wait_for_listeners(listeners, LISTEN_TIMEOUT).await?;
    driver.start(config, advertised.capsules, advertised.agents, advertised.cert, advertised.revocations);
    let task = tokio::spawn(driver.run());
    Ok(Started { listen_addrs, task })
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
        announce_early: config.adverts.announce_early,
        directory: DirectoryConfig {
            admission,
            authorities: config.trust.authorities.clone(),
            ..DirectoryConfig::default()
        },
        ..MeshConfig::default()
    }
}
