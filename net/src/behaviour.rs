//! The libp2p behaviours a node runs, and how each is configured.

use std::time::Duration;

use libp2p::kad::store::MemoryStore;
use libp2p::request_response::{self, ProtocolSupport};
use libp2p::swarm::NetworkBehaviour;
use libp2p::swarm::behaviour::toggle::Toggle;
use libp2p::{
    StreamProtocol, allow_block_list, connection_limits, gossipsub, identify, identity, kad, mdns, ping,
};
use murmur_protocol::Digest;
use murmur_protocol::artifact::{ArtifactRequest, ArtifactResponse};
use murmur_protocol::limits::{GOSSIP_HEARTBEAT_MS, GOSSIP_TRANSMIT_BYTES_MAX};
use murmur_protocol::mesh::ADVERT_TOPIC;
use murmur_protocol::sync::{SyncRequest, SyncResponse};
use murmur_protocol::task::{TaskRequest, TaskResponse};

use super::codec::FrameCodec;
use murmur_config::NetworkConfig;
use murmur_config::limits::{
    ARTIFACT_REQUEST_TIMEOUT, ARTIFACT_STREAMS_MAX, CONNECTIONS_PER_PEER_MAX, SYNC_STREAMS_MAX, SYNC_TIMEOUT,
    TASK_REQUEST_TIMEOUT, TASK_STREAMS_MAX,
};

/// Identify's protocol version: peers with another value are not murmur nodes.
pub const IDENTIFY_PROTOCOL: &str = "/murmur/1.0.0";
/// Our private Kademlia DHT, separate from the public IPFS one.
pub const KAD_PROTOCOL: StreamProtocol = StreamProtocol::new("/murmur/kad/1.0.0");
/// Anti-entropy request-response.
pub const SYNC_PROTOCOL: StreamProtocol = StreamProtocol::new("/murmur/sync/1");
/// Tasks: submit, get, cancel, reply, events.
pub const TASK_PROTOCOL: StreamProtocol = StreamProtocol::new("/murmur/task/1");
/// Artifacts: resolve name@version, fetch blob ranges (chunks).
pub const ARTIFACT_PROTOCOL: StreamProtocol = StreamProtocol::new("/murmur/artifact/1");

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
    pub sync: request_response::Behaviour<FrameCodec<SyncRequest, SyncResponse>>,
    pub task: request_response::Behaviour<FrameCodec<TaskRequest, TaskResponse>>,
    pub artifact: request_response::Behaviour<FrameCodec<ArtifactRequest, ArtifactResponse>>,
}

impl Behaviour {
    /// Builds the behaviours for `keypair` with `config`. Must run inside a tokio runtime
    /// (mDNS binds sockets).
    pub fn new(keypair: &identity::Keypair, config: &NetworkConfig) -> anyhow::Result<Self> {
        let peer_id = keypair.public().to_peer_id();
        let limits = connection_limits::ConnectionLimits::default()
            .with_max_established(Some(config.connections_max))
            .with_max_pending_incoming(Some(config.connections_max / 2))
            .with_max_pending_outgoing(Some(config.connections_max / 2))
            .with_max_established_per_peer(Some(CONNECTIONS_PER_PEER_MAX));

        let identify = identify::Behaviour::new(
            identify::Config::new(IDENTIFY_PROTOCOL.into(), keypair.public())
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

        let sync = request_response::Behaviour::with_codec(
            FrameCodec::default(),
            [(SYNC_PROTOCOL, ProtocolSupport::Full)],
            request_response::Config::default()
                .with_request_timeout(SYNC_TIMEOUT)
                .with_max_concurrent_streams(SYNC_STREAMS_MAX),
        );

        let task = request_response::Behaviour::with_codec(
            FrameCodec::default(),
            [(TASK_PROTOCOL, ProtocolSupport::Full)],
            request_response::Config::default()
                .with_request_timeout(TASK_REQUEST_TIMEOUT)
                .with_max_concurrent_streams(TASK_STREAMS_MAX),
        );

        let artifact = request_response::Behaviour::with_codec(
            FrameCodec::default(),
            [(ARTIFACT_PROTOCOL, ProtocolSupport::Full)],
            request_response::Config::default()
                .with_request_timeout(ARTIFACT_REQUEST_TIMEOUT)
                .with_max_concurrent_streams(ARTIFACT_STREAMS_MAX),
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
        })
    }
}
