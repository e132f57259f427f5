//! Departure notices: a node's signed statement that another node it was connected to has
//! departed.
//!
//! Adverts expire at their TTL, so without notices a crashed node stays listed for up to a
//! TTL, and keeping that short costs every node a stream of refreshes from every other node
//! (the refresh traffic of a mesh grows with the square of its size). With notices, the
//! peers that lose a node's connection and cannot get it back within
//! [`crate::mesh::MeshConfig::suspect_ms`] say so, and every directory drops the node
//! at once; the TTL is only the backstop for a node whose every peer went down with it,
//! so large meshes can refresh rarely.
//!
//! A notice names the node and the very advert the witness held (its sequence number and
//! its signature); it removes that advert and nothing else. Naming the advert by its
//! signature means a notice can only be signed for an advert that exists: nobody can place
//! a notice in advance for an advert its node has not published yet. Any node the directory holds may act
//! as a witness, and a node may announce its own departure. A false notice (a partition
//! the witness mistook for a crash, or a lying witness) is refuted by its subject, which
//! republishes with a higher sequence number as soon as it hears of the notice; so a
//! notice can cost a live node a moment of visibility, never its place in the mesh.

use serde::{Deserialize, Serialize};

use crate::codec::DecodeError;
use crate::identity::{NodeId, Signature};
use crate::signed::{DocKind, Document};
use crate::time::Millis;

/// The notice version this build writes and reads.
pub const DEPARTURE_VERSION: u16 = 1;

/// Largest encoded notice body accepted (a notice is about 140 bytes).
pub const DEPARTURE_BYTES_MAX: usize = 256;

/// A departure notice: "`node`, whose advert `seq` (signed `advert`) I held, has
/// departed." The signer is the witness. On the wire its kind is `node-gone`
/// ([`DocKind::NodeDeparture`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Departure {
    // Fields are in canonical key order (see `codec`).
    /// Document version, [`DEPARTURE_VERSION`].
    pub v: u16,
    /// The witness's clock when it decided.
    pub at: Millis,
    /// The subject's advert sequence number the witness held.
    pub seq: u64,
    /// The node that departed.
    pub node: NodeId,
    /// The signature of the advert the witness held: names that advert exactly.
    pub advert: Signature,
}

impl Departure {
    /// A departure notice for `node`'s advert `seq`, whose signature is `advert`, as of `at`.
    #[must_use]
    pub const fn new(node: NodeId, seq: u64, advert: Signature, at: Millis) -> Self {
        Self { v: DEPARTURE_VERSION, at, seq, node, advert }
    }
}

impl Document for Departure {
    const KIND: DocKind = DocKind::NodeDeparture;
    const VERSION: u16 = DEPARTURE_VERSION;
    const BYTES_MAX: usize = DEPARTURE_BYTES_MAX;

    fn version(&self) -> u16 {
        self.v
    }

    fn validate(&self) -> Result<(), DecodeError> {
        if self.seq == 0 {
            return Err(DecodeError::Invalid {
                what: "departure notice",
                field: "seq",
                reason: "must be at least 1 (no advert has sequence 0)".into(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::SecretKey;
    use crate::signed::{Envelope, Signed};

    #[test]
    fn round_trips_and_refuses_other_kinds() {
        let witness = SecretKey::from_seed([3; 32]);
        let subject = SecretKey::from_seed([4; 32]).node_id();
        let notice = Departure::new(subject, 7, Signature([9; 64]), Millis(1_800_000_000_000));
        let envelope = Signed::sign(notice.clone(), &witness).unwrap().into_envelope();
        let bytes = envelope.encode();
        crate::codec::tests::assert_canonical_key_order(envelope.body());
        let opened: Signed<Departure> = Envelope::decode(&bytes).unwrap().open().unwrap();
        assert_eq!(*opened.doc(), notice);
        assert_eq!(opened.signer(), witness.public());
        assert!(Envelope::decode(&bytes).unwrap().open::<crate::Advert>().is_err());
    }

    #[test]
    fn sequence_zero_is_refused() {
        let witness = SecretKey::from_seed([3; 32]);
        let notice = Departure::new(witness.node_id(), 0, Signature([9; 64]), Millis(1));
        assert!(Signed::sign(notice, &witness).is_err());
    }
}
