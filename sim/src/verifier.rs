//! Verification shared across every simulated node.
//!
//! Thousands of directories receive the same envelope; checking its ed25519 signature in
//! each would dominate a run. [`SharedVerifier`] checks each distinct envelope once, for
//! real, and remembers the answer keyed by signer and signature, confirmed against the exact
//! body bytes on every hit, so a forgery reusing a genuine signature over other bytes is a
//! miss and gets a real check. Decoded adverts and departure notices are shared the same way,
//! and so is the envelope itself: every directory keeps the first copy of the same bytes.
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
    /// The first copy seen: every directory keeps this one ([`Verifier::share`]).
    envelope: Envelope,
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
            envelope: envelope.clone(),
            verified: None,
            advert: None,
            notice: None,
        });
        if entry.envelope != *envelope {
            // Same signer and signature over other bytes: never trust the cached answer.
            let mut fresh = Entry { envelope: envelope.clone(), verified: None, advert: None, notice: None };
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

    fn share(&self, envelope: Envelope) -> Envelope {
        self.with_entry(&envelope, |entry| entry.envelope.clone())
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

#[cfg(test)]
mod tests {
    use murmur_protocol::advert::Advert;
    use murmur_protocol::{Millis, SecretKey, Signed};

    use super::*;

    fn advert(key: &SecretKey, seq: u64) -> Envelope {
        Signed::sign(Advert::new(seq, Millis(1_800_000_000_000), 90_000), key).unwrap().into_envelope()
    }

    #[test]
    fn copies_of_the_same_bytes_are_kept_once_and_other_bytes_never_replace_them() {
        let verifier = SharedVerifier::default();
        let key = SecretKey::from_seed([7; 32]);
        let bytes = advert(&key, 1).encode();
        // Two receivers decoding the same sync answer each get their own copy.
        let (first, second) = (Envelope::decode(&bytes).unwrap(), Envelope::decode(&bytes).unwrap());
        assert!(!std::ptr::eq(first.body().as_ptr(), second.body().as_ptr()));
        let kept = verifier.share(first.clone());
        assert!(std::ptr::eq(kept.body().as_ptr(), first.body().as_ptr()));
        let shared = verifier.share(second.clone());
        assert!(std::ptr::eq(shared.body().as_ptr(), first.body().as_ptr()), "the second copy is the first");
        assert_eq!(shared, second);
        // Another advert is its own.
        let other = advert(&key, 2);
        assert!(std::ptr::eq(verifier.share(other.clone()).body().as_ptr(), other.body().as_ptr()));
    }
}
