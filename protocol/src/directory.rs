//! The directory: every live node advert this node knows, as a sans-IO state machine.
//!
//! The directory accepts a node's advert only when it is signed by that node, newer than
//! the one it holds, fresh, and (in a closed mesh) carries a valid node certificate. It
//! drops adverts whose TTL passes without a newer one, answers "which nodes host capsule
//! NAME", and supports anti-entropy: [`Directory::digest`] summarizes what it holds and
//! [`Input::PeerDigest`] yields the adverts a peer's digest shows it is missing.
//!
//! # Driving it
//!
//! ```text
//! loop {
//!     directory.handle(now, input);              // an advert, a peer digest, or Tick
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

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::advert::{Advert, HostedCapsule};
use crate::cert::verify_cert_with;
use crate::codec::{self, DecodeError};
use crate::digest::Digest;
use crate::identity::{NodeId, PublicKey};
use crate::limits::{
    DIGEST_ENTRIES_MAX, DIRECTORY_NODES_MAX, DIRECTORY_OUTPUTS_MAX, ENVELOPE_OVERHEAD_MAX, SYNC_ADVERTS_MAX,
    SYNC_RESPONSE_BYTES_MAX,
};
use crate::signed::{Envelope, OpenError};
use crate::time::Millis;
use crate::verify::{Ed25519Verifier, Verifier};

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
    /// Nodes held at most; adverts from further nodes are refused.
    pub nodes_max: usize,
    /// Open or closed mesh.
    pub admission: Admission,
}

impl Default for DirectoryConfig {
    fn default() -> Self {
        Self {
            ttl_max_ms: crate::limits::ADVERT_TTL_MS_MAX,
            clock_skew_max_ms: 30_000,
            nodes_max: DIRECTORY_NODES_MAX,
            admission: Admission::Open,
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
    /// A peer sent its digest; the directory answers with what the peer is missing.
    PeerDigest { peer: NodeId, digest: DirectoryDigest },
    /// Time passed; expire what is due.
    Tick,
}

/// What the directory asks the driver to do or know.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum Output {
    /// An advert was accepted (the node is new, or this is a newer advert for it).
    Accepted { node: NodeId, seq: u64, source: Source },
    /// An advert was refused; `node` is the signer the envelope claims (unverified).
    Refused { node: NodeId, source: Source, reason: Refusal },
    /// A node's advert expired without a newer one.
    Expired { node: NodeId },
    /// Send these adverts to `peer`, which lacks them; `more` means its digest showed
    /// further gaps than fit in one response (the peer should ask again).
    SendAdverts { peer: NodeId, adverts: Vec<Envelope>, more: bool },
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
    #[error("directory is full ({nodes_max} nodes)")]
    Full { nodes_max: usize },
}

impl Refusal {
    /// Every reason name, in a fixed order (for metrics that list zero counts too).
    pub const REASONS: [&'static str; 9] = [
        "malformed",
        "bad_signature",
        "duplicate",
        "stale",
        "replayed",
        "expired",
        "from_future",
        "not_admitted",
        "full",
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
        }
    }

