//! The mesh state machine: a node's view of the mesh and everything it decides about it.
//!
//! [`MeshNode`] owns the node's [`Directory`], publishes the node's own signed advert
//! (when what it hosts changes and on a refresh interval), judges adverts and departure
//! notices arriving by gossip (the driver relays only what it accepts), runs anti-entropy
//! with peers when they connect and periodically after, picks peers to dial, and in a
//! closed mesh disconnects peers that cannot show a valid node certificate.
//!
//! # Departures
//!
//! A peer whose connection closes is suspected: the node dials it again, and if it is not
//! back within [`MeshConfig::suspect_ms`] (and has published nothing newer), the node
//! signs a departure notice ([`crate::departure::Departure`]) and gossips it, and every
//! directory drops the peer's advert at once instead of at its TTL. A node that hears a
//! notice about itself refutes it by republishing. So a mesh learns of a crash in seconds whatever its
//! refresh interval, and a large mesh can refresh rarely: its steady traffic then no longer
//! grows with the square of its size.
//!
//! `murnode` drives it from a libp2p swarm (gossipsub, request-response `/murmur/sync/1`);
//! the simulator drives the same code over a modelled network.
//!
//! # Call order
//!
//! ```text
//! let mut node = MeshNode::new(key, config, now);
//! loop {
//!     node.handle(now, input);                   // a peer event, a message, a command, Tick
//!     while let Some(out) = node.poll_output() { carry it out }
//!     at node.poll_timeout(): node.handle(now, Input::Tick)
//! }
//! ```
//!
//! Every output is a command for the driver (`Publish`, `Report`, `SendSyncRequest`, …) or
//! an event for its logs and metrics (`Event`). The machine never blocks and holds nothing
//! unbounded: peers, dial backoffs and queued outputs each have a limit in [`crate::limits`].
//!
//! # Layout
//!
//! This file holds the types a driver sees, the constructors, and the dispatch of inputs
//! and timers. What the machine decides lives beside it, one seam a file, each an
//! `impl MeshNode` block over the same state: `publishing` (the node's own advert),
//! `gossip` (verdicts on gossiped messages), `anti_entropy` (sync sessions with peers),
//! `departures` (suspicion, departure notices, refutation), `dialling` (bootstrap, filling
//! the peer target, redialling departed nodes) and `admission` (who may stay in a closed
//! mesh).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::advert::{Advert, HostedCapsule};
use crate::digest::Digest;
use crate::directory::{
    Directory, DirectoryBase, DirectoryConfig, Output as DirectoryOutput, Refusal, Source,
};
use crate::identity::{NodeId, SecretKey};
use crate::limits::{MESH_OUTPUTS_MAX, MESH_PEERS_MAX};
use crate::signed::Envelope;
use crate::sync::{Buckets, SyncRequest, SyncResponse};
use crate::time::Millis;
use crate::verify::Verifier;

mod admission;
mod anti_entropy;
mod departures;
mod dialling;
mod gossip;
mod publishing;
mod revoking;

pub use admission::REFUSED_HOLD_MS;
pub use anti_entropy::SYNCS_IN_FLIGHT_MAX;
pub use departures::REFUTE_INTERVAL_MS;
pub use dialling::{
    BOOTSTRAP_RETRY_MAX_MS, BOOTSTRAP_RETRY_MS, BOOTSTRAP_STABLE_MS, DIAL_CHECK_INTERVAL_MS,
    RECONNECT_INTERVAL_MS, RECONNECT_WINDOW_MS,
};
pub use publishing::ANNOUNCE_DELAY_MS;

use departures::Suspect;
use dialling::{Bootstrap, Departed, dial_salt};

/// The gossipsub topic adverts travel on.
pub const ADVERT_TOPIC: &str = "murmur/adverts/1";

/// The gossipsub topic revocation lists travel on (wire 1.2: older nodes do not subscribe,
/// so they are never sent a document they cannot read).
pub const REVOCATION_TOPIC: &str = "murmur/revocations/1";

