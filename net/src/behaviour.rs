//! The libp2p behaviours a node runs, and how each is configured.

use std::time::Duration;

use anyhow::Context;

use libp2p::PeerId;
use libp2p::kad::store::MemoryStore;
use libp2p::request_response;
use libp2p::swarm::NetworkBehaviour;
use libp2p::swarm::behaviour::toggle::Toggle;
use libp2p::{
    StreamProtocol, allow_block_list, connection_limits, gossipsub, identify, identity, kad, mdns, ping,
};
use murmur_protocol::Digest;
use murmur_protocol::agent::{AgentRequest, AgentResponse};
use murmur_protocol::artifact::{ArtifactRequest, ArtifactResponse};
use murmur_protocol::limits::{GOSSIP_HEARTBEAT_MS, GOSSIP_TRANSMIT_BYTES_MAX};
use murmur_protocol::mesh::{ADVERT_TOPIC, REVOCATION_TOPIC};
use murmur_protocol::sync::{SyncRequest, SyncResponse};
use murmur_protocol::task::{TaskRequest, TaskResponse};
use murmur_protocol::version::WireVersion;
use tokio::sync::mpsc;

use super::codec::{Budgeted, FrameCodec, InFlight, Overrun};
use murmur_config::NetworkConfig;
use murmur_config::limits::{
    AGENT_REQUEST_BYTES_PER_CONNECTION, AGENT_REQUEST_TIMEOUT, AGENT_STREAMS_MAX,
    ARTIFACT_REQUEST_BYTES_PER_CONNECTION, ARTIFACT_REQUEST_TIMEOUT, ARTIFACT_STREAMS_MAX,
    CONNECTIONS_PER_PEER_MAX, REQUEST_BYTES_IN_FLIGHT_MAX, SYNC_REQUEST_BYTES_PER_CONNECTION,
    SYNC_STREAMS_MAX, SYNC_TIMEOUT, TASK_REQUEST_BYTES_PER_CONNECTION, TASK_REQUEST_TIMEOUT,
    TASK_STREAMS_MAX,
};

/// The variable that makes a node announce, and behave as, an older minor of this build's
/// wire version (`MURMUR_WIRE_MINOR=0`): for rehearsing a rolling upgrade, never needed
/// otherwise. See `docs/src/protocol.md`, "How the wire evolves".
pub const WIRE_MINOR_VAR: &str = "MURMUR_WIRE_MINOR";

/// The wire version this node announces in identify (`/murmur/MAJOR.MINOR.0`): the
/// build's, or the older minor [`WIRE_MINOR_VAR`] names.
pub fn wire_version() -> anyhow::Result<WireVersion> {
    let Some(value) = std::env::var_os(WIRE_MINOR_VAR) else { return Ok(WireVersion::CURRENT) };
    let minor = value
        .to_str()
        .and_then(|v| v.parse::<u16>().ok())
        .filter(|m| *m <= WireVersion::CURRENT.minor)
        .with_context(|| {
            format!(
                "{WIRE_MINOR_VAR}={value:?}: must be a minor version from 0 to {} (this build's)",
                WireVersion::CURRENT.minor
            )
        })?;
    Ok(WireVersion { minor, ..WireVersion::CURRENT })
}
/// Our private Kademlia DHT, separate from the public IPFS one.
pub const KAD_PROTOCOL: StreamProtocol = StreamProtocol::new("/murmur/kad/1.0.0");
/// Anti-entropy request-response.
pub const SYNC_PROTOCOL: StreamProtocol = StreamProtocol::new("/murmur/sync/1");
/// Tasks: submit, get, cancel, reply, events.
pub const TASK_PROTOCOL: StreamProtocol = StreamProtocol::new("/murmur/task/1");
/// Artifacts: resolve name@version, fetch blob ranges (chunks).
pub const ARTIFACT_PROTOCOL: StreamProtocol = StreamProtocol::new("/murmur/artifact/1");
/// Agents: messages between agents of different nodes, and their status.
pub const AGENT_PROTOCOL: StreamProtocol = StreamProtocol::new("/murmur/agent/1");
/// Models: one chat completion per stream, streamed back (see `murmur_protocol::model`).
pub const MODEL_PROTOCOL: StreamProtocol = StreamProtocol::new("/murmur/model/1");

/// Every behaviour of a murmur node.
#[derive(NetworkBehaviour)]
pub struct Behaviour {
    pub limits: connection_limits::Behaviour,
    /// Peers the mesh refused admission to, held off for a while (`Output::Block`): their
    /// connections are denied before any protocol runs on them.
    pub blocked: allow_block_list::Behaviour<allow_block_list::BlockedPeers>,
    pub identify: identify::Behaviour,
    pub ping: ping::Behaviour,
    pub mdns: Toggle<mdns::tokio::Behaviour>,
    pub kad: kad::Behaviour<MemoryStore>,
    pub gossipsub: gossipsub::Behaviour,
    pub sync: Budgeted<SyncRequest, SyncResponse>,
    pub task: Budgeted<TaskRequest, TaskResponse>,
    pub artifact: Budgeted<ArtifactRequest, ArtifactResponse>,
    pub agent: Budgeted<AgentRequest, AgentResponse>,
    /// Raw streams (`/murmur/model/1`), opened and accepted outside the driver through a
    /// [`libp2p_stream::Control`].
    pub streams: libp2p_stream::Behaviour,
}

