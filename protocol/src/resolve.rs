//! Choosing the manifest a pull of `name@version` takes, from what providers offer.
//!
//! Sans-IO, like the pull scheduler: the driver asks providers (`resolve` on
//! `/murmur/artifact/1`) and reports each answer with [`Resolution::offered`]; this module
//! decides which offers may be trusted, when enough have come in ([`Resolution::settled`])
//! and the order in which candidates are tried ([`Resolution::finish`]). Trust never comes
//! from a provider:
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

use std::collections::BTreeMap;
use std::fmt;

use crate::catalog::Catalog;
use crate::digest::Digest;
use crate::identity::{NodeId, PublicKey};
use crate::signed::Envelope;
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
pub struct Resolution {
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

impl Resolution {
    /// Distinct manifests kept at most, counting only offers anyone may make (untrusted
    /// ones, and any manifest under a content pin): each costs memory. The pinned manifest
    /// and manifests a trusted publisher signed are always kept, so junk offers cannot
    /// push them out.
    pub const OFFERED_MAX: usize = 256;

    /// A resolution of `name@version`, pinned to a manifest or content digest or trusting
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
        // as this name@version.
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

    /// Offered manifests nobody vouches for (see [`Resolution::OFFERED_MAX`]).
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
        let mut r = Resolution::new("tool", "1.0.0", None, vec![publisher.public()]);
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
            let mut r = Resolution::new("tool", "1.0.0", None, vec![publisher.public()]);
            for (i, m) in order.into_iter().enumerate() {
                r.offered(node(i as u8), m, Some(signature(&publisher, "tool", m)));
            }
            assert_eq!(r.finish().unwrap()[0].manifest, low);
        }
    }

    #[test]
    fn a_manifest_pin_takes_that_manifest_alone_and_keeps_a_trusted_signature() {
        let publisher = SecretKey::from_seed([9; 32]);
        let (pinned, other) = (Digest::of(b"pinned"), Digest::of(b"other"));
        let mut r = Resolution::new("tool", "1.0.0", Some(pinned), vec![publisher.public()]);
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
        let mut r = Resolution::new("tool", "1.0.0", Some(content), vec![]);
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
        let r = Resolution::new("tool", "1.0.0", None, vec![]);
        assert_eq!(
            r.finish().unwrap_err(),
            ResolveError::NotOffered { name: "tool".into(), version: "1.0.0".into() }
        );
        let mut r = Resolution::new("tool", "1.0.0", None, vec![]);
        r.offered(node(1), a, None);
        let err = r.finish().unwrap_err();
        assert!(err.to_string().contains(&a.to_string()) && err.to_string().contains("trust.publishers"));
    }

    #[test]
    fn offers_are_bounded_but_junk_never_pushes_out_a_vouched_manifest() {
        let content = Digest::of(b"content");
        let mut r = Resolution::new("tool", "1.0.0", Some(content), vec![]);
        for i in 0..(Resolution::OFFERED_MAX as u32 + 10) {
            r.offered(node(1), Digest::of(&i.to_be_bytes()), None);
        }
        assert_eq!(r.finish().unwrap().len(), Resolution::OFFERED_MAX);

        let publisher = SecretKey::from_seed([9; 32]);
        let (signed, pinned) = (Digest::of(b"signed"), Digest::of(b"pinned"));
        let mut r = Resolution::new("tool", "1.0.0", None, vec![publisher.public()]);
        let mut p = Resolution::new("tool", "1.0.0", Some(pinned), vec![]);
        for i in 0..(Resolution::OFFERED_MAX as u32 + 10) {
            r.offered(node(1), Digest::of(&i.to_be_bytes()), None);
            p.offered(node(1), Digest::of(&i.to_be_bytes()), None);
        }
        r.offered(node(2), signed, Some(signature(&publisher, "tool", signed)));
        p.offered(node(2), pinned, None);
        assert_eq!(r.finish().unwrap()[0].manifest, signed);
        assert_eq!(p.finish().unwrap()[0].manifest, pinned);
    }
}
