//! The directory: every live node advert this node knows, as a sans-IO state machine.
//!
//! The directory accepts a node's advert only when it is signed by that node, newer than
//! the one it holds, fresh, and (in a closed mesh) carries a valid node certificate. It
//! drops adverts whose TTL passes without a newer one, answers "which nodes host capsule
//! NAME", and supports anti-entropy: [`Directory::digest`] summarizes what it holds and
//! [`Directory::missing_for`] yields the adverts a peer's digest shows it is missing.
//!
//! # Driving it
//!
//! ```text
//! loop {
//!     directory.handle(now, input);              // an advert, or Tick
//!     while let Some(out) = directory.poll_output() { carry it out }
//!     wake me at directory.poll_timeout() and call handle(now, Input::Tick)
//! }
//! ```
//!
//! Time is the driver's clock in milliseconds; the directory never reads one. All maps are
//! ordered, so iteration order (and therefore every output) depends only on the inputs.
//!
//! # Lifetimes of an advert
//!
//! An accepted advert expires at `min(received + ttl, issued_at + ttl + skew)`, where ttl is
//! clamped to the configured maximum: it lives no longer than its TTL after we saw it, and
//! no copy, however late it arrives, outlives its issuer's intent by more than the clock
//! skew allowance. When it expires we keep a tombstone (node, seq) until the advert could no
//! longer pass the freshness check, so a replay of it in between is refused too.
//!
//! A departure notice ([`crate::departure::Departure`]) ends the very advert it names (by
//! sequence number and signature) early: [`Directory::depart`] drops it and keeps the notice and the
//! advert in its tombstone, and [`Directory::notices_for`] hands both to a peer whose digest
//! shows it still holds that advert or an older one. A notice that
//! names a node or a witness this directory does not know yet (a newcomer still filling its
//! directory) is parked for [`PENDING_NOTICE_MS`] and judged again when an advert of either
//! arrives: otherwise the departed node's advert, arriving after the notice, would stay.
//!
//! # Crowding
//!
//! In an open mesh anyone can mint identities, so a directory bounds what they can take:
//!
//! - A node not connected here is admitted only while fewer than `range_max` held records
//!   claim its address range (the first address's IPv4 /24, IPv6 /48, or DNS domain) and
//!   fewer than `peer_max` held records came from the peer that delivered it.
//! - A full directory makes room for a newcomer by evicting the record its node refreshed
//!   least recently (the oldest `issued_at`), if the newcomer was issued later: honest
//!   nodes re-sign their advert every refresh interval, so identities minted once with
//!   long TTLs age out of the way of every honest join. Relays cannot make a record look
//!   fresher: the issue time is under its node's signature.
//! - Connected nodes (see [`Directory::anchor`]) and this node's own advert are never
//!   evicted and are not held to the range and peer bounds; a connected newcomer evicts
//!   even a fresher record.
//!
//! What remains open to an attacker: identities re-signed faster than honest nodes refresh,
//! spread over many claimed ranges and delivered through many peers, can still crowd out
//! the records of nodes not connected here. A closed mesh (node certificates) is the answer
//! to that; see the trust guide.
//!
//! # Shared bases
//!
//! A directory may start from a [`DirectoryBase`] that many directories share, and then
//! keeps only its own changes: the records it added, and which base records it replaced
//! or dropped. Reads see the union. The simulator starts the nodes of a large mesh this way
//! (10,000 directories of 10,000 adverts each would otherwise be 10⁸ records); `murnode`
//! starts from the empty base.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::advert::{Advert, HostedCapsule};
use crate::cert::verify_cert_with;
use crate::codec::{self, DecodeError};
use crate::departure::Departure;
use crate::digest::Digest;
use crate::identity::{NodeId, PublicKey};
use crate::limits::{
    DIGEST_ENTRIES_MAX, DIRECTORY_NODES_MAX, DIRECTORY_OUTPUTS_MAX, DIRECTORY_PEER_MAX, DIRECTORY_RANGE_MAX,
    ENVELOPE_OVERHEAD_MAX, PENDING_NOTICES_MAX,
};
use crate::plant::{Plant, Plants};
use crate::revocation::{RevocationRefusal, Revocations, Taken};
use crate::signed::{Envelope, OpenError};
use crate::sync::{Buckets, Scope, Summary};
use crate::time::Millis;
use crate::verify::{Ed25519Verifier, Verifier};

/// How long a departure notice naming a node or witness this directory does not know waits
/// for an advert of either (see the module docs).
pub const PENDING_NOTICE_MS: u64 = 60_000;

/// Who may have adverts accepted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Admission {
    /// Any node with a valid self-signed advert.
    #[default]
    Open,
    /// Only nodes whose advert carries a certificate from one of these authorities.
    Closed { authorities: Vec<PublicKey> },
}

/// How a directory judges adverts.
#[derive(Clone, Debug)]
pub struct DirectoryConfig {
    /// Longest TTL honoured; an advert asking for more is held this long.
    pub ttl_max_ms: u64,
    /// Clock difference tolerated between an advert's issuer and us.
    pub clock_skew_max_ms: u64,
    /// Nodes held at most. A full directory makes room for a newcomer by evicting the
    /// record its node refreshed least recently, if the newcomer is fresher (see
    /// "Crowding" in the module docs); otherwise it refuses the newcomer.
    pub nodes_max: usize,
    /// Records of nodes not connected here that may claim one address range (an IPv4 /24,
    /// an IPv6 /48, or a DNS name's last two labels).
    pub range_max: usize,
    /// Records of nodes not connected here that one peer may have delivered.
    pub peer_max: usize,
    /// Open or closed mesh.
    pub admission: Admission,
    /// Authorities whose revocation lists this directory takes (`trust.authorities`): a
    /// node one of them revoked is refused and dropped, open mesh or closed.
    pub authorities: Vec<PublicKey>,
    /// Planted bugs, for the simulator's checkers (none in `murnode`).
    pub plants: Plants,
}

impl Default for DirectoryConfig {
    fn default() -> Self {
        Self {
            ttl_max_ms: crate::limits::ADVERT_TTL_MS_MAX,
            clock_skew_max_ms: 30_000,
            nodes_max: DIRECTORY_NODES_MAX,
            range_max: DIRECTORY_RANGE_MAX,
            peer_max: DIRECTORY_PEER_MAX,
            admission: Admission::Open,
            authorities: Vec::new(),
            plants: Plants::NONE,
        }
    }
}

/// Where an advert came from. Echoed back in the verdict so the driver can route it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// This node's own advert.
    Local,
    /// Gossip from the peer `from`; `token` is the driver's handle for the message (for
    /// example, the gossipsub message id it must report a validation result for).
    Gossip { from: NodeId, token: u64 },
    /// An anti-entropy response from `from`.
    Sync { from: NodeId },
}

/// What the driver tells the directory.
#[derive(Clone, Debug)]
pub enum Input {
    /// An advert arrived.
    Advert { envelope: Envelope, source: Source },
    /// Time passed; expire what is due.
    Tick,
}

