//! The event trace hash: a fingerprint of everything that happened in a run.
//!
//! Every processed event and every protocol verdict is folded into a SHA-256 in processing
//! order. Two runs of the same scenario and seed must produce the same hash on every
//! machine; a test compares runs and a few committed hashes catch accidental behaviour
//! changes.

use sha2::{Digest, Sha256};

/// An incremental hash over event records.
#[derive(Clone, Debug, Default)]
pub struct TraceHash {
    hasher: Sha256,
    records: u64,
}

impl TraceHash {
    /// Folds one record: a tag naming its kind and up to four numbers.
    pub fn record(&mut self, tag: u8, a: u64, b: u64, c: u64) {
        let mut buf = [0u8; 25];
        buf[0] = tag;
        buf[1..9].copy_from_slice(&a.to_le_bytes());
        buf[9..17].copy_from_slice(&b.to_le_bytes());
        buf[17..25].copy_from_slice(&c.to_le_bytes());
        self.hasher.update(buf);
        self.records += 1;
    }

    /// Folds a message's bytes as it went on the wire (its length first, so two messages
    /// never hash as one).
    pub fn bytes(&mut self, bytes: &[u8]) {
        self.hasher.update((bytes.len() as u64).to_le_bytes());
        self.hasher.update(bytes);
    }

    /// Records folded so far.
    #[must_use]
    pub const fn records(&self) -> u64 {
        self.records
    }

    /// The hash so far, as hex.
    #[must_use]
    pub fn hex(&self) -> String {
        hex::encode(self.hasher.clone().finalize())
    }
}
