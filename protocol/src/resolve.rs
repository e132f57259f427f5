//! Choosing the manifest a pull of `name@version` takes, from what providers offer.
//!
//! Sans-IO, like the pull scheduler. [`Resolution`] decides whom to ask and when to stop:
//! the driver sends a `resolve` on `/murmur/artifact/1` to each node [`Resolution::poll_ask`]
//! names, reports each answer ([`Resolution::offered`], [`Resolution::declined`],
//! [`Resolution::failed`]) and time ([`Resolution::handle_timeout`] at
//! [`Resolution::poll_timeout`]), until [`Resolution::is_done`]. Providers are asked in
//! waves of [`ResolveConfig::fanout`]; an ask unanswered after [`ResolveConfig::timeout_ms`]
//! counts as failed. Once the offers are settled, the rest of the wave gets a grace as long
//! as settling took (clamped), then the resolution ends without them: a provider that is
//! down but still advertised must not hold every pull for the whole timeout.
//!
//! [`Offers`] decides which offers may be trusted, when enough have come in
//! ([`Offers::settled`]) and the order in which candidates are tried ([`Offers::finish`]).
//! Trust never comes from a provider:
//!
//! - a pin equal to an offered manifest digest takes that manifest alone;
//! - a pin that is not (a content digest) makes every offered manifest a candidate, most
//!   holders first, each to be checked against the pin once its metadata is fetched;
//! - without a pin, only manifests a publisher in the node's own trusted keys signed for
//!   `name@version` are candidates, most holders first, then the lowest digest, so every
//!   node picks the same.
//!
//! A trusted publisher's signature is kept with a candidate either way, so the node can
//! pass it on to peers that rely on the publisher, and a node offering a trusted manifest
//! without its signature still counts as a holder (the bytes are checked anyway).

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use crate::catalog::Catalog;
use crate::digest::Digest;
use crate::identity::{NodeId, PublicKey};
use crate::limits::ARTIFACT_SIGNATURE_BYTES_MAX;
use crate::signed::Envelope;
use crate::time::Millis;
use crate::trust::open_trusted;

/// Why a candidate manifest may be pulled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Basis {
    /// The caller pinned this manifest's digest.
    PinnedManifest(Digest),
    /// The caller pinned a content digest; the manifest must be checked against it.
    PinnedContent(Digest),
    /// A trusted publisher signed it for `name@version`.
    Publisher(PublicKey),
}

impl fmt::Display for Basis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PinnedManifest(pin) => write!(f, "pinned digest {pin}"),
            Self::PinnedContent(pin) => write!(f, "pinned content digest {pin}"),
            Self::Publisher(key) => write!(f, "publisher {key}"),
        }
    }
}

/// A manifest offered for `name@version` that may be pulled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub manifest: Digest,
    /// Nodes that offered it, in the order they answered.
    pub holders: Vec<NodeId>,
    /// A trusted publisher's signature for it, to keep with the artifact.
    pub signature: Option<Envelope>,
    pub basis: Basis,
}

/// Why no manifest can be pulled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// No provider answered with a manifest.
    #[error("no provider holds {name}@{version}")]
    NotOffered { name: String, version: String },
    #[error(
        "{name}@{version} is offered as {} but none is signed by a publisher in this node's trust.publishers; add the publisher's key there, or pin the digest (`--digest`, or a murmur.lock entry)",
        some(manifests)
    )]
    /// Manifests were offered, none of them trusted.
    Untrusted { name: String, version: String, manifests: Vec<Digest> },
}

