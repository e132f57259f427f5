//! The event loop that joins the swarm and the mesh state machine.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use libp2p::core::transport::ListenerId;
use libp2p::swarm::SwarmEvent;
use libp2p::swarm::dial_opts::DialOpts;
use libp2p::{Multiaddr, PeerId, Swarm, gossipsub, identify, mdns, ping, request_response};
use murmur_protocol::mesh::{ADVERT_TOPIC, Event, Input, MeshNode, Output, REVOCATION_TOPIC, Verdict};
use murmur_protocol::revocation::Revocations;
use murmur_protocol::sync::SyncResponse;
use murmur_protocol::{Envelope, NodeId};
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, trace, warn};

use super::addrs::announceable;
use super::behaviour::{Behaviour, BehaviourEvent};
use super::codec::{Overrun, Scope};
use super::{NetMetrics, Query};
use murmur_config::{Config, clock};
use murmur_protocol::version::{Feature, WireVersion};
mod agents;
mod artifacts;
pub(crate) use artifacts::{ServeFaults, serve_request};
mod tasks;

pub(super) use agents::AgentTransport;
pub(super) use artifacts::ArtifactTransport;
pub(super) use tasks::TaskTransport;

use murmur_api::views::{CapsuleView, CapsulesView, PeerView, PeersView, ProviderView};
use murmur_config::limits::{DRIVER_PENDING_MAX, DRIVER_TICK_MAX};

/// What we know about a connected peer beyond the mesh's view.
#[derive(Debug)]
struct PeerInfo {
    /// The peer's node id, decoded once (decoding validates a curve point).
    node: Option<NodeId>,
    addrs: BTreeSet<Multiaddr>,
    rtt: RttWindow,
    last_seen: Instant,
    /// The wire version its identify announced (none yet: treated as the oldest minor).
    wire: Option<WireVersion>,
    /// A sync request went to it in the oldest minor's shape, before its identify arrived:
    /// if it reads more, exchange again once it says so.
    synced_blind: bool,
}

/// Samples of a peer's round trip kept for its estimate.
const RTT_SAMPLES: usize = 4;

/// A peer's round trip as routing sees it: the least of its last [`RTT_SAMPLES`] pings.
/// One sample is noise — the first ping of a new connection, or one queued behind a
/// burst of traffic or a busy scheduler, can take several times the path's delay — and
/// routing on it sends every request of a quiet mesh to whichever peer was lucky in its
/// last ping. The smallest of the recent samples is the path's delay without the queueing
/// (the filter TCP-BBR keeps for `min_rtt`); a lasting rise shows once the window has turned
/// over, one minute at the default 15 s ping interval.
#[derive(Debug, Default)]
struct RttWindow {
    samples: [Option<Duration>; RTT_SAMPLES],
    next: usize,
}

impl RttWindow {
    fn record(&mut self, rtt: Duration) {
        self.samples[self.next] = Some(rtt);
        self.next = (self.next + 1) % RTT_SAMPLES;
    }

    /// The estimate, none before the first sample.
    fn estimate(&self) -> Option<Duration> {
        self.samples.iter().flatten().min().copied()
    }
}

pub(super) struct Driver {
    swarm: Swarm<Behaviour>,
    mesh: MeshNode,
    topic: gossipsub::IdentTopic,
    revocation_topic: gossipsub::IdentTopic,
    /// Where the node reads the revocation lists held (its sending-end check, its store).
    revocations: watch::Sender<Arc<Revocations>>,
    queries: mpsc::Receiver<Query>,
    shutdown: watch::Receiver<bool>,
    peers: BTreeMap<PeerId, PeerInfo>,
    listen_addrs: BTreeSet<Multiaddr>,
    gossip_pending: BTreeMap<u64, (gossipsub::MessageId, PeerId)>,
    sync_pending: BTreeMap<u64, request_response::ResponseChannel<SyncResponse>>,
    next_token: u64,
    /// Connections closed because a ping went unanswered.
    ping_failures: u64,
    /// The wire version this node announces, and peers refused for theirs, by reason.
    wire: WireVersion,
    version_refusals: BTreeMap<&'static str, u64>,
    /// Inbound requests failed for overrunning a budget of request bytes in flight, by
    /// scope (`connection`: the peer was cut off; `node`: all peers together).
    request_overruns: BTreeMap<&'static str, u64>,
    tasks: TaskTransport,
    artifacts: ArtifactTransport,
    agents: AgentTransport,
    /// Request overruns the codecs report (see `codec`).
    overruns: mpsc::Receiver<(Option<PeerId>, Overrun)>,
    /// The models this node's agents serve, and whether its advert lists them now
    /// ([`WireVersion::lists_models`]: not while an identified peer is older than 1.3).
    models: Vec<String>,
    models_listed: Vec<String>,
}

