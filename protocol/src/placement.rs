//! Hash placement: a directory whose cost grows as N log N instead of N².
//!
//! The gossip directory ([`crate::directory`], [`crate::mesh`]) gives every node every
//! advert: N² (node, advert) pairs, 10⁸ at 10,000 nodes, and a cold start that has to
//! deliver all of them. Here no node holds the whole directory. Each capsule name has a
//! place in a 256-bit key space (SHA-256 of the name), each node has one too (SHA-256 of
//! its id), and the adverts of a name's hosts are held by the `k` nodes whose places are
//! closest to the name's by XOR distance: the name's *homes*. A node finds them with a
//! Kademlia lookup (each answer names nodes closer to the target, `alpha` asks in
//! flight, about log₂ N rounds), stores its own advert there, and resolves a name it does
//! not hold by the same lookup, stopping at the first answer that carries a verified,
//! fresh advert of a host of the name (from a home, or from a host itself).
//!
//! What each node holds: a routing table of at most `k` contacts per distance bucket
//! (about `k` log₂ N of them), the adverts it is a home for (about `k` × names / N), and
//! its own advert. Homes follow joins by two rules, and an advert only ever moves towards
//! its name under either:
//! - *handover*: a node that meets a contact new to its table hands it the adverts of every
//!   name it holds that the contact is nearer to than this node is;
//! - *pass-on*: a node that takes an advert new to it (or a withdrawal) sends it to the
//!   contacts it knows nearer the name, among the `k` nearest, that the store did not
//!   already name as sent to.
//!
//! Homes that leave are replaced by *replication*: every `replicate_ms` a node looks up
//! each name it holds a record of that no store refreshed in the last round (Kademlia's
//! rule, per record: whoever stored it then reached the other homes too) and stores what
//! it holds at the name's nearest nodes; a store that fails (a home gone) starts that
//! lookup at once. A record whose every holder left is found again when its host stores
//! it again.
//!
//! Adverts expire at their TTL; a node stores its advert again every `republish_ms`,
//! re-signed, and a node that stops hosting a name stores its newer advert (which no
//! longer lists the name) at that name's homes, which drop the older one: a withdrawal.
//!
//! Trust is as in the gossip directory: an advert is held only when its signature verifies
//! and it is fresh and newer than the one held. A contact is a claim until a request to it
//! is answered (the transport authenticates the answering node); a node that does not
//! answer is dropped from the table. What an attacker can do here that it cannot with full
//! directories: place identities close to a name and withhold its adverts; `k` homes and
//! resolvers asking further on a home without hosts bound that, as in any DHT. Made-up
//! contacts in answers cost a lookup a timeout each; a lookup takes at most `k` contacts
//! from one answer and keeps at most four times its width of candidates. Known gaps: the
//! per-name bound on hosts held (`hosts_per_name_max`) is first come, first served, so
//! identities enough can fill it; a withdrawal that reaches a home before the advert it
//! withdraws is refused, and the late advert is then held until its TTL.
//!
//! Status: the protocol change that issue 23's formation figure asks for, driven by the
//! simulator (`murmur-sim placement`); `murnode` still runs the gossip directory.
//!
//! # Driving it
//!
//! ```text
//! let mut node = PlacementNode::new(key, config, verifier);
//! node.handle(now, Input::Start { bootstrap });          // then Input::Host { .. }
//! loop {
//!     while let Some(out) = node.poll_output() { carry it out }
//!     wait for a message, a failure or node.poll_timeout(); node.handle(now, input)
//! }
//! ```
//!
//! Requests carry an id the node chose; the driver hands the answer back with the same id
//! ([`Input::Response`]) or says it failed ([`Input::Failed`]: unreachable, or no answer
//! within `request_timeout_ms`, which the node also enforces itself).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::advert::{Advert, HostedCapsule};
use crate::codec::{self, DecodeError};
use crate::digest::Digest;
use crate::identity::{NodeId, PublicKey, SecretKey};
use crate::limits::{CAPSULE_NAME_LEN_MAX, ENVELOPE_BYTES_MAX, ENVELOPE_OVERHEAD_MAX};
use crate::names::check_capsule_name;
use crate::signed::{Envelope, Signed, decode_versioned};
use crate::time::Millis;
use crate::verify::Verifier;

/// The placement message version this build writes and reads.
pub const PLACEMENT_VERSION: u16 = 1;

/// Contacts one answer may name: the largest `k` a node may be configured with.
pub const CONTACTS_PER_ANSWER_MAX: usize = 32;

/// Adverts one answer or store may carry: as many envelopes of the largest size as fit in
/// [`PLACEMENT_MESSAGE_BYTES_MAX`] beside a full list of contacts and a name. A resolver
/// needs a few hosts, not all; a handover of more is sent in several stores.
pub const ADVERTS_PER_MESSAGE_MAX: usize = 15;

/// Largest placement message.
pub const PLACEMENT_MESSAGE_BYTES_MAX: usize = 256 * 1024;

// The worst case a node builds must be a message its peers accept: envelopes at their
// bound (each with its CBOR header), contacts (32 bytes and a header), the name, framing.
const _: () = assert!(
    ADVERTS_PER_MESSAGE_MAX * (ENVELOPE_BYTES_MAX + 8)
        + CONTACTS_PER_ANSWER_MAX * 40
        + CAPSULE_NAME_LEN_MAX
        + 64
        <= PLACEMENT_MESSAGE_BYTES_MAX
);

/// Outputs queued at most; past it the newest are dropped and counted, like the mesh's.
pub const PLACEMENT_OUTPUTS_MAX: usize = 4096;

/// Resolves in flight at once; one past it is answered [`Event::Unresolved`] at once
/// ([`Unresolved::Busy`]). Placing is bounded by the node's own capsules instead (one
/// lookup per name at a time), and there is one join.
pub const RESOLVES_MAX: usize = 64;

/// Repair lookups in flight at once (see [`PlacementConfig::replicate_ms`]).
pub const REPAIRS_MAX: usize = 16;

/// Lookups keep at most this many times their width of candidates, the closest.
const CANDIDATES_PER_WIDTH: usize = 4;

/// Requests in flight at once past which a handover or pass-on is skipped (and counted):
/// lookups and a node's own stores are bounded by [`RESOLVES_MAX`] and its capsules;
/// handovers, which other nodes' arrivals set off, by this.
pub const REQUESTS_IN_FLIGHT_MAX: usize = 2048;

/// A join lookup ends once this many times `k` nodes nearest the newcomer have answered:
/// each of them that holds adverts the newcomer is nearer to hands them over, so a wider
/// join finds more of the homes it takes over from.
const JOIN_WIDTH: usize = 2;

/// The keys of [`PlacementNode`]'s held records for the name at `key`: every host.
fn name_range(key: Key) -> std::ops::RangeInclusive<(Key, NodeId)> {
    (key, NodeId::bound([0; 32]))..=(key, NodeId::bound([0xff; 32]))
}

/// A place in the key space: SHA-256 of a node id or of a capsule name, domain-separated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Key(#[serde(with = "codec::byte_array")] pub [u8; 32]);

impl Key {
    /// The place of `node`.
    #[must_use]
    pub fn of_node(node: &NodeId) -> Self {
        Self::hashed(b"murmur/placement/node\0", node.key().as_bytes())
    }

    /// The place of capsule `name`.
    #[must_use]
    pub fn of_name(name: &str) -> Self {
        Self::hashed(b"murmur/placement/name\0", name.as_bytes())
    }

    fn hashed(domain: &[u8], bytes: &[u8]) -> Self {
        let mut input = Vec::with_capacity(domain.len() + bytes.len());
        input.extend_from_slice(domain);
        input.extend_from_slice(bytes);
        Self(Digest::of(&input).0)
    }

    /// XOR distance to `other`; distances order as big-endian numbers.
    #[must_use]
    pub fn distance(&self, other: &Self) -> Distance {
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = self.0[i] ^ other.0[i];
        }
        Distance(out)
    }
}

/// The XOR of two keys, compared as a 256-bit big-endian number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Distance(pub [u8; 32]);

impl Distance {
    /// Leading zero bits: 256 for the zero distance. Contacts with `n` leading zero bits of
    /// distance from this node go to bucket `n`.
    #[must_use]
    pub fn leading_zeros(&self) -> usize {
        let mut zeros = 0;
        for byte in self.0 {
            if byte == 0 {
                zeros += 8;
            } else {
                return zeros + byte.leading_zeros() as usize;
            }
        }
        zeros
    }
}

/// A node named in an answer: a claim until it answers a request itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Contact(#[serde(with = "crate::identity::claimed_key")] pub PublicKey);

impl Contact {
    /// The node it names.
    #[must_use]
    pub const fn node(&self) -> NodeId {
        NodeId::from_key(self.0)
    }
}