/// How a node takes part in the mesh.
#[derive(Clone, Debug)]
pub struct MeshConfig {
    /// Republish our advert this often even when nothing changed.
    pub refresh_ms: u64,
    /// TTL written into our adverts.
    pub ttl_ms: u64,
    /// Run anti-entropy with one connected peer (round robin) this often, on top of the
    /// exchange every new connection starts with; heals what gossip missed.
    pub sync_interval_ms: u64,
    /// Dial nodes learned from adverts until this many peers are connected.
    pub peers_target: usize,
    /// Wait this long before dialling the same node again.
    pub dial_backoff_ms: u64,
    /// Closed mesh: a peer that has not shown a valid certificate this long after
    /// connecting is disconnected.
    pub admission_timeout_ms: u64,
    /// A peer whose connection closed and that is not back this long after (plus up to
    /// half as long again, fixed per node and peer, so the peers of a crashed node do not
    /// all declare it at once), and has published nothing newer, is declared departed with a
    /// departure notice. 0: never declare (departed nodes then leave directories only at
    /// their TTL).
    pub suspect_ms: u64,
    /// Announce early: after the first peer connects, republish our advert as soon as a
    /// peer subscribes to the advert topic, as well as [`ANNOUNCE_DELAY_MS`] later. A new
    /// node is known mesh-wide within the propagation time instead of a second, at the cost
    /// of one more flood per node start (see [`ANNOUNCE_DELAY_MS`]).
    pub announce_early: bool,
    /// How the directory judges adverts (including open or closed admission).
    pub directory: DirectoryConfig,
}

impl Default for MeshConfig {
    fn default() -> Self {
        Self {
            refresh_ms: 30_000,
            ttl_ms: 90_000,
            sync_interval_ms: 60_000,
            peers_target: 16,
            dial_backoff_ms: 30_000,
            admission_timeout_ms: 15_000,
            suspect_ms: 10_000,
            announce_early: false,
            directory: DirectoryConfig::default(),
        }
    }
}

/// Where a resumed node stands ([`MeshNode::resume`]): what its latest advert says, whom
/// it is connected to, and when it next republishes.
#[derive(Clone, Debug, Default)]
pub struct Resume {
    pub advertised: Advertised,
    pub peers: Vec<NodeId>,
    pub refresh_at: Millis,
}

/// What the driver tells the mesh.
#[derive(Clone, Debug)]
pub enum Input {
    /// A connection to `peer` opened (the first one, if several).
    PeerConnected { peer: NodeId },
    /// The last connection to `peer` closed.
    PeerDisconnected { peer: NodeId },
    /// `peer` told gossipsub it subscribes to [`ADVERT_TOPIC`]: gossip can now carry our
    /// adverts to it (a publication before that reaches no one).
    PeerSubscribed { peer: NodeId },
    /// A gossip message on [`ADVERT_TOPIC`] or [`REVOCATION_TOPIC`] arrived from `from`; the driver must later
    /// receive a [`Output::Report`] with the same `token`.
    GossipReceived { from: NodeId, token: u64, bytes: Vec<u8> },
    /// As [`Input::GossipReceived`], for a driver that already decoded the envelope (the
    /// simulator decodes each message once and delivers it to many nodes); `len` is the
    /// message's size in bytes, for the counters.
    GossipDecoded { from: NodeId, token: u64, envelope: Envelope, len: usize },
    /// `from` asked what we hold that it lacks; answer with the same `token`.
    SyncRequested { from: NodeId, token: u64, request: SyncRequest },
    /// `from` answered our sync request.
    SyncAnswered { from: NodeId, response: SyncResponse },
    /// Exchange with `peer` again (at once, or after the exchange in flight): the driver
    /// sent the last request without what the peer's wire version may read, before its
    /// identify said (a sync request leaves when a connection opens).
    Resync { peer: NodeId },
    /// Our sync request to `peer` failed (timeout, refused, disconnected).
    SyncFailed { peer: NodeId },
    /// `peer` sent more request bytes at once than a connection may (the driver's
    /// per-connection budget, `reason` names it): the mesh cuts it off and holds it off for
    /// [`REFUSED_HOLD_MS`], open mesh or closed.
    PeerOverran { peer: NodeId, reason: String },
    /// The capsules this node hosts changed.
    SetHosted { capsules: Vec<HostedCapsule> },
    /// The agents (brains) this node runs changed.
    SetAgents { agents: Vec<String> },
    /// The models this node's agents serve changed.
    SetModels { models: Vec<String> },
    /// The addresses this node can be reached at changed.
    SetAddrs { addrs: Vec<String> },
    /// The artifacts this node serves changed.
    SetArtifacts { artifacts: Vec<Digest> },
    /// This node's load changed (thousandths of capacity).
    SetLoad { load: u16 },
    /// This node's closed-mesh certificate (an envelope of a [`crate::NodeCert`]).
    SetCert { cert: Option<Envelope> },
    /// A revocation list (an envelope of a [`crate::revocation::Revocation`]) from this
    /// node's operator or its store: taken if valid, trusted and new, then gossiped.
    Revoke { envelope: Envelope },
    /// The peers to dial at start and again, with a growing wait, whenever they are not
    /// connected (see [`BOOTSTRAP_RETRY_MS`]). Entries for one peer are merged; at most
    /// [`crate::limits::BOOTSTRAP_PEERS_MAX`] peers with
    /// [`crate::limits::BOOTSTRAP_ADDRS_MAX`] addresses each are kept.
    SetBootstrap { peers: Vec<(NodeId, Vec<String>)> },
    /// Time passed.
    Tick,
}