impl Driver {
    #[allow(clippy::too_many_arguments)] // the driver's parts, each built by `start`
    pub(super) fn new(
        swarm: Swarm<Behaviour>,
        mesh: MeshNode,
        queries: mpsc::Receiver<Query>,
        tasks: TaskTransport,
        artifacts: ArtifactTransport,
        agents: AgentTransport,
        shutdown: watch::Receiver<bool>,
        wire: WireVersion,
        overruns: mpsc::Receiver<(Option<PeerId>, Overrun)>,
        revocations: watch::Sender<Arc<Revocations>>,
    ) -> Self {
        Self {
            revocation_topic: gossipsub::IdentTopic::new(REVOCATION_TOPIC),
            revocations,
            overruns,
            swarm,
            mesh,
            topic: gossipsub::IdentTopic::new(ADVERT_TOPIC),
            queries,
            shutdown,
            peers: BTreeMap::new(),
            listen_addrs: BTreeSet::new(),
            gossip_pending: BTreeMap::new(),
            sync_pending: BTreeMap::new(),
            next_token: 0,
            ping_failures: 0,
            wire,
            version_refusals: BTreeMap::new(),
            request_overruns: BTreeMap::new(),
            tasks,
            artifacts,
            agents,
            models: Vec::new(),
            models_listed: Vec::new(),
        }
    }

    /// Lists this node's models in its advert, or withholds them, as the peers' wire
    /// versions allow; republishes when that changes.
    pub(super) fn apply_models(&mut self) {
        let allowed = self.wire.lists_models(self.peers.values().map(|p| p.wire));
        let models = if allowed { self.models.clone() } else { Vec::new() };
        if models == self.models_listed {
            return;
        }
        if !allowed && !self.models.is_empty() {
            warn!(
                models = ?self.models,
                "not advertising the models this node serves: a peer speaks a wire older than 1.3 and would refuse the advert; upgrade it"
            );
        }
        self.models_listed.clone_from(&models);
        self.mesh.handle(clock::now(), Input::SetModels { models });
    }

    /// Runs the swarm until every listener reported an address (or failed).
    pub(super) async fn wait_for_listeners(
        &mut self,
        listeners: Vec<ListenerId>,
        timeout: Duration,
    ) -> anyhow::Result<Vec<Multiaddr>> {
        let mut waiting: Vec<ListenerId> = listeners;
        let deadline = tokio::time::Instant::now() + timeout;
        while !waiting.is_empty() {
            let event = tokio::time::timeout_at(deadline, self.swarm.select_next_some())
                .await
                .map_err(|_| anyhow::anyhow!("listeners did not report an address within {timeout:?}"))?;
            match &event {
                SwarmEvent::NewListenAddr { listener_id, .. } => waiting.retain(|id| id != listener_id),
                SwarmEvent::ListenerClosed { listener_id, reason, .. } => {
                    anyhow::bail!("listener {listener_id:?} closed at start: {reason:?}");
                }
                SwarmEvent::ListenerError { error, .. } => anyhow::bail!("listener failed at start: {error}"),
                _ => {}
            }
            self.on_swarm_event(event);
            self.drain();
        }
        Ok(self.listen_addrs.iter().cloned().collect())
    }

