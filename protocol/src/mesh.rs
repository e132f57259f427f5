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
//! signs a departure notice ([`crate::gone::Gone`]) and gossips it, and every directory
//! drops the peer's advert at once instead of at its TTL. A node that hears a notice about
//! itself refutes it by republishing. So a mesh learns of a crash in seconds whatever its
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

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use crate::advert::{Advert, HostedCapsule};
use crate::cert::verify_cert_with;
use crate::digest::Digest;
use crate::directory::{
    Admission, Directory, DirectoryBase, DirectoryConfig, DirectoryDigest, Output as DirectoryOutput,
    Refusal, Source,
};
use crate::gone::Gone;
use crate::identity::{NodeId, SecretKey};
use crate::limits::{
    BOOTSTRAP_ADDRS_MAX, BOOTSTRAP_PEERS_MAX, DEPARTED_NODES_MAX, DIAL_BACKOFF_ENTRIES_MAX,
    ENVELOPE_OVERHEAD_MAX, MESH_OUTPUTS_MAX, MESH_PEERS_MAX, REFUSED_PEERS_MAX, SYNC_ADVERTS_MAX,
    SYNC_INLINE_ADVERTS_MAX, SYNC_NOTICES_MAX, SYNC_RESPONSE_BYTES_MAX, SYNC_SUMMARY_NODES_MIN,
};
use crate::signed::{DocKind, Envelope, Signed};
use crate::sync::{Buckets, Scope, SyncRequest, SyncResponse};
use crate::time::Millis;
use crate::verify::Verifier;

/// The gossipsub topic adverts travel on.
pub const ADVERT_TOPIC: &str = "murmur/adverts/1";

/// After its first peer connects, a node republishes its advert this much later. An advert
/// published with no peers reaches the mesh only through anti-entropy with direct peers,
/// which do not re-gossip it; republishing once gossip can carry it tells every node within
/// a second instead of at the next refresh. The delay lets gossipsub exchange subscriptions
/// first (publishing before that fails with no subscribed peers). Found by the simulator.
pub const ANNOUNCE_DELAY_MS: u64 = 1000;

/// Anti-entropy requests in flight at once. A node that connects to many peers at once (a
/// newcomer dialling its bootstrap list) would otherwise download the whole directory from
/// each of them in parallel; with one at a time, the next request carries the digest the
/// previous answer filled in, and its answer is nearly empty. Found by the simulator.
pub const SYNCS_IN_FLIGHT_MAX: usize = 1;

/// How often, at most, the mesh looks for nodes to dial while below its peer target: often
/// enough to fill gaps within a second, rarely enough that scanning a large directory stays
/// a negligible cost.
pub const DIAL_CHECK_INTERVAL_MS: u64 = 1000;

/// A bootstrap peer that is not connected is dialled again after this long, then after
/// twice as long each time up to [`BOOTSTRAP_RETRY_MAX_MS`] (plus a little per-node
/// jitter): one that was down or unreachable when this node started is found once it is
/// up, whatever order the nodes started in.
pub const BOOTSTRAP_RETRY_MS: u64 = 5_000;
/// The longest wait between dials of a bootstrap peer that stays unreachable.
pub const BOOTSTRAP_RETRY_MAX_MS: u64 = 300_000;
/// A connection to a bootstrap peer that lasted this long resets its wait to
/// [`BOOTSTRAP_RETRY_MS`] (one that a peer keeps refusing, say for a missing certificate,
/// does not).
pub const BOOTSTRAP_STABLE_MS: u64 = 60_000;

/// A node dials one node that departed (a notice dropped its advert, see
/// [`MeshConfig::suspect_ms`]) this often, in an order of its own, for
/// [`RECONNECT_WINDOW_MS`] after the departure, at the addresses its last advert listed.
/// After a partition each side has declared the other gone and nothing else would dial
/// across once it heals unless a bootstrap peer happens to sit on the other side; with every
/// node trying one departed node per interval, the first connection across comes within a
/// fraction of a second in a large mesh, and it carries the notices to the nodes they name,
/// which refute them. A node that crashed for good costs each node one failed dial per
/// interval at most. (Serf's reconnect does the same, every 30 s for a day.)
pub const RECONNECT_INTERVAL_MS: u64 = 30_000;
/// How long after its departure a node is still dialled again.
pub const RECONNECT_WINDOW_MS: u64 = 24 * 60 * 60 * 1000;

/// A peer refused admission to a closed mesh is held off this long: the driver blocks its
/// connections ([`Output::Block`]) and the mesh closes any that still arrive. Without the
/// hold, whatever dials it again (its bootstrap retries, either side's Kademlia) would bring
/// it back as a connected peer until its next refused sync. A node that has since been
/// certified gets in once the hold ends.
pub const REFUSED_HOLD_MS: u64 = 60_000;