/// What travels between placement nodes (`/murmur/place/1` when `murnode` speaks it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum Message {
    /// Request: the `k` nodes closest to `target` that you know.
    FindNode { target: Key },
    /// Answer to `FindNode`.
    Nodes { closer: Vec<Contact> },
    /// Request: the adverts you hold for capsule `name`, or the nodes closest to it.
    FindHosts { name: String },
    /// Answer to `FindHosts`: what is held (possibly nothing) and closer nodes.
    Hosts { closer: Vec<Contact>, adverts: Vec<Envelope> },
    /// Request: hold these adverts of `name`'s hosts (you are one of its homes). `homes`
    /// are the nodes the sender knows to hold them or to be sent them, so the receiver
    /// passes them on only to nodes nearer the name that are not among them.
    Store { name: String, homes: Vec<Contact>, adverts: Vec<Envelope> },
    /// Answer to `Store`: how many of them were taken (now held, or withdrawn as asked).
    Stored { held: u32 },
}

/// A message on the wire: its version and the message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Wire {
    // Fields are in canonical key order (see `codec`).
    pub m: Message,
    pub v: u16,
}

impl Message {
    /// Canonical bytes, versioned.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(&Wire { m: self.clone(), v: PLACEMENT_VERSION })
    }

    /// Decodes and bounds a message from a peer.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let wire: Wire = decode_versioned(
            "placement message",
            bytes,
            PLACEMENT_MESSAGE_BYTES_MAX,
            PLACEMENT_VERSION,
            |w: &Wire| w.v,
        )?;
        let invalid = |field: &'static str, reason: String| DecodeError::Invalid {
            what: "placement message",
            field,
            reason,
        };
        match &wire.m {
            Message::Nodes { closer }
            | Message::Hosts { closer, .. }
            | Message::Store { homes: closer, .. }
                if closer.len() > CONTACTS_PER_ANSWER_MAX =>
            {
                return Err(invalid(
                    "closer",
                    format!("{} contacts, at most {CONTACTS_PER_ANSWER_MAX}", closer.len()),
                ));
            }
            Message::Hosts { adverts, .. } | Message::Store { adverts, .. }
                if adverts.len() > ADVERTS_PER_MESSAGE_MAX =>
            {
                return Err(invalid(
                    "adverts",
                    format!("{} adverts, at most {ADVERTS_PER_MESSAGE_MAX}", adverts.len()),
                ));
            }
            Message::FindHosts { name } | Message::Store { name, .. } => {
                if let Err(reason) = check_capsule_name(name) {
                    return Err(invalid("name", reason));
                }
            }
            _ => {}
        }
        Ok(wire.m)
    }
}

/// How a placement node behaves.
#[derive(Clone, Debug)]
pub struct PlacementConfig {
    /// Homes per name.
    pub k: usize,
    /// Contacts per routing-table bucket, and per answer to a lookup.
    pub bucket: usize,
    /// Requests in flight per resolve.
    pub alpha: usize,
    /// Requests in flight per join or placing lookup. These run once per node, and per
    /// name each refresh, and how soon adverts reach their homes is theirs: asking more
    /// nodes at once lets the fastest answers lead (see the benchmarks' placement table).
    pub place_alpha: usize,
    /// A request unanswered this long has failed.
    pub request_timeout_ms: u64,
    /// The TTL this node signs its advert with, and the longest honoured.
    pub ttl_ms: u64,
    /// Clock difference tolerated with an advert's issuer.
    pub clock_skew_max_ms: u64,
    /// How often this node re-signs its advert and stores it again.
    pub republish_ms: u64,
    /// How often a home stores the adverts it holds at the other nodes it knows among the
    /// name's `k` nearest: homes that left are replaced by the next nearest this way.
    pub replicate_ms: u64,
    /// Adverts held for others (as (name, node) pairs).
    pub records_max: usize,
    /// Hosts held per name; more are refused (a resolver needs a few, not all).
    pub hosts_per_name_max: usize,
}

impl Default for PlacementConfig {
    fn default() -> Self {
        Self {
            k: 8,
            bucket: 8,
            alpha: 3,
            place_alpha: 8,
            request_timeout_ms: 2_000,
            ttl_ms: 86_400_000,
            clock_skew_max_ms: 60_000,
            republish_ms: 3_600_000,
            replicate_ms: 600_000,
            records_max: 100_000,
            hosts_per_name_max: 64,
        }
    }
}

/// What the driver tells the node.
#[derive(Clone, Debug)]
pub enum Input {
    /// Join through these nodes (none: the first node of a mesh).
    Start { bootstrap: Vec<NodeId> },
    /// What this node hosts now: its advert is re-signed and placed at every name's homes.
    Host { capsules: Vec<HostedCapsule>, addrs: Vec<String> },
    /// Find the hosts of `name`.
    Resolve { name: String },
    /// A request from `from`; answer with [`Output::Respond`] carrying `id`.
    Request { from: NodeId, id: u64, message: Message },
    /// The answer to this node's request `id`, from the node it was sent to.
    Response { id: u64, message: Message },
    /// Request `id` failed: the node was unreachable or did not answer.
    Failed { id: u64 },
    /// Time passed (call at [`PlacementNode::poll_timeout`]).
    Tick,
}

/// What the node asks of the driver, or tells it.
#[derive(Clone, Debug)]
pub enum Output {
    /// Send `message` to `to` as request `id`.
    Request { to: NodeId, id: u64, message: Message },
    /// Answer request `id` from `to`.
    Respond { to: NodeId, id: u64, message: Message },
    /// Something happened.
    Event(Event),
}

/// What the node reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The join lookup ended; the table holds `contacts`.
    Joined { contacts: usize },
    /// The advert is stored at `homes` nodes for `name` (this node counted when it is one).
    Placed { name: String, homes: usize },
    /// This node no longer hosts `name`: `homes` of the name's homes dropped its advert.
    Withdrawn { name: String, homes: usize },
    /// `name`'s hosts, verified, found after `asked` requests.
    Resolved { name: String, hosts: Vec<NodeId>, asked: usize },
    /// No hosts of `name` were found after `asked` requests, for the reason given.
    Unresolved { name: String, asked: usize, why: Unresolved },
    /// [`Input::Host`] was refused and the advert held before stays in place: `reason`
    /// names the capsule or the bound at fault.
    HostRefused { reason: String },
}

/// Why a resolve found no hosts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unresolved {
    /// The lookup reached the nodes nearest the name and none held a host's advert.
    NotFound,
    /// [`RESOLVES_MAX`] resolves were in flight; nothing was asked.
    Busy,
    /// The name is not a capsule name (the reason says why); nothing was asked.
    BadName(String),
}

/// Counters for metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlacementStats {
    pub requests_sent: u64,
    pub requests_failed: u64,
    pub requests_answered: u64,
    pub adverts_held: u64,
    pub adverts_refused: u64,
    pub handoffs: u64,
    /// Handovers skipped: [`REQUESTS_IN_FLIGHT_MAX`] requests were in flight.
    pub handoffs_dropped: u64,
    /// Adverts dropped because a newer one of the same host no longer lists the name.
    pub withdrawals: u64,
    /// Stores sent by the periodic replication of held adverts.
    pub replications: u64,
    /// Repair lookups finished (each followed by its stores).
    pub repairs: u64,
    pub outputs_dropped: u64,
}

/// At most `k` contacts per bucket, least recently seen first.
#[derive(Clone, Debug)]
pub struct RoutingTable {
    local: Key,
    k: usize,
    buckets: Vec<Vec<(NodeId, Key)>>,
}

impl RoutingTable {
    /// An empty table around `local`.
    #[must_use]
    pub fn new(local: Key, k: usize) -> Self {
        Self { local, k, buckets: vec![Vec::new(); 256] }
    }

    /// `node` answered or asked: kept (moved to most recent) if it fits its bucket. True
    /// when it was not in the table before and is now. A full bucket keeps its old
    /// contacts (the longest-lived are the likeliest to stay: Kademlia's rule).
    pub fn observe(&mut self, node: NodeId) -> bool {
        let key = Key::of_node(&node);
        let k = self.k;
        let Some(bucket) = self.bucket_mut(&key) else { return false };
        if let Some(at) = bucket.iter().position(|(n, _)| *n == node) {
            let entry = bucket.remove(at);
            bucket.push(entry);
            return false;
        }
        if bucket.len() >= k {
            return false;
        }
        bucket.push((node, key));
        true
    }

    /// Forgets `node` (it failed a request).
    pub fn remove(&mut self, node: &NodeId) {
        let key = Key::of_node(node);
        if let Some(bucket) = self.bucket_mut(&key) {
            bucket.retain(|(n, _)| n != node);
        }
    }

    /// Whether `node` is in the table.
    #[must_use]
    pub fn contains(&self, node: &NodeId) -> bool {
        let key = Key::of_node(node);
        let zeros = self.local.distance(&key).leading_zeros();
        self.buckets.get(zeros).is_some_and(|b| b.iter().any(|(n, _)| n == node))
    }

    fn bucket_mut(&mut self, key: &Key) -> Option<&mut Vec<(NodeId, Key)>> {
        let zeros = self.local.distance(key).leading_zeros();
        self.buckets.get_mut(zeros)
    }

    /// The `n` contacts closest to `target`, closest first.
    #[must_use]
    pub fn closest(&self, target: &Key, n: usize) -> Vec<(Distance, NodeId)> {
        let mut all: Vec<(Distance, NodeId)> =
            self.buckets.iter().flatten().map(|(node, key)| (key.distance(target), *node)).collect();
        if all.len() > n {
            all.select_nth_unstable(n);
            all.truncate(n);
        }
        all.sort_unstable();
        all
    }