    /// Feeds the configured state into the mesh and dials the bootstrap peers.
    pub(super) fn start(
        &mut self,
        config: &Config,
        hosted: Vec<murmur_protocol::HostedCapsule>,
        agents: Vec<String>,
        cert: Option<Envelope>,
        revocations: Vec<Envelope>,
    ) {
        let now = clock::now();
        for envelope in revocations {
            self.mesh.handle(now, Input::Revoke { envelope });
        }
        self.publish_revocations();
        self.mesh.handle(now, Input::SetCert { cert });
        self.mesh.handle(now, Input::SetHosted { capsules: hosted });
        self.mesh.handle(now, Input::SetAgents { agents });
        // The mesh dials the bootstrap peers, at once and again while one is not connected
        // (one that was down at our start is found when it comes up).
        let mut bootstrap = Vec::new();
        for (peer, addr) in &config.network.bootstrap {
            match NodeId::from_peer_id(peer) {
                Ok(node) => {
                    self.swarm.behaviour_mut().kad.add_address(peer, addr.clone());
                    bootstrap.push((node, vec![addr.to_string()]));
                }
                // Such a peer would be disconnected at once as "not a murmur peer".
                Err(_) => {
                    warn!(peer = %peer, addr = %addr, "bootstrap peer skipped: its peer id is not an ed25519 key, so it is no Murmur node")
                }
            }
        }
        self.mesh.handle(now, Input::SetBootstrap { peers: bootstrap });
        if !config.network.bootstrap.is_empty()
            && let Err(err) = self.swarm.behaviour_mut().kad.bootstrap()
        {
            debug!(error = %err, "kademlia bootstrap not started");
        }
        self.drain();
    }

    pub(super) async fn run(mut self) {
        loop {
            let sleep = self.sleep_duration();
            tokio::select! {
                event = self.swarm.select_next_some() => self.on_swarm_event(event),
                () = tokio::time::sleep(sleep) => {
                    self.mesh.handle(clock::now(), Input::Tick);
                    self.tick_tasks();
                }
                Some(query) = self.queries.recv() => self.answer(query),
                Some(query) = self.tasks.queries.recv() => self.on_task_query(query),
                Some(report) = self.tasks.reports.recv() => self.on_task_report(report),
                Some(query) = self.artifacts.queries.recv() => self.on_artifact_query(query),
                Some((token, response)) = self.artifacts.served.recv() => self.on_artifact_served(token, response),
                Some(query) = self.agents.queries.recv() => self.on_agent_query(query),
                Some((peer, overrun)) = self.overruns.recv() => self.on_overrun(peer, overrun),
                _ = self.shutdown.changed() => break,
            }
            self.drain();
        }
        info!("mesh stopped");
    }

    fn sleep_duration(&self) -> Duration {
        let now = clock::now();
        let mut at = self.mesh.poll_timeout().unwrap_or(now.plus(DRIVER_TICK_MAX.as_millis() as u64));
        if let Some(task_at) = self.task_timeout() {
            at = at.min(task_at);
        }
        Duration::from_millis(at.since(now)).min(DRIVER_TICK_MAX)
    }

    fn token(&mut self) -> u64 {
        self.next_token = self.next_token.wrapping_add(1);
        self.next_token
    }