/// A node refutes departure notices about itself by republishing, at most this often: a
/// stream of false notices costs the mesh one advert a second, not one per notice.
pub const REFUTE_INTERVAL_MS: u64 = 1_000;

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
    /// all declare it at once), and has published nothing newer, is declared gone with a
    /// departure notice. 0: never declare (departed nodes then leave directories only at
    /// their TTL).
    pub suspect_ms: u64,
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
    /// A gossip message on [`ADVERT_TOPIC`] arrived from `from`; the driver must later
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
    /// Our sync request to `peer` failed (timeout, refused, disconnected).
    SyncFailed { peer: NodeId },
    /// The capsules this node hosts changed.
    SetHosted { capsules: Vec<HostedCapsule> },
    /// The addresses this node can be reached at changed.
    SetAddrs { addrs: Vec<String> },
    /// The artifacts this node serves changed.
    SetArtifacts { artifacts: Vec<Digest> },
    /// This node's load changed (thousandths of capacity).
    SetLoad { load: u16 },
    /// This node's closed-mesh certificate (an envelope of a [`crate::NodeCert`]).
    SetCert { cert: Option<Envelope> },
    /// The peers to dial at start and again, with a growing wait, whenever they are not
    /// connected (see [`BOOTSTRAP_RETRY_MS`]). Entries for one peer are merged; at most
    /// [`BOOTSTRAP_PEERS_MAX`] peers with [`BOOTSTRAP_ADDRS_MAX`] addresses each are kept.
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
    /// A departure notice from `witness` dropped `node`'s advert `seq` (`source` is
    /// [`Source::Local`] when this node is the witness).
    Departed { node: NodeId, seq: u64, witness: NodeId, source: Source },
    /// We published our own advert with this sequence number.
    Published { seq: u64 },
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
    pub outputs_dropped: u64,
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
    next_sync: Millis,
    sync_cursor: Option<NodeId>,
    peers: BTreeMap<NodeId, Peer>,
    dialed: BTreeMap<NodeId, Millis>,
    next_dial_check: Millis,
    /// Bootstrap peers, their addresses, and when to dial each next.
    bootstrap: BTreeMap<NodeId, Bootstrap>,
    /// A secret of this node's that orders its dial candidates (see [`dial_rank`]).
    dial_salt: u64,
    /// Peers refused admission, and when their hold ends (see [`REFUSED_HOLD_MS`]).
    held: BTreeMap<NodeId, Millis>,
    /// Peers whose connection closed: the advert seq held then, and when to declare them
    /// gone (see [`MeshConfig::suspect_ms`]).
    suspects: BTreeMap<NodeId, Suspect>,
    /// Nodes that departed, with the addresses their last advert listed and when, for
    /// reconnecting after a partition (see [`RECONNECT_INTERVAL_MS`]).
    departed: BTreeMap<NodeId, Departed>,
    next_reconnect: Millis,
    /// The [`dial_rank`] of the departed node dialled last: the next is the one after it.
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
            Input::PeerDisconnected { peer } => {
                if let Some(gone) = self.peers.remove(&peer) {
                    if let Some(entry) = self.bootstrap.get_mut(&peer) {
                        if now.since(gone.connected_at) >= BOOTSTRAP_STABLE_MS {
                            entry.wait_ms = BOOTSTRAP_RETRY_MS;
                        }
                        entry.next_at = now.plus(entry.wait_ms);
                    }
                    self.suspect(now, peer, false);
                }
                self.start_waiting_sync();
            }
            Input::GossipReceived { from, token, bytes } => {
                let envelope = Envelope::decode(&bytes).ok();
                self.on_gossip(now, from, token, envelope, bytes.len());
            }
            Input::GossipDecoded { from, token, envelope, len } => {
                self.on_gossip(now, from, token, Some(envelope), len)
            }
            Input::SyncRequested { from, token, request } => self.on_sync_request(now, from, token, request),
            Input::SyncAnswered { from, response } => self.on_sync_response(now, from, response),
            Input::SyncFailed { peer } => {
                if let Some(state) = self.peers.get_mut(&peer) {
                    state.syncing = false;
                }
                self.start_waiting_sync();
            }
            Input::SetHosted { capsules } => self.update_local(now, |l| l.capsules = capsules),
            Input::SetAddrs { addrs } => self.update_local(now, |l| l.addrs = addrs),
            Input::SetArtifacts { artifacts } => self.update_local(now, |l| l.artifacts = artifacts),
            // Load rides on the next refresh: republishing on every change would turn task
            // traffic into advert traffic.
            Input::SetLoad { load } => self.local.load = load,
            Input::SetCert { cert } => self.update_local(now, |l| l.cert = cert),
            Input::SetBootstrap { peers } => self.set_bootstrap(now, peers),
            Input::Tick => {}
        }
        self.on_time(now);
        self.drain_directory(now);
    }

    /// The next queued output, oldest first.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// When the mesh next needs [`Input::Tick`].
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Millis> {
        let mut next = self.next_refresh.min(self.next_sync);
        if let Some(at) = self.directory.poll_timeout() {
            next = next.min(at);
        }
        if let Some(deadline) = self.admission_deadline() {
            next = next.min(deadline);
        }
        if self.peers.len() < self.config.peers_target {
            next = next.min(self.next_dial_check);
        }
        for (peer, entry) in &self.bootstrap {
            if !self.peers.contains_key(peer) {
                next = next.min(entry.next_at);
            }
        }
        if let Some(until) = self.held.values().min() {
            next = next.min(*until);
        }
        if let Some(deadline) = self.suspects.values().map(|s| s.deadline).min() {
            next = next.min(deadline);
        }
        if !self.departed.is_empty() {
            next = next.min(self.next_reconnect);
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

    fn closed(&self) -> bool {
        matches!(self.config.directory.admission, Admission::Closed { .. })
    }

    fn on_connected(&mut self, now: Millis, peer: NodeId) {
        if peer == self.id || self.peers.contains_key(&peer) {
            return;
        }
        if let Some(until) = self.held.get(&peer).filter(|until| **until > now) {
            let wait = until.since(now);
            self.push(Output::Disconnect {
                peer,
                reason: format!("refused admission to this closed mesh; held off for {wait} ms more"),
            });
            return;
        }
        if self.peers.len() >= MESH_PEERS_MAX {
            self.push(Output::Disconnect { peer, reason: format!("more than {MESH_PEERS_MAX} peers") });
            return;
        }
        let admitted = !self.closed();
        if self.peers.is_empty() {
            self.next_refresh = self.next_refresh.min(now.plus(ANNOUNCE_DELAY_MS));
        }
        self.suspects.remove(&peer);
        self.peers.insert(peer, Peer::connected(now, admitted));
        self.start_sync(peer);
    }

    fn start_sync(&mut self, peer: NodeId) {
        let in_flight = self.peers.values().filter(|p| p.syncing).count();
        let Some(state) = self.peers.get_mut(&peer) else { return };
        if state.syncing {
            return;
        }
        if in_flight >= SYNCS_IN_FLIGHT_MAX {
            state.sync_wanted = true;
            return;
        }
        state.sync_wanted = false;
        state.syncing = true;
        self.stats.syncs_sent += 1;
        // A large directory is summarized first (see `crate::sync`); the salt differs per
        // exchange, so two directories that differ cannot collide twice in a row.
        let nodes = self.directory.len();
        let catching_up = std::mem::take(&mut state.catching_up);
        let (summary, request) = if nodes >= SYNC_SUMMARY_NODES_MIN && !catching_up {
            let salt = sync_salt(self.dial_salt, self.stats.syncs_sent);
            let buckets = Buckets::for_nodes(salt, nodes);
            self.stats.sync_summaries += 1;
            (
                Some(buckets),
                SyncRequest::summarized(self.local.cert.clone(), self.directory.summary(&buckets)),
            )
        } else {
            (None, SyncRequest::new(self.local.cert.clone(), self.directory.digest()))
        };
        if let Some(state) = self.peers.get_mut(&peer) {
            state.summary = summary;
        }
        self.push(Output::SendSyncRequest { peer, request });
    }

    /// `envelope` is `None` when the message did not decode.
    fn on_gossip(&mut self, now: Millis, from: NodeId, token: u64, envelope: Option<Envelope>, len: usize) {
        self.stats.gossip_in_messages += 1;
        self.stats.gossip_in_bytes += len as u64;
        // In a closed mesh too, gossip is judged on its merits, whoever relays it: every
        // advert must carry its own node's certificate, so a peer not (yet) admitted cannot
        // bring in anything a certified relay could not. Ignoring its messages instead would
        // lose adverts: gossipsub remembers an ignored message as seen and drops the copies
        // certified peers send next (found by the simulator's closed-mesh scenario: an
        // uncertified peer relaying honest adverts kept them from a node for one refresh).
        let (verdict, forged) = match envelope {
            None => (Verdict::Reject, true),
            Some(envelope) => self.judge_gossip(now, from, token, envelope),
        };
        if forged && self.closed() && !self.peers.get(&from).is_some_and(|p| p.admitted) {
            // Not admitted, and sending junk or forgeries (a clock-independent fault; an
            // honest relay never forwards either): no need to wait for its sync request.
            self.refuse_peer(
                now,
                from,
                "sent a malformed or forged advert before showing a certificate",
                true,
            );
        }
        match verdict {
            Verdict::Accept => self.stats.gossip_accepted += 1,
            Verdict::Ignore => self.stats.gossip_ignored += 1,
            Verdict::Reject => self.stats.gossip_rejected += 1,
        }
        self.push(Output::Report { token, verdict });
    }

    /// The verdict on a gossiped advert, and whether it was malformed or forged.
    fn judge_gossip(&mut self, now: Millis, from: NodeId, token: u64, envelope: Envelope) -> (Verdict, bool) {
        if envelope.kind() == DocKind::NodeGone {
            return match self.on_notice(now, &envelope, Source::Gossip { from, token }) {
                // Relayed also when it names a node we never held: others may hold it.
                Ok(true) | Err(Refusal::NotHeld) => (Verdict::Accept, false),
                Ok(false) => (Verdict::Ignore, false),
                Err(reason) if reason.is_misbehaviour() => {
                    (Verdict::Reject, matches!(reason, Refusal::Malformed(_) | Refusal::BadSignature))
                }
                Err(_) => (Verdict::Ignore, false),
            };
        }
        let node = NodeId::from_key(envelope.signer());
        let identical = self.directory.get(&node).is_some_and(|r| *r.envelope() == envelope);
        match self.directory.insert(now, envelope, Source::Gossip { from, token }) {
            Ok(_) => (Verdict::Accept, false),
            // Already accepted through anti-entropy: relaying helps peers that lack it.
            Err(Refusal::Duplicate { .. }) if identical => (Verdict::Accept, false),
            Err(reason) if reason.is_misbehaviour() => {
                (Verdict::Reject, matches!(reason, Refusal::Malformed(_) | Refusal::BadSignature))
            }
            Err(_) => (Verdict::Ignore, false),
        }
    }

    fn on_sync_request(&mut self, now: Millis, from: NodeId, token: u64, request: SyncRequest) {
        if let Admission::Closed { authorities } = &self.config.directory.admission {
            let admitted =
                request.cert.clone().ok_or_else(|| "presented no node certificate".to_owned()).and_then(
                    |cert| {
                        verify_cert_with(cert, authorities, now, &from, self.directory.verifier())
                            .map_err(|e| e.to_string())
                    },
                );
            match admitted {
                Ok(_) => {
                    if let Some(peer) = self.peers.get_mut(&from) {
                        peer.admitted = true;
                    }
                }
                Err(reason) => {
                    self.refuse_peer(now, from, &reason, true);
                    return;
                }
            }
        }
        if let Some(summary) = &request.summary {
            self.stats.syncs_answered += 1;
            let response = if self.directory.len() < SYNC_SUMMARY_NODES_MIN {
                // We hold little (a newcomer): all of it is smaller than a second round trip
                // for the requester's digest. It judges each advert as usual.
                let (adverts, more) = self.directory.missing_for(
                    &DirectoryDigest::default(),
                    SYNC_ADVERTS_MAX,
                    SYNC_RESPONSE_BYTES_MAX,
                );
                SyncResponse::new(adverts, more)
            } else {
                let buckets = summary.buckets();
                let differ = summary.differing(&self.directory.summary(&buckets));
                let scope = Scope::new(buckets, differ.iter().map(|b| b.0).collect());
                let inline = self.directory.adverts_in(&scope, SYNC_INLINE_ADVERTS_MAX).unwrap_or_default();
                SyncResponse::differing(differ, inline)
            };
            self.push(Output::SendSyncResponse { token, response });
            return;
        }
        // Notices (with the adverts they ended, for a peer holding an older one) take at most
        // half the response; what they leave goes to adverts the peer lacks. (A scoped digest
        // lists only its buckets, so the notices are for those buckets alone.)
        let size = |envelope: &Envelope| envelope.body().len() + ENVELOPE_OVERHEAD_MAX;
        let (mut gone, mut adverts, mut bytes) = (Vec::new(), Vec::new(), 0);
        for (notice, advert) in self.directory.notices_for(&request.digest, SYNC_NOTICES_MAX) {
            let cost = size(&notice) + advert.as_ref().map_or(0, size);
            if bytes + cost > SYNC_RESPONSE_BYTES_MAX / 2 || adverts.len() == SYNC_ADVERTS_MAX / 2 {
                break;
            }
            bytes += cost;
            gone.push(notice);
            adverts.extend(advert);
        }
        let (missing, more) = self.directory.missing_in(
            &request.digest,
            request.scope.as_ref(),
            SYNC_ADVERTS_MAX - adverts.len(),
            SYNC_RESPONSE_BYTES_MAX - bytes,
        );
        adverts.extend(missing);
        self.stats.syncs_answered += 1;
        let response = SyncResponse::new(adverts, more).with_notices(gone);
        self.push(Output::SendSyncResponse { token, response });
    }

    fn on_sync_response(&mut self, now: Millis, from: NodeId, response: SyncResponse) {
        let Some(peer) = self.peers.get_mut(&from) else { return };
        peer.syncing = false;
        let peer_admitted = peer.admitted;
        let summary = peer.summary.take();
        // Adverts that come with `differ` are all the responder holds in those buckets.
        let inline: Option<BTreeSet<NodeId>> = (response.differ.is_some() && !response.adverts.is_empty())
            .then(|| response.adverts.iter().map(|e| NodeId::from_key(e.signer())).collect());
        for envelope in response.adverts {
            // An update of a node we knew, or a node a notice dropped here coming back: gossip
            // missed it on its way to us (a partition, loss), so it likely missed the nodes
            // around us too, and anti-entropy alone would take it to them one sync interval
            // per hop. Gossip it on once accepted. (Adverts of nodes we did not know at all,
            // a newcomer's first sync, are not re-flooded.)
            let node = NodeId::from_key(envelope.signer());
            let news = self.directory.get(&node).is_some() || self.departed.contains_key(&node);
            let relay = news.then(|| envelope.clone());
            // Each advert is judged on its own; a peer relaying someone's forgery is not
            // proof the peer forged it, so refusals here only count.
            let accepted = self.directory.insert(now, envelope, Source::Sync { from }).is_ok();
            if let Some(envelope) = relay.filter(|_| accepted) {
                self.publish_envelope(&envelope);
            }
        }
        for notice in response.gone {
            // A notice news to us is news to our gossip neighbours too (they learned the
            // advert from the same side of a healed partition): relay it, so the whole
            // mesh, and the node it names, hears of it.
            if matches!(self.on_notice(now, &notice, Source::Sync { from }), Ok(true)) {
                self.publish_envelope(&notice);
            }
        }
        // A peer not admitted to a closed mesh gets one answer read, not an endless series.
        let may_continue = !self.closed() || peer_admitted;
        if let Some(differ) = response.differ {
            // The answer to our summary, with the adverts it could inline already judged:
            // the buckets that still differ are settled by their digest, unless the inline
            // adverts show the responder holds every node we hold there (then we are only
            // ahead of it: nothing to learn, no notice to miss; its own syncs catch it up).
            // (An answer we did not ask for, or naming buckets we do not have, ends the
            // exchange.)
            let Some(buckets) =
                summary.filter(|buckets| differ.last().is_none_or(|last| last.0 < buckets.count()))
            else {
                self.start_waiting_sync();
                return;
            };
            let ahead_only = |bucket: u32| {
                inline.as_ref().is_some_and(|theirs| {
                    self.directory.nodes_in(&buckets, bucket).all(|node| theirs.contains(&node))
                })
            };
            let still: Vec<u32> = differ
                .iter()
                .filter(|b| self.directory.bucket_sum(&buckets, b.0) != b.1 && !ahead_only(b.0))
                .map(|b| b.0)
                .collect();
            if still.is_empty() {
                self.stats.sync_summaries_settled += 1;
            } else if may_continue && let Some(peer) = self.peers.get_mut(&from) {
                peer.syncing = true;
                self.stats.sync_summaries_scoped += 1;
                let scope = Scope::new(buckets, still);
                let digest = self.directory.digest_in(&scope);
                let request = SyncRequest::scoped(self.local.cert.clone(), scope, digest);
                self.push(Output::SendSyncRequest { peer: from, request });
                return;
            }
        } else if response.more && may_continue {
            if let Some(peer) = self.peers.get_mut(&from) {
                peer.catching_up = true;
            }
            self.start_sync(from);
        }
        self.start_waiting_sync();
    }

    /// Starts the first waiting sync (peers in order), if a slot is free.
    fn start_waiting_sync(&mut self) {
        if let Some(peer) = self.peers.iter().find(|(_, p)| p.sync_wanted).map(|(id, _)| *id) {
            self.start_sync(peer);
        }
    }

    /// Refuses `peer` admission: disconnects it and, when `hold`, holds it off for
    /// [`REFUSED_HOLD_MS`].
    fn refuse_peer(&mut self, now: Millis, peer: NodeId, reason: &str, hold: bool) {
        self.stats.peers_refused += 1;
        self.peers.remove(&peer);
        let reason = format!("not admitted to this closed mesh: {reason}");
        if hold {
            if !self.held.contains_key(&peer) && self.held.len() >= REFUSED_PEERS_MAX {
                // Full: the hold that ends first ends now.
                if let Some(first) =
                    self.held.iter().min_by_key(|(id, until)| (**until, **id)).map(|(id, _)| *id)
                {
                    self.unhold(now, first);
                }
            }
            self.held.insert(peer, now.plus(REFUSED_HOLD_MS));
            self.push(Output::Block { peer, reason });
        } else {
            self.push(Output::Disconnect { peer, reason });
        }
        self.start_waiting_sync();
    }

    /// Ends the holds that are over.
    fn release_held(&mut self, now: Millis) {
        let over: Vec<NodeId> =
            self.held.iter().filter(|(_, until)| **until <= now).map(|(id, _)| *id).collect();
        for peer in over {
            self.unhold(now, peer);
        }
    }

    /// Ends `peer`'s hold; a bootstrap peer may be dialled again at once (its hold may have
    /// ended early, when the map was full).
    fn unhold(&mut self, now: Millis, peer: NodeId) {
        self.held.remove(&peer);
        if let Some(entry) = self.bootstrap.get_mut(&peer) {
            entry.next_at = entry.next_at.min(now);
        }
        self.push(Output::Unblock { peer });
    }

    /// Handles a departure notice: one about this node is refuted (when it names our
    /// current advert and verifies), any other goes to the directory. Ok(true) when it
    /// dropped an advert.
    fn on_notice(&mut self, now: Millis, envelope: &Envelope, source: Source) -> Result<bool, Refusal> {
        let about_us =
            self.directory.verifier().peek_notice(envelope).is_ok_and(|notice| notice.node == self.id);
        if !about_us {
            return self.directory.depart(now, envelope, source).map(|_| true);
        }
        let notice = self.directory.check_notice_about_self(now, envelope)?;
        // Only a notice naming the advert we hold now: an older one is answered already, and
        // a newer one names an advert we never signed (forged by its witness).
        if notice.seq == self.local.seq {
            let earliest = self.last_published.map_or(now, |at| at.plus(REFUTE_INTERVAL_MS)).max(now);
            if earliest < self.next_refresh {
                self.stats.refutations += 1;
                self.next_refresh = earliest;
            }
        }
        Ok(false)
    }

    /// A connected peer's connection closed: dial it again, and declare it gone if it is not
    /// back in time (see [`MeshConfig::suspect_ms`]).
    fn suspect(&mut self, now: Millis, peer: NodeId, dialled_since_loss: bool) {
        if self.config.suspect_ms == 0
            || self.held.contains_key(&peer)
            || self.suspects.len() >= MESH_PEERS_MAX
        {
            return;
        }
        let Some(record) = self.directory.get(&peer) else { return };
        let (seq, addrs) = (record.advert().seq, record.advert().addrs.clone());
        // Up to half as long again, fixed per node and peer: the peers of a crashed node
        // all lose it at once, and the first to declare it spares the others their notices
        // (each would be one more message to every node).
        let jitter = dial_rank(self.dial_salt, &peer) % (self.config.suspect_ms / 2 + 1);
        // Within the dial backoff, a peer that keeps closing our connections (it holds us
        // off, or is full) is not redialled at the speed of a round trip: the dial waits for
        // the backoff to end, and the suspicion runs from that dial (a peer is declared gone
        // only after a dial that did not bring it back).
        let deadline = now.plus(self.config.suspect_ms + jitter);
        let backoff_ends = self.dialed.get(&peer).map(|at| at.plus(self.config.dial_backoff_ms));
        match backoff_ends.filter(|end| *end > now) {
            Some(_) if dialled_since_loss => {
                self.suspects.insert(peer, Suspect { seq, deadline, dialled: true });
            }
            Some(end) => {
                self.suspects.insert(peer, Suspect { seq, deadline: end, dialled: false });
            }
            None => {
                self.suspects.insert(peer, Suspect { seq, deadline, dialled: true });
                if !addrs.is_empty() {
                    self.note_dialed(now, peer);
                    self.push(Output::Dial { peer, addrs });
                }
            }
        }
    }

    /// Declares the suspects whose time is up gone: signs a notice, applies it, gossips it.
    fn declare_departures(&mut self, now: Millis) {
        let due: Vec<(NodeId, Suspect)> =
            self.suspects.iter().filter(|(_, s)| s.deadline <= now).map(|(peer, s)| (*peer, *s)).collect();
        for (peer, Suspect { seq, dialled, .. }) in due {
            self.suspects.remove(&peer);
            let Some((held, advert)) =
                self.directory.get(&peer).map(|r| (r.advert().seq, *r.envelope().signature()))
            else {
                continue;
            };
            if self.peers.contains_key(&peer) {
                continue;
            }
            if held != seq || !dialled {
                // A newer advert came since: it may have left the peer just before it died
                // (in flight when the connection closed), so it is no proof of life. Or the
                // dial waited for the backoff. Suspect it afresh, dialling: a live peer comes
                // back.
                self.suspect(now, peer, dialled);
                continue;
            }
            let Ok(signed) = Signed::sign(Gone::new(peer, seq, advert, now), &self.key) else { continue };
            let envelope = signed.into_envelope();
            if self.directory.depart(now, &envelope, Source::Local).is_ok() {
                self.stats.departures_declared += 1;
                self.publish_envelope(&envelope);
            }
        }
    }

    fn publish_envelope(&mut self, envelope: &Envelope) {
        let bytes = envelope.encode();
        self.stats.gossip_out_messages += 1;
        self.stats.gossip_out_bytes += bytes.len() as u64;
        self.push(Output::Publish { bytes });
    }

    fn note_dialed(&mut self, now: Millis, peer: NodeId) {
        if self.dialed.len() >= DIAL_BACKOFF_ENTRIES_MAX
            && !self.dialed.contains_key(&peer)
            && let Some(oldest) = self.dialed.iter().min_by_key(|(_, at)| **at).map(|(id, _)| *id)
        {
            self.dialed.remove(&oldest);
        }
        self.dialed.insert(peer, now);
    }

    fn update_local(&mut self, now: Millis, change: impl FnOnce(&mut Advertised)) {
        change(&mut self.local);
        // Republish at once: what we host changed.
        self.next_refresh = now;
    }

    fn on_time(&mut self, now: Millis) {
        if now >= self.next_refresh {
            self.publish(now);
        }
        self.directory.handle(now, crate::directory::Input::Tick);
        if self.closed() {
            self.enforce_admission(now);
        }
        self.release_held(now);
        self.declare_departures(now);
        if now >= self.next_sync {
            self.next_sync = now.plus(self.config.sync_interval_ms);
            if let Some(peer) = self.next_sync_peer() {
                self.start_sync(peer);
            }
        }
        self.maybe_bootstrap(now);
        self.maybe_dial(now);
        self.maybe_reconnect(now);
    }

    /// Whether `node` may be dialled now: not connected, not held off, and not dialled
    /// within the dial backoff.
    fn may_dial(&self, now: Millis, node: &NodeId) -> bool {
        !self.peers.contains_key(node)
            && !self.held.contains_key(node)
            && self.dialed.get(node).is_none_or(|at| now >= at.plus(self.config.dial_backoff_ms))
    }

    /// Dials the next departed node, if one is due (see [`RECONNECT_INTERVAL_MS`]).
    fn maybe_reconnect(&mut self, now: Millis) {
        if now < self.next_reconnect {
            return;
        }
        self.next_reconnect = now.plus(RECONNECT_INTERVAL_MS);
        self.departed.retain(|_, d| now < d.at.plus(RECONNECT_WINDOW_MS));
        // The dialable node ranked next after the last one, wrapping around.
        let ranked: Vec<(u64, NodeId)> = self
            .departed
            .keys()
            .filter(|node| self.may_dial(now, node))
            .map(|node| (dial_rank(self.dial_salt, node), *node))
            .collect();
        let after = ranked.iter().filter(|(rank, _)| *rank > self.reconnect_cursor).min();
        let Some(&(rank, node)) = after.or_else(|| ranked.iter().min()) else { return };
        self.reconnect_cursor = rank;
        if let Some(addrs) = self.departed.get(&node).map(|d| d.addrs.clone()) {
            self.note_dialed(now, node);
            self.push(Output::Dial { peer: node, addrs });
        }
    }

    /// Remembers a node a notice dropped, to dial it again now and then.
    fn remember_departed(&mut self, now: Millis, node: NodeId, addrs: Vec<String>) {
        if node == self.id || addrs.is_empty() {
            return;
        }
        if self.departed.len() >= DEPARTED_NODES_MAX
            && !self.departed.contains_key(&node)
            && let Some(oldest) = self.departed.iter().min_by_key(|(id, d)| (d.at, **id)).map(|(id, _)| *id)
        {
            self.departed.remove(&oldest);
        }
        self.departed.insert(node, Departed { addrs, at: now });
    }

    fn set_bootstrap(&mut self, now: Millis, peers: Vec<(NodeId, Vec<String>)>) {
        let mut bootstrap: BTreeMap<NodeId, Bootstrap> = BTreeMap::new();
        for (peer, addrs) in peers {
            if peer == self.id || (bootstrap.len() >= BOOTSTRAP_PEERS_MAX && !bootstrap.contains_key(&peer)) {
                continue;
            }
            let entry = bootstrap.entry(peer).or_insert_with(|| Bootstrap {
                addrs: Vec::new(),
                next_at: now,
                wait_ms: BOOTSTRAP_RETRY_MS,
            });
            for addr in addrs {
                if entry.addrs.len() < BOOTSTRAP_ADDRS_MAX && !entry.addrs.contains(&addr) {
                    entry.addrs.push(addr);
                }
            }
        }
        self.bootstrap = bootstrap;
    }

    /// Dials each bootstrap peer that is not connected and whose wait is over (at start,
    /// every one), and doubles its wait.
    fn maybe_bootstrap(&mut self, now: Millis) {
        let mut dials = Vec::new();
        for (peer, entry) in &mut self.bootstrap {
            if self.peers.contains_key(peer) || now < entry.next_at {
                continue;
            }
            if let Some(until) = self.held.get(peer) {
                // We refused it: no dial until the hold ends (the driver would block it).
                entry.next_at = *until;
                continue;
            }
            // Up to a quarter more, fixed per node and peer, so nodes restarted together do
            // not all dial at once.
            let jitter = dial_rank(self.dial_salt, peer) % (entry.wait_ms / 4 + 1);
            entry.next_at = now.plus(entry.wait_ms + jitter);
            entry.wait_ms = (entry.wait_ms * 2).min(BOOTSTRAP_RETRY_MAX_MS);
            dials.push((*peer, entry.addrs.clone()));
        }
        for (peer, addrs) in dials {
            self.push(Output::Dial { peer, addrs });
        }
    }

    fn publish(&mut self, now: Millis) {
        self.next_refresh = now.plus(self.config.refresh_ms);
        let advert = self.local.next(now, self.config.ttl_ms);
        let seq = advert.seq;
        match Signed::sign(advert, &self.key) {
            Ok(signed) => {
                self.local.seq = seq;
                self.last_published = Some(now);
                let envelope = signed.into_envelope();
                let _ = self.directory.insert(now, envelope.clone(), Source::Local);
                self.publish_envelope(&envelope);
                self.push(Output::Event(Event::Published { seq }));
            }
            Err(err) => {
                // Our own inputs were out of bounds (too many capsules, a bad name): keep the
                // last good advert; the driver validated its inputs, so this is a bug there.
                self.push(Output::Event(Event::AdvertRefused {
                    node: self.id,
                    source: Source::Local,
                    reason: Refusal::Malformed(err.to_string()),
                }));
            }
        }
    }

    fn admission_deadline(&self) -> Option<Millis> {
        if !self.closed() {
            return None;
        }
        self.peers
            .values()
            .filter(|p| !p.admitted)
            .map(|p| p.connected_at.plus(self.config.admission_timeout_ms))
            .min()
    }

    fn enforce_admission(&mut self, now: Millis) {
        let timeout = self.config.admission_timeout_ms;
        let late: Vec<NodeId> = self
            .peers
            .iter()
            .filter(|(_, p)| !p.admitted && now >= p.connected_at.plus(timeout))
            .map(|(id, _)| *id)
            .collect();
        for peer in late {
            // Not held off: its certificate may be stuck behind our own queued sync
            // requests (one at a time), so it may reconnect at once.
            self.refuse_peer(now, peer, &format!("no certificate within {timeout} ms"), false);
        }
    }

    /// The connected, admitted peer after the cursor, wrapping around.
    fn next_sync_peer(&mut self) -> Option<NodeId> {
        let admitted = |p: &&Peer| p.admitted && !p.syncing && !p.sync_wanted;
        let after = self.sync_cursor.and_then(|cursor| {
            self.peers
                .range(cursor..)
                .filter(|(id, _)| **id != cursor)
                .find(|(_, p)| admitted(p))
                .map(|(id, _)| *id)
        });
        let next = after.or_else(|| self.peers.iter().find(|(_, p)| admitted(p)).map(|(id, _)| *id));
        self.sync_cursor = next;
        next
    }

    fn maybe_dial(&mut self, now: Millis) {
        let mut deficit = self.config.peers_target.saturating_sub(self.peers.len());
        // Scanning the directory costs O(nodes): do it at most once per check interval.
        if deficit == 0 || now < self.next_dial_check {
            return;
        }
        self.next_dial_check = now.plus(DIAL_CHECK_INTERVAL_MS);
        // The candidates this node ranks first: every node ranks the directory in its own
        // order, so dials spread over the mesh. (In directory order every node dialled the
        // same few nodes, with the lowest ids, until their connection limits refused
        // newcomers; found by the simulator's churn scenario.)
        let mut candidates: Vec<(u64, &crate::directory::Record)> = self
            .directory
            .records(now)
            .filter(|record| {
                record.node() != self.id
                    && self.may_dial(now, &record.node())
                    && !record.advert().addrs.is_empty()
            })
            .map(|record| (dial_rank(self.dial_salt, &record.node()), record))
            .collect();
        deficit = deficit.min(candidates.len());
        if deficit < candidates.len() {
            candidates.select_nth_unstable_by_key(deficit, |(rank, record)| (*rank, record.node()));
            candidates.truncate(deficit);
        }
        candidates.sort_unstable_by_key(|(rank, record)| (*rank, record.node()));
        let dials: Vec<(NodeId, Vec<String>)> = candidates
            .into_iter()
            .map(|(_, record)| (record.node(), record.advert().addrs.clone()))
            .collect();
        for (peer, addrs) in dials {
            self.note_dialed(now, peer);
            self.push(Output::Dial { peer, addrs });
        }
    }

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
                DirectoryOutput::Departed { node, seq, witness, source, addrs } => {
                    self.remember_departed(now, node, addrs);
                    Event::Departed { node, seq, witness, source }
                }
                // The mesh answers digests itself (`on_sync_request`), never via the directory.
                DirectoryOutput::SendAdverts { .. } => continue,
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

/// A peer whose connection closed: the advert seq held then, when to act, and whether it
/// was dialled since (if not, the dial is what is due).
#[derive(Clone, Copy, Debug)]
struct Suspect {
    seq: u64,
    deadline: Millis,
    dialled: bool,
}

/// A node a notice dropped: where its last advert said it listens, and when it departed.
#[derive(Clone, Debug)]
struct Departed {
    addrs: Vec<String>,
    at: Millis,
}

/// A bootstrap peer: where to dial it, when next, and how long the wait after that is.
#[derive(Clone, Debug)]
struct Bootstrap {
    addrs: Vec<String>,
    next_at: Millis,
    wait_ms: u64,
}

/// The salt of our `n`th summary: one-way from our secret `dial_salt` (peers see the salt,
/// and must not learn the secret from it).
fn sync_salt(dial_salt: u64, n: u64) -> u64 {
    let mut input = b"murmur/sync-salt/1\0".to_vec();
    input.extend_from_slice(&dial_salt.to_le_bytes());
    input.extend_from_slice(&n.to_le_bytes());
    let digest = Digest::of(&input);
    u64::from_le_bytes(digest.0[..8].try_into().expect("8 bytes"))
}

/// A secret of the node's own, derived from its key, that salts [`dial_rank`]: nobody else
/// can compute its order, so no one can grind keys to become a given node's first choices.
fn dial_salt(key: &SecretKey) -> u64 {
    let mut input = b"murmur/dial-rank/1\0".to_vec();
    input.extend_from_slice(&key.to_seed());
    let digest = Digest::of(&input);
    u64::from_le_bytes([
        digest.0[0],
        digest.0[1],
        digest.0[2],
        digest.0[3],
        digest.0[4],
        digest.0[5],
        digest.0[6],
        digest.0[7],
    ])
}

/// Where a node with `salt` ranks `other` among the nodes it may dial (lowest first): each
/// node has its own order, so no node is everyone's first choice.
fn dial_rank(salt: u64, other: &NodeId) -> u64 {
    let bytes = other.key().as_bytes();
    let word =
        u64::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7]]);
    // splitmix64's finaliser: every bit of the input moves every bit of the output.
    let mut z = salt ^ word;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests;
