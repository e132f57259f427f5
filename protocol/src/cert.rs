//! Node certificates: an authority's admission of one node to a closed mesh.
//!
//! In a closed mesh every node carries a certificate in its advert; a directory accepts an
//! advert only when the certificate names the advert's signer, is signed by a trusted
//! authority and is valid now. In an open mesh certificates are ignored.

use serde::{Deserialize, Serialize};

use crate::codec::DecodeError;
use crate::identity::{NodeId, PublicKey};
use crate::limits::CERT_BYTES_MAX;
use crate::signed::{DocKind, Document, Envelope, Signed};
use crate::time::Millis;
use crate::trust::{TrustError, check_window, open_trusted_with};

/// The certificate version this build writes and reads.
pub const CERT_VERSION: u16 = 1;

/// Admission of one node to a closed mesh. The signer is the issuing authority.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeCert {
    // Fields are in canonical key order (see `codec`).
    /// Document version, [`CERT_VERSION`].
    pub v: u16,
    /// The admitted node.
    pub node: NodeId,
    /// Issuer-chosen serial number.
    pub serial: u64,
    /// End of validity (exclusive).
    pub not_after: Millis,
    /// Start of validity (inclusive).
    pub not_before: Millis,
}

/// Why a certificate was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    #[error("node certificate {0}")]
    Trust(#[from] TrustError),
    #[error("node certificate is for {found}, not {expected}")]
    WrongNode { expected: NodeId, found: NodeId },
}

impl CertError {
    /// A stable machine-readable name for the failed check.
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::Trust(err) => err.reason(),
            Self::WrongNode { .. } => "wrong_node",
        }
    }
}

impl NodeCert {
    /// A certificate admitting `node` during `[not_before, not_after)`.
    #[must_use]
    pub const fn new(node: NodeId, serial: u64, not_before: Millis, not_after: Millis) -> Self {
        Self { v: CERT_VERSION, node, serial, not_after, not_before }
    }
}

/// Verifies that `envelope` is a certificate for `node`, from a trusted authority, valid
/// at `now`.
pub fn verify_cert(
    envelope: Envelope,
    authorities: &[PublicKey],
    now: Millis,
    node: &NodeId,
) -> Result<Signed<NodeCert>, CertError> {
    verify_cert_with(envelope, authorities, now, node, &crate::verify::Ed25519Verifier)
}

/// As [`verify_cert`], with the signature checked by `verifier` (a directory checks every
/// advert's certificate through its own verifier, which the simulator shares).
pub fn verify_cert_with(
    envelope: Envelope,
    authorities: &[PublicKey],
    now: Millis,
    node: &NodeId,
    verifier: &dyn crate::verify::Verifier,
) -> Result<Signed<NodeCert>, CertError> {
    let signed = open_trusted_with::<NodeCert>(envelope, authorities, verifier)?;
    let cert = signed.doc();
    check_window(cert.not_before, cert.not_after, now)?;
    if cert.node != *node {
        return Err(CertError::WrongNode { expected: *node, found: cert.node });
    }
    Ok(signed)
}

impl Document for NodeCert {
    const KIND: DocKind = DocKind::NodeCert;
    const VERSION: u16 = CERT_VERSION;
    const BYTES_MAX: usize = CERT_BYTES_MAX;

    fn version(&self) -> u16 {
        self.v
    }

    fn validate(&self) -> Result<(), DecodeError> {
        if self.not_before >= self.not_after {
            return Err(DecodeError::Invalid {
                what: "node-cert",
                field: "not_after",
                reason: "must be later than not_before".into(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::SecretKey;

    const T0: Millis = Millis(1_800_000_000_000);

    #[test]
    fn certificates_verify_for_their_node_only() {
        let authority = SecretKey::from_seed([1; 32]);
        let node = SecretKey::from_seed([2; 32]).node_id();
        let other = SecretKey::from_seed([3; 32]).node_id();
        let env =
            Signed::sign(NodeCert::new(node, 1, T0, T0.plus(1000)), &authority).unwrap().into_envelope();
        crate::codec::tests::assert_canonical_key_order(&env.encode());
        let trusted = [authority.public()];
        verify_cert(env.clone(), &trusted, T0, &node).unwrap();
        assert_eq!(verify_cert(env.clone(), &trusted, T0, &other).unwrap_err().reason(), "wrong_node");
        assert_eq!(verify_cert(env.clone(), &trusted, T0.plus(1000), &node).unwrap_err().reason(), "expired");
        assert_eq!(verify_cert(env, &[], T0, &node).unwrap_err().reason(), "untrusted_issuer");
    }
}