/// What the directory tells the driver happened: its verdicts on adverts, expiries and
/// departures.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum Output {
    /// An advert was accepted (the node is new, or this is a newer advert for it).
    Accepted { node: NodeId, seq: u64, source: Source },
    /// An advert was refused; `node` is the signer the envelope claims (unverified).
    Refused { node: NodeId, source: Source, reason: Refusal },
    /// A node's advert expired without a newer one.
    Expired { node: NodeId },
    /// A full directory dropped `node`'s advert, the one refreshed least recently, to make
    /// room for `by`'s.
    Evicted { node: NodeId, by: NodeId },
    /// A revocation list of `authority` (list `seq`) revoked `node`: its advert, if one was
    /// held, is dropped, and further adverts of it are refused.
    Revoked { node: NodeId, authority: PublicKey, seq: u64 },
    /// A departure notice from `witness` dropped `node`'s advert `seq`.
    /// `addrs`: where the dropped advert said the node listens (for reconnecting to it
    /// after a partition heals).
    Departed { node: NodeId, seq: u64, witness: NodeId, source: Source, addrs: Vec<String> },
}

/// Why an advert was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("malformed advert: {0}")]
    Malformed(String),
    #[error("signature does not verify for the claimed node")]
    BadSignature,
    #[error("sequence {seq} was already accepted")]
    Duplicate { seq: u64 },
    #[error("sequence {seq} is older than the held {held}")]
    Stale { seq: u64, held: u64 },
    #[error("sequence {seq} replays an advert that expired (held up to {held})")]
    Replayed { seq: u64, held: u64 },
    #[error("advert expired at {}", valid_until.to_rfc3339())]
    Expired { valid_until: Millis },
    #[error("advert issued {ahead_ms} ms in the future, beyond the clock skew allowance")]
    FromFuture { ahead_ms: u64 },
    #[error("node is not admitted to this closed mesh: {0}")]
    NotAdmitted(String),
    #[error("directory is full ({nodes_max} nodes) of nodes refreshed more recently than this one")]
    Full { nodes_max: usize },
    #[error("{range_max} nodes not connected here already claim this advert's address range")]
    RangeFull { range_max: usize },
    #[error("{peer_max} nodes not connected here were already delivered by this peer")]
    PeerFull { peer_max: usize },
    #[error("node is revoked by authority {authority} (revocation list {seq})")]
    Revoked { authority: PublicKey, seq: u64 },
    /// The notice is genuine (known witness, fresh, signed) but names an advert this
    /// directory does not hold (a node it never heard of, or a newer advert than it has):
    /// worth relaying, since the advert may be on its way to others, and parked here.
    #[error("the departure notice names an advert this directory does not hold")]
    NotHeld,
    #[error("the departure notice's witness is not a node this directory holds")]
    UnknownWitness,
    /// The notice names the sequence number held but another advert (signature): no
    /// advert it describes was ever held, so its witness lied.
    #[error("the departure notice names seq {seq} with an advert signature other than the one held")]
    WrongAdvert { seq: u64 },
}

impl Refusal {
    /// Every reason name, in a fixed order (for metrics that list zero counts too).
    pub const REASONS: [&'static str; 15] = [
        "malformed",
        "bad_signature",
        "duplicate",
        "stale",
        "replayed",
        "expired",
        "from_future",
        "not_admitted",
        "full",
        "not_held",
        "unknown_witness",
        "wrong_advert",
        "range_full",
        "peer_full",
        "revoked",
    ];

    /// A stable machine-readable name, one of [`Refusal::REASONS`].
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::Malformed(_) => "malformed",
            Self::BadSignature => "bad_signature",
            Self::Duplicate { .. } => "duplicate",
            Self::Stale { .. } => "stale",
            Self::Replayed { .. } => "replayed",
            Self::Expired { .. } => "expired",
            Self::FromFuture { .. } => "from_future",
            Self::NotAdmitted(_) => "not_admitted",
            Self::Full { .. } => "full",
            Self::NotHeld => "not_held",
            Self::UnknownWitness => "unknown_witness",
            Self::WrongAdvert { .. } => "wrong_advert",
            Self::RangeFull { .. } => "range_full",
            Self::PeerFull { .. } => "peer_full",
            Self::Revoked { .. } => "revoked",
        }
    }

    /// Whether the sender provably misbehaved (as opposed to being late or redundant,
    /// which honest gossip produces all the time). Gossip drivers penalise these peers.
    #[must_use]
    pub const fn is_misbehaviour(&self) -> bool {
        matches!(
            self,
            Self::Malformed(_)
                | Self::BadSignature
                | Self::FromFuture { .. }
                | Self::NotAdmitted(_)
                | Self::WrongAdvert { .. }
        )
    }
}

/// One held advert and what the directory knows about it.
#[derive(Clone, Debug)]
pub struct Record {
    envelope: Envelope,
    advert: Arc<Advert>,
    received_at: Millis,
    expires_at: Millis,
    /// The peer that delivered this copy (`None`: this node's own advert).
    via: Option<NodeId>,
    /// [`range_key`] of the advert.
    range: u64,
}

impl Record {
    /// The node that signed the advert.
    #[must_use]
    pub fn node(&self) -> NodeId {
        NodeId::from_key(self.envelope.signer())
    }

    /// The verified advert.
    #[must_use]
    pub fn advert(&self) -> &Advert {
        &self.advert
    }

    /// The envelope, for relaying.
    #[must_use]
    pub const fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    /// When this directory accepted it.
    #[must_use]
    pub const fn received_at(&self) -> Millis {
        self.received_at
    }

    /// When this directory will drop it unless a newer one arrives.
    #[must_use]
    pub const fn expires_at(&self) -> Millis {
        self.expires_at
    }

    /// The peer that delivered the copy held (`None` for this node's own advert).
    #[must_use]
    pub const fn via(&self) -> Option<NodeId> {
        self.via
    }
}

/// Counters for metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirectoryStats {
    /// Adverts accepted.
    pub accepted: u64,
    /// Adverts refused, by [`Refusal::reason`].
    pub refused: BTreeMap<&'static str, u64>,
    /// Adverts dropped at their TTL.
    pub expired: u64,
    /// Adverts dropped by a departure notice.
    pub departed: u64,
    /// Outputs dropped because the driver did not drain them.
    pub outputs_dropped: u64,
    /// Tombstones dropped early because the tombstone table was full.
    pub tombstones_dropped: u64,
    /// Adverts a full directory dropped to make room for a fresher one.
    pub evicted: u64,
    /// Adverts dropped because their node was revoked.
    pub revoked: u64,
}

/// Records frozen for sharing: the common start of many directories (see the module
/// docs). Immutable once built.
#[derive(Debug, Default)]
pub struct DirectoryBase {
    records: BTreeMap<NodeId, Record>,
    by_capsule: BTreeSet<(u64, [u8; 32])>,
    expiries: BTreeSet<(Millis, NodeId)>,
    by_issued: BTreeSet<(Millis, NodeId)>,
    ranges: BTreeMap<u64, usize>,
    vias: BTreeMap<NodeId, usize>,
}

impl DirectoryBase {
    /// The record for `node`.
    #[must_use]
    pub fn get(&self, node: &NodeId) -> Option<&Record> {
        self.records.get(node)
    }

    /// Every record, ordered by node.
    pub fn records(&self) -> impl Iterator<Item = &Record> {
        self.records.values()
    }