/// Whether the driver should relay a gossip message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Valid and new (or identical to what we hold): relay it.
    Accept,
    /// Not useful (late or duplicate): drop it quietly.
    Ignore,
    /// Invalid: drop it and penalise the peer that sent it.
    Reject,
}

/// What the mesh asks the driver to do, or tells it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum Output {
    /// Publish this envelope (an advert or a departure notice) on [`ADVERT_TOPIC`].
    Publish { bytes: Vec<u8> },
    /// Publish this revocation list on [`REVOCATION_TOPIC`].
    PublishRevocation { bytes: Vec<u8> },
    /// The verdict on the gossip message with `token`.
    Report { token: u64, verdict: Verdict },
    /// Send a sync request to `peer`.
    SendSyncRequest { peer: NodeId, request: SyncRequest },
    /// Answer the sync request with `token`.
    SendSyncResponse { token: u64, response: SyncResponse },
    /// Connect to `peer` at one of `addrs`.
    Dial { peer: NodeId, addrs: Vec<String> },
    /// Close every connection to `peer`.
    Disconnect { peer: NodeId, reason: String },
    /// Close every connection to `peer` and refuse new ones, both ways, until
    /// [`Output::Unblock`] names it (see [`REFUSED_HOLD_MS`]). A driver without a block list
    /// may treat this as [`Output::Disconnect`]: the mesh closes a held peer's connections
    /// itself.
    Block { peer: NodeId, reason: String },
    /// `peer` may connect again.
    Unblock { peer: NodeId },
    /// Something the driver may log or count.
    Event(Event),
}

/// Facts about the directory, for logs and metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// An advert was accepted.
    AdvertAccepted { node: NodeId, seq: u64, source: Source },
    /// An advert was refused.
    AdvertRefused { node: NodeId, source: Source, reason: Refusal },
    /// A node's advert expired.
    AdvertExpired { node: NodeId },
    /// A full directory dropped `node`'s advert, refreshed least recently, for `by`'s.
    AdvertEvicted { node: NodeId, by: NodeId },
    /// A departure notice from `witness` dropped `node`'s advert `seq` (`source` is
    /// [`Source::Local`] when this node is the witness).
    Departed { node: NodeId, seq: u64, witness: NodeId, source: Source },
    /// We published our own advert with this sequence number.
    Published { seq: u64 },
    /// A revocation list was taken: list `seq` of `authority`, newly revoking `nodes` and
    /// revoking `grants` grants in all. The driver stores the lists held
    /// ([`Directory::revocations`]).
    Revoked { authority: crate::identity::PublicKey, seq: u64, nodes: Vec<NodeId>, grants: usize },
    /// A revocation list was refused (`from`: the peer that sent it, `None` for this node's
    /// own operator).
    RevocationRefused {
        authority: crate::identity::PublicKey,
        from: Option<NodeId>,
        reason: crate::revocation::RevocationRefusal,
    },
}