    fn on_swarm_event(&mut self, event: SwarmEvent<BehaviourEvent>) {
        let now = clock::now();
        match event {
            SwarmEvent::NewListenAddr { address, .. } => {
                info!(addr = %address, "listening");
                self.listen_addrs.insert(address);
                self.announce_addrs();
            }
            SwarmEvent::ExpiredListenAddr { address, .. } => {
                self.listen_addrs.remove(&address);
                self.announce_addrs();
            }
            SwarmEvent::ConnectionEstablished { peer_id, endpoint, num_established, .. } => {
                let info = self.peers.entry(peer_id).or_insert_with(|| PeerInfo {
                    node: NodeId::from_peer_id(&peer_id).ok(),
                    addrs: BTreeSet::new(),
                    rtt: RttWindow::default(),
                    last_seen: Instant::now(),
                    wire: None,
                    synced_blind: false,
                });
                info.addrs.insert(endpoint.get_remote_address().clone());
                info.last_seen = Instant::now();
                if num_established.get() == 1 {
                    match NodeId::from_peer_id(&peer_id) {
                        Ok(peer) => {
                            debug!(peer = %peer_id, "peer connected");
                            self.mesh.handle(now, Input::PeerConnected { peer });
                        }
                        Err(err) => {
                            warn!(peer = %peer_id, reason = %err, "not a murmur peer; disconnecting");
                            let _ = self.swarm.disconnect_peer_id(peer_id);
                        }
                    }
                }
            }
            SwarmEvent::ConnectionClosed { peer_id, num_established, .. } => {
                if num_established == 0 {
                    self.peers.remove(&peer_id);
                    if let Ok(peer) = NodeId::from_peer_id(&peer_id) {
                        debug!(peer = %peer_id, "peer disconnected");
                        self.mesh.handle(now, Input::PeerDisconnected { peer });
                    }
                    self.apply_models();
                }
            }
            SwarmEvent::OutgoingConnectionError { peer_id, error, .. } => {
                debug!(peer = ?peer_id, error = %error, "dial failed");
            }
            SwarmEvent::Behaviour(event) => self.on_behaviour_event(event),
            other => trace!(event = ?other, "swarm event"),
        }
    }

