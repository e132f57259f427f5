//! Anti-entropy messages (`/murmur/sync/1`): "here is what I hold" and "here is what you
//! lack".
//!
//! When a connection opens, each side sends a [`SyncRequest`] with its directory digest
//! (and, in a closed mesh, its node certificate); the other answers with a
//! [`SyncResponse`] holding the adverts the digest shows missing or older. A response that
//! could not hold everything says `more`, and the requester asks again.
//!
//! A full digest is about 45 bytes per node held: 450 KB at 10,000 nodes, for every
//! connection and every periodic sync, mostly to learn that nothing differs. So a node
//! holding many nodes sends a [`Summary`] first: its directory cut into buckets by the
//! leading bits of the node ids (so a bucket is a range of ids, read without a scan), with
//! per bucket the sum of a keyed hash of each entry (up to about a byte per node). The
//! responder answers with the buckets whose sums differ from its own, with its sums for
//! them ([`SyncResponse::differ`]), and, when they hold few nodes (at most
//! [`SYNC_INLINE_ADVERTS_MAX`]), its adverts in them. The requester judges those adverts as
//! usual and sums its buckets again. A bucket that still differs holds something the
//! responder's does not: a newer advert (the requester is only ahead, and is done when the
//! inline adverts show the responder holds every node it holds there) or a node the
//! responder lacks, perhaps because a departure notice ended it there. That is settled by
//! a second exchange, the digest of those buckets alone with their [`Scope`], which the
//! responder answers as it would a full digest, looking only at its nodes in those buckets
//! (notices included). Two directories that agree exchange one summary; a requester that
//! missed an advert or two gets it in the summary's answer.
//!
//! The hash is keyed by a salt the requester picks per exchange, so two honest directories
//! that differ cannot keep having equal sums. It is not cryptographic and need not be: a
//! responder that wants to hide adverts from a requester can simply leave them out, summary
//! or not; anti-entropy with other peers repairs that.

use serde::{Deserialize, Serialize};

use crate::codec::{self, DecodeError};
use crate::directory::DirectoryDigest;
use crate::identity::{NodeId, PublicKey};
use crate::limits::{
    REVOCATIONS_HELD_MAX, SYNC_ADVERTS_MAX, SYNC_BUCKETS_MAX, SYNC_INLINE_ADVERTS_MAX, SYNC_NOTICES_MAX,
    SYNC_REQUEST_BYTES_MAX, SYNC_RESPONSE_BYTES_MAX,
};
use crate::signed::{DocKind, Envelope, decode_versioned};

/// The sync message version this build writes and reads.
pub const SYNC_VERSION: u16 = 1;

/// "This is what I hold": all of it (`digest` alone), a summary of it (`summary`, with an
/// empty digest), or the part of it in some buckets (`digest` with its `scope`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncRequest {
    // Fields are in canonical key order (see `codec`).
    pub v: u16,
    /// The requester's node certificate (closed mesh), so the responder can admit it.
    pub cert: Option<Envelope>,
    /// The buckets `digest` covers, when it covers only some (omitted otherwise, so a
    /// full-digest request is the same bytes as before summaries existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
    /// What the requester holds (in `scope`, when given; empty with a summary).
    pub digest: DirectoryDigest,
    /// What the requester holds, bucket by bucket (omitted when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
    /// The revocation lists the requester holds, as `[authority, seq]` (wire 1.2, sent only
    /// to peers announcing it; omitted otherwise). A responder that sees it answers with
    /// the lists it holds that are newer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revocations: Option<Vec<(PublicKey, u64)>>,
}

/// How an exchange cuts directories into buckets: `count` (a power of two) buckets by the
/// leading bits of the node id, so a bucket is a range of node ids (directories are
/// ordered by node: a bucket's nodes are read without a scan of the rest), and per node
/// held a fingerprint of its entry, keyed with `salt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buckets {
    salt: u64,
    count: u32,
    /// Hash keys drawn from `salt`.
    keys: [u64; 4],
}

