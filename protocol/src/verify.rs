//! Pluggable signature checking, so a driver can share verified results across nodes.
//!
//! `murnode` checks each envelope once ([`Ed25519Verifier`]). The simulator runs thousands
//! of directories that each receive the same envelopes; it plugs in a verifier that caches
//! verified envelope digests, while adversarial scenarios still run real ed25519 on every
//! envelope the cache has not seen.

use std::fmt;

use crate::signed::Envelope;

/// Decides whether an envelope's signature verifies.
pub trait Verifier: Send + Sync + fmt::Debug {
    /// True when the envelope's signature verifies for its claimed signer.
    fn verify(&self, envelope: &Envelope) -> bool;
}

/// Checks every signature with ed25519.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ed25519Verifier;

impl Verifier for Ed25519Verifier {
    fn verify(&self, envelope: &Envelope) -> bool {
        envelope.verify_signature()
    }
}