/// Counters for metrics (the directory keeps its own, see [`MeshNode::directory`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MeshStats {
    pub gossip_in_messages: u64,
    pub gossip_in_bytes: u64,
    pub gossip_out_messages: u64,
    pub gossip_out_bytes: u64,
    pub gossip_accepted: u64,
    pub gossip_ignored: u64,
    pub gossip_rejected: u64,
    pub syncs_sent: u64,
    pub syncs_answered: u64,
    /// Syncs we started with a summary; those its answer settled (nothing differed, or
    /// the adverts it carried left us nothing to learn); and those that went on to the
    /// digest of the buckets that still differed.
    pub sync_summaries: u64,
    pub sync_summaries_settled: u64,
    pub sync_summaries_scoped: u64,
    pub peers_refused: u64,
    /// Peers cut off and held off for overrunning a connection's request budget.
    pub peers_cut_off: u64,
    pub outputs_dropped: u64,
    /// Revocation lists taken, and refused (old copies included).
    pub revocations_taken: u64,
    pub revocations_refused: u64,
    /// Departure notices this node signed as a witness.
    pub departures_declared: u64,
    /// Departure notices about this node's current advert that brought its next
    /// republication forward (refuted them).
    pub refutations: u64,
}

#[derive(Clone, Debug)]
struct Peer {
    connected_at: Millis,
    admitted: bool,
    /// Our sync request to this peer is in flight.
    syncing: bool,
    /// A sync with this peer is due but waits for a free slot.
    sync_wanted: bool,
    /// The bucketing of our summary in flight to this peer, if the request is one.
    summary: Option<Buckets>,
    /// Its last answer said `more`: we are catching up, so the next request sends the
    /// digest (a summary would only find most buckets differing).
    catching_up: bool,
}

impl Peer {
    /// A peer connected at `now`, with no exchange under way.
    const fn connected(now: Millis, admitted: bool) -> Self {
        Self {
            connected_at: now,
            admitted,
            syncing: false,
            sync_wanted: false,
            summary: None,
            catching_up: false,
        }
    }
}

/// What a node advertises about itself, and the sequence number of its latest advert.
#[derive(Clone, Debug, Default)]
pub struct Advertised {
    pub capsules: Vec<HostedCapsule>,
    pub agents: Vec<String>,
    pub models: Vec<String>,
    pub addrs: Vec<String>,
    pub artifacts: Vec<Digest>,
    pub load: u16,
    pub cert: Option<Envelope>,
    pub seq: u64,
}

impl Advertised {
    /// The node's next advert, issued at `now`: sequence number `max(seq + 1, now)`, so it
    /// is newer than any before it, across restarts too.
    #[must_use]
    pub fn next(&self, now: Millis, ttl_ms: u64) -> Advert {
        let mut advert = Advert::new((self.seq + 1).max(now.0), now, ttl_ms);
        advert.capsules.clone_from(&self.capsules);
        advert.agents.clone_from(&self.agents);
        advert.models.clone_from(&self.models);
        advert.addrs.clone_from(&self.addrs);
        advert.artifacts.clone_from(&self.artifacts);
        advert.load = self.load;
        advert.cert.clone_from(&self.cert);
        advert
    }
}