    fn on_behaviour_event(&mut self, event: BehaviourEvent) {
        let now = clock::now();
        match event {
            BehaviourEvent::Gossipsub(gossipsub::Event::Message {
                propagation_source,
                message_id,
                message,
            }) => {
                self.touch(&propagation_source);
                let Ok(from) = NodeId::from_peer_id(&propagation_source) else {
                    self.report(&message_id, &propagation_source, gossipsub::MessageAcceptance::Reject);
                    return;
                };
                let token = self.token();
                if self.gossip_pending.len() < DRIVER_PENDING_MAX {
                    self.gossip_pending.insert(token, (message_id, propagation_source));
                    self.mesh.handle(now, Input::GossipReceived { from, token, bytes: message.data });
                } else {
                    self.report(&message_id, &propagation_source, gossipsub::MessageAcceptance::Ignore);
                }
            }
            BehaviourEvent::Gossipsub(gossipsub::Event::Subscribed { peer_id, topic })
                if topic == gossipsub::IdentTopic::new(ADVERT_TOPIC).hash() =>
            {
                if let Ok(peer) = NodeId::from_peer_id(&peer_id) {
                    self.mesh.handle(now, Input::PeerSubscribed { peer });
                }
            }
            BehaviourEvent::Gossipsub(other) => trace!(event = ?other, "gossipsub"),
            BehaviourEvent::Sync(request_response::Event::Message { peer, message, .. }) => {
                self.touch(&peer);
                let Ok(from) = NodeId::from_peer_id(&peer) else { return };
                match message {
                    request_response::Message::Request { request, channel, .. } => {
                        if self.sync_pending.len() >= DRIVER_PENDING_MAX {
                            return;
                        }
                        if !self.wire.reads_sync(&request) {
                            // Rehearsing an older minor: its strict decoder fails such a
                            // request, unanswered.
                            debug!(peer = %peer, wire = %self.wire, "sync request with revocations not read");
                            return;
                        }
                        let token = self.token();
                        self.sync_pending.insert(token, channel);
                        self.mesh.handle(now, Input::SyncRequested { from, token, request });
                    }
                    request_response::Message::Response { response, .. } => {
                        self.mesh.handle(now, Input::SyncAnswered { from, response });
                    }
                }
            }
            BehaviourEvent::Sync(request_response::Event::OutboundFailure { peer, error, .. }) => {
                debug!(peer = %peer, error = %error, "sync request failed");
                if let Ok(peer) = NodeId::from_peer_id(&peer) {
                    self.mesh.handle(now, Input::SyncFailed { peer });
                }
            }
            BehaviourEvent::Sync(request_response::Event::InboundFailure { peer, error, .. }) => {
                debug!(peer = %peer, error = %error, "sync answer failed");
            }
            BehaviourEvent::Sync(request_response::Event::ResponseSent { .. }) => {}
            BehaviourEvent::Task(event) => self.on_task_event(event),
            BehaviourEvent::Artifact(event) => self.on_artifact_event(event),
            BehaviourEvent::Streams(()) => {}
            BehaviourEvent::Agent(event) => {
                if let request_response::Event::Message { peer, .. } = &event {
                    self.touch(peer);
                }
                self.on_agent_event(event);
            }
            BehaviourEvent::Identify(identify::Event::Received { peer_id, info, .. }) => {
                match WireVersion::admit(self.wire, &info.protocol_version) {
                    Ok(wire) => {
                        let mut resync = false;
                        if let Some(peer) = self.peers.get_mut(&peer_id) {
                            peer.wire = Some(wire);
                            resync = std::mem::take(&mut peer.synced_blind)
                                && self.wire.shares(Some(wire), Feature::Revocations);
                        }
                        if resync && let Ok(peer) = NodeId::from_peer_id(&peer_id) {
                            self.mesh.handle(now, Input::Resync { peer });
                        }
                        if wire != self.wire {
                            debug!(peer = %peer_id, wire = %wire, ours = %self.wire, "peer speaks another minor wire version");
                        }
                        self.apply_models();
                    }
                    Err(refusal) => {
                        warn!(peer = %peer_id, reason = refusal.reason(), "peer refused: it {refusal}; disconnecting");
                        *self.version_refusals.entry(refusal.reason()).or_default() += 1;
                        let _ = self.swarm.disconnect_peer_id(peer_id);
                        return;
                    }
                }
                if self.is_blocked(&peer_id) {
                    // Refused admission while identify was under way: keep it out of Kademlia.
                    return;
                }
                for addr in info.listen_addrs {
                    self.swarm.behaviour_mut().kad.add_address(&peer_id, addr);
                }
            }
            BehaviourEvent::Identify(_) => {}
            BehaviourEvent::Ping(ping::Event { peer, connection, result }) => match result {
                Ok(rtt) => {
                    if let Some(info) = self.peers.get_mut(&peer) {
                        info.rtt.record(rtt);
                        info.last_seen = Instant::now();
                    }
                }
                // A peer that answers that it does not speak ping (a tool rather than a
                // node) is responsive: it keeps its connection.
                Err(ping::Failure::Unsupported) => trace!(peer = %peer, "peer does not speak ping"),
                Err(err) => {
                    // libp2p leaves this policy to us: a ping unanswered (or a ping stream
                    // that could not be opened) in time means the peer froze, lost power or
                    // is cut off, and TCP would keep the connection for minutes. Closing it
                    // lets the mesh redial the peer and, if it stays away, declare it gone.
                    debug!(peer = %peer, error = %err, "closing a connection whose ping failed");
                    self.ping_failures += 1;
                    self.swarm.close_connection(connection);
                }
            },
            BehaviourEvent::Mdns(mdns::Event::Discovered(found)) => {
                for (peer, addr) in found {
                    if peer == *self.swarm.local_peer_id()
                        || self.swarm.is_connected(&peer)
                        || self.is_blocked(&peer)
                    {
                        continue;
                    }
                    debug!(peer = %peer, addr = %addr, "found on the LAN");
                    self.swarm.behaviour_mut().kad.add_address(&peer, addr.clone());
                    let _ = self.swarm.dial(DialOpts::peer_id(peer).addresses(vec![addr]).build());
                }
            }
            BehaviourEvent::Mdns(mdns::Event::Expired(_)) => {}
            BehaviourEvent::Kad(event) => trace!(event = ?event, "kademlia"),
            BehaviourEvent::Limits(never) | BehaviourEvent::Blocked(never) => match never {},
        }
    }

    fn touch(&mut self, peer: &PeerId) {
        if let Some(info) = self.peers.get_mut(peer) {
            info.last_seen = Instant::now();
        }
    }

    fn report(
        &mut self,
        id: &gossipsub::MessageId,
        source: &PeerId,
        acceptance: gossipsub::MessageAcceptance,
    ) {
        self.swarm.behaviour_mut().gossipsub.report_message_validation_result(id, source, acceptance);
    }

