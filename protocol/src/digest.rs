//! Content digests: SHA-256, spelled `sha256:<64 lowercase hex>` as OCI spells them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
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

#[cfg(test)]
mod tests {
    use super::*;

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