impl Buckets {
    /// `count` buckets, rounded up to a power of two within `1..=SYNC_BUCKETS_MAX`.
    #[must_use]
    pub fn new(salt: u64, count: usize) -> Self {
        let count = count.clamp(1, SYNC_BUCKETS_MAX).next_power_of_two();
        let mut state = salt;
        let keys = std::array::from_fn(|_| {
            state = mix(state);
            state
        });
        Self { salt, count: count as u32, keys }
    }

    /// The bucketing for a directory of `nodes` nodes:
    /// [`crate::limits::SYNC_NODES_PER_BUCKET`] nodes a bucket.
    #[must_use]
    pub fn for_nodes(salt: u64, nodes: usize) -> Self {
        Self::new(salt, nodes / crate::limits::SYNC_NODES_PER_BUCKET)
    }

    /// The number of buckets.
    #[must_use]
    pub const fn count(&self) -> u32 {
        self.count
    }

    /// The bucket `node` falls in: the leading bits of its id.
    #[must_use]
    pub fn bucket(&self, node: &NodeId) -> u32 {
        let bytes = node.key().as_bytes();
        let head = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        head.checked_shr(32 - self.count.trailing_zeros()).unwrap_or(0)
    }

    /// The node ids bucket `bucket` holds, lowest and highest.
    #[must_use]
    pub fn range(&self, bucket: u32) -> (NodeId, NodeId) {
        let bits = self.count.trailing_zeros();
        let (mut low, mut high) = ([0u8; 32], [0xff; 32]);
        if bits > 0 {
            let head = bucket << (32 - bits);
            let mask = u32::MAX >> bits;
            low[..4].copy_from_slice(&head.to_be_bytes());
            high[..4].copy_from_slice(&(head | mask).to_be_bytes());
        }
        (NodeId::bound(low), NodeId::bound(high))
    }

    /// The fingerprint of the entry `(node, seq)`: a keyed hash (two folded
    /// multiplications, as in wyhash; a summary hashes every node held).
    #[must_use]
    pub fn fingerprint(&self, node: &NodeId, seq: u64) -> u64 {
        let bytes = node.key().as_bytes();
        let word = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let k = &self.keys;
        let hash = fold(word(0) ^ k[0], word(1) ^ k[1]) ^ fold(word(2) ^ k[2], word(3) ^ k[3]);
        fold(hash ^ k[1], seq ^ k[2])
    }

    /// The summary of `entries`, `(node, seq)` pairs: per bucket, the wrapping sum of the
    /// fingerprints of its entries.
    #[must_use]
    pub fn summarize(&self, entries: impl IntoIterator<Item = (NodeId, u64)>) -> Summary {
        let mut sums = vec![0u64; self.count as usize];
        for (node, seq) in entries {
            let sum = &mut sums[self.bucket(&node) as usize];
            *sum = sum.wrapping_add(self.fingerprint(&node, seq));
        }
        Summary { salt: self.salt, sums }
    }
}

/// The 128-bit product of `a` and `b`, its halves xored.
const fn fold(a: u64, b: u64) -> u64 {
    let product = (a as u128) * (b as u128);
    (product as u64) ^ ((product >> 64) as u64)
}

/// splitmix64's finalizer: every input bit moves every output bit.
const fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A directory cut into buckets: per bucket, the sum of its entries' fingerprints.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    // Fields are in canonical key order (see `codec`).
    /// The requester's key for this exchange's hash.
    pub salt: u64,
    /// One sum per bucket; the length, a power of two, is the bucket count.
    pub sums: Vec<u64>,
}

impl Summary {
    /// The bucketing this summary uses.
    #[must_use]
    pub fn buckets(&self) -> Buckets {
        Buckets::new(self.salt, self.sums.len())
    }