    fn announce_addrs(&mut self) {
        let addrs = announceable(&self.listen_addrs);
        self.mesh.handle(clock::now(), Input::SetAddrs { addrs });
    }

    /// Carries out everything the mesh asked for.
    fn drain(&mut self) {
        let mut revoked = false;
        while let Some(output) = self.mesh.poll_output() {
            match output {
                Output::Publish { bytes } => {
                    let topic = self.topic.clone();
                    if let Err(err) = self.swarm.behaviour_mut().gossipsub.publish(topic, bytes) {
                        // With no subscribed peer yet, anti-entropy delivers it on connect.
                        debug!(error = %err, "advert not gossiped");
                    }
                }
                Output::PublishRevocation { bytes } => {
                    let topic = self.revocation_topic.clone();
                    if let Err(err) = self.swarm.behaviour_mut().gossipsub.publish(topic, bytes) {
                        // With no subscribed peer yet, anti-entropy delivers it on connect.
                        debug!(error = %err, "revocation list not gossiped");
                    }
                }
                Output::Report { token, verdict } => {
                    if let Some((id, source)) = self.gossip_pending.remove(&token) {
                        let acceptance = match verdict {
                            Verdict::Accept => gossipsub::MessageAcceptance::Accept,
                            Verdict::Ignore => gossipsub::MessageAcceptance::Ignore,
                            Verdict::Reject => gossipsub::MessageAcceptance::Reject,
                        };
                        self.report(&id, &source, acceptance);
                    }
                }
                Output::SendSyncRequest { peer, mut request } => {
                    let peer_id = peer.to_peer_id();
                    let info = self.peers.get_mut(&peer_id);
                    let theirs = info.as_ref().and_then(|info| info.wire);
                    if let Some(info) = info.filter(|info| info.wire.is_none()) {
                        info.synced_blind = true;
                    }
                    self.wire.shape_sync_for(theirs, &mut request);
                    self.swarm.behaviour_mut().sync.send_request(&peer_id, request);
                }
                Output::SendSyncResponse { token, response } => {
                    if let Some(channel) = self.sync_pending.remove(&token) {
                        let _ = self.swarm.behaviour_mut().sync.send_response(channel, response);
                    }
                }
                Output::Dial { peer, addrs } => {
                    let addrs: Vec<Multiaddr> = addrs.iter().filter_map(|a| a.parse().ok()).collect();
                    let peer_id = peer.to_peer_id();
                    for addr in &addrs {
                        self.swarm.behaviour_mut().kad.add_address(&peer_id, addr.clone());
                    }
                    debug!(peer = %peer, "dialing a bootstrap peer or a node learned from its advert");
                    if let Err(err) = self.swarm.dial(DialOpts::peer_id(peer_id).addresses(addrs).build()) {
                        debug!(peer = %peer, error = %err, "dial not started");
                    }
                }
                Output::Disconnect { peer, reason } => {
                    warn!(peer = %peer, reason = %reason, "disconnecting peer");
                    let _ = self.swarm.disconnect_peer_id(peer.to_peer_id());
                }
                Output::Block { peer, reason } => {
                    warn!(peer = %peer, reason = %reason, "blocking peer");
                    let peer_id = peer.to_peer_id();
                    let behaviour = self.swarm.behaviour_mut();
                    behaviour.blocked.block_peer(peer_id);
                    // Not a route we hand to others, nor one Kademlia dials again.
                    behaviour.kad.remove_peer(&peer_id);
                    let _ = self.swarm.disconnect_peer_id(peer_id);
                    // Its connections are closing: not a peer to list any more.
                    self.peers.remove(&peer_id);
                }
                Output::Unblock { peer } => {
                    debug!(peer = %peer, "hold over; peer may connect again");
                    self.swarm.behaviour_mut().blocked.unblock_peer(peer.to_peer_id());
                }
                Output::Event(event) => {
                    log_event(&event);
                    revoked |= matches!(event, Event::Revoked { .. });
                }
            }
        }
        if revoked {
            self.publish_revocations();
        }
    }