/// The first few of `digests`, for an error message.
fn some(digests: &[Digest]) -> String {
    const SHOWN: usize = 4;
    let shown: Vec<String> = digests.iter().take(SHOWN).map(ToString::to_string).collect();
    match digests.len().saturating_sub(SHOWN) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

/// The offers for one `name@version` so far.
#[derive(Debug)]
pub struct Offers {
    name: String,
    version: String,
    pin: Option<Digest>,
    publishers: Vec<PublicKey>,
    /// Every offered manifest and the nodes offering it (trusted or not: a node that holds
    /// a trusted manifest without relaying its signature still serves the right bytes).
    holders: BTreeMap<Digest, Vec<NodeId>>,
    /// Offered manifests that may be pulled, why, and a trusted signature for them.
    trusted: BTreeMap<Digest, (Basis, Option<Envelope>)>,
}

impl Offers {
    /// Distinct manifests kept at most, counting only offers anyone may make (untrusted
    /// ones, and any manifest under a content pin): each costs memory. The pinned manifest
    /// and manifests a trusted publisher signed are always kept, so junk offers cannot
    /// push them out.
    pub const OFFERED_MAX: usize = 256;

    /// The offers for `name@version`, pinned to a manifest or content digest or trusting
    /// `publishers`' signatures.
    #[must_use]
    pub fn new(name: &str, version: &str, pin: Option<Digest>, publishers: Vec<PublicKey>) -> Self {
        Self {
            name: name.to_owned(),
            version: version.to_owned(),
            pin,
            publishers,
            holders: BTreeMap::new(),
            trusted: BTreeMap::new(),
        }
    }

    /// Provider `node` answered that it holds `manifest` as `name@version`, with the
    /// publisher `signature` it holds for it, if any.
    pub fn offered(&mut self, node: NodeId, manifest: Digest, signature: Option<Envelope>) {
        // A signature counts only if a trusted publisher made it for this very manifest
        // as this name@version, and it is small enough to keep.
        let signature = signature.filter(|envelope| envelope.encode().len() <= ARTIFACT_SIGNATURE_BYTES_MAX);
        let signed = signature.and_then(|envelope| {
            let catalog = open_trusted::<Catalog>(envelope.clone(), &self.publishers).ok()?;
            (catalog.doc().manifest_of(&self.name, &self.version) == Some(manifest))
                .then(|| (envelope, catalog.signer()))
        });
        let basis = match (self.pin, &signed) {
            (Some(pin), _) if pin == manifest => Some(Basis::PinnedManifest(pin)),
            (None, Some((_, signer))) => Some(Basis::Publisher(*signer)),
            (Some(pin), _) => Some(Basis::PinnedContent(pin)),
            (None, None) => None,
        };
        let vouched = matches!(basis, Some(Basis::PinnedManifest(_) | Basis::Publisher(_)));
        if !vouched && !self.holders.contains_key(&manifest) && self.open_offers() >= Self::OFFERED_MAX {
            return;
        }
        let holders = self.holders.entry(manifest).or_default();
        if !holders.contains(&node) {
            holders.push(node);
        }
        let Some(basis) = basis else { return };
        let (_, kept) = self.trusted.entry(manifest).or_insert((basis, None));
        if kept.is_none() {
            *kept = signed.map(|(envelope, _)| envelope);
        }
    }

    /// Offered manifests nobody vouches for (see [`Offers::OFFERED_MAX`]).
    fn open_offers(&self) -> usize {
        self.holders
            .keys()
            .filter(|m| {
                !matches!(self.trusted.get(m), Some((Basis::PinnedManifest(_) | Basis::Publisher(_), _)))
            })
            .count()
    }

    /// Whether asking more providers can change nothing that matters: the pinned manifest
    /// was offered, or (without a pin) some trusted manifest was. With a content pin every
    /// provider's offer may be the one, so it never settles early.
    #[must_use]
    pub fn settled(&self) -> bool {
        match self.pin {
            Some(pin) => self.trusted.contains_key(&pin),
            None => !self.trusted.is_empty(),
        }
    }

    /// The candidates in the order to try them.
    pub fn finish(mut self) -> Result<Vec<Candidate>, ResolveError> {
        let mut candidates: Vec<Candidate> = std::mem::take(&mut self.trusted)
            .into_iter()
            .map(|(manifest, (basis, signature))| Candidate {
                manifest,
                holders: self.holders.remove(&manifest).unwrap_or_default(),
                signature,
                basis,
            })
            .collect();
        if let Some(pin) = self.pin
            && let Some(exact) = candidates.iter().position(|c| c.manifest == pin)
        {
            return Ok(vec![candidates.swap_remove(exact)]);
        }
        candidates.sort_by_key(|c| (std::cmp::Reverse(c.holders.len()), c.manifest));
        if !candidates.is_empty() {
            return Ok(candidates);
        }
        let (name, version) = (self.name, self.version);
        if self.holders.is_empty() {
            return Err(ResolveError::NotOffered { name, version });
        }
        Err(ResolveError::Untrusted { name, version, manifests: self.holders.into_keys().collect() })
    }
}

/// How a [`Resolution`] asks providers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResolveConfig {
    /// Providers asked at once; the next as many are asked when a wave ends unsettled.
    pub fanout: usize,
    /// An ask without an answer this long counts as failed.
    pub timeout_ms: u64,
    /// Once the offers are settled, the asks still open get as long again as settling
    /// took, but at least this long ...
    pub grace_min_ms: u64,
    /// ... and at most this long.
    pub grace_max_ms: u64,
}

