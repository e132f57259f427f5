//! Pluggable signature checking and decoding, so a driver can share work across nodes.
//!
//! `murnode` checks and decodes each envelope once ([`Ed25519Verifier`]). The simulator
//! runs thousands of directories that each receive the same envelopes; it plugs in a
//! verifier that remembers results for envelopes it has seen (matching their exact bytes),
//! while adversarial scenarios still run real ed25519 on every envelope it has not.

use std::fmt;
use std::sync::Arc;

use crate::advert::Advert;
use crate::departure::Departure;
use crate::signed::{Envelope, OpenError};

/// Decides whether an envelope's signature verifies, and decodes advert bodies.
pub trait Verifier: Send + Sync + fmt::Debug {
    /// True when the envelope's signature verifies for its claimed signer.
    fn verify(&self, envelope: &Envelope) -> bool;

    /// Decodes and validates an advert body without checking the signature (see
    /// [`Envelope::peek`]). The result is shared, so a cache can hand the same decoded
    /// advert to every directory that receives the envelope.
    fn peek_advert(&self, envelope: &Envelope) -> Result<Arc<Advert>, OpenError> {
        envelope.peek::<Advert>().map(Arc::new)
    }

    /// The copy of `envelope` a directory keeps. `murnode` keeps what it was handed; the
    /// simulator hands back the one copy of those exact bytes every node keeps, so an
    /// advert that reached 10,000 simulated directories through their own decoded sync
    /// answers is held once, not 10,000 times.
    fn share(&self, envelope: Envelope) -> Envelope {
        envelope
    }

    /// As [`Verifier::peek_advert`], for a departure notice.
    fn peek_notice(&self, envelope: &Envelope) -> Result<Arc<Departure>, OpenError> {
        envelope.peek::<Departure>().map(Arc::new)
    }
}

/// Checks every signature with ed25519 and decodes every body.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ed25519Verifier;

impl Verifier for Ed25519Verifier {
    fn verify(&self, envelope: &Envelope) -> bool {
        envelope.verify_signature()
    }
}