    /// The buckets in which `other` (made with the same bucketing) differs, in order, with
    /// `other`'s sums.
    #[must_use]
    pub fn differing(&self, other: &Self) -> Vec<BucketSum> {
        (0..self.sums.len().min(other.sums.len()))
            .filter(|&b| self.sums[b] != other.sums[b])
            .map(|b| BucketSum(b as u32, other.sums[b]))
            .collect()
    }

    fn validate(&self) -> Result<(), DecodeError> {
        let len = self.sums.len();
        if !valid_count(len) {
            return Err(DecodeError::Invalid {
                what: "sync request",
                field: "summary",
                reason: format!("has {len} buckets, not a power of two up to {SYNC_BUCKETS_MAX}"),
            });
        }
        Ok(())
    }
}

/// A bucket and the responder's sum for it: `[bucket, sum]` on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketSum(pub u32, pub u64);

/// The buckets a scoped digest covers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scope {
    // Fields are in canonical key order (see `codec`).
    /// The summary's salt.
    pub salt: u64,
    /// The summary's bucket count.
    pub count: u32,
    /// The buckets covered, in increasing order.
    pub buckets: Vec<u32>,
}

impl Scope {
    /// `buckets` of the bucketing `of`.
    #[must_use]
    pub const fn new(of: Buckets, buckets: Vec<u32>) -> Self {
        Self { salt: of.salt, count: of.count, buckets }
    }

    /// The bucketing this scope uses.
    #[must_use]
    pub fn buckets(&self) -> Buckets {
        Buckets::new(self.salt, self.count as usize)
    }

    /// The node id ranges of the covered buckets, in order.
    pub fn ranges(&self) -> impl Iterator<Item = (NodeId, NodeId)> + '_ {
        let buckets = self.buckets();
        self.buckets.iter().map(move |&bucket| buckets.range(bucket))
    }

    fn validate(&self) -> Result<(), DecodeError> {
        let invalid = |reason: String| DecodeError::Invalid { what: "sync request", field: "scope", reason };
        let count = self.count as usize;
        if !valid_count(count) {
            return Err(invalid(format!("has {count} buckets, not a power of two up to {SYNC_BUCKETS_MAX}")));
        }
        if !ascending_below(&self.buckets, self.count) {
            return Err(invalid(format!("buckets must be increasing and below {count}")));
        }
        Ok(())
    }
}

/// Whether `count` buckets is a bucketing [`Buckets::new`] could make.
const fn valid_count(count: usize) -> bool {
    count.is_power_of_two() && count <= SYNC_BUCKETS_MAX
}

/// Whether `buckets` is strictly increasing with every entry below `count`.
fn ascending_below(buckets: &[u32], count: u32) -> bool {
    buckets.windows(2).all(|w| w[0] < w[1]) && buckets.last().is_none_or(|&last| last < count)
}

/// "This is what you lack."
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncResponse {
    // Fields are in canonical key order (see `codec`).
    pub v: u16,
    /// Departure notices that ended adverts the requester's digest still lists (omitted
    /// when empty, so a response without notices is the same bytes as before notices
    /// existed). The field keeps its wire key, `gone`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gone: Vec<Envelope>,
    /// More adverts were missing than fit; ask again.
    pub more: bool,
    /// The answer to a summary: the buckets whose fingerprints differ, in increasing order,
    /// with the responder's sums (empty: the directories agree). It comes with no notices
    /// and no `more`, and with adverts only those the responder holds in these buckets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub differ: Option<Vec<BucketSum>>,
    /// Advert envelopes, each to be judged by the requester's directory.
    pub adverts: Vec<Envelope>,
    /// Revocation lists newer than the request said the requester holds (only to a request
    /// that said so; omitted when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revocations: Vec<Envelope>,
}

impl SyncRequest {
    /// A request carrying `digest` and an optional certificate.
    #[must_use]
    pub const fn new(cert: Option<Envelope>, digest: DirectoryDigest) -> Self {
        Self { v: SYNC_VERSION, cert, scope: None, digest, summary: None, revocations: None }
    }