/// One node's mesh state machine. See the module docs for the call order.
#[derive(Debug)]
pub struct MeshNode {
    key: SecretKey,
    id: NodeId,
    config: MeshConfig,
    directory: Directory,
    local: Advertised,
    next_refresh: Millis,
    /// With [`MeshConfig::announce_early`]: our first peer connected, and we republish when
    /// the first subscription arrives (gossip can carry the advert to the peers connected
    /// by then)...
    announce_early: bool,
    /// ...and again at this time, [`ANNOUNCE_DELAY_MS`] after the connection, for the nodes
    /// that connected since and learned of us only by anti-entropy.
    announce_at: Option<Millis>,
    next_sync: Millis,
    sync_cursor: Option<NodeId>,
    peers: BTreeMap<NodeId, Peer>,
    dialed: BTreeMap<NodeId, Millis>,
    next_dial_check: Millis,
    /// Bootstrap peers, their addresses, and when to dial each next.
    bootstrap: BTreeMap<NodeId, Bootstrap>,
    /// A secret of this node's that orders its dial candidates (see
    /// [`dialling::dial_rank`]).
    dial_salt: u64,
    /// Peers refused admission, and when their hold ends (see [`REFUSED_HOLD_MS`]).
    held: BTreeMap<NodeId, Millis>,
    /// Peers whose connection closed: the advert seq held then, and when to declare them
    /// departed (see [`MeshConfig::suspect_ms`]).
    suspects: BTreeMap<NodeId, Suspect>,
    /// Nodes that departed, with the addresses their last advert listed and when, for
    /// reconnecting after a partition (see [`RECONNECT_INTERVAL_MS`]).
    departed: BTreeMap<NodeId, Departed>,
    next_reconnect: Millis,
    /// The [`dialling::dial_rank`] of the departed node dialled last: the next is the one
    /// after it.
    reconnect_cursor: u64,
    /// When we last published our advert.
    last_published: Option<Millis>,
    outputs: VecDeque<Output>,
    stats: MeshStats,
}

impl MeshNode {
    /// A node that signs with `key`; its first advert goes out at the first `handle`.
    #[must_use]
    pub fn new(key: SecretKey, config: MeshConfig, now: Millis) -> Self {
        let directory = Directory::new(config.directory.clone());
        Self::with_directory(key, config, directory, now)
    }

    /// Like [`MeshNode::new`] with a shared signature verifier (the simulator's cache).
    #[must_use]
    pub fn with_verifier(
        key: SecretKey,
        config: MeshConfig,
        verifier: Arc<dyn Verifier>,
        now: Millis,
    ) -> Self {
        let directory = Directory::with_verifier(config.directory.clone(), verifier);
        Self::with_directory(key, config, directory, now)
    }

    /// A node resumed in a mesh's steady state, for simulating a large mesh without first
    /// replaying its formation: its directory starts from `base` (shared with the other
    /// nodes, and holding this node's advert `state.seq`), and it has been connected to
    /// `state.peers` (admitted, synced) since `now`. It republishes at `state.refresh_at`.
    #[must_use]
    pub fn resume(
        key: SecretKey,
        config: MeshConfig,
        verifier: Arc<dyn Verifier>,
        base: Arc<DirectoryBase>,
        state: Resume,
        now: Millis,
    ) -> Self {
        let directory = Directory::with_base(config.directory.clone(), verifier, base);
        let mut node = Self::with_directory(key, config, directory, now);
        node.local = state.advertised;
        node.next_refresh = state.refresh_at;
        node.last_published = Some(now);
        for peer in state.peers.into_iter().filter(|peer| *peer != node.id).take(MESH_PEERS_MAX) {
            node.peers.insert(peer, Peer::connected(now, true));
        }
        node
    }

    fn with_directory(key: SecretKey, config: MeshConfig, directory: Directory, now: Millis) -> Self {
        let next_sync = now.plus(config.sync_interval_ms);
        let dial_salt = dial_salt(&key);
        Self {
            id: key.node_id(),
            key,
            config,
            directory,
            local: Advertised::default(),
            next_refresh: now,
            announce_early: false,
            announce_at: None,
            next_sync,
            sync_cursor: None,
            peers: BTreeMap::new(),
            dialed: BTreeMap::new(),
            next_dial_check: now,
            bootstrap: BTreeMap::new(),
            dial_salt,
            held: BTreeMap::new(),
            suspects: BTreeMap::new(),
            departed: BTreeMap::new(),
            // Each node on its own phase, so that after a heal the mesh's reconnects spread
            // over the interval.
            next_reconnect: now.plus(RECONNECT_INTERVAL_MS + dial_salt % RECONNECT_INTERVAL_MS),
            reconnect_cursor: 0,
            last_published: None,
            outputs: VecDeque::new(),
            stats: MeshStats::default(),
        }
    }