    /// Records held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether no record is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

/// The set of live adverts this node knows.
#[derive(Debug)]
pub struct Directory {
    config: DirectoryConfig,
    verifier: Arc<dyn Verifier>,
    /// The shared start (empty unless built [`Directory::with_base`]).
    base: Arc<DirectoryBase>,
    /// Base records this directory has replaced or dropped: they are not its own.
    shadowed: BTreeSet<NodeId>,
    /// Base expiries up to and including this one have been handled.
    base_expired_through: Option<(Millis, NodeId)>,
    /// This directory's own records (never one for a node the base holds unshadowed).
    records: BTreeMap<NodeId, Record>,
    /// (hash of capsule name, node key bytes) for every capsule of every held advert: one
    /// flat ordered set, so a capsule hosted by a few nodes costs a few entries rather than
    /// a map node per name. Hash collisions are harmless: lookups confirm the name.
    by_capsule: BTreeSet<(u64, [u8; 32])>,
    expiries: BTreeSet<(Millis, NodeId)>,
    /// (issue time, node) of own records: who its node refreshed least recently.
    by_issued: BTreeSet<(Millis, NodeId)>,
    /// Records per address range and per delivering peer, as differences from the base's
    /// counts.
    ranges: BTreeMap<u64, i64>,
    vias: BTreeMap<NodeId, i64>,
    /// Nodes connected here: never evicted, and not held to the range and peer bounds.
    anchored: BTreeSet<NodeId>,
    /// The latest revocation list of each trusted authority.
    revocations: Revocations,
    tombstones: BTreeMap<NodeId, Tombstone>,
    tombstone_expiries: BTreeSet<(Millis, NodeId)>,
    /// Parked notices, oldest first, by arrival number; indexed by subject and by witness.
    pending: BTreeMap<u64, Pending>,
    pending_by_node: BTreeSet<(NodeId, u64)>,
    pending_next: u64,
    outputs: VecDeque<Output>,
    stats: DirectoryStats,
}

/// A departure notice waiting for an advert of its subject or witness.
#[derive(Clone, Debug)]
struct Pending {
    envelope: Envelope,
    subject: NodeId,
    witness: NodeId,
    source: Source,
    until: Millis,
}

#[derive(Clone, Debug)]
struct Tombstone {
    seq: u64,
    until: Millis,
    /// The departure notice that ended the advert, and the advert, if a notice ended it
    /// (handed on by [`Directory::notices_for`]).
    notice: Option<(Envelope, Envelope)>,
}

/// An anti-entropy summary: for every node held, the sequence number held.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DirectoryDigest {
    entries: Vec<DigestEntry>,
}

/// One node in a digest: `[node, seq]` on the wire.
///
/// The node's key is read without its curve check. A digest only names nodes to compare
/// with a directory's (whose keys were checked when their adverts verified); nothing
/// verifies, dials or stores a key taken from one, and a name that is no key matches
/// nothing. Checking it cost a point decompression per entry, about 5 µs: 49 ms to decode
/// a 10,000-node digest against 1.5 ms without (found when the simulator began decoding
/// every sync request it delivers; `cargo bench -p murmur-protocol -- sync_request`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct DigestEntry(pub NodeId, pub u64);

impl<'de> Deserialize<'de> for DigestEntry {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// The same `[node bytes, seq]` array, the node's bytes taken as they are.
        #[derive(Deserialize)]
        struct Wire(#[serde(with = "crate::codec::byte_array")] [u8; 32], u64);
        let Wire(node, seq) = Wire::deserialize(deserializer)?;
        Ok(Self(NodeId::bound(node), seq))
    }
}

impl DirectoryDigest {
    /// Builds a digest from entries in any order, keeping the highest seq per node.
    #[must_use]
    pub fn from_entries(mut entries: Vec<DigestEntry>) -> Self {
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        entries.dedup_by_key(|e| e.0);
        Self { entries }
    }

    /// The entries, sorted by node.
    #[must_use]
    pub fn entries(&self) -> &[DigestEntry] {
        &self.entries
    }

    /// A short fingerprint: two directories with the same fingerprint hold the same
    /// (node, seq) pairs, so a driver can skip a full exchange.
    #[must_use]
    pub fn fingerprint(&self) -> Digest {
        Digest::of(&codec::encode(self))
    }

    /// Canonical bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(self)
    }

    /// Decodes a digest, refusing unsorted or duplicate entries and oversized input.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        const DIGEST_BYTES_MAX: usize = 16 + DIGEST_ENTRIES_MAX * 48;
        let digest: Self = codec::decode("directory digest", bytes, DIGEST_BYTES_MAX)?;
        digest.validate()?;
        Ok(digest)
    }

    /// Checks the bound and the strict ordering (which also rules out duplicates).
    pub fn validate(&self) -> Result<(), DecodeError> {
        let invalid =
            |reason: String| DecodeError::Invalid { what: "directory digest", field: "entries", reason };
        if self.entries.len() > DIGEST_ENTRIES_MAX {
            return Err(invalid(format!(
                "has {} entries, more than {DIGEST_ENTRIES_MAX}",
                self.entries.len()
            )));
        }
        if self.entries.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(invalid("must be sorted by node with no node twice".into()));
        }
        Ok(())
    }
}

impl Directory {
    /// An empty directory that checks signatures with ed25519.
    #[must_use]
    pub fn new(config: DirectoryConfig) -> Self {
        Self::with_verifier(config, Arc::new(Ed25519Verifier))
    }

    /// An empty directory that checks signatures through `verifier`.
    #[must_use]
    pub fn with_verifier(config: DirectoryConfig, verifier: Arc<dyn Verifier>) -> Self {
        Self::with_base(config, verifier, Arc::default())
    }

    /// A directory that starts out holding everything `base` holds (see the module docs).
    #[must_use]
    pub fn with_base(config: DirectoryConfig, verifier: Arc<dyn Verifier>, base: Arc<DirectoryBase>) -> Self {
        let revocations = Revocations::new(config.authorities.clone(), config.plants);
        Self {
            config,
            verifier,
            base,
            shadowed: BTreeSet::new(),
            base_expired_through: None,
            records: BTreeMap::new(),
            by_capsule: BTreeSet::new(),
            expiries: BTreeSet::new(),
            by_issued: BTreeSet::new(),
            ranges: BTreeMap::new(),
            vias: BTreeMap::new(),
            anchored: BTreeSet::new(),
            revocations,
            tombstones: BTreeMap::new(),
            tombstone_expiries: BTreeSet::new(),
            pending: BTreeMap::new(),
            pending_by_node: BTreeSet::new(),
            pending_next: 0,
            outputs: VecDeque::new(),
            stats: DirectoryStats::default(),
        }
    }

    /// Feeds one input at time `now`. Outputs are queued for [`Directory::poll_output`].
    pub fn handle(&mut self, now: Millis, input: Input) {
        self.expire(now);
        match input {
            Input::Advert { envelope, source } => {
                let _ = self.insert(now, envelope, source);
            }
            Input::Tick => {}
        }
    }

    /// The next queued output, oldest first.
    pub fn poll_output(&mut self) -> Option<Output> {
        crate::limits::pop_output(&mut self.outputs)
    }