    /// Whether the sender provably misbehaved (as opposed to being late or redundant,
    /// which honest gossip produces all the time). Gossip drivers penalise these peers.
    #[must_use]
    pub const fn is_misbehaviour(&self) -> bool {
        matches!(
            self,
            Self::Malformed(_) | Self::BadSignature | Self::FromFuture { .. } | Self::NotAdmitted(_)
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
    /// Outputs dropped because the driver did not drain them.
    pub outputs_dropped: u64,
    /// Tombstones dropped early because the tombstone table was full.
    pub tombstones_dropped: u64,
}

/// The set of live adverts this node knows.
#[derive(Debug)]
pub struct Directory {
    config: DirectoryConfig,
    verifier: Arc<dyn Verifier>,
    records: BTreeMap<NodeId, Record>,
    /// (hash of capsule name, node key bytes) for every capsule of every held advert: one
    /// flat ordered set, so a capsule hosted by a few nodes costs a few entries rather than
    /// a map node per name. Hash collisions are harmless: lookups confirm the name.
    by_capsule: BTreeSet<(u64, [u8; 32])>,
    expiries: BTreeSet<(Millis, NodeId)>,
    tombstones: BTreeMap<NodeId, Tombstone>,
    tombstone_expiries: BTreeSet<(Millis, NodeId)>,
    outputs: VecDeque<Output>,
    stats: DirectoryStats,
}

#[derive(Clone, Copy, Debug)]
struct Tombstone {
    seq: u64,
    until: Millis,
}

/// An anti-entropy summary: for every node held, the sequence number held.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DirectoryDigest {
    entries: Vec<DigestEntry>,
}

/// One node in a digest: `[node, seq]` on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DigestEntry(pub NodeId, pub u64);

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
        Self {
            config,
            verifier,
            records: BTreeMap::new(),
            by_capsule: BTreeSet::new(),
            expiries: BTreeSet::new(),
            tombstones: BTreeMap::new(),
            tombstone_expiries: BTreeSet::new(),
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
            Input::PeerDigest { peer, digest } => {
                let (adverts, more) = self.missing_for(&digest, SYNC_ADVERTS_MAX, SYNC_RESPONSE_BYTES_MAX);
                if !adverts.is_empty() {
                    self.push(Output::SendAdverts { peer, adverts, more });
                }
            }
            Input::Tick => {}
        }
    }

    /// The next queued output, oldest first.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// When the directory next needs [`Input::Tick`], if ever.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Millis> {
        let record = self.expiries.first().map(|(at, _)| *at);
        let tombstone = self.tombstone_expiries.first().map(|(at, _)| *at);
        match (record, tombstone) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Judges one advert and, if accepted, stores it; returns the accepted sequence number. The verdict is also queued as an
    /// [`Output`]. Input from anywhere is safe: a refusal changes nothing held.
    pub fn insert(&mut self, now: Millis, envelope: Envelope, source: Source) -> Result<u64, Refusal> {
        let claimed = NodeId::from_key(envelope.signer());
        match self.judge(now, &envelope) {
            Ok(advert) => {
                let seq = advert.seq;
                self.store(now, envelope, advert);
                self.stats.accepted += 1;
                self.push(Output::Accepted { node: claimed, seq, source });
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
            if let Some(record) = self.remove(&node) {
                let advert = record.advert();
                let until = advert.issued_at.plus(self.clamped_ttl(advert) + self.config.clock_skew_max_ms);
                self.bury(node, advert.seq, until);
                self.stats.expired += 1;
                self.push(Output::Expired { node });
            }
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
        self.records.get(node)
    }

    /// Every record still valid at `now`, ordered by node. (Records past their expiry are
    /// dropped at the next `handle`; this never shows one in between.)
    pub fn records(&self, now: Millis) -> impl Iterator<Item = &Record> {
        self.records.values().filter(move |r| r.expires_at > now)
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
        self.records.len()
    }

    /// The signature verifier this directory checks with (shared in the simulator).
    #[must_use]
    pub fn verifier(&self) -> &dyn Verifier {
        self.verifier.as_ref()
    }

    /// Whether no node is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The nodes hosting capsule `name` whose advert is still valid at `now`, ordered by
    /// node, with the capsule's entry.
    pub fn hosts<'a>(
        &'a self,
        now: Millis,
        name: &'a str,
    ) -> impl Iterator<Item = (&'a Record, &'a HostedCapsule)> + 'a {
        let key = name_key(name);
        self.by_capsule.range((key, [0u8; 32])..=(key, [0xff; 32])).filter_map(move |(_, node)| {
            let record = self.records.get(&NodeId::from_key(PublicKey::from_validated(*node)))?;
            if record.expires_at <= now {
                return None;
            }
            let capsule = record.advert().capsules.iter().find(|c| c.name == name)?;
            Some((record, capsule))
        })
    }

    /// Every capsule name in the directory, sorted (a scan: for views, not hot paths).
    pub fn capsule_names(&self) -> impl Iterator<Item = &str> {
        let names: BTreeSet<&str> =
            self.records.values().flat_map(|r| r.advert.capsules.iter().map(|c| c.name.as_str())).collect();
        names.into_iter()
    }

    /// A summary of what is held, for anti-entropy.
    #[must_use]
    pub fn digest(&self) -> DirectoryDigest {
        DirectoryDigest {
            entries: self
                .records
                .iter()
                .map(|(node, record)| DigestEntry(*node, record.advert().seq))
                .collect(),
        }
    }

    /// The adverts a peer with `digest` is missing (nodes it lacks, or holds older adverts
    /// for): at most `count_max` of them and about `bytes_max` encoded bytes, and whether
    /// more were left out.
    #[must_use]
    pub fn missing_for(
        &self,
        digest: &DirectoryDigest,
        count_max: usize,
        bytes_max: usize,
    ) -> (Vec<Envelope>, bool) {
        let mut theirs = digest.entries.iter().peekable();
        let mut missing = Vec::new();
        let mut bytes = 0;
        for (node, record) in &self.records {
            while theirs.next_if(|entry| entry.0 < *node).is_some() {}
            let their_seq = theirs.next_if(|entry| entry.0 == *node).map(|entry| entry.1);
            if their_seq.is_none_or(|seq| seq < record.advert().seq) {
                let size = record.envelope().body().len() + ENVELOPE_OVERHEAD_MAX;
                if missing.len() == count_max || bytes + size > bytes_max {
                    return (missing, true);
                }
                bytes += size;
                missing.push(record.envelope().clone());
            }
        }
        (missing, false)
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

    /// Runs every check on an advert, cheapest first; the signature is checked only once
    /// nothing cheaper refused it.
    fn judge(&self, now: Millis, envelope: &Envelope) -> Result<Arc<Advert>, Refusal> {
        let node = NodeId::from_key(envelope.signer());
        let held = self.records.get(&node);
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
        if !self.records.contains_key(&node) && self.records.len() >= self.config.nodes_max {
            return Err(Refusal::Full { nodes_max: self.config.nodes_max });
        }
        Ok(advert)
    }

    fn store(&mut self, now: Millis, envelope: Envelope, advert: Arc<Advert>) {
        let node = NodeId::from_key(envelope.signer());
        let ttl = self.clamped_ttl(&advert);
        let expires_at = now.plus(ttl).min(advert.issued_at.plus(ttl + self.config.clock_skew_max_ms));
        self.remove(&node);
        if let Some(tombstone) = self.tombstones.remove(&node) {
            self.tombstone_expiries.remove(&(tombstone.until, node));
        }
        for capsule in &advert.capsules {
            self.by_capsule.insert((name_key(&capsule.name), *node.key().as_bytes()));
        }
        self.expiries.insert((expires_at, node));
        self.records.insert(node, Record { envelope, advert, received_at: now, expires_at });
    }

    fn remove(&mut self, node: &NodeId) -> Option<Record> {
        let record = self.records.remove(node)?;
        self.expiries.remove(&(record.expires_at, *node));
        for capsule in &record.advert().capsules {
            self.by_capsule.remove(&(name_key(&capsule.name), *node.key().as_bytes()));
        }
        Some(record)
    }

    fn bury(&mut self, node: NodeId, seq: u64, until: Millis) {
        if self.tombstones.len() >= self.config.nodes_max
            && let Some((_, oldest)) = self.tombstone_expiries.pop_first()
        {
            self.tombstones.remove(&oldest);
            self.stats.tombstones_dropped += 1;
        }
        self.tombstones.insert(node, Tombstone { seq, until });
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

/// A stable 64-bit hash of a capsule name (FNV-1a), for the capsule index.
fn name_key(name: &str) -> u64 {
    name.bytes()
        .fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests;