    /// Feeds one input at `now`.
    pub fn handle(&mut self, now: Millis, input: Input) {
        match input {
            Input::PeerConnected { peer } => self.on_connected(now, peer),
            Input::PeerDisconnected { peer } => self.on_disconnected(now, peer),
            Input::PeerSubscribed { peer } => self.on_subscribed(now, peer),
            Input::GossipReceived { from, token, bytes } => {
                let envelope = Envelope::decode(&bytes).ok();
                self.on_gossip(now, from, token, envelope, bytes.len());
            }
            Input::GossipDecoded { from, token, envelope, len } => {
                self.on_gossip(now, from, token, Some(envelope), len)
            }
            Input::SyncRequested { from, token, request } => self.on_sync_request(now, from, token, request),
            Input::SyncAnswered { from, response } => self.on_sync_response(now, from, response),
            Input::SyncFailed { peer } => self.on_sync_failed(peer),
            Input::Resync { peer } => match self.peers.get_mut(&peer) {
                // The exchange in flight left without it: the next one follows the answer.
                Some(state) if state.syncing => state.sync_wanted = true,
                Some(_) => self.start_sync(peer),
                None => {}
            },
            // Its other streams overran too before the cut took effect: one cut.
            Input::PeerOverran { peer, .. } if self.held.get(&peer).is_some_and(|until| *until > now) => {}
            Input::PeerOverran { peer, reason } => {
                self.stats.peers_cut_off += 1;
                self.hold_off(now, peer, format!("cut off: {reason}"));
            }
            Input::SetHosted { capsules } => self.update_local(now, |l| l.capsules = capsules),
            Input::SetAgents { agents } => self.update_local(now, |l| l.agents = agents),
            Input::SetModels { models } => self.update_local(now, |l| l.models = models),
            Input::SetAddrs { addrs } => self.update_local(now, |l| l.addrs = addrs),
            Input::SetArtifacts { artifacts } => self.update_local(now, |l| l.artifacts = artifacts),
            // Load rides on the next refresh: republishing on every change would turn task
            // traffic into advert traffic.
            Input::SetLoad { load } => self.local.load = load,
            Input::SetCert { cert } => self.update_local(now, |l| l.cert = cert),
            Input::Revoke { envelope } => {
                let _ = self.revoke(now, envelope);
            }
            Input::SetBootstrap { peers } => self.set_bootstrap(now, peers),
            Input::Tick => {}
        }
        self.on_time(now);
        self.drain_directory(now);
    }

    /// The next queued output, oldest first.
    pub fn poll_output(&mut self) -> Option<Output> {
        crate::limits::pop_output(&mut self.outputs)
    }

    /// When the mesh next needs [`Input::Tick`].
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Millis> {
        let mut next = self.next_refresh.min(self.next_sync);
        let deadlines = [
            self.directory.poll_timeout(),
            self.admission_timeout(),
            self.dial_timeout(),
            self.departure_timeout(),
        ];
        for at in deadlines.into_iter().flatten() {
            next = next.min(at);
        }
        Some(next)
    }

    /// This node's identity.
    #[must_use]
    pub const fn id(&self) -> NodeId {
        self.id
    }

    /// The directory (read-only): who hosts what.
    #[must_use]
    pub const fn directory(&self) -> &Directory {
        &self.directory
    }

    /// Counters for metrics.
    #[must_use]
    pub const fn stats(&self) -> &MeshStats {
        &self.stats
    }