impl ResolveConfig {
    /// What `murnode` uses.
    pub const DEFAULT: Self = Self { fanout: 16, timeout_ms: 5_000, grace_min_ms: 50, grace_max_ms: 1_000 };
}

impl Default for ResolveConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Resolving one `name@version`: whom to ask, when to stop, and the [`Offers`] so far.
#[derive(Debug)]
pub struct Resolution {
    offers: Offers,
    config: ResolveConfig,
    started: Millis,
    /// Providers not asked yet, in the order given.
    waiting: VecDeque<NodeId>,
    /// Asks to send (the driver takes them with [`Resolution::poll_ask`]).
    to_send: VecDeque<NodeId>,
    /// Asks of this wave without an answer, and when each times out.
    open: BTreeMap<NodeId, Millis>,
    /// When the open asks stop counting, once the offers are settled.
    grace_until: Option<Millis>,
    asked: usize,
    unanswered: usize,
    done: bool,
}

impl Resolution {
    /// Starts resolving with `offers` by asking `providers` (duplicates are asked once),
    /// the first wave at once.
    #[must_use]
    pub fn new(offers: Offers, providers: Vec<NodeId>, config: ResolveConfig, now: Millis) -> Self {
        let mut seen = std::collections::BTreeSet::new();
        let waiting = providers.into_iter().filter(|p| seen.insert(*p)).collect();
        let mut resolution = Self {
            offers,
            config: ResolveConfig {
                fanout: config.fanout.max(1),
                grace_max_ms: config.grace_max_ms.max(config.grace_min_ms),
                ..config
            },
            started: now,
            waiting,
            to_send: VecDeque::new(),
            open: BTreeMap::new(),
            grace_until: None,
            asked: 0,
            unanswered: 0,
            done: false,
        };
        resolution.advance(now);
        resolution
    }

    /// The next provider to ask, if any.
    pub fn poll_ask(&mut self) -> Option<NodeId> {
        self.to_send.pop_front()
    }

    /// `node` answered that it holds `manifest` as `name@version`, with the publisher
    /// `signature` it holds for it, if any. An answer nobody is waiting for (never asked,
    /// already answered, timed out, or after the end) changes nothing; returns whether the
    /// offer was taken into account.
    pub fn offered(
        &mut self,
        now: Millis,
        node: NodeId,
        manifest: Digest,
        signature: Option<Envelope>,
    ) -> bool {
        if self.open.remove(&node).is_none() {
            return false;
        }
        self.offers.offered(node, manifest, signature);
        self.answered(now);
        true
    }

    /// `node` answered that it holds no `name@version`.
    pub fn declined(&mut self, now: Millis, node: NodeId) {
        if self.open.remove(&node).is_some() {
            self.answered(now);
        }
    }

    /// Asking `node` failed (no connection, an error answer such as "busy"): it counts as
    /// unanswered.
    pub fn failed(&mut self, now: Millis, node: NodeId) {
        if self.open.remove(&node).is_some() {
            self.unanswered += 1;
            self.answered(now);
        }
    }

