//! Keys and node identities.
//!
//! Every key is ed25519. A node's identity is its public key; on the wire and to users it
//! is spelled as the libp2p `PeerId` derived from that key (`12D3KooW…`), so the name a
//! user sees in `mur peers` is the name libp2p authenticates. Other keys (authorities,
//! publishers) are spelled `ed25519:<64 hex digits>`.

use std::fmt;
use std::str::FromStr;

use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};

use crate::codec::byte_array;

/// Text prefix of a public key that is not a node identity.
pub const PUBLIC_KEY_PREFIX: &str = "ed25519:";

/// Why a key or identity could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("public key must be written `ed25519:` followed by 64 hex digits, got `{0}`")]
    PublicKeyText(String),
    #[error("bytes are not a valid ed25519 public key")]
    NotACurvePoint,
    #[error("`{0}` is not a libp2p peer id")]
    PeerIdText(String),
    #[error("peer id {0} is not derived from an ed25519 key (murmur nodes use ed25519 identities)")]
    NotEd25519(String),
    #[error("secret key must be exactly 32 bytes, got {0}")]
    SecretKeyLength(usize),
}

/// An ed25519 public key, validated as a point on the curve.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "KeyBytes", into = "KeyBytes")]
pub struct PublicKey([u8; 32]);

/// Keys order bytewise (as their encodings do). Directories keep thousands of keys in
/// ordered maps, so the common case compares one machine word, not 32 bytes.
impl Ord for PublicKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let head =
            |k: &Self| u64::from_be_bytes([k.0[0], k.0[1], k.0[2], k.0[3], k.0[4], k.0[5], k.0[6], k.0[7]]);
        head(self).cmp(&head(other)).then_with(|| self.0[8..].cmp(&other.0[8..]))
    }
}

impl PartialOrd for PublicKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl PublicKey {
    /// Reads a public key from its 32 raw bytes, refusing bytes that are not a curve point.
    pub fn from_bytes(bytes: [u8; 32]) -> Result<Self, KeyError> {
        VerifyingKey::from_bytes(&bytes).map_err(|_| KeyError::NotACurvePoint)?;
        Ok(Self(bytes))
    }

    /// Wraps bytes taken from a key that was validated before (no curve check).
    pub(crate) const fn from_validated(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The key's 32 raw bytes.
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Checks `signature` over `message` with ed25519's strict rules (no small-order keys,
    /// no non-canonical scalars), so one message has one valid signature per key.
    #[must_use]
    pub fn verify(&self, message: &[u8], signature: &Signature) -> bool {
        let Ok(key) = VerifyingKey::from_bytes(&self.0) else {
            return false;
        };
        let signature = ed25519_dalek::Signature::from_bytes(&signature.0);
        key.verify_strict(message, &signature).is_ok()
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PUBLIC_KEY_PREFIX}{}", hex::encode(self.0))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for PublicKey {
    type Err = KeyError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || KeyError::PublicKeyText(text.to_owned());
        let hex_part = text.trim().strip_prefix(PUBLIC_KEY_PREFIX).ok_or_else(bad)?;
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut bytes).map_err(|_| bad())?;
        Self::from_bytes(bytes)
    }
}