    /// Connected peers, ordered, with whether each is admitted (always true when open).
    pub fn peers(&self) -> impl Iterator<Item = (NodeId, bool, Millis)> + '_ {
        self.peers.iter().map(|(id, p)| (*id, p.admitted, p.connected_at))
    }

    /// Peers refused admission to this closed mesh and held off, with when each hold ends
    /// (see [`REFUSED_HOLD_MS`]), ordered by node.
    pub fn held(&self) -> impl Iterator<Item = (NodeId, Millis)> + '_ {
        self.held.iter().map(|(id, until)| (*id, *until))
    }

    /// Whom to ask for artifact `digest` (any artifact at all when `None`): the nodes whose
    /// live advert lists it, never this node, connected peers first (an ask needs no dial),
    /// each group in node order.
    #[must_use]
    pub fn artifact_providers(&self, now: Millis, digest: Option<&Digest>) -> Vec<NodeId> {
        let (mut connected, others): (Vec<NodeId>, Vec<NodeId>) = self
            .directory
            .artifact_holders(now, digest)
            .filter(|node| *node != self.id)
            .partition(|node| self.peers.contains_key(node));
        connected.extend(others);
        connected
    }

    /// The sequence number of our latest advert.
    #[must_use]
    pub const fn local_seq(&self) -> u64 {
        self.local.seq
    }

    fn on_connected(&mut self, now: Millis, peer: NodeId) {
        if peer == self.id || self.peers.contains_key(&peer) || self.turned_away(now, peer) {
            return;
        }
        if self.peers.len() >= MESH_PEERS_MAX {
            self.push(Output::Disconnect { peer, reason: format!("more than {MESH_PEERS_MAX} peers") });
            return;
        }
        let admitted = !self.closed();
        if self.peers.is_empty() {
            self.announce_soon(now);
        }
        self.suspects.remove(&peer);
        if self.expel_if_revoked(now, peer) {
            return;
        }
        self.directory.anchor(peer, true);
        self.peers.insert(peer, Peer::connected(now, admitted));
        self.start_sync(peer);
    }

    /// The last connection to `peer` closed: a bootstrap peer's next dial is rescheduled,
    /// the peer is suspected (see [`MeshConfig::suspect_ms`]), and a sync that waited for
    /// a slot may start.
    fn on_disconnected(&mut self, now: Millis, peer: NodeId) {
        if let Some(lost) = self.peers.remove(&peer) {
            self.directory.anchor(peer, false);
            self.rearm_bootstrap(now, &peer, lost.connected_at);
            self.suspect(now, peer, false);
        }
        self.start_waiting_sync();
    }

    /// Everything due by `now`, in a fixed order: our advert, expiries, admission, holds,
    /// departures, the periodic sync, then dials.
    fn on_time(&mut self, now: Millis) {
        self.maybe_publish(now);
        self.directory.handle(now, crate::directory::Input::Tick);
        if self.closed() {
            self.enforce_admission(now);
        }
        self.release_held(now);
        self.declare_departures(now);
        self.maybe_sync(now);
        self.maybe_bootstrap(now);
        self.maybe_dial(now);
        self.maybe_reconnect(now);
    }

    /// Turns what the directory reports into events, and keeps the list of departed nodes
    /// to redial in step with it.
    fn drain_directory(&mut self, now: Millis) {
        while let Some(output) = self.directory.poll_output() {
            let event = match output {
                DirectoryOutput::Accepted { node, seq, source } => {
                    self.departed.remove(&node);
                    Event::AdvertAccepted { node, seq, source }
                }
                DirectoryOutput::Refused { node, source, reason } => {
                    Event::AdvertRefused { node, source, reason }
                }
                DirectoryOutput::Expired { node } => Event::AdvertExpired { node },
                DirectoryOutput::Evicted { node, by } => Event::AdvertEvicted { node, by },
                // Told by the mesh itself (`Event::Revoked`), peers expelled there.
                DirectoryOutput::Revoked { .. } => continue,
                DirectoryOutput::Departed { node, seq, witness, source, addrs } => {
                    self.remember_departed(now, node, addrs);
                    Event::Departed { node, seq, witness, source }
                }
            };
            self.push(Output::Event(event));
        }
    }

    fn push(&mut self, output: Output) {
        if self.outputs.len() >= MESH_OUTPUTS_MAX {
            self.outputs.pop_front();
            self.stats.outputs_dropped += 1;
        }
        self.outputs.push_back(output);
    }
}

#[cfg(test)]
mod tests;