    /// Tells the rest of the node which revocation lists the mesh holds now.
    fn publish_revocations(&self) {
        self.revocations.send_replace(Arc::new(self.mesh.directory().revocations().clone()));
    }

    /// A request failed for overrunning a budget of request bytes in flight (see `codec`).
    /// A peer that overran its connection's budget is cut off: the mesh disconnects it and
    /// holds it off.
    fn on_overrun(&mut self, peer: Option<PeerId>, overrun: Overrun) {
        match (overrun.scope, peer) {
            (Scope::Connection, Some(peer)) => {
                *self.request_overruns.entry("connection").or_default() += 1;
                warn!(peer = %peer, "peer cut off: {overrun}");
                match NodeId::from_peer_id(&peer) {
                    Ok(node) => self
                        .mesh
                        .handle(clock::now(), Input::PeerOverran { peer: node, reason: overrun.to_string() }),
                    Err(_) => {
                        let _ = self.swarm.disconnect_peer_id(peer);
                    }
                }
            }
            (Scope::Connection, None) => {
                *self.request_overruns.entry("connection").or_default() += 1;
                warn!("a connection overran its request budget and its peer is not known: {overrun}");
            }
            (Scope::Node, _) => {
                *self.request_overruns.entry("node").or_default() += 1;
                debug!("request refused: {overrun}");
            }
        }
    }

    fn answer(&mut self, query: Query) {
        match query {
            Query::Peers(reply) => {
                let _ = reply.send(self.peers_view());
            }
            Query::Capsules(reply) => {
                let _ = reply.send(self.capsules_view());
            }
            Query::Revoke(envelope, reply) => {
                let _ = reply.send(self.mesh.revoke(clock::now(), envelope));
            }
            Query::SetHosted(capsules, reply) => {
                info!(capsules = capsules.len(), "hosted capsules changed");
                self.mesh.handle(clock::now(), Input::SetHosted { capsules });
                let _ = reply.send(());
            }
            Query::Metrics(reply) => {
                let directory = self.mesh.directory();
                let _ = reply.send(NetMetrics {
                    peers_connected: self.peers.len(),
                    directory_nodes: directory.len(),
                    directory_capsules: directory.capsule_names().count(),
                    mesh: self.mesh.stats().clone(),
                    directory: directory.stats().clone(),
                    router: self.tasks.exchange().stats().clone(),
                    task_refusals: self.tasks.exchange().refusals().clone(),
                    artifact_served: self.artifacts.served_count,
                    artifact_busy: self.artifacts.busy_count,
                    artifact_bulk_served: self.artifacts.bulk_counts().0,
                    artifact_bulk_refused: self.artifacts.bulk_counts().1,
                    ping_failures: self.ping_failures,
                    version_refusals: self.version_refusals.clone(),
                    request_overruns: self.request_overruns.clone(),
                    agent_refusals: self.agents.refusals.clone(),
                    agent_delivered: self.agents.delivered,
                    revocation_lists: self.mesh.directory().revocations().len(),
                });
            }
        }
    }

    /// Whether the mesh holds `peer` off (`Output::Block`): nothing of it enters Kademlia.
    fn is_blocked(&self, peer: &PeerId) -> bool {
        self.swarm.behaviour().blocked.blocked_peers().contains(peer)
    }