/// Wire form of a key: a 32-byte CBOR byte string.
#[derive(Serialize, Deserialize)]
#[serde(transparent)]
struct KeyBytes(#[serde(with = "byte_array")] [u8; 32]);

impl TryFrom<KeyBytes> for PublicKey {
    type Error = KeyError;

    fn try_from(bytes: KeyBytes) -> Result<Self, Self::Error> {
        Self::from_bytes(bytes.0)
    }
}

impl From<PublicKey> for KeyBytes {
    fn from(key: PublicKey) -> Self {
        Self(key.0)
    }
}

/// Serde for a key that is only a claim until a signature over it verifies (an envelope's
/// signer): read as 32 bytes without the curve check. The check costs a point
/// decompression, about 5 µs; a sync answer of 10,000 adverts spent 50 ms on it before any
/// signature was looked at, and every signature check decompresses the key again anyway
/// ([`PublicKey::verify`] answers `false` for bytes that are no point), so the envelope's
/// claim is checked exactly where it is relied on.
pub(crate) mod claimed_key {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::{KeyBytes, PublicKey};

    pub(crate) fn serialize<S: Serializer>(key: &PublicKey, serializer: S) -> Result<S::Ok, S::Error> {
        KeyBytes(key.0).serialize(serializer)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<PublicKey, D::Error> {
        KeyBytes::deserialize(deserializer).map(|bytes| PublicKey::from_validated(bytes.0))
    }
}

/// Multihash code of the identity "hash" (the digest is the input itself).
const IDENTITY_MULTIHASH: u8 = 0x00;

/// libp2p's protobuf encoding of an ed25519 public key, up to the 32 key bytes: field 1
/// (`KeyType`) = 1 (Ed25519), field 2 (`Data`) of length 32.
const ED25519_PROTOBUF_PREFIX: [u8; 4] = [0x08, 0x01, 0x12, 0x20];

/// A node's identity: its public key, spelled as a libp2p `PeerId`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeId(PublicKey);

impl NodeId {
    /// The node whose key is `key`.
    #[must_use]
    pub const fn from_key(key: PublicKey) -> Self {
        Self(key)
    }

    /// Any 32 bytes as a node id, not checked to be a key: for the ends of ranges of ids.
    #[must_use]
    pub(crate) const fn bound(bytes: [u8; 32]) -> Self {
        Self(PublicKey::from_validated(bytes))
    }

    /// The node's public key.
    #[must_use]
    pub const fn key(&self) -> &PublicKey {
        &self.0
    }

    /// The libp2p `PeerId` of this node.
    ///
    /// An ed25519 peer id is the identity multihash of the key's protobuf encoding, so it
    /// is built from the bytes directly: no curve arithmetic (converting through
    /// libp2p's key type would decompress the point on every call, and ids are formatted
    /// on hot paths).
    #[must_use]
    pub fn to_peer_id(&self) -> libp2p_identity::PeerId {
        let mut bytes = [0u8; 2 + ED25519_PROTOBUF_PREFIX.len() + 32];
        bytes[0] = IDENTITY_MULTIHASH;
        bytes[1] = (ED25519_PROTOBUF_PREFIX.len() + 32) as u8;
        bytes[2..6].copy_from_slice(&ED25519_PROTOBUF_PREFIX);
        bytes[6..].copy_from_slice(&self.0.0);
        libp2p_identity::PeerId::from_bytes(&bytes)
            .expect("an identity multihash of 36 bytes is a valid peer id")
    }

    /// The node behind a libp2p `PeerId`, if that id embeds an ed25519 key (validated as a
    /// curve point, once).
    pub fn from_peer_id(peer: &libp2p_identity::PeerId) -> Result<Self, KeyError> {
        let not_ed25519 = || KeyError::NotEd25519(peer.to_base58());
        let multihash = peer.as_ref();
        if multihash.code() != u64::from(IDENTITY_MULTIHASH) {
            return Err(not_ed25519());
        }
        let key = multihash
            .digest()
            .strip_prefix(ED25519_PROTOBUF_PREFIX.as_slice())
            .and_then(|key| <[u8; 32]>::try_from(key).ok())
            .ok_or_else(not_ed25519)?;
        Ok(Self(PublicKey::from_bytes(key)?))
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_peer_id().to_base58())
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeId({self})")
    }
}

impl FromStr for NodeId {
    type Err = KeyError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let peer = libp2p_identity::PeerId::from_str(text.trim())
            .map_err(|_| KeyError::PeerIdText(text.to_owned()))?;
        Self::from_peer_id(&peer)
    }
}

/// An ed25519 signature.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Signature(#[serde(with = "byte_array")] pub [u8; 64]);

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Signature({}…)", hex::encode(&self.0[..8]))
    }
}

/// An ed25519 secret key. It never prints its bytes.
#[derive(Clone)]
pub struct SecretKey(SigningKey);