    /// When the directory next needs [`Input::Tick`], if ever.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Millis> {
        // The next base expiry may be for a shadowed record: waking for it is harmless.
        [
            self.expiries.first().map(|(at, _)| *at),
            self.next_base_expiry().map(|(at, _)| at),
            self.tombstone_expiries.first().map(|(at, _)| *at),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Judges one advert and, if accepted, stores it; returns the accepted sequence number. The verdict is also queued as an
    /// [`Output`]. Input from anywhere is safe: a refusal changes nothing held.
    pub fn insert(&mut self, now: Millis, envelope: Envelope, source: Source) -> Result<u64, Refusal> {
        let claimed = NodeId::from_key(envelope.signer());
        match self.judge(now, &envelope, source) {
            Ok((advert, victim)) => {
                let seq = advert.seq;
                if let Some(victim) = victim {
                    self.evict(victim, claimed);
                }
                self.store(now, envelope, advert, source);
                self.stats.accepted += 1;
                self.push(Output::Accepted { node: claimed, seq, source });
                self.retry_pending(now, claimed);
                Ok(seq)
            }
            Err(reason) => {
                *self.stats.refused.entry(reason.reason()).or_default() += 1;
                self.push(Output::Refused { node: claimed, source, reason: reason.clone() });
                Err(reason)
            }
        }
    }

    /// Drops every advert whose expiry is at or before `now`.
    pub fn expire(&mut self, now: Millis) {
        while let Some(&(at, node)) = self.expiries.first() {
            if at > now {
                break;
            }
            self.expiries.pop_first();
            self.expire_node(node);
        }
        while let Some((at, node)) = self.next_base_expiry() {
            if at > now {
                break;
            }
            self.base_expired_through = Some((at, node));
            if !self.shadowed.contains(&node) {
                self.expire_node(node);
            }
        }
        while self.pending.first_key_value().is_some_and(|(_, p)| p.until <= now) {
            self.unpark_first();
        }
        while let Some(&(at, node)) = self.tombstone_expiries.first() {
            if at > now {
                break;
            }
            self.tombstone_expiries.pop_first();
            self.tombstones.remove(&node);
        }
    }

    /// The record held for `node`.
    #[must_use]
    pub fn get(&self, node: &NodeId) -> Option<&Record> {
        self.records.get(node).or_else(|| self.base_record(node))
    }

    /// Every record still valid at `now`, ordered by node. (Records past their expiry are
    /// dropped at the next `handle`; this never shows one in between.)
    pub fn records(&self, now: Millis) -> impl Iterator<Item = &Record> {
        self.all_records().filter(move |r| r.expires_at > now)
    }

    /// Freezes what this directory holds into a base other directories can start from
    /// ([`Directory::with_base`]).
    #[must_use]
    pub fn freeze(&self) -> Arc<DirectoryBase> {
        let mut base = DirectoryBase::default();
        for record in self.all_records() {
            let node = record.node();
            for key in index_keys(record.advert()) {
                base.by_capsule.insert((key, *node.key().as_bytes()));
            }
            base.expiries.insert((record.expires_at, node));
            base.by_issued.insert((record.advert.issued_at, node));
            *base.ranges.entry(record.range).or_default() += 1;
            if let Some(via) = record.via {
                *base.vias.entry(via).or_default() += 1;
            }
            base.records.insert(node, record.clone());
        }
        Arc::new(base)
    }

    /// The base this directory started from (empty unless built [`Directory::with_base`]).
    #[must_use]
    pub const fn base(&self) -> &Arc<DirectoryBase> {
        &self.base
    }

    /// The records this directory holds that are not its base's, ordered by node.
    pub fn own_records(&self) -> impl Iterator<Item = &Record> {
        self.records.values()
    }

    /// Whether this directory replaced or dropped its base's record for `node`.
    #[must_use]
    pub fn shadows(&self, node: &NodeId) -> bool {
        self.shadowed.contains(node)
    }

    /// The base records this directory replaced or dropped, ordered by node. What it
    /// holds is exactly its base minus these, plus [`Directory::own_records`].
    pub fn shadowed(&self) -> impl Iterator<Item = &NodeId> {
        self.shadowed.iter()
    }

    /// The nodes whose advert, still valid at `now`, lists artifact `digest` (any artifact
    /// at all when `None`), ordered by node: who to ask for an artifact.
    pub fn artifact_holders<'a>(
        &'a self,
        now: Millis,
        digest: Option<&'a Digest>,
    ) -> impl Iterator<Item = NodeId> + 'a {
        self.records(now)
            .filter(move |r| match digest {
                Some(d) => r.advert().artifacts.contains(d),
                None => !r.advert().artifacts.is_empty(),
            })
            .map(Record::node)
    }

    /// Nodes held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.records.len() + self.base.records.len() - self.shadowed.len()
    }

    /// The signature verifier this directory checks with (shared in the simulator).
    #[must_use]
    pub fn verifier(&self) -> &dyn Verifier {
        self.verifier.as_ref()
    }

    /// Whether no node is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The nodes hosting capsule `name` whose advert is still valid at `now`, ordered by
    /// node, with the capsule's entry.
    pub fn hosts<'a>(
        &'a self,
        now: Millis,
        name: &'a str,
    ) -> impl Iterator<Item = (&'a Record, &'a HostedCapsule)> + 'a {
        let key = name_key(name);
        let range = (key, [0u8; 32])..=(key, [0xff; 32]);
        let own = self.by_capsule.range(range.clone());
        let base = self.base.by_capsule.range(range).filter(move |(_, node)| {
            !self.shadowed.contains(&NodeId::from_key(PublicKey::from_validated(*node)))
        });
        MergeSorted::new(own, base, |entry: &&(u64, [u8; 32])| **entry).filter_map(move |(_, node)| {
            let record = self.get(&NodeId::from_key(PublicKey::from_validated(*node)))?;
            if record.expires_at <= now {
                return None;
            }
            let capsule = record.advert().capsules.iter().find(|c| c.name == name)?;
            Some((record, capsule))
        })
    }

    /// The nodes running agent `name` whose advert is still valid at `now`, ordered by node.
    pub fn agent_hosts<'a>(&'a self, now: Millis, name: &'a str) -> impl Iterator<Item = NodeId> + 'a {
        self.indexed(now, agent_key(name), move |advert| advert.runs_agent(name))
    }

    /// The nodes serving model `name` whose advert is still valid at `now`, ordered by
    /// node.
    pub fn model_hosts<'a>(&'a self, now: Millis, name: &'a str) -> impl Iterator<Item = NodeId> + 'a {
        self.indexed(now, model_key(name), move |advert| advert.serves_model(name))
    }

    /// The nodes under index `key` (own records and the base's not shadowed), ordered by
    /// node, whose advert is valid at `now` and really lists the name (`lists`: keys are
    /// hashes).
    fn indexed<'a>(
        &'a self,
        now: Millis,
        key: u64,
        lists: impl Fn(&Advert) -> bool + 'a,
    ) -> impl Iterator<Item = NodeId> + 'a {
        let range = (key, [0u8; 32])..=(key, [0xff; 32]);
        let own = self.by_capsule.range(range.clone());
        let base = self.base.by_capsule.range(range).filter(move |(_, node)| {
            !self.shadowed.contains(&NodeId::from_key(PublicKey::from_validated(*node)))
        });
        MergeSorted::new(own, base, |entry: &&(u64, [u8; 32])| **entry).filter_map(move |(_, node)| {
            let node = NodeId::from_key(PublicKey::from_validated(*node));
            let record = self.get(&node)?;
            (record.expires_at > now && lists(record.advert())).then_some(node)
        })
    }

    /// Every model name in the directory with the nodes that serve it, sorted (a scan:
    /// for views, not hot paths).
    #[must_use]
    pub fn models(&self, now: Millis) -> BTreeMap<&str, Vec<NodeId>> {
        let mut models: BTreeMap<&str, Vec<NodeId>> = BTreeMap::new();
        for record in self.all_records().filter(|r| r.expires_at > now) {
            for model in &record.advert().models {
                models.entry(model.as_str()).or_default().push(record.node());
            }
        }
        models
    }

    /// Every agent name in the directory with the nodes that run it, sorted (a scan: for
    /// views, not hot paths).
    #[must_use]
    pub fn agents(&self, now: Millis) -> BTreeMap<&str, Vec<NodeId>> {
        let mut agents: BTreeMap<&str, Vec<NodeId>> = BTreeMap::new();
        for record in self.all_records().filter(|r| r.expires_at > now) {
            for agent in &record.advert().agents {
                agents.entry(agent.as_str()).or_default().push(record.node());
            }
        }
        agents
    }

    /// Every capsule name in the directory, sorted (a scan: for views, not hot paths).
    pub fn capsule_names(&self) -> impl Iterator<Item = &str> {
        let names: BTreeSet<&str> =
            self.all_records().flat_map(|r| r.advert.capsules.iter().map(|c| c.name.as_str())).collect();
        names.into_iter()
    }

    /// A summary of what is held, for anti-entropy.
    #[must_use]
    pub fn digest(&self) -> DirectoryDigest {
        Self::digest_of(self.all_records())
    }

    /// What is held, bucket by bucket (for a summary-first sync; see [`crate::sync`]).
    #[must_use]
    pub fn summary(&self, buckets: &Buckets) -> Summary {
        buckets.summarize(self.all_records().map(|record| (record.node(), record.advert().seq)))
    }

    /// The sum of bucket `bucket`, as [`Directory::summary`] would have it.
    #[must_use]
    pub fn bucket_sum(&self, buckets: &Buckets, bucket: u32) -> u64 {
        let (low, high) = buckets.range(bucket);
        self.records_in(low, high).fold(0u64, |sum, record| {
            sum.wrapping_add(buckets.fingerprint(&record.node(), record.advert().seq))
        })
    }

    /// The nodes held in bucket `bucket`, in order.
    pub fn nodes_in(&self, buckets: &Buckets, bucket: u32) -> impl Iterator<Item = NodeId> + '_ {
        let (low, high) = buckets.range(bucket);
        self.records_in(low, high).map(Record::node)
    }

    /// The digest of what is held in the buckets `scope` covers.
    #[must_use]
    pub fn digest_in(&self, scope: &Scope) -> DirectoryDigest {
        Self::digest_of(self.scoped_records(Some(scope)))
    }

    /// The digest of `records`, which come in node order.
    fn digest_of<'a>(records: impl Iterator<Item = &'a Record>) -> DirectoryDigest {
        DirectoryDigest {
            entries: records.map(|record| DigestEntry(record.node(), record.advert().seq)).collect(),
        }
    }

    /// The adverts held in the buckets `scope` covers, if there are at most `count_max`.
    #[must_use]
    pub fn adverts_in(&self, scope: &Scope, count_max: usize) -> Option<Vec<Envelope>> {
        let mut adverts = Vec::new();
        for record in self.scoped_records(Some(scope)) {
            if adverts.len() == count_max {
                return None;
            }
            adverts.push(record.envelope().clone());
        }
        Some(adverts)
    }

    /// The adverts a peer with `digest` is missing (nodes it lacks, or holds older adverts
    /// for): at most `count_max` of them and about `bytes_max` encoded bytes, and whether
    /// more were left out. When they do not all fit, the ones this directory took most
    /// recently go first: a newcomer paging through the whole directory gets what is still
    /// spreading (a change published while it had no connection) in its first answer, not
    /// wherever its node id falls in the last.
    #[must_use]
    pub fn missing_for(
        &self,
        digest: &DirectoryDigest,
        count_max: usize,
        bytes_max: usize,
    ) -> (Vec<Envelope>, bool) {
        self.missing_in(digest, None, count_max, bytes_max)
    }

    /// [`Directory::missing_for`] a digest that covers only `scope`, when given: nodes
    /// outside it are not missing, whatever the digest lists.
    #[must_use]
    pub fn missing_in(
        &self,
        digest: &DirectoryDigest,
        scope: Option<&Scope>,
        count_max: usize,
        bytes_max: usize,
    ) -> (Vec<Envelope>, bool) {
        let size = |record: &Record| record.envelope().body().len() + ENVELOPE_OVERHEAD_MAX;
        let mut theirs = digest.entries.iter().peekable();
        let mut missing: Vec<&Record> = Vec::new();
        let mut bytes = 0;
        for record in self.scoped_records(scope) {
            let node = record.node();
            while theirs.next_if(|entry| entry.0 < node).is_some() {}
            let their_seq = theirs.next_if(|entry| entry.0 == node).map(|entry| entry.1);
            if their_seq.is_none_or(|seq| seq < record.advert().seq) {
                bytes += size(record);
                missing.push(record);
            }
        }
        if missing.len() <= count_max && bytes <= bytes_max {
            return (missing.into_iter().map(|record| record.envelope().clone()).collect(), false);
        }
        // Newest first, ties in node order: the `count_max` most recent, then as many of
        // them as fit the byte budget.
        let mut order: Vec<(Reverse<Millis>, usize)> =
            missing.iter().enumerate().map(|(at, record)| (Reverse(record.received_at), at)).collect();
        if order.len() > count_max {
            order.select_nth_unstable(count_max);
            order.truncate(count_max);
        }
        order.sort_unstable();
        let mut page = Vec::with_capacity(order.len());
        let mut bytes = 0;
        for record in order.into_iter().map(|(_, at)| missing[at]) {
            if bytes + size(record) > bytes_max {
                break;
            }
            bytes += size(record);
            page.push(record.envelope().clone());
        }
        (page, true)
    }

    /// The departure notices a peer with `digest` has not applied (its digest still lists
    /// the departed node), at most `count_max`, ordered by node; each with the departed
    /// advert when the peer holds an older one (without it the notice could not apply
    /// there: it names exactly the advert it ended).
    #[must_use]
    pub fn notices_for(
        &self,
        digest: &DirectoryDigest,
        count_max: usize,
    ) -> Vec<(Envelope, Option<Envelope>)> {
        let entries = digest.entries();
        self.tombstones
            .iter()
            .filter_map(|(node, tombstone)| {
                let (notice, advert) = tombstone.notice.as_ref()?;
                let at = entries.binary_search_by(|entry| entry.0.cmp(node)).ok()?;
                let theirs = entries[at].1;
                (theirs <= tombstone.seq)
                    .then(|| (notice.clone(), (theirs < tombstone.seq).then(|| advert.clone())))
            })
            .take(count_max)
            .collect()
    }

    /// Judges a departure notice and, if it holds, drops the advert it names (keeping the
    /// notice in a tombstone, which also refuses that advert if it comes back). Returns the
    /// departed node. The verdict is also queued as an [`Output`]. A refusal changes nothing.
    ///
    /// A notice holds when it decodes, names the very advert this directory holds for its
    /// node (never a newer one: a notice naming a sequence number its node has not reached
    /// would otherwise bury the node's next adverts too), comes from a node this directory
    /// holds or recently held (or from the departing node itself), is fresh, and its
    /// signature verifies.
    pub fn depart(&mut self, now: Millis, envelope: &Envelope, source: Source) -> Result<NodeId, Refusal> {
        let witness = NodeId::from_key(envelope.signer());
        match self.check_notice(now, envelope) {
            Ok(notice) => {
                let node = notice.node;
                let mut addrs = Vec::new();
                if let Some(record) = self.remove(&node) {
                    addrs.clone_from(&record.advert().addrs);
                    // Until neither the advert nor the notice could pass a freshness check.
                    let skew = self.config.clock_skew_max_ms;
                    let advert = record.advert();
                    let until = advert
                        .issued_at
                        .plus(self.clamped_ttl(advert) + skew)
                        .max(notice.at.plus(self.config.ttl_max_ms + 2 * skew));
                    self.bury(node, advert.seq, until, Some((envelope.clone(), record.envelope().clone())));
                }
                self.stats.departed += 1;
                self.push(Output::Departed { node, seq: notice.seq, witness, source, addrs });
                Ok(node)
            }
            Err(reason) => {
                *self.stats.refused.entry(reason.reason()).or_default() += 1;
                // Both only after the signature verified: junk never takes a parking place.
                if matches!(reason, Refusal::NotHeld | Refusal::UnknownWitness) {
                    self.park(now, envelope, witness, source);
                }
                self.push(Output::Refused { node: witness, source, reason: reason.clone() });
                Err(reason)
            }
        }
    }

    /// Parks a notice naming a node or witness not known yet (see the module docs).
    fn park(&mut self, now: Millis, envelope: &Envelope, witness: NodeId, source: Source) {
        let Ok(notice) = self.verifier.peek_notice(envelope) else { return };
        let subject = notice.node;
        let parked = self
            .pending_by_node
            .range((subject, 0)..=(subject, u64::MAX))
            .any(|(_, id)| self.pending.get(id).is_some_and(|p| p.envelope == *envelope));
        if parked {
            return;
        }
        if self.pending.len() >= PENDING_NOTICES_MAX {
            self.unpark_first();
        }
        let id = self.pending_next;
        self.pending_next += 1;
        self.pending_by_node.insert((subject, id));
        self.pending_by_node.insert((witness, id));
        let until = now.plus(PENDING_NOTICE_MS);
        self.pending.insert(id, Pending { envelope: envelope.clone(), subject, witness, source, until });
    }

    fn unpark_first(&mut self) -> Option<Pending> {
        let (id, pending) = self.pending.pop_first()?;
        self.pending_by_node.remove(&(pending.subject, id));
        self.pending_by_node.remove(&(pending.witness, id));
        Some(pending)
    }

    /// Judges again the parked notices that name `node`, now that its advert is here.
    fn retry_pending(&mut self, now: Millis, node: NodeId) {
        let ids: Vec<u64> =
            self.pending_by_node.range((node, 0)..=(node, u64::MAX)).map(|(_, id)| *id).collect();
        for id in ids {
            let Some(pending) = self.pending.remove(&id) else { continue };
            self.pending_by_node.remove(&(pending.subject, id));
            self.pending_by_node.remove(&(pending.witness, id));
            let _ = self.depart(now, &pending.envelope, pending.source);
        }
    }

    /// Counters for metrics.
    #[must_use]
    pub const fn stats(&self) -> &DirectoryStats {
        &self.stats
    }

    /// The configuration this directory judges by.
    #[must_use]
    pub const fn config(&self) -> &DirectoryConfig {
        &self.config
    }

    /// Runs every check on a departure notice, cheapest first, without applying it (see
    /// [`Directory::depart`]).
    pub fn check_notice(&self, now: Millis, envelope: &Envelope) -> Result<Arc<Departure>, Refusal> {
        self.judge_notice(now, envelope, true)
    }

    /// As [`Directory::check_notice`], for a notice about this directory's own node, which
    /// refutes it whoever signed it: a fresh, signed notice naming its current advert drops
    /// it wherever the witness is known, so the witness need not be known here.
    pub fn check_notice_about_self(
        &self,
        now: Millis,
        envelope: &Envelope,
    ) -> Result<Arc<Departure>, Refusal> {
        self.judge_notice(now, envelope, false)
    }

    fn judge_notice(
        &self,
        now: Millis,
        envelope: &Envelope,
        known_witness: bool,
    ) -> Result<Arc<Departure>, Refusal> {
        let notice =
            self.verifier.peek_notice(envelope).map_err(|err| Refusal::Malformed(err.to_string()))?;
        let held_record = self.get(&notice.node);
        let held = held_record.map(|record| record.advert.seq);
        match (held, self.tombstones.get(&notice.node)) {
            (Some(held), _) if held > notice.seq => return Err(Refusal::Stale { seq: notice.seq, held }),
            (None, Some(tombstone)) if tombstone.seq >= notice.seq => {
                return Err(Refusal::Duplicate { seq: notice.seq });
            }
            _ => {}
        }
        let skew = self.config.clock_skew_max_ms;
        if notice.at > now.plus(skew) {
            return Err(Refusal::FromFuture { ahead_ms: notice.at.since(now) });
        }
        let valid_until = notice.at.plus(self.config.ttl_max_ms);
        if valid_until.plus(skew) <= now {
            return Err(Refusal::Expired { valid_until });
        }
        if !self.verifier.verify(envelope) {
            return Err(Refusal::BadSignature);
        }
        let witness = NodeId::from_key(envelope.signer());
        // A witness this directory knows, or knew: one that a notice dropped (each side of
        // a partition declares the other departed) still vouches for its notices.
        if known_witness
            && witness != notice.node
            && self.get(&witness).is_none()
            && !self.tombstones.contains_key(&witness)
        {
            return Err(Refusal::UnknownWitness);
        }
        match held_record {
            Some(record) if record.advert.seq == notice.seq => {
                if *record.envelope.signature() != notice.advert {
                    return Err(Refusal::WrongAdvert { seq: notice.seq });
                }
                Ok(notice)
            }
            // A node not known here (yet), or an advert newer than the one held.
            _ => Err(Refusal::NotHeld),
        }
    }

    /// Runs every check on an advert, cheapest first; the signature is checked only once
    /// nothing cheaper refused it.
    /// Also returns the record to evict first when the directory is full.
    fn judge(
        &self,
        now: Millis,
        envelope: &Envelope,
        source: Source,
    ) -> Result<(Arc<Advert>, Option<NodeId>), Refusal> {
        let node = NodeId::from_key(envelope.signer());
        if let Some((authority, seq)) = self.revocations.node_revoked(&node) {
            return Err(Refusal::Revoked { authority, seq });
        }
        let held = self.get(&node);
        // The same bytes again (gossip and anti-entropy overlap): no need to decode.
        if let Some(record) = held
            && record.envelope == *envelope
        {
            return Err(Refusal::Duplicate { seq: record.advert.seq });
        }
        let advert = self
            .verifier
            .peek_advert(envelope)
            .map_err(|err: OpenError| Refusal::Malformed(err.to_string()))?;
        if let Some(held) = held.map(|r| r.advert.seq) {
            if advert.seq == held {
                return Err(Refusal::Duplicate { seq: advert.seq });
            }
            if advert.seq < held {
                return Err(Refusal::Stale { seq: advert.seq, held });
            }
        }
        if let Some(tombstone) = self.tombstones.get(&node)
            && advert.seq <= tombstone.seq
        {
            return Err(Refusal::Replayed { seq: advert.seq, held: tombstone.seq });
        }
        let skew = self.config.clock_skew_max_ms;
        let valid_until = advert.issued_at.plus(self.clamped_ttl(&advert));
        if valid_until.plus(skew) <= now {
            return Err(Refusal::Expired { valid_until });
        }
        if advert.issued_at > now.plus(skew) {
            return Err(Refusal::FromFuture { ahead_ms: advert.issued_at.since(now) });
        }
        if !self.verifier.verify(envelope) {
            return Err(Refusal::BadSignature);
        }
        if let Admission::Closed { authorities } = &self.config.admission {
            let cert = advert
                .cert
                .clone()
                .ok_or_else(|| Refusal::NotAdmitted("advert carries no node certificate".into()))?;
            verify_cert_with(cert, authorities, now, &node, self.verifier.as_ref())
                .map_err(|err| Refusal::NotAdmitted(err.to_string()))?;
        }
        let victim = if held.is_none() { self.make_room(&node, &advert, source)? } else { None };
        Ok((advert, victim))
    }

    /// Whether a node new to this directory may come in (see "Crowding" in the module
    /// docs), and whose record it displaces if the directory is full.
    fn make_room(&self, node: &NodeId, advert: &Advert, source: Source) -> Result<Option<NodeId>, Refusal> {
        let via = via_of(source);
        let anchored = via.is_none() || self.anchored.contains(node);
        let full = self.len() >= self.config.nodes_max;
        if self.config.plants.has(Plant::RefuseWhenFull) {
            let refuse = full.then_some(Refusal::Full { nodes_max: self.config.nodes_max });
            return refuse.map_or(Ok(None), Err);
        }
        // Full: the record refreshed least recently gives way to a fresher (or connected) one.
        let victim = full
            .then(|| self.stalest())
            .flatten()
            .filter(|(issued_at, _)| anchored || *issued_at < advert.issued_at)
            .and_then(|(_, victim)| self.get(&victim));
        if !anchored {
            let range = range_key(advert);
            let freed = usize::from(victim.is_some_and(|v| v.range == range));
            if self.range_count(range) - freed >= self.config.range_max {
                return Err(Refusal::RangeFull { range_max: self.config.range_max });
            }
            if let Some(via) = via {
                let freed = usize::from(victim.is_some_and(|v| v.via == Some(via)));
                if self.via_count(&via) - freed >= self.config.peer_max {
                    return Err(Refusal::PeerFull { peer_max: self.config.peer_max });
                }
            }
        }
        match victim {
            Some(victim) => Ok(Some(victim.node())),
            None if full => Err(Refusal::Full { nodes_max: self.config.nodes_max }),
            None => Ok(None),
        }
    }

    /// The record whose node refreshed it least recently, among those that may be
    /// evicted (not anchored, not this node's own), with its issue time.
    fn stalest(&self) -> Option<(Millis, NodeId)> {
        let evictable = |node: &NodeId| {
            !self.anchored.contains(node) && self.get(node).is_some_and(|record| record.via.is_some())
        };
        let own = self.by_issued.iter().find(|(_, node)| evictable(node));
        let base =
            self.base.by_issued.iter().find(|(_, node)| !self.shadowed.contains(node) && evictable(node));
        own.into_iter().chain(base).min().copied()
    }

    /// The revocation lists held (see [`crate::revocation`]).
    #[must_use]
    pub const fn revocations(&self) -> &Revocations {
        &self.revocations
    }

    /// Takes a revocation list, if it is valid, trusted and newer than the one held, and
    /// drops the adverts of the nodes it newly revokes (this node's own excepted: a node
    /// does not forget itself, its peers refuse it). A refusal changes nothing.
    pub fn revoke(&mut self, envelope: Envelope) -> Result<Taken, RevocationRefusal> {
        let taken = self.revocations.insert(envelope, self.verifier.as_ref())?;
        for node in &taken.nodes {
            if self.revocations.node_revoked(node).is_none() {
                continue; // a planted bug ignores revocations
            }
            let own = self.get(node).is_some_and(|record| record.via.is_none());
            if !own && self.remove(node).is_some() {
                self.stats.revoked += 1;
            }
            self.push(Output::Revoked { node: *node, authority: taken.authority, seq: taken.seq });
        }
        Ok(taken)
    }

    /// Drops `node`'s record to make room for `by`'s. No tombstone: the node may come back
    /// with a fresher advert.
    fn evict(&mut self, node: NodeId, by: NodeId) {
        if self.remove(&node).is_some() {
            self.stats.evicted += 1;
            self.push(Output::Evicted { node, by });
        }
    }

    /// Marks `node` as connected here (anchored) or no longer connected. An anchored node's
    /// record is never evicted, and its adverts are not held to the range and peer bounds.
    pub fn anchor(&mut self, node: NodeId, connected: bool) {
        if connected {
            self.anchored.insert(node);
        } else {
            self.anchored.remove(&node);
        }
    }

    /// Records held that claim address range `range`.
    fn range_count(&self, range: u64) -> usize {
        let base = self.base.ranges.get(&range).copied().unwrap_or(0);
        usize::try_from(base as i64 + self.ranges.get(&range).copied().unwrap_or(0)).unwrap_or(0)
    }

    /// Records held whose copy `via` delivered.
    fn via_count(&self, via: &NodeId) -> usize {
        let base = self.base.vias.get(via).copied().unwrap_or(0);
        usize::try_from(base as i64 + self.vias.get(via).copied().unwrap_or(0)).unwrap_or(0)
    }

    /// Counts `record` in (`step` 1) or out of (`step` -1) its range's and its peer's tallies.
    fn tally(&mut self, record: &Record, step: i64) {
        *self.ranges.entry(record.range).or_default() += step;
        if let Some(via) = record.via {
            *self.vias.entry(via).or_default() += step;
        }
    }

    fn store(&mut self, now: Millis, envelope: Envelope, advert: Arc<Advert>, source: Source) {
        let envelope = self.verifier.share(envelope);
        let node = NodeId::from_key(envelope.signer());
        let ttl = self.clamped_ttl(&advert);
        let expires_at = now.plus(ttl).min(advert.issued_at.plus(ttl + self.config.clock_skew_max_ms));
        self.remove(&node);
        if let Some(tombstone) = self.tombstones.remove(&node) {
            self.tombstone_expiries.remove(&(tombstone.until, node));
        }
        for key in index_keys(&advert) {
            self.by_capsule.insert((key, *node.key().as_bytes()));
        }
        self.expiries.insert((expires_at, node));
        self.by_issued.insert((advert.issued_at, node));
        let range = range_key(&advert);
        let record = Record { envelope, advert, received_at: now, expires_at, via: via_of(source), range };
        self.tally(&record, 1);
        self.records.insert(node, record);
    }

    fn remove(&mut self, node: &NodeId) -> Option<Record> {
        let Some(record) = self.records.remove(node) else {
            let record = self.base_record(node)?.clone();
            self.shadowed.insert(*node);
            self.tally(&record, -1);
            return Some(record);
        };
        self.tally(&record, -1);
        self.expiries.remove(&(record.expires_at, *node));
        self.by_issued.remove(&(record.advert.issued_at, *node));
        for key in index_keys(record.advert()) {
            self.by_capsule.remove(&(key, *node.key().as_bytes()));
        }
        Some(record)
    }

    /// Drops `node`'s advert at its expiry, keeping a tombstone.
    fn expire_node(&mut self, node: NodeId) {
        if let Some(record) = self.remove(&node) {
            let advert = record.advert();
            let until = advert.issued_at.plus(self.clamped_ttl(advert) + self.config.clock_skew_max_ms);
            self.bury(node, advert.seq, until, None);
            self.stats.expired += 1;
            self.push(Output::Expired { node });
        }
    }

    /// The base's record for `node`, unless this directory shadowed it.
    fn base_record(&self, node: &NodeId) -> Option<&Record> {
        self.base.records.get(node).filter(|_| !self.shadowed.contains(node))
    }

    /// The first base expiry not yet handled.
    fn next_base_expiry(&self) -> Option<(Millis, NodeId)> {
        let from = self.base_expired_through.map_or(Bound::Unbounded, Bound::Excluded);
        self.base.expiries.range((from, Bound::Unbounded)).next().copied()
    }

    /// Every record held, own and shared, ordered by node.
    fn all_records(&self) -> impl Iterator<Item = &Record> {
        self.records_in(NodeId::bound([0; 32]), NodeId::bound([0xff; 32]))
    }

    /// The records from node `low` through `high`, in order.
    fn records_in(&self, low: NodeId, high: NodeId) -> impl Iterator<Item = &Record> {
        // The base minus what is shadowed, both walked in order: no lookup per record.
        let mut shadowed = self.shadowed.range(low..=high).peekable();
        let base = self.base.records.range(low..=high).filter(move |(node, _)| {
            while shadowed.next_if(|s| *s < *node).is_some() {}
            shadowed.next_if(|s| *s == *node).is_none()
        });
        MergeSorted::new(self.records.range(low..=high), base, |(node, _): &(&NodeId, &Record)| **node)
            .map(|(_, record)| record)
    }

    /// Every record, or (given a scope) those in its buckets; in order either way.
    fn scoped_records<'a>(&'a self, scope: Option<&'a Scope>) -> Box<dyn Iterator<Item = &'a Record> + 'a> {
        match scope {
            None => Box::new(self.all_records()),
            Some(scope) => Box::new(scope.ranges().flat_map(|(low, high)| self.records_in(low, high))),
        }
    }

    fn bury(&mut self, node: NodeId, seq: u64, until: Millis, notice: Option<(Envelope, Envelope)>) {
        if self.tombstones.len() >= self.config.nodes_max
            && let Some((_, oldest)) = self.tombstone_expiries.pop_first()
        {
            self.tombstones.remove(&oldest);
            self.stats.tombstones_dropped += 1;
        }
        if let Some(old) = self.tombstones.insert(node, Tombstone { seq, until, notice }) {
            self.tombstone_expiries.remove(&(old.until, node));
        }
        self.tombstone_expiries.insert((until, node));
    }

    fn clamped_ttl(&self, advert: &Advert) -> u64 {
        advert.ttl_ms.min(self.config.ttl_max_ms)
    }

    fn push(&mut self, output: Output) {
        if self.outputs.len() >= DIRECTORY_OUTPUTS_MAX {
            self.outputs.pop_front();
            self.stats.outputs_dropped += 1;
        }
        self.outputs.push_back(output);
    }
}