    fn peers_view(&self) -> PeersView {
        let now = clock::now();
        let local = self.mesh.id();
        let admitted: BTreeMap<NodeId, bool> = self.mesh.peers().map(|(id, ok, _)| (id, ok)).collect();
        let mut views: BTreeMap<String, PeerView> = BTreeMap::new();
        for (peer_id, info) in &self.peers {
            let node = NodeId::from_peer_id(peer_id).ok();
            views.insert(
                peer_id.to_base58(),
                PeerView {
                    peer_id: peer_id.to_base58(),
                    connected: true,
                    admitted: node.and_then(|n| admitted.get(&n).copied()).unwrap_or(false),
                    addrs: info.addrs.iter().map(ToString::to_string).collect(),
                    rtt_ms: info.rtt.estimate().map(|d| d.as_secs_f64() * 1000.0),
                    last_seen_ms: Some(
                        u64::try_from(info.last_seen.elapsed().as_millis()).unwrap_or(u64::MAX),
                    ),
                    ..PeerView::default()
                },
            );
        }
        for record in self.mesh.directory().records(now) {
            let node = record.node();
            if node == local {
                continue;
            }
            let view = views.entry(node.to_string()).or_insert_with(|| PeerView {
                peer_id: node.to_string(),
                addrs: record.advert().addrs.clone(),
                last_seen_ms: Some(now.since(record.received_at())),
                ..PeerView::default()
            });
            view.advert_seq = Some(record.advert().seq);
            view.capsules = record.advert().capsules.len();
            view.artifacts = record.advert().artifacts.len();
        }
        for (node, until) in self.mesh.held() {
            let view = views
                .entry(node.to_string())
                .or_insert_with(|| PeerView { peer_id: node.to_string(), ..PeerView::default() });
            view.held_ms = Some(until.since(now));
        }
        PeersView { local_peer_id: local.to_string(), peers: views.into_values().collect() }
    }

    fn capsules_view(&self) -> CapsulesView {
        let now = clock::now();
        let directory = self.mesh.directory();
        let local = self.mesh.id();
        let capsules = directory
            .capsule_names()
            .map(|name| CapsuleView {
                name: name.to_owned(),
                providers: directory
                    .hosts(now, name)
                    .map(|(record, capsule)| ProviderView {
                        peer_id: record.node().to_string(),
                        local: record.node() == local,
                        version: capsule.version.clone(),
                        digest: capsule.digest.map(|d| d.to_string()),
                        advert_age_ms: now.since(record.advert().issued_at),
                        load: record.advert().load,
                    })
                    .collect(),
            })
            .collect();
        CapsulesView { capsules }
    }
}

fn log_event(event: &Event) {
    match event {
        Event::AdvertAccepted { node, seq, source } => {
            debug!(peer = %node, seq, source = ?source, "advert accepted")
        }
        Event::AdvertRefused { node, source, reason } if reason.is_misbehaviour() => {
            warn!(peer = %node, source = ?source, reason = %reason, "advert refused");
        }
        Event::AdvertRefused { node, source, reason } => {
            debug!(peer = %node, source = ?source, reason = %reason, "advert refused");
        }
        Event::AdvertExpired { node } => info!(peer = %node, "advert expired"),
        Event::AdvertEvicted { node, by } => {
            info!(peer = %node, by = %by, "advert evicted from the full directory")
        }
        Event::Departed { node, seq, witness, source } => {
            info!(peer = %node, seq, witness = %witness, source = ?source, "node departed")
        }
        Event::Published { seq } => debug!(seq, "advert published"),
        Event::Revoked { authority, seq, nodes, grants } => {
            let nodes: Vec<String> = nodes.iter().map(ToString::to_string).collect();
            warn!(authority = %authority, seq, grants, nodes = ?nodes, "revocation list taken");
        }
        Event::RevocationRefused { authority, from, reason } if reason.is_invalid() => {
            warn!(authority = %authority, from = ?from.map(|f| f.to_string()), reason = %reason, "revocation list refused");
        }
        Event::RevocationRefused { authority, from, reason } => {
            debug!(authority = %authority, from = ?from.map(|f| f.to_string()), reason = %reason, "revocation list refused");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slow first ping does not make a peer look far away once a normal one follows,
    /// and a lasting rise shows once the window has turned over.
    #[test]
    fn the_round_trip_estimate_is_the_least_recent_sample() {
        let ms = Duration::from_millis;
        let mut window = RttWindow::default();
        assert_eq!(window.estimate(), None);
        window.record(ms(11));
        assert_eq!(window.estimate(), Some(ms(11)));
        window.record(ms(2));
        window.record(ms(9));
        assert_eq!(window.estimate(), Some(ms(2)), "the spike and the queued ping are noise");
        for _ in 0..RTT_SAMPLES {
            window.record(ms(40));
        }
        assert_eq!(window.estimate(), Some(ms(40)), "a lasting rise replaces the old delay");
    }
}