    /// Contacts held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.buckets.iter().map(Vec::len).sum()
    }

    /// Whether no contact is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ask {
    New,
    InFlight,
    Answered,
    Failed,
}

#[derive(Clone, Debug)]
enum Purpose {
    Join,
    Place {
        name: String,
    },
    Resolve {
        name: String,
    },
    /// A home of the name left: find the name's nearest nodes now and store there.
    Repair {
        key: Key,
    },
}

/// An iterative lookup: the candidates known, closest first, and what became of each.
#[derive(Clone, Debug)]
struct Lookup {
    target: Key,
    /// How many closest nodes must have answered for the lookup to end.
    width: usize,
    purpose: Purpose,
    candidates: BTreeMap<Distance, (NodeId, Ask)>,
    in_flight: usize,
    asked: usize,
}

impl Lookup {
    fn new(
        target: Key,
        width: usize,
        purpose: Purpose,
        seeds: impl IntoIterator<Item = (Distance, NodeId)>,
    ) -> Self {
        let candidates = seeds.into_iter().map(|(d, n)| (d, (n, Ask::New))).collect();
        Self { target, width, purpose, candidates, in_flight: 0, asked: 0 }
    }

    /// Adds a candidate; past [`CANDIDATES_PER_WIDTH`] × width, the farthest not in flight
    /// goes (so made-up contacts cannot grow a lookup without bound).
    fn offer(&mut self, node: NodeId, local: &NodeId) {
        if node == *local {
            return;
        }
        let distance = Key::of_node(&node).distance(&self.target);
        self.candidates.entry(distance).or_insert((node, Ask::New));
        while self.candidates.len() > CANDIDATES_PER_WIDTH * self.width {
            // Failed ones go first (they only keep a node from being asked twice), then
            // the farthest not in flight.
            let failed = self.candidates.iter().rev().find(|(_, (_, a))| *a == Ask::Failed);
            let drop = failed
                .or_else(|| self.candidates.iter().rev().find(|(_, (_, a))| *a != Ask::InFlight))
                .map(|(d, _)| *d);
            let Some(drop) = drop else { break };
            self.candidates.remove(&drop);
        }
    }

    fn mark(&mut self, node: &NodeId, to: Ask) {
        let distance = Key::of_node(node).distance(&self.target);
        if let Some((_, ask)) = self.candidates.get_mut(&distance) {
            if *ask == Ask::InFlight {
                self.in_flight -= 1;
            }
            *ask = to;
        }
    }

    /// The next nodes to ask: new candidates among the `width` closest that have not
    /// failed, while fewer than `alpha` are in flight.
    fn next(&mut self, alpha: usize) -> Vec<NodeId> {
        let mut out = Vec::new();
        for (node, ask) in self.candidates.values_mut().filter(|(_, a)| *a != Ask::Failed).take(self.width) {
            if self.in_flight + out.len() >= alpha {
                break;
            }
            if *ask == Ask::New {
                *ask = Ask::InFlight;
                out.push(*node);
            }
        }
        self.in_flight += out.len();
        self.asked += out.len();
        out
    }

    /// Done when the `width` closest that have not failed have all answered.
    fn is_done(&self) -> bool {
        self.in_flight == 0
            && self
                .candidates
                .values()
                .filter(|(_, a)| *a != Ask::Failed)
                .take(self.width)
                .all(|(_, a)| *a == Ask::Answered)
    }

    fn answered(&self, k: usize) -> Vec<(Distance, NodeId)> {
        self.candidates
            .iter()
            .filter(|(_, (_, a))| *a == Ask::Answered)
            .take(k)
            .map(|(d, (n, _))| (*d, *n))
            .collect()
    }
}

#[derive(Clone, Debug)]
enum Waiting {
    Lookup {
        lookup: u64,
        to: NodeId,
    },
    /// A store; `place` is the placing it counts towards (none for a handover), `again`
    /// the name a replication round sent it for (a failure there replicates it again).
    Store {
        place: Option<u64>,
        to: NodeId,
        again: Option<Key>,
    },
}

/// A placing of this node's own advert under one name: stores sent, answers awaited.
#[derive(Clone, Debug)]
struct Placing {
    name: String,
    withdraw: bool,
    acked: usize,
    left: usize,
}

/// What became of an advert offered for a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Taken {
    New,
    Known,
    Withdrawn,
    Refused,
}

#[derive(Clone, Debug)]
struct Held {
    envelope: Envelope,
    seq: u64,
    expires_at: Millis,
    /// When a store of it last came in, or this node last replicated it.
    stored_at: Millis,
}

/// One node's part of hash placement (see the module docs).
#[derive(Debug)]
pub struct PlacementNode {
    config: PlacementConfig,
    secret: SecretKey,
    id: NodeId,
    key: Key,
    verifier: Arc<dyn Verifier>,
    table: RoutingTable,
    lookups: BTreeMap<u64, Lookup>,
    next_lookup: u64,
    waiting: BTreeMap<u64, (Waiting, Millis)>,
    deadlines: BTreeSet<(Millis, u64)>,
    next_request: u64,
    /// Adverts held as a home, by (name's key, host).
    held: BTreeMap<(Key, NodeId), Held>,
    held_names: BTreeMap<Key, String>,
    expiries: BTreeSet<(Millis, Key, NodeId)>,
    own: Option<(Envelope, Advert)>,
    seq: u64,
    next_republish: Option<Millis>,
    next_replicate: Option<Millis>,
    /// Placings whose stores are awaited, by the lookup that found the homes.
    placing: BTreeMap<u64, Placing>,
    /// Names with a placing lookup in flight (at most one each).
    placing_names: BTreeSet<String>,
    /// Names held here with a repair lookup in flight.
    repairing: BTreeSet<Key>,
    outputs: VecDeque<Output>,
    stats: PlacementStats,
}

impl PlacementNode {
    /// A node with `secret` as its identity.
    #[must_use]
    pub fn new(secret: SecretKey, config: PlacementConfig, verifier: Arc<dyn Verifier>) -> Self {
        let id = secret.node_id();
        let key = Key::of_node(&id);
        let k = config.k.clamp(1, CONTACTS_PER_ANSWER_MAX);
        let bucket = config.bucket.clamp(k, CONTACTS_PER_ANSWER_MAX);
        let config = PlacementConfig {
            k,
            bucket,
            alpha: config.alpha.max(1),
            place_alpha: config.place_alpha.max(1),
            ..config
        };
        Self {
            table: RoutingTable::new(key, bucket),
            config,
            secret,
            id,
            key,
            verifier,
            lookups: BTreeMap::new(),
            next_lookup: 0,
            waiting: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            next_request: 0,
            held: BTreeMap::new(),
            held_names: BTreeMap::new(),
            expiries: BTreeSet::new(),
            own: None,
            seq: 0,
            next_republish: None,
            next_replicate: None,
            placing: BTreeMap::new(),
            placing_names: BTreeSet::new(),
            repairing: BTreeSet::new(),
            outputs: VecDeque::new(),
            stats: PlacementStats::default(),
        }
    }

    /// This node's id.
    #[must_use]
    pub const fn id(&self) -> NodeId {
        self.id
    }

    /// The routing table.
    #[must_use]
    pub const fn table(&self) -> &RoutingTable {
        &self.table
    }

    /// Counters.
    #[must_use]
    pub const fn stats(&self) -> &PlacementStats {
        &self.stats
    }

    /// (name, host) pairs held as a home.
    #[must_use]
    pub fn held_len(&self) -> usize {
        self.held.len()
    }

    /// Whether this node holds `host`'s advert for `name`, unexpired at `now`.
    #[must_use]
    pub fn holds(&self, name: &str, host: &NodeId, now: Millis) -> bool {
        self.held.get(&(Key::of_name(name), *host)).is_some_and(|h| h.expires_at > now)
    }