/// The union of two sequences ascending by `key`, with no key in both, ascending.
struct MergeSorted<A: Iterator, B: Iterator<Item = A::Item>, F> {
    a: std::iter::Peekable<A>,
    b: std::iter::Peekable<B>,
    key: F,
}

impl<A: Iterator, B: Iterator<Item = A::Item>, F> MergeSorted<A, B, F> {
    fn new(a: A, b: B, key: F) -> Self {
        Self { a: a.peekable(), b: b.peekable(), key }
    }
}

impl<T, K: Ord, A: Iterator<Item = T>, B: Iterator<Item = T>, F: Fn(&T) -> K> Iterator
    for MergeSorted<A, B, F>
{
    type Item = T;

    fn next(&mut self) -> Option<T> {
        match (self.a.peek(), self.b.peek()) {
            (Some(a), Some(b)) if (self.key)(b) < (self.key)(a) => self.b.next(),
            (Some(_), _) => self.a.next(),
            (None, _) => self.b.next(),
        }
    }
}

/// A stable 64-bit hash of a capsule name (FNV-1a), for the capsule index.
/// The peer that delivered an advert from `source` (`None`: this node's own).
const fn via_of(source: Source) -> Option<NodeId> {
    match source {
        Source::Local => None,
        Source::Gossip { from, .. } | Source::Sync { from } => Some(from),
    }
}