    /// Time passed: asks past their timeout fail, a grace that ran out ends the wave.
    pub fn handle_timeout(&mut self, now: Millis) {
        let late: Vec<NodeId> = self.open.iter().filter(|(_, at)| **at <= now).map(|(n, _)| *n).collect();
        for node in late {
            self.open.remove(&node);
            self.unanswered += 1;
        }
        self.advance(now);
    }

    /// When [`Resolution::handle_timeout`] should be called next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Millis> {
        if self.done {
            return None;
        }
        let first_timeout = self.open.values().min().copied();
        match (first_timeout, self.grace_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether asking is over: [`Resolution::finish`] gives the candidates.
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Providers asked so far.
    #[must_use]
    pub fn asked(&self) -> usize {
        self.asked
    }

    /// Asks that failed, timed out, or were still open when the resolution ended.
    #[must_use]
    pub fn unanswered(&self) -> usize {
        self.unanswered
    }

    /// The candidates in the order to try them (asking ends here if it had not).
    pub fn finish(self) -> Result<Vec<Candidate>, ResolveError> {
        self.offers.finish()
    }

    fn answered(&mut self, now: Millis) {
        if self.grace_until.is_none() && self.offers.settled() {
            let grace = now.since(self.started).clamp(self.config.grace_min_ms, self.config.grace_max_ms);
            self.grace_until = Some(now.plus(grace));
        }
        self.advance(now);
    }

    /// Ends the wave when nothing is open or its grace ran out; then ends the resolution,
    /// or asks the next wave if the offers are not settled.
    fn advance(&mut self, now: Millis) {
        if self.done {
            return;
        }
        let graced_out = self.grace_until.is_some_and(|at| at <= now);
        if !self.open.is_empty() && !graced_out {
            return;
        }
        self.unanswered += self.open.len();
        self.open.clear();
        if self.offers.settled() || self.waiting.is_empty() {
            self.done = true;
            self.to_send.clear();
            return;
        }
        let deadline = now.plus(self.config.timeout_ms);
        while self.open.len() < self.config.fanout
            && let Some(node) = self.waiting.pop_front()
        {
            self.open.insert(node, deadline);
            self.to_send.push_back(node);
            self.asked += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{CatalogArtifact, CatalogBlob};
    use crate::identity::SecretKey;
    use crate::signed::Signed;
    use crate::time::Millis;

    fn node(n: u8) -> NodeId {
        NodeId::from_key(SecretKey::from_seed([n; 32]).public())
    }

    /// A publisher's signature naming `manifest` as `name@version`.
    fn signature(publisher: &SecretKey, name: &str, manifest: Digest) -> Envelope {
        let catalog = Catalog::new(
            Millis(1),
            vec![CatalogArtifact { name: name.into(), version: "1.0.0".into(), manifest }],
            vec![CatalogBlob { size: 100, digest: manifest }],
        );
        Signed::sign(catalog, publisher).unwrap().into_envelope()
    }

    #[test]
    fn without_a_pin_only_trusted_signatures_for_this_name_count_most_holders_first() {
        let publisher = SecretKey::from_seed([9; 32]);
        let stranger = SecretKey::from_seed([8; 32]);
        let (a, b, c) = (Digest::of(b"a"), Digest::of(b"b"), Digest::of(b"c"));
        let mut r = Offers::new("tool", "1.0.0", None, vec![publisher.public()]);
        assert!(!r.settled());
        r.offered(node(1), a, Some(signature(&publisher, "tool", a)));
        assert!(r.settled());
        r.offered(node(2), b, Some(signature(&publisher, "tool", b)));
        r.offered(node(3), b, None); // a holder without the signature still serves it
        r.offered(node(3), b, None); // the same node twice counts once
        r.offered(node(4), c, Some(signature(&stranger, "tool", c))); // untrusted key
        r.offered(node(5), c, Some(signature(&publisher, "other", c))); // signed for another name
        let candidates = r.finish().unwrap();
        let order: Vec<_> = candidates.iter().map(|c| (c.manifest, c.holders.len())).collect();
        assert_eq!(order, vec![(b, 2), (a, 1)]);
        assert_eq!(candidates[0].basis, Basis::Publisher(publisher.public()));
        assert!(candidates[0].signature.is_some());
    }

    #[test]
    fn ties_go_to_the_lowest_digest_so_every_node_picks_the_same() {
        let publisher = SecretKey::from_seed([9; 32]);
        let (a, b) = (Digest::of(b"a"), Digest::of(b"b"));
        let low = a.min(b);
        for order in [[a, b], [b, a]] {
            let mut r = Offers::new("tool", "1.0.0", None, vec![publisher.public()]);
            for (i, m) in order.into_iter().enumerate() {
                r.offered(node(i as u8), m, Some(signature(&publisher, "tool", m)));
            }
            assert_eq!(r.finish().unwrap()[0].manifest, low);
        }
    }

    #[test]
    fn a_signature_too_large_to_keep_counts_as_none() {
        let publisher = SecretKey::from_seed([9; 32]);
        let manifest = Digest::of(b"m");
        // A genuine signature by a trusted publisher, padded with blobs past the bound.
        let padding = (0..400u32).map(|i| CatalogBlob { size: 1, digest: Digest::of(&i.to_le_bytes()) });
        let blobs = std::iter::once(CatalogBlob { size: 100, digest: manifest }).chain(padding);
        let catalog = Catalog::new(
            Millis(1),
            vec![CatalogArtifact { name: "tool".into(), version: "1.0.0".into(), manifest }],
            blobs.collect(),
        );
        let large = Signed::sign(catalog, &publisher).unwrap().into_envelope();
        assert!(large.encode().len() > ARTIFACT_SIGNATURE_BYTES_MAX);

        let mut unpinned = Offers::new("tool", "1.0.0", None, vec![publisher.public()]);
        unpinned.offered(node(1), manifest, Some(large.clone()));
        assert!(matches!(unpinned.finish(), Err(ResolveError::Untrusted { .. })));

        let mut pinned = Offers::new("tool", "1.0.0", Some(manifest), vec![publisher.public()]);
        pinned.offered(node(1), manifest, Some(large));
        let candidates = pinned.finish().unwrap();
        assert_eq!(candidates[0].basis, Basis::PinnedManifest(manifest));
        assert!(candidates[0].signature.is_none(), "an oversized signature is not kept");
    }

    #[test]
    fn a_manifest_pin_takes_that_manifest_alone_and_keeps_a_trusted_signature() {
        let publisher = SecretKey::from_seed([9; 32]);
        let (pinned, other) = (Digest::of(b"pinned"), Digest::of(b"other"));
        let mut r = Offers::new("tool", "1.0.0", Some(pinned), vec![publisher.public()]);
        r.offered(node(1), other, None);
        r.offered(node(2), other, None);
        assert!(!r.settled(), "a content pin might still be any offer");
        r.offered(node(3), pinned, Some(signature(&publisher, "tool", pinned)));
        assert!(r.settled());
        let candidates = r.finish().unwrap();
        assert_eq!(candidates.len(), 1);
        assert_eq!(candidates[0].basis, Basis::PinnedManifest(pinned));
        assert!(candidates[0].signature.is_some());
    }

    #[test]
    fn a_content_pin_makes_every_offer_a_candidate_to_check() {
        let content = Digest::of(b"content");
        let (a, b) = (Digest::of(b"a"), Digest::of(b"b"));
        let mut r = Offers::new("tool", "1.0.0", Some(content), vec![]);
        r.offered(node(1), a, None);
        r.offered(node(2), b, None);
        r.offered(node(3), b, None);
        let candidates = r.finish().unwrap();
        assert_eq!(candidates.iter().map(|c| c.manifest).collect::<Vec<_>>(), vec![b, a]);
        assert!(candidates.iter().all(|c| c.basis == Basis::PinnedContent(content)));
    }

    #[test]
    fn nothing_trusted_is_an_error_that_names_the_untrusted_manifests() {
        let a = Digest::of(b"a");
        let r = Offers::new("tool", "1.0.0", None, vec![]);
        assert_eq!(
            r.finish().unwrap_err(),
            ResolveError::NotOffered { name: "tool".into(), version: "1.0.0".into() }
        );
        let mut r = Offers::new("tool", "1.0.0", None, vec![]);
        r.offered(node(1), a, None);
        let err = r.finish().unwrap_err();
        assert!(err.to_string().contains(&a.to_string()) && err.to_string().contains("trust.publishers"));
    }

    #[test]
    fn offers_are_bounded_but_junk_never_pushes_out_a_vouched_manifest() {
        let content = Digest::of(b"content");
        let mut r = Offers::new("tool", "1.0.0", Some(content), vec![]);
        for i in 0..(Offers::OFFERED_MAX as u32 + 10) {
            r.offered(node(1), Digest::of(&i.to_be_bytes()), None);
        }
        assert_eq!(r.finish().unwrap().len(), Offers::OFFERED_MAX);

        let publisher = SecretKey::from_seed([9; 32]);
        let (signed, pinned) = (Digest::of(b"signed"), Digest::of(b"pinned"));
        let mut r = Offers::new("tool", "1.0.0", None, vec![publisher.public()]);
        let mut p = Offers::new("tool", "1.0.0", Some(pinned), vec![]);
        for i in 0..(Offers::OFFERED_MAX as u32 + 10) {
            r.offered(node(1), Digest::of(&i.to_be_bytes()), None);
            p.offered(node(1), Digest::of(&i.to_be_bytes()), None);
        }
        r.offered(node(2), signed, Some(signature(&publisher, "tool", signed)));
        p.offered(node(2), pinned, None);
        assert_eq!(r.finish().unwrap()[0].manifest, signed);
        assert_eq!(p.finish().unwrap()[0].manifest, pinned);
    }

    /// A resolution of "tool@1.0.0" trusting `publisher`, asking nodes 1..=n.
    fn resolution(publisher: &SecretKey, n: u8, fanout: usize) -> Resolution {
        let offers = Offers::new("tool", "1.0.0", None, vec![publisher.public()]);
        let config = ResolveConfig { fanout, ..ResolveConfig::DEFAULT };
        Resolution::new(offers, (1..=n).map(node).collect(), config, Millis(1_000))
    }

    fn asks(r: &mut Resolution) -> Vec<NodeId> {
        std::iter::from_fn(|| r.poll_ask()).collect()
    }

    #[test]
    fn providers_are_asked_in_waves_until_a_trusted_offer_comes() {
        let publisher = SecretKey::from_seed([9; 32]);
        let m = Digest::of(b"m");
        let mut r = resolution(&publisher, 5, 2);
        assert_eq!(asks(&mut r), vec![node(1), node(2)]);
        r.declined(Millis(1_010), node(1));
        assert!(asks(&mut r).is_empty(), "the wave is still open");
        r.failed(Millis(1_020), node(2));
        assert_eq!(asks(&mut r), vec![node(3), node(4)], "an unsettled wave is followed by the next");
        r.offered(Millis(1_030), node(3), m, Some(signature(&publisher, "tool", m)));
        r.offered(Millis(1_040), node(4), m, None);
        assert!(r.is_done() && asks(&mut r).is_empty(), "settled: node 5 is never asked");
        assert_eq!((r.asked(), r.unanswered()), (4, 1));
        assert_eq!(r.finish().unwrap()[0].holders, vec![node(3), node(4)]);
    }

    #[test]
    fn once_settled_the_rest_of_the_wave_gets_a_grace_as_long_as_settling_took() {
        let publisher = SecretKey::from_seed([9; 32]);
        let m = Digest::of(b"m");
        let mut r = resolution(&publisher, 3, 16);
        assert_eq!(asks(&mut r).len(), 3);
        assert_eq!(r.poll_timeout(), Some(Millis(6_000)), "the asks' timeout");
        r.offered(Millis(1_300), node(1), m, Some(signature(&publisher, "tool", m)));
        assert_eq!(r.poll_timeout(), Some(Millis(1_600)), "300 ms to settle, 300 ms of grace");
        r.offered(Millis(1_500), node(2), m, None);
        r.handle_timeout(Millis(1_599));
        assert!(!r.is_done());
        r.handle_timeout(Millis(1_600));
        assert!(r.is_done() && r.poll_timeout().is_none());
        assert_eq!(r.unanswered(), 1, "node 3, down but still advertised, did not hold the pull");
        r.offered(Millis(1_700), node(3), m, None); // too late: changes nothing
        assert_eq!(r.finish().unwrap()[0].holders, vec![node(1), node(2)]);
    }

    #[test]
    fn the_grace_is_clamped_both_ways() {
        let publisher = SecretKey::from_seed([9; 32]);
        let m = Digest::of(b"m");
        for (settled_after, grace) in [(5, 50), (400, 400), (4_000, 1_000)] {
            let mut r = resolution(&publisher, 2, 16);
            let at = Millis(1_000 + settled_after);
            r.offered(at, node(1), m, Some(signature(&publisher, "tool", m)));
            assert_eq!(r.poll_timeout(), Some(at.plus(grace)), "settled after {settled_after} ms");
        }
    }

    #[test]
    fn asks_time_out_and_answers_nobody_waits_for_change_nothing() {
        let publisher = SecretKey::from_seed([9; 32]);
        let m = Digest::of(b"m");
        let mut r = resolution(&publisher, 3, 2);
        assert_eq!(asks(&mut r), vec![node(1), node(2)]);
        r.offered(Millis(1_010), node(3), m, Some(signature(&publisher, "tool", m))); // never asked
        assert!(!r.is_done());
        r.handle_timeout(Millis(6_000));
        assert_eq!(r.unanswered(), 2);
        assert_eq!(asks(&mut r), vec![node(3)]);
        r.offered(Millis(6_010), node(1), m, Some(signature(&publisher, "tool", m))); // timed out
        r.declined(Millis(6_020), node(3));
        assert!(r.is_done());
        assert_eq!(
            r.finish().unwrap_err(),
            ResolveError::NotOffered { name: "tool".into(), version: "1.0.0".into() }
        );
    }

    #[test]
    fn no_providers_is_done_at_once() {
        let publisher = SecretKey::from_seed([9; 32]);
        let mut r = resolution(&publisher, 0, 16);
        assert!(r.is_done() && r.poll_ask().is_none() && r.poll_timeout().is_none());
        assert!(matches!(r.finish(), Err(ResolveError::NotOffered { .. })));
    }

    proptest::proptest! {
        /// Whatever the answers and their timing: never more than a wave open, never a
        /// provider asked twice, every ask accounted for, and done within one timeout per
        /// wave.
        #[test]
        fn asking_is_bounded_and_always_ends(
            n in 0u8..40,
            fanout in 1usize..8,
            events in proptest::collection::vec((0u8..4, 0u8..40, 0u64..3_000), 0..120),
        ) {
            let publisher = SecretKey::from_seed([9; 32]);
            let m = Digest::of(b"m");
            let sig = signature(&publisher, "tool", m);
            let mut r = resolution(&publisher, n, fanout);
            let mut now = Millis(1_000);
            let mut asked = std::collections::BTreeSet::new();
            for (kind, who, step) in events {
                for ask in asks(&mut r) {
                    proptest::prop_assert!(asked.insert(ask), "asked twice");
                }
                proptest::prop_assert!(r.open.len() <= fanout);
                now = now.plus(step);
                match kind {
                    0 => {
                        r.offered(now, node(who), m, Some(sig.clone()));
                    }
                    1 => r.declined(now, node(who)),
                    2 => r.failed(now, node(who)),
                    _ => r.handle_timeout(now),
                }
            }
            for _ in 0..=usize::from(n).div_ceil(fanout) {
                asks(&mut r);
                now = now.plus(ResolveConfig::DEFAULT.timeout_ms);
                r.handle_timeout(now);
            }
            proptest::prop_assert!(r.is_done());
            proptest::prop_assert!(r.asked() <= usize::from(n));
            proptest::prop_assert!(r.unanswered() <= r.asked());
        }
    }
}