impl Behaviour {
    /// Builds the behaviours for `keypair` with `config`. Must run inside a tokio runtime
    /// (mDNS binds sockets).
    /// Request overruns (see `codec`) are reported on `overruns`.
    pub fn new(
        keypair: &identity::Keypair,
        config: &NetworkConfig,
        wire: WireVersion,
        overruns: mpsc::Sender<(Option<PeerId>, Overrun)>,
        streams: libp2p_stream::Behaviour,
    ) -> anyhow::Result<Self> {
        let peer_id = keypair.public().to_peer_id();
        let limits = connection_limits::ConnectionLimits::default()
            .with_max_established(Some(config.connections_max))
            .with_max_pending_incoming(Some(config.connections_max / 2))
            .with_max_pending_outgoing(Some(config.connections_max / 2))
            .with_max_established_per_peer(Some(CONNECTIONS_PER_PEER_MAX));

        let identify = identify::Behaviour::new(
            identify::Config::new(wire.identify(), keypair.public())
                .with_agent_version(format!("murnode/{}", env!("CARGO_PKG_VERSION")))
                .with_push_listen_addr_updates(true),
        );

        let mdns = if config.mdns {
            let mdns_config =
                mdns::Config { query_interval: config.mdns_query_interval, ..mdns::Config::default() };
            Some(mdns::tokio::Behaviour::new(mdns_config, peer_id)?)
        } else {
            None
        };

        let mut kad =
            kad::Behaviour::with_config(peer_id, MemoryStore::new(peer_id), kad::Config::new(KAD_PROTOCOL));
        // Server mode from the start: every node answers DHT queries, even before an
        // external address is confirmed (otherwise small meshes see "no known peers").
        kad.set_mode(Some(kad::Mode::Server));

        let gossip_config = gossipsub::ConfigBuilder::default()
            .validation_mode(gossipsub::ValidationMode::Strict)
            .validate_messages()
            .message_id_fn(|message: &gossipsub::Message| {
                gossipsub::MessageId::from(Digest::of(&message.data).0.to_vec())
            })
            .max_transmit_size(GOSSIP_TRANSMIT_BYTES_MAX)
            .heartbeat_interval(Duration::from_millis(GOSSIP_HEARTBEAT_MS))
            .heartbeat_initial_delay(Duration::from_millis(500))
            .build()
            .map_err(|err| anyhow::anyhow!("gossipsub config: {err}"))?;
        let mut gossipsub =
            gossipsub::Behaviour::new(gossipsub::MessageAuthenticity::Signed(keypair.clone()), gossip_config)
                .map_err(|err| anyhow::anyhow!("gossipsub: {err}"))?;
        gossipsub.subscribe(&gossipsub::IdentTopic::new(ADVERT_TOPIC))?;
        // A node rehearsing a minor before revocations does not subscribe, so gossipsub
        // sends it none: what such a build does.
        if wire.has(murmur_protocol::version::Feature::Revocations) {
            gossipsub.subscribe(&gossipsub::IdentTopic::new(REVOCATION_TOPIC))?;
        }

        // One node-wide budget for request bytes, one per connection and protocol.
        let in_flight =
            InFlight::node(REQUEST_BYTES_IN_FLIGHT_MAX, SYNC_REQUEST_BYTES_PER_CONNECTION, overruns);
        let sync = Budgeted::new(
            FrameCodec::new(in_flight.sibling(SYNC_REQUEST_BYTES_PER_CONNECTION)),
            SYNC_PROTOCOL,
            request_response::Config::default()
                .with_request_timeout(SYNC_TIMEOUT)
                .with_max_concurrent_streams(SYNC_STREAMS_MAX),
        );

        let task = Budgeted::new(
            FrameCodec::new(in_flight.sibling(TASK_REQUEST_BYTES_PER_CONNECTION)),
            TASK_PROTOCOL,
            request_response::Config::default()
                .with_request_timeout(TASK_REQUEST_TIMEOUT)
                .with_max_concurrent_streams(TASK_STREAMS_MAX),
        );

        let artifact = Budgeted::new(
            FrameCodec::new(in_flight.sibling(ARTIFACT_REQUEST_BYTES_PER_CONNECTION)),
            ARTIFACT_PROTOCOL,
            request_response::Config::default()
                .with_request_timeout(ARTIFACT_REQUEST_TIMEOUT)
                .with_max_concurrent_streams(ARTIFACT_STREAMS_MAX),
        );

        let agent = Budgeted::new(
            FrameCodec::new(in_flight.sibling(AGENT_REQUEST_BYTES_PER_CONNECTION)),
            AGENT_PROTOCOL,
            request_response::Config::default()
                .with_request_timeout(AGENT_REQUEST_TIMEOUT)
                .with_max_concurrent_streams(AGENT_STREAMS_MAX),
        );

        Ok(Self {
            limits: connection_limits::Behaviour::new(limits),
            blocked: allow_block_list::Behaviour::default(),
            identify,
            ping: ping::Behaviour::new(
                ping::Config::new().with_interval(config.ping_interval).with_timeout(config.ping_timeout),
            ),
            mdns: mdns.into(),
            kad,
            gossipsub,
            sync,
            task,
            artifact,
            agent,
            streams,
        })
    }
}