    /// A request carrying a summary and an optional certificate.
    #[must_use]
    pub fn summarized(cert: Option<Envelope>, summary: Summary) -> Self {
        Self {
            v: SYNC_VERSION,
            cert,
            scope: None,
            digest: DirectoryDigest::default(),
            summary: Some(summary),
            revocations: None,
        }
    }

    /// A request carrying `digest`, which covers only `scope`.
    #[must_use]
    pub const fn scoped(cert: Option<Envelope>, scope: Scope, digest: DirectoryDigest) -> Self {
        Self { v: SYNC_VERSION, cert, scope: Some(scope), digest, summary: None, revocations: None }
    }

    /// The request, telling the responder which revocation lists the requester holds.
    #[must_use]
    pub fn with_revocations(mut self, seen: Vec<(PublicKey, u64)>) -> Self {
        self.revocations = Some(seen);
        self
    }

    /// Canonical bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(self)
    }

    /// Decodes and validates a request from a peer.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let request: Self =
            decode_versioned("sync request", bytes, SYNC_REQUEST_BYTES_MAX, SYNC_VERSION, |r: &Self| r.v)?;
        request.digest.validate()?;
        if let Some(summary) = &request.summary {
            summary.validate()?;
            if request.scope.is_some() || !request.digest.entries().is_empty() {
                return Err(DecodeError::Invalid {
                    what: "sync request",
                    field: "summary",
                    reason: "comes with a digest or a scope; it stands alone".into(),
                });
            }
        }
        if let Some(scope) = &request.scope {
            scope.validate()?;
        }
        if let Some(seen) = &request.revocations
            && seen.len() > REVOCATIONS_HELD_MAX
        {
            return Err(DecodeError::Invalid {
                what: "sync request",
                field: "revocations",
                reason: format!("has {} entries, more than {REVOCATIONS_HELD_MAX}", seen.len()),
            });
        }
        if let Some(cert) = &request.cert
            && cert.kind() != DocKind::NodeCert
        {
            return Err(DecodeError::Invalid {
                what: "sync request",
                field: "cert",
                reason: format!("holds a {} document", cert.kind()),
            });
        }
        Ok(request)
    }
}

impl SyncResponse {
    /// A response carrying `adverts`.
    #[must_use]
    pub const fn new(adverts: Vec<Envelope>, more: bool) -> Self {
        Self { v: SYNC_VERSION, gone: Vec::new(), more, differ: None, adverts, revocations: Vec::new() }
    }

    /// The answer to a summary: the buckets that differ, and (when few) the responder's
    /// adverts in them.
    #[must_use]
    pub const fn differing(buckets: Vec<BucketSum>, adverts: Vec<Envelope>) -> Self {
        Self {
            v: SYNC_VERSION,
            gone: Vec::new(),
            more: false,
            differ: Some(buckets),
            adverts,
            revocations: Vec::new(),
        }
    }

    /// The response with revocation lists added.
    #[must_use]
    pub fn with_revocations(mut self, revocations: Vec<Envelope>) -> Self {
        self.revocations = revocations;
        self
    }

    /// The response with departure notices added.
    #[must_use]
    pub fn with_notices(mut self, gone: Vec<Envelope>) -> Self {
        self.gone = gone;
        self
    }

