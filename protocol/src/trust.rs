//! Checks shared by every document an authority signs: trusted issuer, signature,
//! validity window.
//!
//! The order is deliberate: a document from an untrusted issuer is refused before its
//! signature is checked (cheap refusal of junk), and the window is checked only on a
//! verified document (so an error never describes content nobody vouched for).

use crate::codec::DecodeError;
use crate::identity::PublicKey;
use crate::signed::{Document, Envelope, OpenError, Signed};
use crate::time::Millis;

/// Why an authority-signed document was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TrustError {
    #[error("malformed: {0}")]
    Malformed(DecodeError),
    #[error("expected a {expected} document, found a {found}")]
    WrongKind { expected: crate::signed::DocKind, found: crate::signed::DocKind },
    #[error("issuer {issuer} is not a trusted authority")]
    UntrustedIssuer { issuer: PublicKey },
    #[error("signature does not verify (tampered, or not signed by {issuer})")]
    BadSignature { issuer: PublicKey },
    #[error("expired at {} (now {})", not_after.to_rfc3339(), now.to_rfc3339())]
    Expired { not_after: Millis, now: Millis },
    #[error("not valid before {} (now {})", not_before.to_rfc3339(), now.to_rfc3339())]
    NotYetValid { not_before: Millis, now: Millis },
}

impl TrustError {
    /// A stable machine-readable name for the failed check (metrics, JSON `reason`).
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::Malformed(_) => "malformed",
            Self::WrongKind { .. } => "wrong_kind",
            Self::UntrustedIssuer { .. } => "untrusted_issuer",
            Self::BadSignature { .. } => "bad_signature",
            Self::Expired { .. } => "expired",
            Self::NotYetValid { .. } => "not_yet_valid",
        }
    }
}

impl From<OpenError> for TrustError {
    fn from(err: OpenError) -> Self {
        match err {
            OpenError::WrongKind { expected, found } => Self::WrongKind { expected, found },
            OpenError::BadSignature { signer } => Self::BadSignature { issuer: signer },
            OpenError::Body(err) => Self::Malformed(err),
        }
    }
}

/// Opens `envelope` as a `T` signed by one of `authorities`.
pub fn open_trusted<T: Document>(
    envelope: Envelope,
    authorities: &[PublicKey],
) -> Result<Signed<T>, TrustError> {
    open_trusted_with(envelope, authorities, &crate::verify::Ed25519Verifier)
}

/// As [`open_trusted`], with the signature checked by `verifier`.
pub fn open_trusted_with<T: Document>(
    envelope: Envelope,
    authorities: &[PublicKey],
    verifier: &dyn crate::verify::Verifier,
) -> Result<Signed<T>, TrustError> {
    if envelope.kind() != T::KIND {
        return Err(TrustError::WrongKind { expected: T::KIND, found: envelope.kind() });
    }
    let issuer = envelope.signer();
    if !authorities.contains(&issuer) {
        return Err(TrustError::UntrustedIssuer { issuer });
    }
    Ok(envelope.open_with::<T>(verifier)?)
}

/// Checks that `now` lies in `[not_before, not_after)`.
pub fn check_window(not_before: Millis, not_after: Millis, now: Millis) -> Result<(), TrustError> {
    if now < not_before {
        return Err(TrustError::NotYetValid { not_before, now });
    }
    if now >= not_after {
        return Err(TrustError::Expired { not_after, now });
    }
    Ok(())
}
