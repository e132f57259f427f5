//! Content digests: SHA-256, spelled `sha256:<64 lowercase hex>` as OCI spells them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::block_api::compress256;
use sha2::{Digest as _, Sha256};

use crate::codec::byte_array;

/// Text prefix of a digest.
pub const DIGEST_PREFIX: &str = "sha256:";

/// The SHA-256 digest of some bytes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Digest(#[serde(with = "byte_array")] pub [u8; 32]);

/// Why a digest's text could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("digest must be written `sha256:` followed by 64 lowercase hex digits, got `{0}`")]
pub struct DigestParseError(pub String);

impl Digest {
    /// The digest of `bytes`.
    #[must_use]
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// The 64 lowercase hex digits, without the `sha256:` prefix (as in OCI blob paths).
    #[must_use]
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{DIGEST_PREFIX}{}", self.hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for Digest {
    type Err = DigestParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || DigestParseError(text.to_owned());
        let hex_part = text.strip_prefix(DIGEST_PREFIX).ok_or_else(bad)?;
        // OCI requires lowercase; accepting uppercase would give one digest two spellings.
        if hex_part.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(bad());
        }
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut bytes).map_err(|_| bad())?;
        Ok(Self(bytes))
    }
}

/// SHA-256 computed piece by piece, each piece a whole number of 64-byte blocks, with the
/// chaining value between pieces written as a [`Digest`].
///
/// A chunk list of version 2 lists the chaining value after each chunk, so a chunk can be
/// checked alone and in any order (start from the value before it, absorb it, compare with
/// the value after it), and chunks that all check prove the digest of the whole content:
/// the checks are exactly the steps of hashing it in one pass. Knowing chaining values
/// gives nothing away; SHA-256's security never rested on keeping them secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chain {
    state: [u32; 8],
}

impl Chain {
    /// SHA-256's initial chaining value (FIPS 180-4, 5.3.3).
    const INITIAL: [u32; 8] = [
        0x6a09_e667,
        0xbb67_ae85,
        0x3c6e_f372,
        0xa54f_f53a,
        0x510e_527f,
        0x9b05_688c,
        0x1f83_d9ab,
        0x5be0_cd19,
    ];
    /// SHA-256's block size.
    pub const BLOCK: usize = 64;

    /// A chain at the start of the content.
    #[must_use]
    pub fn start() -> Self {
        Self { state: Self::INITIAL }
    }

    /// A chain at the chaining value `value` (as [`Chain::value`] wrote it).
    #[must_use]
    pub fn resume(value: &Digest) -> Self {
        let mut state = [0u32; 8];
        for (word, bytes) in state.iter_mut().zip(value.0.as_chunks::<4>().0) {
            *word = u32::from_be_bytes(*bytes);
        }
        Self { state }
    }

    /// Absorbs `bytes`; `false` (and nothing absorbed) unless they are a whole number of
    /// blocks.
    pub fn absorb(&mut self, bytes: &[u8]) -> bool {
        let (blocks, rest) = bytes.as_chunks::<{ Self::BLOCK }>();
        if !rest.is_empty() {
            return false;
        }
        compress256(&mut self.state, blocks);
        true
    }

    /// The chaining value so far.
    #[must_use]
    pub fn value(&self) -> Digest {
        let mut out = [0u8; 32];
        for (bytes, word) in out.as_chunks_mut::<4>().0.iter_mut().zip(self.state) {
            *bytes = word.to_be_bytes();
        }
        Digest(out)
    }

    /// Absorbs the content's last bytes `tail` and pads: the SHA-256 digest of content
    /// `total_len` bytes long whose earlier bytes this chain has absorbed.
    #[must_use]
    pub fn finish(mut self, tail: &[u8], total_len: u64) -> Digest {
        let (blocks, rest) = tail.as_chunks::<{ Self::BLOCK }>();
        compress256(&mut self.state, blocks);
        // The padding: 0x80, zeros, the length in bits as a big-endian u64, ending a block.
        let mut last = [0u8; 2 * Self::BLOCK];
        last[..rest.len()].copy_from_slice(rest);
        last[rest.len()] = 0x80;
        let end = if rest.len() + 1 + 8 <= Self::BLOCK { Self::BLOCK } else { 2 * Self::BLOCK };
        last[end - 8..end].copy_from_slice(&total_len.wrapping_mul(8).to_be_bytes());
        compress256(&mut self.state, last[..end].as_chunks::<{ Self::BLOCK }>().0);
        self.value()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Hashing in block-aligned pieces, resuming from each written chaining value,
        /// gives SHA-256 of the whole.
        #[test]
        fn a_chain_of_pieces_is_sha256_of_the_whole(
            bytes in proptest::collection::vec(any::<u8>(), 0..1200),
            cut in 0usize..20,
        ) {
            let piece = (cut + 1) * Chain::BLOCK;
            let whole = Digest::of(&bytes);
            prop_assert_eq!(Chain::start().finish(&bytes, bytes.len() as u64), whole);
            let mut value = Chain::start().value();
            let mut at = 0;
            while bytes.len() - at > piece {
                let mut chain = Chain::resume(&value);
                prop_assert!(chain.absorb(&bytes[at..at + piece]));
                value = chain.value();
                at += piece;
            }
            prop_assert_eq!(Chain::resume(&value).finish(&bytes[at..], bytes.len() as u64), whole);
        }
    }

    #[test]
    fn padding_is_right_at_every_block_boundary() {
        let bytes: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
        for len in [0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 300] {
            let data = &bytes[..len];
            assert_eq!(Chain::start().finish(data, len as u64), Digest::of(data), "{len} bytes");
            if len >= 64 {
                let mut chain = Chain::start();
                assert!(chain.absorb(&data[..64]));
                assert_eq!(chain.finish(&data[64..], len as u64), Digest::of(data), "{len} bytes, resumed");
            }
        }
    }

    #[test]
    fn a_chain_absorbs_only_whole_blocks() {
        let mut chain = Chain::start();
        assert!(!chain.absorb(&[0; 65]));
        assert_eq!(chain, Chain::start());
        assert!(chain.absorb(&[0; 128]));
        assert_eq!(Chain::resume(&chain.value()).value(), chain.value());
    }

    #[test]
    fn digest_of_empty_input_is_the_known_value() {
        assert_eq!(
            Digest::of(b"").to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn text_round_trips_and_refuses_other_spellings() {
        let digest = Digest::of(b"murmur");
        assert_eq!(digest.to_string().parse::<Digest>().unwrap(), digest);
        assert!(digest.to_string().to_uppercase().parse::<Digest>().is_err());
        assert!(digest.hex().parse::<Digest>().is_err());
        assert!("sha256:abc".parse::<Digest>().is_err());
    }
}
