//! Verification shared across every simulated node.
//!
//! Thousands of directories receive the same envelope; checking its ed25519 signature in
//! each would dominate a run. [`SharedVerifier`] checks each distinct envelope once, for
//! real, and remembers the answer keyed by signer and signature, confirmed against the exact
//! body bytes on every hit, so a forgery reusing a genuine signature over other bytes is a
//! miss and gets a real check. Decoded adverts and departure notices are shared the same way.
//!
//! The canary's [`AcceptAll`] skips signature checks entirely: the planted bug the safety
//! checkers must catch.

use crate::fxhash::FxHashMap as HashMap;
use std::sync::{Arc, Mutex};

use murmur_protocol::advert::Advert;
use murmur_protocol::departure::Departure;
use murmur_protocol::signed::{Envelope, OpenError};
use murmur_protocol::verify::Verifier;

type Key = ([u8; 32], [u8; 64]);

#[derive(Debug)]
struct Entry {
    body: Arc<[u8]>,
    verified: Option<bool>,
    advert: Option<Result<Arc<Advert>, OpenError>>,
    notice: Option<Result<Arc<Departure>, OpenError>>,
}

/// Checks each distinct envelope once and shares the results.
#[derive(Debug, Default)]
pub struct SharedVerifier {
    entries: Mutex<HashMap<Key, Entry>>,
    stats: Mutex<VerifierStats>,
}

/// How much work the cache saved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerifierStats {
    /// Real ed25519 verifications performed.
    pub ed25519_checks: u64,
    /// Verifications answered from the cache.
    pub cache_hits: u64,
}

impl SharedVerifier {
    /// Counters so far.
    #[must_use]
    pub fn stats(&self) -> VerifierStats {
        *self.stats.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn with_entry<T>(&self, envelope: &Envelope, f: impl FnOnce(&mut Entry) -> T) -> T {
        let key = (*envelope.signer().as_bytes(), envelope.signature().0);
        let mut entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = entries.entry(key).or_insert_with(|| Entry {
            body: Arc::from(envelope.body()),
            verified: None,
            advert: None,
            notice: None,
        });
        if *entry.body != *envelope.body() {
            // Same signer and signature over other bytes: never trust the cached answer.
            let mut fresh =
                Entry { body: Arc::from(envelope.body()), verified: None, advert: None, notice: None };
            return f(&mut fresh);
        }
        f(entry)
    }
}

impl Verifier for SharedVerifier {
    fn verify(&self, envelope: &Envelope) -> bool {
        let (result, hit) = self.with_entry(envelope, |entry| match entry.verified {
            Some(ok) => (ok, true),
            None => {
                let ok = envelope.verify_signature();
                entry.verified = Some(ok);
                (ok, false)
            }
        });
        let mut stats = self.stats.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if hit {
            stats.cache_hits += 1;
        } else {
            stats.ed25519_checks += 1;
        }
        result
    }

    fn peek_advert(&self, envelope: &Envelope) -> Result<Arc<Advert>, OpenError> {
        self.with_entry(envelope, |entry| {
            entry.advert.get_or_insert_with(|| envelope.peek::<Advert>().map(Arc::new)).clone()
        })
    }

    fn peek_notice(&self, envelope: &Envelope) -> Result<Arc<Departure>, OpenError> {
        self.with_entry(envelope, |entry| {
            entry.notice.get_or_insert_with(|| envelope.peek::<Departure>().map(Arc::new)).clone()
        })
    }
}

/// The canary's planted bug: every signature "verifies".
#[derive(Debug, Default)]
pub struct AcceptAll;

impl Verifier for AcceptAll {
    fn verify(&self, _: &Envelope) -> bool {
        true
    }
}
