//! The mesh's wire version, announced in libp2p identify as `/murmur/MAJOR.MINOR.0`, and
//! what a peer's version means for what may be sent to it.
//!
//! The rule (see `docs/src/protocol.md`, "How the wire evolves"):
//!
//! - Nodes of one **major** version form one mesh; a peer of another major (or one that is
//!   not a murmur node) is refused at identify. A rolling upgrade across minors never
//!   splits a mesh.
//! - Decoders stay strict (canonical CBOR, unknown fields refused), so a **minor** version
//!   adds only what is negotiated: each optional request field, answer shape or blob format
//!   it introduces is a [`Feature`], and a node sends it only to a peer whose announced
//!   minor has it ([`WireVersion::has`]); to older peers it sends the older shape, or, where
//!   there is none (a blob already named by its digest), the older peer refuses it with an
//!   error naming the version.
//! - Signed documents that spread through the mesh (adverts, departures, grants,
//!   certificates, catalogs) do not change within a major: every node must read every one.

use std::fmt;

/// This build's major wire version: only peers of the same major are admitted.
pub const WIRE_MAJOR: u16 = 1;
/// This build's minor wire version: the features of [`Feature::since`] up to it.
pub const WIRE_MINOR: u16 = 3;

/// A negotiated addition to the wire, with the minor version that introduced it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feature {
    /// `settle_wait_ms` in a task `submit`: the owner answers once the task settles.
    SettleWait,
    /// Version-2 chunk lists (chained values) in artifact manifests.
    ChainedChunkLists,
    /// Revocation lists: `revocations` in sync requests and answers, and the
    /// [`crate::mesh::REVOCATION_TOPIC`] gossip topic.
    Revocations,
    /// Models in adverts and the `/murmur/model/1` stream (1.3).
    Models,
}

impl Feature {
    /// The minor version of [`WIRE_MAJOR`] that introduced it.
    #[must_use]
    pub const fn since(self) -> u16 {
        match self {
            Self::SettleWait | Self::ChainedChunkLists => 1,
            Self::Revocations => 2,
            Self::Models => 3,
        }
    }
}

/// A node's wire version, as its identify announces it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct WireVersion {
    pub major: u16,
    pub minor: u16,
}

impl WireVersion {
    /// This build's.
    pub const CURRENT: Self = Self { major: WIRE_MAJOR, minor: WIRE_MINOR };

    /// The identify protocol version string: `/murmur/MAJOR.MINOR.0`.
    #[must_use]
    pub fn identify(self) -> String {
        format!("/murmur/{}.{}.0", self.major, self.minor)
    }

    /// Whether a peer at this version reads `feature`.
    #[must_use]
    pub const fn has(self, feature: Feature) -> bool {
        self.major == WIRE_MAJOR && self.minor >= feature.since()
    }

    /// Whether a node at this version may send `feature` to a peer announcing `peer` (none:
    /// its identify has not arrived, so it counts as the oldest minor): both must have it.
    #[must_use]
    pub fn shares(self, peer: Option<Self>, feature: Feature) -> bool {
        self.has(feature) && peer.is_some_and(|p| p.has(feature))
    }

    /// Shapes `request` for a peer announcing `peer`: what it cannot read is left out
    /// (`settle_wait_ms`: the owner then answers at once).
    pub fn shape_for(self, peer: Option<Self>, request: &mut crate::task::TaskRequest) {
        if let crate::task::TaskRequest::Submit(submit) = request
            && !self.shares(peer, Feature::SettleWait)
        {
            submit.settle_wait_ms = 0;
        }
    }

    /// Shapes a sync request for a peer announcing `peer`: without `revocations` for a peer
    /// that predates them (its answer then carries none either).
    pub fn shape_sync_for(self, peer: Option<Self>, request: &mut crate::sync::SyncRequest) {
        if !self.shares(peer, Feature::Revocations) {
            request.revocations = None;
        }
    }

    /// Whether this node, at this version, reads a sync `request` (a node rehearsing a
    /// minor before 1.2 refuses `revocations`, as that minor's strict decoder would).
    #[must_use]
    pub fn reads_sync(self, request: &crate::sync::SyncRequest) -> bool {
        request.revocations.is_none() || self.has(Feature::Revocations)
    }

    /// Whether this node, at this version, reads `request` (a node rehearsing an older
    /// minor refuses what that minor's strict decoder could not read).
    #[must_use]
    pub fn reads(self, request: &crate::task::TaskRequest) -> bool {
        !matches!(request, crate::task::TaskRequest::Submit(s) if s.settle_wait_ms != 0)
            || self.has(Feature::SettleWait)
    }

    /// Whether this node may list models in its advert, given the wire versions its
    /// identified peers announced. An advert is signed once for everyone and a 1.2 node
    /// refuses one that lists models (its decoder knows no such field), so a node lists
    /// them only while it and every peer it has identified speak 1.3 or later; a peer
    /// not identified yet does not hold them back (identify follows within the first
    /// round trip). Nodes further away are not known here: upgrade a mesh before its
    /// agents serve models (see docs/src/protocol.md).
    #[must_use]
    pub fn lists_models(self, peers: impl IntoIterator<Item = Option<Self>>) -> bool {
        self.has(Feature::Models) && peers.into_iter().flatten().all(|peer| peer.has(Feature::Models))
    }

    /// Reads a peer's identify protocol version and decides whether it may join a mesh of
    /// `ours`: the same major, any minor and patch.
    pub fn admit(ours: Self, announced: &str) -> Result<Self, VersionRefusal> {
        let theirs = Self::parse(announced)
            .ok_or_else(|| VersionRefusal::NotMurmur { announced: announced.chars().take(64).collect() })?;
        if theirs.major != ours.major {
            return Err(VersionRefusal::OtherMajor { theirs, ours });
        }
        Ok(theirs)
    }