impl SecretKey {
    /// The key with this 32-byte seed. Callers draw the seed from the OS (`murnode`) or from
    /// a seeded RNG (the simulator); the protocol crate never draws randomness itself.
    #[must_use]
    pub fn from_seed(seed: [u8; 32]) -> Self {
        Self(SigningKey::from_bytes(&seed))
    }

    /// Reads a key from a 32-byte seed held in a slice, as stored in key files.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, KeyError> {
        let seed: [u8; 32] = bytes.try_into().map_err(|_| KeyError::SecretKeyLength(bytes.len()))?;
        Ok(Self::from_seed(seed))
    }

    /// The 32-byte seed, for writing a key file.
    #[must_use]
    pub fn to_seed(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    /// The matching public key.
    #[must_use]
    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key().to_bytes())
    }

    /// The node identity of this key.
    #[must_use]
    pub fn node_id(&self) -> NodeId {
        NodeId(self.public())
    }

    /// Signs `message` (deterministic: same key and message, same signature).
    #[must_use]
    pub fn sign(&self, message: &[u8]) -> Signature {
        Signature(self.0.sign(message).to_bytes())
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretKey(public: {})", self.public())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> SecretKey {
        SecretKey::from_seed([n; 32])
    }

    #[test]
    fn public_key_text_round_trips() {
        let public = key(1).public();
        let text = public.to_string();
        assert!(text.starts_with("ed25519:") && text.len() == 8 + 64);
        assert_eq!(text.parse::<PublicKey>().unwrap(), public);
    }

    #[test]
    fn public_key_text_errors_are_clear() {
        for bad in ["", "ed25519:", "ed25519:zz", "12345", "ed25519:00"] {
            let err = bad.parse::<PublicKey>().unwrap_err();
            assert!(err.to_string().contains("64 hex digits"), "{bad}: {err}");
        }
    }

    #[test]
    fn node_id_spells_as_libp2p_peer_id() {
        let node = key(2).node_id();
        let libp2p_key = libp2p_identity::ed25519::Keypair::from(
            libp2p_identity::ed25519::SecretKey::try_from_bytes([2u8; 32]).unwrap(),
        );
        let expected = libp2p_identity::PublicKey::from(libp2p_key.public()).to_peer_id();
        assert_eq!(node.to_peer_id(), expected);
        assert!(node.to_string().starts_with("12D3KooW"));
        assert_eq!(node.to_string().parse::<NodeId>().unwrap(), node);
    }

    #[test]
    fn non_ed25519_peer_id_is_refused() {
        // A sha2-256 multihash peer id, as RSA keys get: no key can be read out of it.
        let mut bytes = vec![0x12, 0x20];
        bytes.extend_from_slice(&[7; 32]);
        let sha_peer = libp2p_identity::PeerId::from_bytes(&bytes).unwrap();
        assert!(matches!(NodeId::from_peer_id(&sha_peer), Err(KeyError::NotEd25519(_))));
        assert!(matches!("not-a-peer".parse::<NodeId>(), Err(KeyError::PeerIdText(_))));
    }

    #[test]
    fn signatures_verify_only_for_their_message_and_key() {
        let signer = key(3);
        let sig = signer.sign(b"hello");
        assert!(signer.public().verify(b"hello", &sig));
        assert!(!signer.public().verify(b"hellp", &sig));
        assert!(!key(4).public().verify(b"hello", &sig));
    }

    #[test]
    fn keys_order_bytewise() {
        let mut keys: Vec<PublicKey> = (0..50u8).map(|n| key(n).public()).collect();
        let mut bytes: Vec<[u8; 32]> = keys.iter().map(|k| *k.as_bytes()).collect();
        keys.sort();
        bytes.sort();
        assert_eq!(keys.iter().map(|k| *k.as_bytes()).collect::<Vec<_>>(), bytes);
    }

    #[test]
    fn secret_key_debug_hides_the_secret() {
        let secret = key(5);
        let shown = format!("{secret:?}");
        assert!(!shown.contains(&hex::encode(secret.to_seed())));
    }
}