    /// The next output for the driver.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// When to call [`Input::Tick`] next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Millis> {
        [
            self.deadlines.first().map(|(at, _)| *at),
            self.expiries.first().map(|(at, _, _)| *at),
            self.next_republish,
            self.next_replicate,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Takes one input.
    pub fn handle(&mut self, now: Millis, input: Input) {
        match input {
            Input::Start { bootstrap } => {
                for node in bootstrap.into_iter().filter(|n| *n != self.id) {
                    self.table.observe(node);
                }
                self.next_replicate = Some(now.plus(self.config.replicate_ms.max(1)));
                self.start_lookup(now, self.key, Purpose::Join);
            }
            Input::Host { capsules, addrs } => self.host(now, capsules, addrs),
            Input::Resolve { name } => self.resolve(now, name),
            Input::Request { from, id, message } => self.on_request(now, from, id, message),
            Input::Response { id, message } => self.on_response(now, id, message),
            Input::Failed { id } => self.on_failed(now, id),
            Input::Tick => self.tick(now),
        }
    }

    fn push(&mut self, output: Output) {
        if self.outputs.len() >= PLACEMENT_OUTPUTS_MAX {
            self.stats.outputs_dropped += 1;
            return;
        }
        self.outputs.push_back(output);
    }

    /// Sends a request; `false` (counted) when the output queue is full, and then nothing
    /// waits for an answer: the caller settles what it was for.
    fn send(&mut self, now: Millis, to: NodeId, message: Message, waiting: Waiting) -> bool {
        if self.outputs.len() >= PLACEMENT_OUTPUTS_MAX {
            self.stats.outputs_dropped += 1;
            return false;
        }
        let id = self.next_request;
        self.next_request += 1;
        let deadline = now.plus(self.config.request_timeout_ms);
        self.waiting.insert(id, (waiting, deadline));
        self.deadlines.insert((deadline, id));
        self.stats.requests_sent += 1;
        self.outputs.push_back(Output::Request { to, id, message });
        true
    }

    /// Signs and places a new advert. Names the previous advert listed and this one does
    /// not are withdrawn: the new advert goes to their homes too, which drop the old one.
    fn host(&mut self, now: Millis, capsules: Vec<HostedCapsule>, addrs: Vec<String>) {
        if let Some(reason) = capsules
            .iter()
            .find_map(|c| check_capsule_name(&c.name).err().map(|r| format!("capsule {:?}: {r}", c.name)))
        {
            self.push(Output::Event(Event::HostRefused { reason }));
            return;
        }
        let mut advert = Advert::new(self.seq + 1, now, self.config.ttl_ms);
        advert.capsules = capsules;
        advert.addrs = addrs;
        let signed = match Signed::sign(advert.clone(), &self.secret) {
            Ok(signed) => signed,
            Err(err) => {
                self.push(Output::Event(Event::HostRefused { reason: format!("the advert: {err}") }));
                return;
            }
        };
        self.seq += 1;
        let dropped: Vec<String> = self
            .own
            .as_ref()
            .map(|(_, old)| {
                old.capsules
                    .iter()
                    .filter(|c| advert.hosts(&c.name).is_none())
                    .map(|c| c.name.clone())
                    .collect()
            })
            .unwrap_or_default();
        let mut names: Vec<String> = advert.capsules.iter().map(|c| c.name.clone()).collect();
        names.extend(dropped);
        names.sort();
        names.dedup();
        self.own = Some((signed.into_envelope(), advert));
        self.next_republish = Some(now.plus(self.config.republish_ms));
        for name in names {
            self.start_lookup(now, Key::of_name(&name), Purpose::Place { name });
        }
    }

    fn hosts_own(&self, name: &str) -> bool {
        self.own.as_ref().is_some_and(|(_, a)| a.hosts(name).is_some())
    }

    fn resolve(&mut self, now: Millis, name: String) {
        if let Err(reason) = check_capsule_name(&name) {
            self.push(Output::Event(Event::Unresolved { name, asked: 0, why: Unresolved::BadName(reason) }));
            return;
        }
        let key = Key::of_name(&name);
        let mut hosts: Vec<NodeId> =
            self.hosts_held(&key, now).map(|(node, _)| node).filter(|n| *n != self.id).collect();
        if self.hosts_own(&name) {
            hosts.push(self.id);
        }
        if !hosts.is_empty() {
            hosts.sort();
            self.push(Output::Event(Event::Resolved { name, hosts, asked: 0 }));
            return;
        }
        self.start_lookup(now, key, Purpose::Resolve { name });
    }

    /// Every record held for the name at `key`, expired or not.
    fn held_records<'a>(&'a self, key: &Key) -> impl Iterator<Item = (NodeId, &'a Held)> + 'a {
        self.held.range(name_range(*key)).map(|((_, node), h)| (*node, h))
    }

    fn hosts_held<'a>(&'a self, key: &Key, now: Millis) -> impl Iterator<Item = (NodeId, &'a Held)> + 'a {
        self.held_records(key).filter(move |(_, h)| h.expires_at > now)
    }

    fn start_lookup(&mut self, now: Millis, target: Key, purpose: Purpose) {
        match &purpose {
            Purpose::Resolve { .. }
                if self.lookups.values().filter(|l| matches!(l.purpose, Purpose::Resolve { .. })).count()
                    >= RESOLVES_MAX =>
            {
                if let Purpose::Resolve { name } = purpose {
                    self.push(Output::Event(Event::Unresolved { name, asked: 0, why: Unresolved::Busy }));
                }
                return;
            }
            // One placing lookup per name: the one in flight stores whatever advert is
            // current when it ends.
            Purpose::Place { name } if !self.placing_names.insert(name.clone()) => return,
            // One repair per name, and a bounded number at once (a node that finds many
            // homes gone repairs the rest at its next replication round).
            Purpose::Repair { key }
                if self.repairing.contains(key) || self.repairing.len() >= REPAIRS_MAX =>
            {
                return;
            }
            Purpose::Repair { key } => {
                self.repairing.insert(*key);
            }
            _ => {}
        }
        let width = if matches!(purpose, Purpose::Join) { JOIN_WIDTH * self.config.k } else { self.config.k };
        let seeds = self.table.closest(&target, width);
        let id = self.next_lookup;
        self.next_lookup += 1;
        self.lookups.insert(id, Lookup::new(target, width, purpose, seeds));
        self.step(now, id);
    }

    /// Sends a lookup's next asks, or finishes it.
    fn step(&mut self, now: Millis, id: u64) {
        let Some(lookup) = self.lookups.get_mut(&id) else { return };
        let alpha = match lookup.purpose {
            Purpose::Resolve { .. } => self.config.alpha,
            Purpose::Join | Purpose::Place { .. } | Purpose::Repair { .. } => self.config.place_alpha,
        };
        let asks = lookup.next(alpha);
        let target = lookup.target;
        let message = match &lookup.purpose {
            Purpose::Resolve { name } => Message::FindHosts { name: name.clone() },
            Purpose::Join | Purpose::Place { .. } | Purpose::Repair { .. } => Message::FindNode { target },
        };
        for to in asks {
            if !self.send(now, to, message.clone(), Waiting::Lookup { lookup: id, to })
                && let Some(lookup) = self.lookups.get_mut(&id)
            {
                // Not sent: skipped, but the contact stays (it did nothing wrong).
                lookup.mark(&to, Ask::Failed);
            }
        }
        let Some(lookup) = self.lookups.get(&id) else { return };
        if (lookup.is_done() || lookup.in_flight == 0)
            && let Some(lookup) = self.lookups.remove(&id)
        {
            self.finish(now, id, lookup);
        }
    }

    fn finish(&mut self, now: Millis, id: u64, lookup: Lookup) {
        let closest = lookup.answered(self.config.k);
        match lookup.purpose {
            Purpose::Repair { key } => {
                self.repairing.remove(&key);
                self.stats.repairs += 1;
                let targets: Vec<NodeId> = closest.iter().map(|(_, n)| *n).collect();
                self.store_held(now, key, targets, Some(key));
            }
            Purpose::Join => {
                let contacts = self.table.len();
                self.push(Output::Event(Event::Joined { contacts }));
            }
            Purpose::Resolve { name } => {
                self.push(Output::Event(Event::Unresolved {
                    name,
                    asked: lookup.asked,
                    why: Unresolved::NotFound,
                }));
            }
            Purpose::Place { name } => {
                self.placing_names.remove(&name);
                let Some((envelope, _)) = self.own.clone() else { return };
                let withdraw = !self.hosts_own(&name);
                // This node is a home itself when it is closer than the k-th answering node.
                let mine = self.key.distance(&lookup.target);
                let self_home =
                    closest.len() < self.config.k || closest.last().is_some_and(|(d, _)| mine < *d);
                let homes: Vec<NodeId> =
                    closest.iter().map(|(_, n)| *n).take(self.config.k - usize::from(self_home)).collect();
                let mut acked = 0;
                if self_home && self.accept(now, &envelope, &name) != Taken::Refused {
                    acked += 1;
                }
                if homes.is_empty() {
                    self.placed(name, withdraw, acked);
                    return;
                }
                self.placing.insert(id, Placing { name: name.clone(), withdraw, acked, left: homes.len() });
                let mut listed: Vec<Contact> = homes.iter().map(|n| Contact(*n.key())).collect();
                if self_home {
                    listed.push(Contact(*self.id.key()));
                }
                for to in homes {
                    let store = Message::Store {
                        name: name.clone(),
                        homes: listed.clone(),
                        adverts: vec![envelope.clone()],
                    };
                    if !self.send(now, to, store, Waiting::Store { place: Some(id), to, again: None }) {
                        self.store_settled(Some(id), false);
                    }
                }
            }
        }
    }

    fn placed(&mut self, name: String, withdraw: bool, homes: usize) {
        let event = if withdraw { Event::Withdrawn { name, homes } } else { Event::Placed { name, homes } };
        self.push(Output::Event(event));
    }

    fn on_request(&mut self, now: Millis, from: NodeId, id: u64, message: Message) {
        let k = self.config.bucket;
        let contacts = |table: &RoutingTable, target: &Key| -> Vec<Contact> {
            table
                .closest(target, k)
                .into_iter()
                .filter(|(_, n)| *n != from)
                .map(|(_, n)| Contact(*n.key()))
                .collect()
        };
        let answer = match message {
            Message::FindNode { target } => Some(Message::Nodes { closer: contacts(&self.table, &target) }),
            Message::FindHosts { name } => {
                let key = Key::of_name(&name);
                let mut adverts: Vec<Envelope> = Vec::new();
                if let Some((envelope, _)) = self.own.as_ref().filter(|_| self.hosts_own(&name)) {
                    adverts.push(envelope.clone());
                }
                adverts.extend(
                    self.hosts_held(&key, now)
                        .filter(|(host, _)| *host != self.id)
                        .map(|(_, h)| h.envelope.clone())
                        .take(ADVERTS_PER_MESSAGE_MAX - adverts.len()),
                );
                Some(Message::Hosts { closer: contacts(&self.table, &key), adverts })
            }
            Message::Store { name, homes, adverts } => {
                let mut taken = Vec::new();
                let mut held = 0u32;
                for envelope in adverts {
                    match self.accept(now, &envelope, &name) {
                        Taken::New | Taken::Withdrawn => {
                            held += 1;
                            taken.push(envelope);
                        }
                        Taken::Known => held += 1,
                        Taken::Refused => {}
                    }
                }
                self.pass_on(now, &name, from, &homes, taken);
                Some(Message::Stored { held })
            }
            // Answers are not requests: ignored.
            Message::Nodes { .. } | Message::Hosts { .. } | Message::Stored { .. } => None,
        };
        if let Some(message) = answer {
            self.push(Output::Respond { to: from, id, message });
        }
        self.observed(now, from);
    }

    /// `node` asked or answered: into the table and, when it is new there, handed the
    /// adverts of every name held here that it is nearer to than this node (the handover
    /// rule of the module docs). A newcomer meets the nodes around its own place, where
    /// the names it is a home for are held, by its join lookup (twice as wide as the others
    /// for that).
    fn observed(&mut self, now: Millis, node: NodeId) {
        if !self.table.observe(node) {
            return;
        }
        let node_key = Key::of_node(&node);
        let mut handoff: Vec<(String, Vec<Envelope>)> = Vec::new();
        for (key, name) in &self.held_names {
            if node_key.distance(key) < self.key.distance(key) {
                handoff.push((
                    name.clone(),
                    self.hosts_held(key, now).map(|(_, h)| h.envelope.clone()).collect(),
                ));
            }
        }
        let homes = [Contact(*node.key()), Contact(*self.id.key())];
        for (name, adverts) in handoff {
            self.stats.handoffs += self.send_stores(now, node, &name, &homes, &adverts, None);
        }
    }

    /// Stores `adverts` of `name` at `to` in messages of at most [`ADVERTS_PER_MESSAGE_MAX`],
    /// for a handover, a pass-on or a replication; one past [`REQUESTS_IN_FLIGHT_MAX`]
    /// requests in flight is skipped and counted. How many were sent.
    fn send_stores(
        &mut self,
        now: Millis,
        to: NodeId,
        name: &str,
        homes: &[Contact],
        adverts: &[Envelope],
        again: Option<Key>,
    ) -> u64 {
        let mut sent = 0;
        for batch in adverts.chunks(ADVERTS_PER_MESSAGE_MAX) {
            if self.waiting.len() >= REQUESTS_IN_FLIGHT_MAX {
                self.stats.handoffs_dropped += 1;
                continue;
            }
            let store =
                Message::Store { name: name.to_owned(), homes: homes.to_vec(), adverts: batch.to_vec() };
            self.send(now, to, store, Waiting::Store { place: None, to, again });
            sent += 1;
        }
        sent
    }

    /// The advert in `envelope` and when a copy held from `now` expires, if its size, body
    /// and times admit it (the signature is checked apart, last, as it costs most).
    fn admissible(&self, now: Millis, envelope: &Envelope) -> Option<(Arc<Advert>, Millis)> {
        if envelope.body().len() + ENVELOPE_OVERHEAD_MAX > ENVELOPE_BYTES_MAX {
            return None;
        }
        let advert = self.verifier.peek_advert(envelope).ok()?;
        let ttl = advert.ttl_ms.min(self.config.ttl_ms);
        let expires_at = now.plus(ttl).min(advert.issued_at.plus(ttl).plus(self.config.clock_skew_max_ms));
        let fresh = expires_at > now && advert.issued_at <= now.plus(self.config.clock_skew_max_ms);
        fresh.then_some((advert, expires_at))
    }

    /// Takes `envelope` for `name`. A store is taken from anyone: who is a home is the
    /// storer's finding (its lookup, or a home handing over), which this node's own view
    /// cannot overrule better; what a store can make it hold is bounded by
    /// `hosts_per_name_max` and `records_max`, and only adverts whose signatures verify.
    /// An advert that lists the name is held when newer than the one held; one that does
    /// not, but is newer than the one held, withdraws it.
    fn accept(&mut self, now: Millis, envelope: &Envelope, name: &str) -> Taken {
        let Some((advert, expires_at)) = self.admissible(now, envelope) else {
            self.stats.adverts_refused += 1;
            return Taken::Refused;
        };
        let key = Key::of_name(name);
        let host = NodeId::from_key(envelope.signer());
        if let Some(held) = self.held.get_mut(&(key, host))
            && held.seq == advert.seq
        {
            held.stored_at = now;
            return Taken::Known;
        }
        let held = self.held.get(&(key, host));
        if held.is_some_and(|h| h.seq > advert.seq) {
            return Taken::Refused;
        }
        if advert.hosts(name).is_none() {
            if held.is_none() || !self.verifier.verify(envelope) {
                self.stats.adverts_refused += 1;
                return Taken::Refused;
            }
            self.drop_held(key, host);
            self.stats.withdrawals += 1;
            return Taken::Withdrawn;
        }
        let full_name = self.hosts_held(&key, now).count() >= self.config.hosts_per_name_max;
        if held.is_none() && (full_name || self.held.len() >= self.config.records_max) {
            return Taken::Refused;
        }
        if !self.verifier.verify(envelope) {
            self.stats.adverts_refused += 1;
            return Taken::Refused;
        }
        let envelope = self.verifier.share(envelope.clone());
        if let Some(old) =
            self.held.insert((key, host), Held { envelope, seq: advert.seq, expires_at, stored_at: now })
        {
            self.expiries.remove(&(old.expires_at, key, host));
        }
        self.expiries.insert((expires_at, key, host));
        self.held_names.entry(key).or_insert_with(|| name.to_owned());
        self.stats.adverts_held += 1;
        Taken::New
    }

    /// Every `replicate_ms`, each name this node holds an advert of that no one stored here
    /// in the last round (Kademlia's rule, per record: whoever stored it then reached the
    /// other homes too) is
    /// looked up and stored at its nearest nodes: homes that left are replaced by the next
    /// nearest, which this node's table alone may not know. At most [`REPAIRS_MAX`] at
    /// once; the rest are due again next round.
    fn replicate(&mut self, now: Millis) {
        let since = Millis(now.0.saturating_sub(self.config.replicate_ms));
        let due: Vec<Key> = self
            .held_names
            .keys()
            .filter(|key| self.held_records(key).any(|(_, h)| h.stored_at <= since))
            .copied()
            .collect();
        for key in due {
            self.start_lookup(now, key, Purpose::Repair { key });
        }
    }

    /// Sends what this node holds for the name at `key` to `targets`, bounded like
    /// handovers. One that holds it already answers at once, without a signature check
    /// (same sequence number); one that took a departed home's place gets it.
    fn store_held(&mut self, now: Millis, key: Key, targets: Vec<NodeId>, again: Option<Key>) {
        let Some(name) = self.held_names.get(&key).cloned() else { return };
        let adverts: Vec<Envelope> = self.hosts_held(&key, now).map(|(_, h)| h.envelope.clone()).collect();
        let targets: Vec<NodeId> = targets.into_iter().filter(|n| *n != self.id).collect();
        if targets.is_empty() || adverts.is_empty() {
            return;
        }
        for (_, held) in self.held.range_mut(name_range(key)) {
            held.stored_at = now;
        }
        let mut homes: Vec<Contact> = targets.iter().map(|n| Contact(*n.key())).collect();
        homes.push(Contact(*self.id.key()));
        homes.truncate(CONTACTS_PER_ANSWER_MAX);
        for to in targets {
            self.stats.replications += self.send_stores(now, to, &name, &homes, &adverts, again);
        }
    }

    fn drop_held(&mut self, key: Key, host: NodeId) {
        if let Some(old) = self.held.remove(&(key, host)) {
            self.expiries.remove(&(old.expires_at, key, host));
        }
        if self.held_records(&key).next().is_none() {
            self.held_names.remove(&key);
        }
    }

    /// Passes adverts (or withdrawals) just taken for `name` on to the nodes this node
    /// knows that are nearer the name than it, among the `k` nearest, and not in `homes`
    /// (nor `from`): the storer may not have known them (its lookup ended early, or they
    /// joined since). The store they get names them and this node first, then as many of
    /// `homes` as fit.
    fn pass_on(&mut self, now: Millis, name: &str, from: NodeId, homes: &[Contact], taken: Vec<Envelope>) {
        if taken.is_empty() {
            return;
        }
        let key = Key::of_name(name);
        let mine = self.key.distance(&key);
        let listed = |n: &NodeId| *n == from || homes.iter().any(|c| c.node() == *n);
        let targets: Vec<NodeId> = self
            .table
            .closest(&key, self.config.k)
            .into_iter()
            .filter(|(d, n)| *d < mine && !listed(n))
            .map(|(_, n)| n)
            .collect();
        if targets.is_empty() {
            return;
        }
        let mut known: Vec<Contact> = vec![Contact(*self.id.key())];
        known.extend(targets.iter().map(|n| Contact(*n.key())));
        known.extend(homes.iter().copied());
        known.truncate(CONTACTS_PER_ANSWER_MAX);
        for to in targets {
            self.stats.handoffs += self.send_stores(now, to, name, &known, &taken, None);
        }
    }

    fn on_response(&mut self, now: Millis, id: u64, message: Message) {
        let Some((waiting, deadline)) = self.waiting.remove(&id) else { return };
        self.deadlines.remove(&(deadline, id));
        self.stats.requests_answered += 1;
        match waiting {
            Waiting::Lookup { lookup, to } => {
                self.observed(now, to);
                let (closer, adverts) = match message {
                    Message::Nodes { closer } => (closer, Vec::new()),
                    Message::Hosts { closer, adverts } => (closer, adverts),
                    _ => (Vec::new(), Vec::new()),
                };
                let Some(state) = self.lookups.get_mut(&lookup) else { return };
                state.mark(&to, Ask::Answered);
                // As many as were asked for: more would only be more to try.
                for contact in closer.iter().take(self.config.bucket) {
                    state.offer(contact.node(), &self.id);
                }
                if let Purpose::Resolve { name } = &state.purpose {
                    let name = name.clone();
                    let asked = state.asked;
                    let hosts = self.verified_hosts(now, &name, &adverts);
                    if !hosts.is_empty() {
                        self.lookups.remove(&lookup);
                        self.push(Output::Event(Event::Resolved { name, hosts, asked }));
                        return;
                    }
                }
                self.step(now, lookup);
            }
            Waiting::Store { place, to, .. } => {
                self.observed(now, to);
                let held = matches!(message, Message::Stored { held } if held > 0);
                self.store_settled(place, held);
            }
        }
    }

    /// The hosts of `name` among `adverts` that are admissible now, list the name, and
    /// whose signatures verify.
    fn verified_hosts(&self, now: Millis, name: &str, adverts: &[Envelope]) -> Vec<NodeId> {
        let mut hosts: Vec<NodeId> = adverts
            .iter()
            .filter(|e| self.admissible(now, e).is_some_and(|(a, _)| a.hosts(name).is_some()))
            .filter(|e| self.verifier.verify(e))
            .map(|e| NodeId::from_key(e.signer()))
            .collect();
        hosts.sort();
        hosts.dedup();
        hosts
    }

    fn store_settled(&mut self, place: Option<u64>, held: bool) {
        let Some(id) = place else { return };
        let Some(placing) = self.placing.get_mut(&id) else { return };
        placing.acked += usize::from(held);
        placing.left -= 1;
        if placing.left == 0
            && let Some(Placing { name, withdraw, acked, .. }) = self.placing.remove(&id)
        {
            self.placed(name, withdraw, acked);
        }
    }

    fn on_failed(&mut self, now: Millis, id: u64) {
        let Some((waiting, deadline)) = self.waiting.remove(&id) else { return };
        self.deadlines.remove(&(deadline, id));
        self.stats.requests_failed += 1;
        match waiting {
            Waiting::Lookup { lookup, to } => {
                self.table.remove(&to);
                if let Some(state) = self.lookups.get_mut(&lookup) {
                    state.mark(&to, Ask::Failed);
                    // The table's next nearest stand in: without them a lookup whose seeds
                    // all left would end without one answer.
                    for (_, node) in self.table.closest(&state.target, state.width) {
                        state.offer(node, &self.id);
                    }
                }
                self.step(now, lookup);
            }
            Waiting::Store { place, to, again } => {
                self.table.remove(&to);
                self.store_settled(place, false);
                // A home that left: look the name's nearest nodes up now and store there,
                // rather than wait a round (the table alone may not know who is next).
                if let Some(key) = again
                    && self.held_names.contains_key(&key)
                {
                    self.start_lookup(now, key, Purpose::Repair { key });
                }
            }
        }
    }

    fn tick(&mut self, now: Millis) {
        while let Some(&(at, id)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.deadlines.pop_first();
            self.on_failed(now, id);
        }
        while let Some(&(at, key, host)) = self.expiries.first() {
            if at > now {
                break;
            }
            self.expiries.pop_first();
            if self.held.get(&(key, host)).is_some_and(|h| h.expires_at == at) {
                self.drop_held(key, host);
            }
        }
        if self.next_replicate.is_some_and(|at| at <= now) {
            self.next_replicate = Some(now.plus(self.config.replicate_ms.max(1)));
            self.replicate(now);
        }
        if self.next_republish.is_some_and(|at| at <= now) {
            self.next_republish = Some(now.plus(self.config.republish_ms));
            if let Some((_, advert)) = self.own.clone() {
                self.host(now, advert.capsules, advert.addrs);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::Ed25519Verifier;

    fn key(i: u8) -> SecretKey {
        SecretKey::from_seed([i; 32])
    }

    fn capsule(name: &str) -> HostedCapsule {
        HostedCapsule { name: name.into(), digest: None, version: "1.0.0".into() }
    }

    /// Nodes wired to each other directly: every request answered at once, in order.
    struct Net {
        nodes: BTreeMap<NodeId, PlacementNode>,
        events: Vec<(NodeId, Event)>,
        /// Nodes whose requests fail.
        down: BTreeSet<NodeId>,
        now: Millis,
    }

    impl Net {
        fn new(n: u8) -> Self {
            let verifier: Arc<dyn Verifier> = Arc::new(Ed25519Verifier);
            let nodes = (1..=n)
                .map(|i| {
                    let node = PlacementNode::new(key(i), PlacementConfig::default(), verifier.clone());
                    (node.id(), node)
                })
                .collect();
            Self { nodes, events: Vec::new(), down: BTreeSet::new(), now: Millis(1_000) }
        }

        fn ids(&self) -> Vec<NodeId> {
            self.nodes.keys().copied().collect()
        }

        fn input(&mut self, node: NodeId, input: Input) {
            let mut queue = VecDeque::from([(node, input)]);
            while let Some((at, input)) = queue.pop_front() {
                let Some(n) = self.nodes.get_mut(&at) else { continue };
                n.handle(self.now, input);
                let outputs: Vec<Output> = std::iter::from_fn(|| n.poll_output()).collect();
                for out in outputs {
                    match out {
                        Output::Request { to, id, message } => {
                            let bytes = message.encode();
                            if self.down.contains(&to) || !self.nodes.contains_key(&to) {
                                queue.push_back((at, Input::Failed { id }));
                                continue;
                            }
                            let message = Message::decode(&bytes).expect("decodes");
                            // The responder's answer comes back through `Respond`.
                            queue.push_back((to, Input::Request { from: at, id, message }));
                        }
                        Output::Respond { to, id, message } => {
                            let message = Message::decode(&message.encode()).expect("decodes");
                            queue.push_back((to, Input::Response { id, message }));
                        }
                        Output::Event(event) => self.events.push((at, event)),
                    }
                }
            }
        }
    }

    fn joined(n: u8) -> Net {
        let mut net = Net::new(n);
        let ids = net.ids();
        for (i, id) in ids.iter().enumerate() {
            let bootstrap = if i == 0 { Vec::new() } else { vec![ids[0]] };
            net.input(*id, Input::Start { bootstrap });
        }
        net
    }

    #[test]
    fn distance_is_xor_and_orders_big_endian() {
        let a = Key([0; 32]);
        let mut b = [0u8; 32];
        b[0] = 0x10;
        let mut c = [0u8; 32];
        c[31] = 0xff;
        assert!(a.distance(&Key(c)) < a.distance(&Key(b)));
        assert_eq!(a.distance(&Key(b)).leading_zeros(), 3);
        assert_eq!(a.distance(&a).leading_zeros(), 256);
        assert_eq!(Key(b).distance(&Key(c)), Key(c).distance(&Key(b)));
    }

    #[test]
    fn a_full_bucket_keeps_its_old_contacts() {
        let local = Key([0; 32]);
        let mut table = RoutingTable::new(local, 2);
        // Ids whose keys share bucket 0 (first bit set) with each other.
        let ids: Vec<NodeId> = (1..=40u8)
            .map(|i| key(i).node_id())
            .filter(|id| Key::of_node(id).0[0] & 0x80 != 0)
            .take(3)
            .collect();
        assert!(table.observe(ids[0]));
        assert!(table.observe(ids[1]));
        assert!(!table.observe(ids[2]), "the bucket is full");
        assert!(!table.contains(&ids[2]));
        table.remove(&ids[0]);
        assert!(table.observe(ids[2]), "room after a failure");
    }

    #[test]
    fn an_advert_is_placed_at_the_names_k_closest_nodes_and_resolved_from_anywhere() {
        let mut net = joined(40);
        let ids = net.ids();
        let host = ids[5];
        net.input(host, Input::Host { capsules: vec![capsule("echo")], addrs: Vec::new() });
        let placed = net.events.iter().find_map(|(n, e)| match e {
            Event::Placed { name, homes } if *n == host && name == "echo" => Some(*homes),
            _ => None,
        });
        assert_eq!(placed, Some(8), "{:?}", net.events);
        // The true homes: the 8 nodes closest to the name.
        let target = Key::of_name("echo");
        let mut by_distance: Vec<NodeId> = ids.clone();
        by_distance.sort_by_key(|id| Key::of_node(id).distance(&target));
        for home in &by_distance[..8] {
            assert!(net.nodes[home].holds("echo", &host, Millis(1_000)), "home {home} lacks the advert");
        }
        for far in &by_distance[16..] {
            assert!(!net.nodes[far].holds("echo", &host, Millis(1_000)), "{far} is no home but holds it");
        }
        let asker = by_distance[39];
        net.input(asker, Input::Resolve { name: "echo".into() });
        let resolved = net.events.iter().rev().find_map(|(n, e)| match e {
            Event::Resolved { name, hosts, .. } if *n == asker && name == "echo" => Some(hosts.clone()),
            _ => None,
        });
        assert_eq!(resolved, Some(vec![host]));
    }

    #[test]
    fn a_name_nobody_hosts_is_unresolved_and_a_late_home_gets_the_adverts_handed_over() {
        let mut net = joined(20);
        let ids = net.ids();
        net.input(ids[3], Input::Resolve { name: "nobody".into() });
        assert!(
            net.events
                .iter()
                .any(|(_, e)| matches!(e, Event::Unresolved { name, why: Unresolved::NotFound, .. } if name == "nobody"))
        );
        net.input(ids[3], Input::Host { capsules: vec![capsule("late")], addrs: Vec::new() });
        // Newcomers join; those now among the name's closest must receive the advert.
        let verifier: Arc<dyn Verifier> = Arc::new(Ed25519Verifier);
        for i in 100..140u8 {
            let node = PlacementNode::new(key(i), PlacementConfig::default(), verifier.clone());
            let id = node.id();
            net.nodes.insert(id, node);
            net.input(id, Input::Start { bootstrap: vec![ids[0]] });
        }
        let target = Key::of_name("late");
        let mut all = net.ids();
        all.sort_by_key(|id| Key::of_node(id).distance(&target));
        let holding =
            all[..8].iter().filter(|id| net.nodes[*id].holds("late", &ids[3], Millis(1_000))).count();
        assert!(holding >= 6, "{holding} of the 8 closest hold the advert after the joins");
    }

    #[test]
    fn a_forged_advert_is_not_held_nor_resolved() {
        let mut net = joined(12);
        let ids = net.ids();
        // An advert signed by node 1 but claiming node 2 as signer: the bytes are altered.
        let mut advert = Advert::new(1, Millis(1_000), 60_000);
        advert.capsules = vec![capsule("echo")];
        let genuine = Signed::sign(advert, &key(1)).expect("signs").into_envelope();
        let mut bytes = genuine.encode();
        let at = bytes.windows(4).position(|w| w == b"echo").expect("the name is in the body");
        bytes[at] = b'f';
        let forged = Envelope::decode(&bytes).expect("still an envelope");
        for id in &ids {
            net.input(
                *id,
                Input::Request {
                    from: ids[0],
                    id: 9,
                    message: Message::Store {
                        name: "fcho".into(),
                        homes: Vec::new(),
                        adverts: vec![forged.clone()],
                    },
                },
            );
        }
        assert!(ids.iter().all(|id| net.nodes[id].held_len() == 0));
    }

    #[test]
    fn a_store_holds_an_advert_only_under_a_name_it_lists() {
        let mut net = joined(6);
        let ids = net.ids();
        let mut advert = Advert::new(1, Millis(1_000), 60_000);
        advert.capsules = vec![capsule("echo")];
        let envelope = Signed::sign(advert, &key(1)).expect("signs").into_envelope();
        let store = |name: &str| Message::Store {
            name: name.into(),
            homes: Vec::new(),
            adverts: vec![envelope.clone()],
        };
        net.input(ids[2], Input::Request { from: ids[0], id: 1, message: store("other") });
        assert_eq!(net.nodes[&ids[2]].held_len(), 0, "held under a name the advert does not list");
        net.input(ids[2], Input::Request { from: ids[0], id: 2, message: store("echo") });
        assert!(net.nodes[&ids[2]].holds("echo", &key(1).node_id(), Millis(1_000)));
        assert!(!net.nodes[&ids[2]].holds("other", &key(1).node_id(), Millis(1_000)));
    }

    #[test]
    fn an_unreachable_contact_is_dropped_and_the_lookup_goes_on() {
        let mut net = joined(30);
        let ids = net.ids();
        let target = Key::of_name("echo");
        let mut by_distance = ids.clone();
        by_distance.sort_by_key(|id| Key::of_node(id).distance(&target));
        net.down.insert(by_distance[0]);
        let host = by_distance[20];
        net.input(host, Input::Host { capsules: vec![capsule("echo")], addrs: Vec::new() });
        assert!(!net.nodes[&host].table().contains(&by_distance[0]));
        let homes = net.events.iter().find_map(|(n, e)| match e {
            Event::Placed { homes, .. } if *n == host => Some(*homes),
            _ => None,
        });
        assert_eq!(homes, Some(8), "the next closest stood in");
    }

    #[test]
    fn messages_over_their_bounds_are_refused() {
        let closer = vec![Contact(*key(1).node_id().key()); CONTACTS_PER_ANSWER_MAX + 1];
        let err = Message::decode(&Message::Nodes { closer }.encode()).expect_err("too many contacts");
        assert!(err.to_string().contains("closer"), "{err}");
        let err = Message::decode(&Message::FindHosts { name: "not a name!".into() }.encode())
            .expect_err("bad name");
        assert!(err.to_string().contains("name"), "{err}");
        let mut bytes = Message::FindNode { target: Key([7; 32]) }.encode();
        bytes.push(0);
        assert!(Message::decode(&bytes).is_err(), "trailing bytes");
        assert_eq!(
            Message::decode(&Message::FindNode { target: Key([7; 32]) }.encode()).expect("decodes"),
            Message::FindNode { target: Key([7; 32]) }
        );
    }
    /// The largest advert an issuer can sign: capsules with the longest names until the
    /// body's bound.
    fn largest_envelope(i: u8) -> Envelope {
        let mut last = None;
        let mut advert = Advert::new(1, Millis(1_000), 60_000);
        for n in 0..crate::limits::ADVERT_CAPSULES_MAX {
            let mut name = format!("c{n}-");
            name.extend(std::iter::repeat_n('x', CAPSULE_NAME_LEN_MAX - name.len()));
            advert.capsules.push(HostedCapsule {
                name,
                digest: Some(Digest::of(&[i, n as u8])),
                version: "1.0.0-rc.1+build.1234567890".into(),
            });
            match Signed::sign(advert.clone(), &key(i)) {
                Ok(signed) => last = Some(signed.into_envelope()),
                Err(_) => break,
            }
        }
        last.expect("one capsule fits")
    }

    #[test]
    fn the_largest_answer_a_node_builds_is_within_the_message_bound() {
        let envelope = largest_envelope(1);
        assert!(
            envelope.body().len() > crate::limits::ADVERT_BYTES_MAX * 9 / 10,
            "{}",
            envelope.body().len()
        );
        let closer = vec![Contact(*key(2).node_id().key()); CONTACTS_PER_ANSWER_MAX];
        let store = Message::Store {
            name: "x".repeat(CAPSULE_NAME_LEN_MAX),
            homes: closer.clone(),
            adverts: vec![envelope.clone(); ADVERTS_PER_MESSAGE_MAX],
        };
        let bytes = store.encode();
        assert!(bytes.len() <= PLACEMENT_MESSAGE_BYTES_MAX, "{} bytes", bytes.len());
        assert_eq!(Message::decode(&bytes).expect("a full store decodes"), store);
        // Small adverts, so that the count is what trips.
        let mut small = Advert::new(1, Millis(1_000), 60_000);
        small.capsules = vec![capsule("echo")];
        let small = Signed::sign(small, &key(1)).expect("signs").into_envelope();
        let hosts = Message::Hosts { closer, adverts: vec![small; ADVERTS_PER_MESSAGE_MAX + 1] };
        let err = Message::decode(&hosts.encode()).expect_err("one advert too many");
        assert!(err.to_string().contains("adverts"), "{err}");
    }

    #[test]
    fn a_bad_name_is_refused_before_anything_is_sent() {
        let mut net = joined(10);
        let ids = net.ids();
        let contacts = net.nodes[&ids[4]].table().len();
        let mut node = net.nodes.remove(&ids[4]).expect("node");
        node.handle(Millis(1_000), Input::Resolve { name: "Not A Name".into() });
        let outputs: Vec<Output> = std::iter::from_fn(|| node.poll_output()).collect();
        assert!(
            matches!(
                &outputs[..],
                [Output::Event(Event::Unresolved { why: Unresolved::BadName(_), asked: 0, .. })]
            ),
            "{outputs:?}"
        );
        node.handle(
            Millis(1_000),
            Input::Host { capsules: vec![capsule("echo"), capsule("Bad Name")], addrs: Vec::new() },
        );
        let outputs: Vec<Output> = std::iter::from_fn(|| node.poll_output()).collect();
        assert!(
            matches!(&outputs[..], [Output::Event(Event::HostRefused { reason })] if reason.contains("Bad Name")),
            "{outputs:?}"
        );
        assert_eq!(node.table().len(), contacts, "no contact dropped");
    }

    #[test]
    fn a_host_of_more_capsules_than_resolves_in_flight_places_every_one() {
        let mut net = joined(30);
        let ids = net.ids();
        let capsules: Vec<HostedCapsule> = (0..100).map(|i| capsule(&format!("svc-{i}"))).collect();
        net.input(ids[7], Input::Host { capsules, addrs: Vec::new() });
        let placed = net
            .events
            .iter()
            .filter(|(n, e)| *n == ids[7] && matches!(e, Event::Placed { homes: 8, .. }))
            .count();
        assert_eq!(placed, 100);
    }

    #[test]
    fn a_second_host_while_placing_does_not_start_a_second_lookup_for_a_name() {
        let verifier: Arc<dyn Verifier> = Arc::new(Ed25519Verifier);
        let mut node = PlacementNode::new(key(1), PlacementConfig::default(), verifier);
        node.handle(Millis(0), Input::Start { bootstrap: vec![key(2).node_id()] });
        let _ = std::iter::from_fn(|| node.poll_output()).count();
        node.handle(Millis(1), Input::Host { capsules: vec![capsule("echo")], addrs: Vec::new() });
        node.handle(
            Millis(2),
            Input::Host { capsules: vec![capsule("echo")], addrs: vec!["/ip4/10.0.0.1/tcp/1".into()] },
        );
        let asks = std::iter::from_fn(|| node.poll_output())
            .filter(|o| matches!(o, Output::Request { message: Message::FindNode { target }, .. } if *target == Key::of_name("echo")))
            .count();
        // The join already asks the one contact; each placing lookup asks it once more.
        assert_eq!(asks, 1);
    }

    #[test]
    fn a_name_no_longer_hosted_is_withdrawn_from_its_homes() {
        let mut net = joined(30);
        let ids = net.ids();
        let host = ids[11];
        let both = vec![capsule("echo"), capsule("wc")];
        net.input(host, Input::Host { capsules: both, addrs: Vec::new() });
        let holding = |net: &Net, name: &str| {
            net.nodes.values().filter(|n| n.holds(name, &host, Millis(1_000))).count()
        };
        assert_eq!(holding(&net, "echo"), 8);
        net.input(host, Input::Host { capsules: vec![capsule("wc")], addrs: Vec::new() });
        assert!(
            net.events
                .iter()
                .any(|(n, e)| *n == host && *e == Event::Withdrawn { name: "echo".into(), homes: 8 }),
            "{:?}",
            net.events
        );
        assert_eq!(holding(&net, "echo"), 0);
        assert_eq!(holding(&net, "wc"), 8, "the name still hosted stays");
        net.input(ids[3], Input::Resolve { name: "echo".into() });
        assert!(
            net.events
                .iter()
                .any(|(n, e)| *n == ids[3] && matches!(e, Event::Unresolved { name, .. } if name == "echo"))
        );
    }

    #[test]
    fn a_resolver_takes_no_expired_advert() {
        let verifier: Arc<dyn Verifier> = Arc::new(Ed25519Verifier);
        let mut node = PlacementNode::new(key(1), PlacementConfig::default(), verifier);
        let peer = key(2).node_id();
        node.handle(Millis(0), Input::Start { bootstrap: vec![peer] });
        let _ = std::iter::from_fn(|| node.poll_output()).count();
        let now = Millis(10_000_000);
        node.handle(now, Input::Resolve { name: "echo".into() });
        let id = std::iter::from_fn(|| node.poll_output())
            .find_map(|o| match o {
                Output::Request { id, message: Message::FindHosts { .. }, .. } => Some(id),
                _ => None,
            })
            .expect("asks its contact");
        // Signed long ago with a one-minute TTL: well past it, and past the clock skew.
        let mut advert = Advert::new(1, Millis(1_000), 60_000);
        advert.capsules = vec![capsule("echo")];
        let stale = Signed::sign(advert, &key(3)).expect("signs").into_envelope();
        node.handle(
            now,
            Input::Response { id, message: Message::Hosts { closer: Vec::new(), adverts: vec![stale] } },
        );
        let events: Vec<Output> = std::iter::from_fn(|| node.poll_output()).collect();
        assert!(
            matches!(&events[..], [Output::Event(Event::Unresolved { why: Unresolved::NotFound, .. })]),
            "{events:?}"
        );
    }

    #[test]
    fn a_lookup_keeps_a_bounded_number_of_candidates() {
        let target = Key([0x55; 32]);
        let mut lookup = Lookup::new(target, 8, Purpose::Join, Vec::new());
        let local = key(0).node_id();
        for i in 1..=200u8 {
            lookup.offer(key(i).node_id(), &local);
        }
        assert_eq!(lookup.candidates.len(), CANDIDATES_PER_WIDTH * 8);
        // The closest are the ones kept.
        let mut all: Vec<Distance> =
            (1..=200u8).map(|i| Key::of_node(&key(i).node_id()).distance(&target)).collect();
        all.sort();
        assert_eq!(lookup.candidates.keys().copied().collect::<Vec<_>>(), all[..32]);
    }

    #[test]
    fn a_request_dropped_at_a_full_output_queue_does_not_cost_the_contact() {
        let verifier: Arc<dyn Verifier> = Arc::new(Ed25519Verifier);
        let mut node = PlacementNode::new(key(1), PlacementConfig::default(), verifier);
        let peer = key(2).node_id();
        node.handle(Millis(0), Input::Start { bootstrap: vec![peer] });
        let join = std::iter::from_fn(|| node.poll_output())
            .find_map(|o| if let Output::Request { id, .. } = o { Some(id) } else { None })
            .expect("the join asks");
        node.handle(Millis(1), Input::Response { id: join, message: Message::Nodes { closer: Vec::new() } });
        let _ = std::iter::from_fn(|| node.poll_output()).count();
        // The driver does not poll: answers fill the queue.
        for id in 0..PLACEMENT_OUTPUTS_MAX as u64 {
            node.handle(
                Millis(1),
                Input::Request { from: peer, id, message: Message::FindNode { target: Key([1; 32]) } },
            );
        }
        node.handle(Millis(1), Input::Resolve { name: "echo".into() });
        assert!(node.stats().outputs_dropped > 0);
        node.handle(Millis(60_000), Input::Tick);
        assert!(node.table().contains(&peer), "the contact did nothing wrong");
    }

    #[test]
    fn a_host_that_is_its_own_home_names_itself_once() {
        let mut net = joined(5);
        let ids = net.ids();
        net.input(ids[2], Input::Host { capsules: vec![capsule("echo")], addrs: Vec::new() });
        assert!(
            net.nodes[&ids[2]].holds("echo", &ids[2], Millis(1_000)),
            "fewer nodes than k: all are homes"
        );
        net.input(ids[2], Input::Resolve { name: "echo".into() });
        let resolved = net.events.iter().rev().find_map(|(n, e)| match e {
            Event::Resolved { hosts, .. } if *n == ids[2] => Some(hosts.clone()),
            _ => None,
        });
        assert_eq!(resolved, Some(vec![ids[2]]));
        let node = net.nodes.get_mut(&ids[2]).expect("node");
        node.handle(
            Millis(1_000),
            Input::Request { from: ids[0], id: 7, message: Message::FindHosts { name: "echo".into() } },
        );
        let adverts = std::iter::from_fn(|| node.poll_output()).find_map(|o| match o {
            Output::Respond { message: Message::Hosts { adverts, .. }, .. } => Some(adverts.len()),
            _ => None,
        });
        assert_eq!(adverts, Some(1));
    }

    #[test]
    fn homes_replicate_what_they_hold_so_a_departed_home_is_replaced() {
        let mut net = joined(30);
        let ids = net.ids();
        let host = ids[9];
        net.input(host, Input::Host { capsules: vec![capsule("echo")], addrs: Vec::new() });
        let target = Key::of_name("echo");
        let mut by_distance: Vec<NodeId> = ids.iter().copied().filter(|id| *id != host).collect();
        by_distance.sort_by_key(|id| Key::of_node(id).distance(&target));
        let gone = by_distance[0];
        net.nodes.remove(&gone);
        net.down.insert(gone);
        let replacement = by_distance[8];
        let holds = |net: &Net, id: &NodeId, now: Millis| net.nodes[id].holds("echo", &host, now);
        let replicate_ms = PlacementConfig::default().replicate_ms;
        // Before a replication round, whether the ninth nearest holds it is chance; after
        // one, the nearest eight that are left all do.
        net.now = Millis(1_000 + replicate_ms);
        for id in net.ids() {
            net.input(id, Input::Tick);
        }
        let now = net.now;
        for id in &by_distance[1..9] {
            assert!(holds(&net, id, now), "home {id} lacks the advert after a replication round");
        }
        assert!(holds(&net, &replacement, now));
        assert!(net.nodes.values().any(|n| n.stats().replications > 0));
    }
}