    /// Canonical bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(self)
    }

    /// Decodes and validates a response from a peer.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let response: Self =
            decode_versioned("sync response", bytes, SYNC_RESPONSE_BYTES_MAX, SYNC_VERSION, |r: &Self| r.v)?;
        if response.adverts.len() > SYNC_ADVERTS_MAX {
            return Err(DecodeError::Invalid {
                what: "sync response",
                field: "adverts",
                reason: format!("has {} entries, more than {SYNC_ADVERTS_MAX}", response.adverts.len()),
            });
        }
        if response.gone.len() > SYNC_NOTICES_MAX {
            return Err(DecodeError::Invalid {
                what: "sync response",
                field: "gone",
                reason: format!("has {} entries, more than {SYNC_NOTICES_MAX}", response.gone.len()),
            });
        }
        if let Some(other) = response.gone.iter().find(|n| n.kind() != DocKind::NodeDeparture) {
            return Err(DecodeError::Invalid {
                what: "sync response",
                field: "gone",
                reason: format!("holds a {} document", other.kind()),
            });
        }
        if response.revocations.len() > REVOCATIONS_HELD_MAX {
            return Err(DecodeError::Invalid {
                what: "sync response",
                field: "revocations",
                reason: format!(
                    "has {} entries, more than {REVOCATIONS_HELD_MAX}",
                    response.revocations.len()
                ),
            });
        }
        if let Some(other) = response.revocations.iter().find(|n| n.kind() != DocKind::Revocation) {
            return Err(DecodeError::Invalid {
                what: "sync response",
                field: "revocations",
                reason: format!("holds a {} document", other.kind()),
            });
        }
        if let Some(differ) = &response.differ {
            let invalid = |reason: &str| DecodeError::Invalid {
                what: "sync response",
                field: "differ",
                reason: reason.into(),
            };
            let buckets: Vec<u32> = differ.iter().map(|b| b.0).collect();
            if !ascending_below(&buckets, SYNC_BUCKETS_MAX as u32) {
                return Err(invalid(&format!("must be increasing and below {SYNC_BUCKETS_MAX}")));
            }
            if response.more || !response.gone.is_empty() || response.adverts.len() > SYNC_INLINE_ADVERTS_MAX
            {
                return Err(invalid(&format!(
                    "comes with notices, `more` or more than {SYNC_INLINE_ADVERTS_MAX} adverts"
                )));
            }
        }
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::tests::assert_canonical_key_order;
    use crate::directory::DigestEntry;
    use crate::identity::SecretKey;

    fn node(n: u8) -> NodeId {
        SecretKey::from_seed([n; 32]).node_id()
    }

    fn digest(nodes: &[u8]) -> DirectoryDigest {
        DirectoryDigest::from_entries(nodes.iter().map(|&n| DigestEntry(node(n), 1)).collect())
    }

    #[test]
    fn a_digest_entry_is_read_without_checking_its_key() {
        // Bytes that are no ed25519 point: a key made of them is refused, a digest entry
        // naming them is read as the bytes (and matches no node).
        let not_a_key = (0u8..=255)
            .map(|i| [i; 32])
            .find(|b| crate::identity::PublicKey::from_bytes(*b).is_err())
            .expect("some 32-byte strings are no curve point");
        let mut entries = digest(&[1, 2]).entries().to_vec();
        entries.push(DigestEntry(NodeId::bound(not_a_key), 9));
        let request = SyncRequest::new(None, DirectoryDigest::from_entries(entries));
        let bytes = request.encode();
        let decoded = SyncRequest::decode(&bytes).expect("decodes");
        assert_eq!(decoded.digest, request.digest);
        assert_eq!(decoded.encode(), bytes, "the same bytes again");
        assert!(decoded.digest.entries().iter().any(|e| e.0.key().as_bytes() == &not_a_key));
    }

    fn invalid(bytes: &[u8]) -> String {
        match SyncRequest::decode(bytes) {
            Err(e) => e.to_string(),
            Ok(request) => panic!("accepted {request:?}"),
        }
    }

    #[test]
    fn summary_scope_and_differ_keep_canonical_key_order() {
        let buckets = Buckets::new(9, 8);
        let summary = buckets.summarize([(node(1), 4), (node(2), 7)]);
        assert_canonical_key_order(&SyncRequest::summarized(None, summary).encode());
        let scoped = SyncRequest::scoped(None, Scope::new(buckets, vec![0, 5]), digest(&[1, 2]));
        assert_canonical_key_order(&scoped.encode());
        assert_canonical_key_order(&SyncResponse::differing(vec![BucketSum(5, 1)], Vec::new()).encode());
    }

    #[test]
    fn sums_see_every_entry_and_only_its_own_bucket_changes() {
        let buckets = Buckets::new(3, 64);
        let entries: Vec<(NodeId, u64)> = (1..=40).map(|n| (node(n), u64::from(n))).collect();
        let before = buckets.summarize(entries.clone());
        // One node's newer advert: its bucket, and only its bucket, differs.
        let mut newer = entries.clone();
        newer[7].1 += 1;
        let after = buckets.summarize(newer);
        let differ = before.differing(&after);
        assert_eq!(differ.len(), 1);
        assert_eq!(differ[0], BucketSum(buckets.bucket(&entries[7].0), after.sums[differ[0].0 as usize]));
        // The order entries come in does not matter.
        let mut reversed = entries;
        reversed.reverse();
        assert!(before.differing(&buckets.summarize(reversed)).is_empty());
        // Another salt, other sums (the same directories may not collide twice).
        assert_ne!(
            Buckets::new(4, 64).summarize([(node(1), 1)]).sums,
            buckets.summarize([(node(1), 1)]).sums
        );
    }

    #[test]
    fn buckets_are_ranges_of_node_ids_in_order() {
        for count in [1, 2, 16, 4096] {
            let buckets = Buckets::new(1, count);
            let mut last_high = None;
            for bucket in 0..buckets.count() {
                let (low, high) = buckets.range(bucket);
                assert!(low <= high);
                assert!(last_high.is_none_or(|h| h < low), "ranges follow each other");
                last_high = Some(high);
            }
            for n in 0..=255 {
                let (low, high) = buckets.range(buckets.bucket(&node(n)));
                assert!(low <= node(n) && node(n) <= high);
            }
        }
        assert_eq!(Buckets::new(1, 5000).count(), 4096, "at most SYNC_BUCKETS_MAX");
        assert_eq!(Buckets::new(1, 0).count(), 1);
        assert_eq!(Buckets::new(1, 100).count(), 128, "rounded up to a power of two");
    }

    #[test]
    fn malformed_summaries_scopes_and_answers_are_refused_with_the_field_named() {
        let three = Summary { salt: 1, sums: vec![0; 3] };
        let message = invalid(&SyncRequest::summarized(None, three).encode());
        assert!(message.contains("summary") && message.contains("power of two"), "{message}");
        let too_many = Summary { salt: 1, sums: vec![0; 2 * SYNC_BUCKETS_MAX] };
        assert!(invalid(&SyncRequest::summarized(None, too_many).encode()).contains("summary"));
        let mut with_digest = SyncRequest::summarized(None, Buckets::new(1, 4).summarize([]));
        with_digest.digest = digest(&[1]);
        assert!(invalid(&with_digest.encode()).contains("stands alone"));
        let unsorted = Scope { salt: 1, count: 8, buckets: vec![3, 2] };
        assert!(invalid(&SyncRequest::scoped(None, unsorted, digest(&[])).encode()).contains("scope"));
        let beyond = Scope { salt: 1, count: 8, buckets: vec![8] };
        assert!(invalid(&SyncRequest::scoped(None, beyond, digest(&[])).encode()).contains("below 8"));
        let odd = Scope { salt: 1, count: 6, buckets: vec![] };
        assert!(invalid(&SyncRequest::scoped(None, odd, digest(&[])).encode()).contains("power of two"));

        let answer =
            |response: SyncResponse| SyncResponse::decode(&response.encode()).unwrap_err().to_string();
        let unsorted = SyncResponse::differing(vec![BucketSum(2, 0), BucketSum(2, 1)], Vec::new());
        assert!(answer(unsorted).contains("differ"));
        let mut with_more = SyncResponse::differing(vec![BucketSum(2, 0)], Vec::new());
        with_more.more = true;
        assert!(answer(with_more).contains("differ"));
    }
}