    fn parse(announced: &str) -> Option<Self> {
        let rest = announced.strip_prefix("/murmur/")?;
        let mut parts = rest.split('.');
        let number = |part: Option<&str>| {
            part.filter(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))?
                .parse::<u16>()
                .ok()
        };
        let (major, minor) = (number(parts.next())?, number(parts.next())?);
        number(parts.next())?;
        parts.next().is_none().then_some(Self { major, minor })
    }
}

impl fmt::Display for WireVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Why a peer is not admitted to the mesh for its version.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VersionRefusal {
    #[error("announces `{announced}`, not a murmur node (`/murmur/MAJOR.MINOR.PATCH`)")]
    NotMurmur { announced: String },
    #[error(
        "speaks murmur wire {theirs}, this node {ours}: majors differ, so the two cannot share a mesh (upgrade the older node)"
    )]
    OtherMajor { theirs: WireVersion, ours: WireVersion },
}

impl VersionRefusal {
    /// A stable name for logs and metrics.
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::NotMurmur { .. } => "not_murmur",
            Self::OtherMajor { .. } => "other_major",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: WireVersion = WireVersion { major: 1, minor: 1 };

    #[test]
    fn the_same_major_is_admitted_whatever_its_minor_and_patch() {
        for (announced, minor) in [("/murmur/1.0.0", 0), ("/murmur/1.1.0", 1), ("/murmur/1.7.3", 7)] {
            assert_eq!(WireVersion::admit(OURS, announced), Ok(WireVersion { major: 1, minor }));
        }
        assert_eq!(WireVersion::CURRENT.identify(), format!("/murmur/{WIRE_MAJOR}.{WIRE_MINOR}.0"));
    }

    #[test]
    fn another_major_or_another_protocol_is_refused_by_name() {
        let refusal = WireVersion::admit(OURS, "/murmur/2.0.0").unwrap_err();
        assert_eq!(refusal.reason(), "other_major");
        assert!(refusal.to_string().contains("murmur wire 2.0, this node 1.1"), "{refusal}");
        for junk in ["/ipfs/0.1.0", "/murmur/1.0", "/murmur/1.0.0.0", "/murmur/1.x.0", "/murmur/+1.0.0", ""] {
            assert_eq!(WireVersion::admit(OURS, junk).unwrap_err().reason(), "not_murmur", "{junk}");
        }
        let long = "x".repeat(10_000);
        let refusal = WireVersion::admit(OURS, &long).unwrap_err();
        assert!(refusal.to_string().len() < 200, "the quote is bounded");
    }

    #[test]
    fn models_are_listed_only_while_every_identified_peer_reads_them() {
        let v = |minor| WireVersion { major: 1, minor };
        assert!(v(3).lists_models([Some(v(3)), Some(v(4)), None]));
        assert!(!v(3).lists_models([Some(v(3)), Some(v(2))]), "a 1.2 peer would refuse the advert");
        assert!(!v(2).lists_models(std::iter::empty()), "a node rehearsing 1.2 lists none");
    }

    #[test]
    fn features_are_sent_only_to_peers_whose_minor_has_them() {
        let old = WireVersion { major: 1, minor: 0 };
        assert!(!old.has(Feature::SettleWait) && !old.has(Feature::ChainedChunkLists));
        assert!(OURS.has(Feature::SettleWait) && OURS.has(Feature::ChainedChunkLists));
        assert!(!WireVersion { major: 2, minor: 9 }.has(Feature::SettleWait));
        assert!(OURS.shares(Some(OURS), Feature::SettleWait));
        assert!(!OURS.shares(Some(old), Feature::SettleWait) && !OURS.shares(None, Feature::SettleWait));
        assert!(!old.shares(Some(OURS), Feature::SettleWait), "a node sends only what it has itself");
    }

    #[test]
    fn a_submit_to_an_older_peer_leaves_out_what_it_cannot_read() {
        use crate::task::{Sender, Submit, TaskId, TaskRequest};
        let old = WireVersion { major: 1, minor: 0 };
        let submit = |settle_wait_ms| {
            TaskRequest::Submit(Submit {
                task: TaskId::derive("a", "m"),
                text: "hi".into(),
                sender: Sender::Client,
                capsule: "echo".into(),
                context: None,
                message: "m".into(),
                traceparent: None,
                settle_wait_ms,
            })
        };
        let mut request = submit(5000);
        OURS.shape_for(Some(OURS), &mut request);
        assert_eq!(request, submit(5000));
        OURS.shape_for(Some(old), &mut request);
        assert_eq!(request, submit(0));
        assert!(OURS.reads(&submit(5000)) && old.reads(&submit(0)) && !old.reads(&submit(5000)));
    }

    #[test]
    fn a_sync_request_to_a_peer_before_1_2_carries_no_revocations() {
        use crate::sync::SyncRequest;
        let v12 = WireVersion { major: 1, minor: 2 };
        let fresh = || SyncRequest::new(None, crate::DirectoryDigest::default()).with_revocations(vec![]);
        let mut request = fresh();
        v12.shape_sync_for(Some(v12), &mut request);
        assert!(request.revocations.is_some());
        for older in [Some(OURS), None] {
            let mut request = fresh();
            v12.shape_sync_for(older, &mut request);
            assert_eq!(request, SyncRequest::new(None, crate::DirectoryDigest::default()));
            assert_eq!(request.encode(), SyncRequest::new(None, crate::DirectoryDigest::default()).encode());
        }
        assert!(v12.reads_sync(&fresh()) && !OURS.reads_sync(&fresh()));
    }
}