/// The address range an advert claims, hashed: its first address's IPv4 /24, IPv6 /48,
/// or DNS name's last two labels (anything else: its first component). Adverts without an
/// address share one range. Only the first address counts, so listing many buys nothing.
fn range_key(advert: &Advert) -> u64 {
    let Some(addr) = advert.addrs.first() else { return fnv(0xcbf2_9ce4_8422_2325, b"none") };
    let mut parts = addr.split('/').skip(1);
    let (kind, value) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let range = match kind {
        "ip4" => value.parse::<std::net::Ipv4Addr>().ok().map(|ip| {
            let [a, b, c, _] = ip.octets();
            format!("ip4/{a}.{b}.{c}")
        }),
        "ip6" => value.parse::<std::net::Ipv6Addr>().ok().map(|ip| {
            let s = ip.segments();
            format!("ip6/{:x}:{:x}:{:x}", s[0], s[1], s[2])
        }),
        "dns" | "dns4" | "dns6" | "dnsaddr" => {
            let name = value.trim_end_matches('.').to_ascii_lowercase();
            let labels: Vec<&str> = name.rsplit('.').take(2).collect();
            Some(format!("dns/{}", labels.join(".")))
        }
        _ => None,
    };
    fnv(0xcbf2_9ce4_8422_2325, range.unwrap_or_else(|| kind.to_owned()).as_bytes())
}

fn name_key(name: &str) -> u64 {
    fnv(0xcbf2_9ce4_8422_2325, name.as_bytes())
}

/// The index key of agent `name`: its own namespace beside capsule names (no capsule name
/// holds a NUL byte, so the two never share a key by construction, only by hash chance,
/// which lookups filter out).
fn agent_key(name: &str) -> u64 {
    fnv(fnv(0xcbf2_9ce4_8422_2325, b"\0agent\0"), name.as_bytes())
}

/// The index key of model `name`, in its own namespace as [`agent_key`]'s.
fn model_key(name: &str) -> u64 {
    fnv(fnv(0xcbf2_9ce4_8422_2325, b"\0model\0"), name.as_bytes())
}

fn fnv(start: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(start, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3))
}

/// What the name index holds for one advert: its capsules, agents and models.
fn index_keys(advert: &Advert) -> impl Iterator<Item = u64> + '_ {
    advert
        .capsules
        .iter()
        .map(|c| name_key(&c.name))
        .chain(advert.agents.iter().map(|a| agent_key(a)))
        .chain(advert.models.iter().map(|m| model_key(m)))
}

#[cfg(test)]
mod tests;
