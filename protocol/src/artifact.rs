//! `/murmur/artifact/1`: asking a peer for an artifact, and the chunk lists that let a
//! puller check every piece of a large blob before it writes it.
//!
//! # Trust
//!
//! A puller believes nothing a provider says about *which* artifact is `name@version`: it
//! takes the manifest digest from a digest the user pinned, from its `murmur.lock`, or
//! from a [`Catalog`](crate::catalog::Catalog) naming `name@version` signed by a publisher
//! it already trusts (a provider only relays that signature). Everything after is checked
//! against the digest: the manifest bytes hash to it, the manifest names the config,
//! content and chunk-list digests, the chunk list names each chunk's digest. So any
//! provider may serve any piece, and a piece that does not hash to its digest is refused
//! before it touches the disk (the [`crate::pull`] scheduler then drops that provider).
//!
//! # Messages
//!
//! One request per stream, one response: [`ArtifactRequest::Resolve`] asks which manifest
//! a provider holds for `name@version` (and the publisher's signature, if it has one);
//! [`ArtifactRequest::Blob`] asks for `len` bytes at `offset` of a blob, at most
//! [`CHUNK_BYTES_MAX`]. Both are framed with a version like the other request protocols.

use serde::{Deserialize, Serialize};

use crate::codec::{self, DecodeError};
use crate::digest::{Chain, Digest};
use crate::names::{check_capsule_name, check_version};
use crate::signed::Envelope;

/// The wire version of `/murmur/artifact/1` frames this build writes and reads.
pub const ARTIFACT_WIRE_VERSION: u16 = 1;
/// Chunk size for content pulled from the mesh: 1 MiB keeps a lost chunk cheap and a
/// request well inside any stream's flow-control window.
pub const CHUNK_BYTES: u64 = 1 << 20;
/// Most bytes one `Blob` request may ask for.
pub const CHUNK_BYTES_MAX: u64 = 4 << 20;
/// Largest artifact frame: one chunk plus framing.
pub const ARTIFACT_FRAME_BYTES_MAX: usize = CHUNK_BYTES_MAX as usize + 64 * 1024;
/// Largest blob a chunk list may describe (4 GiB in 4,096 chunks of 1 MiB).
pub const CHUNKED_BLOB_BYTES_MAX: u64 = 4 << 30;
/// Largest encoded chunk list.
pub const CHUNK_LIST_BYTES_MAX: usize = 160 * 1024;
/// Longest error text in a response.
pub const ARTIFACT_REASON_BYTES_MAX: usize = 512;
/// The chunk-list version this build writes: 2, chaining values (see [`ChunkList`]).
/// It also reads version 1, a plain SHA-256 per chunk.
pub const CHUNK_LIST_VERSION: u16 = 2;
/// The first chunk-list version: each entry is SHA-256 of its chunk alone.
const CHUNK_LIST_VERSION_PER_CHUNK: u16 = 1;

/// A request on `/murmur/artifact/1`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum ArtifactRequest {
    /// Which manifest do you hold as `name@version`?
    Resolve { name: String, version: String },
    /// `len` bytes at `offset` of blob `digest`.
    // Fields are in canonical key order (see `codec`).
    Blob { len: u64, digest: Digest, offset: u64 },
}

/// An answer on `/murmur/artifact/1`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum ArtifactResponse {
    /// The provider holds `manifest` (`size` bytes) as the name@version asked for, with the
    /// publisher's signed catalog naming it when the provider has one.
    // Fields are in canonical key order (see `codec`).
    Resolved { size: u64, manifest: Digest, signature: Option<Envelope> },
    /// The bytes asked for (fewer only at the blob's end).
    Bytes {
        #[serde(with = "codec::byte_vec")]
        data: Vec<u8>,
    },
    /// The provider does not hold what was asked for.
    NotFound,
    /// The request could not be served (busy, bad range); says why.
    Error { reason: String },
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Frame<T> {
    v: u16,
    body: T,
}

impl ArtifactRequest {
    /// Canonical bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(&Frame { v: ARTIFACT_WIRE_VERSION, body: self })
    }

    /// Decodes and validates a request from a peer.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let frame: Frame<Self> = crate::signed::decode_versioned(
            "artifact request",
            bytes,
            ARTIFACT_FRAME_BYTES_MAX,
            ARTIFACT_WIRE_VERSION,
            |f: &Frame<Self>| f.v,
        )?;
        frame.body.validate()?;
        Ok(frame.body)
    }

    fn validate(&self) -> Result<(), DecodeError> {
        let invalid =
            |field, reason: String| DecodeError::Invalid { what: "artifact request", field, reason };
        match self {
            Self::Resolve { name, version } => {
                check_capsule_name(name).map_err(|r| invalid("name", r))?;
                check_version(version).map_err(|r| invalid("version", r))
            }
            Self::Blob { len, offset, .. } => {
                if *len == 0 || *len > CHUNK_BYTES_MAX {
                    return Err(invalid("len", format!("must be 1..={CHUNK_BYTES_MAX}, not {len}")));
                }
                if offset.checked_add(*len).is_none() {
                    return Err(invalid("offset", "offset + len overflows".into()));
                }
                Ok(())
            }
        }
    }
}

impl ArtifactResponse {
    /// Canonical bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(&Frame { v: ARTIFACT_WIRE_VERSION, body: self })
    }

    /// Decodes and validates a response from a peer.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let lenient =
            codec::decode_lenient::<Frame<Self>>("artifact response", bytes, ARTIFACT_FRAME_BYTES_MAX);
        let frame = match lenient {
            // Chunk answers skip the canonical-form check (a re-encoding and comparison of up
            // to 4 MiB per chunk): their bytes are checked against a digest by the puller,
            // and nothing signs or hashes the frame itself.
            Ok(frame) if frame.v == ARTIFACT_WIRE_VERSION && matches!(frame.body, Self::Bytes { .. }) => {
                frame
            }
            _ => crate::signed::decode_versioned(
                "artifact response",
                bytes,
                ARTIFACT_FRAME_BYTES_MAX,
                ARTIFACT_WIRE_VERSION,
                |f: &Frame<Self>| f.v,
            )?,
        };
        let invalid =
            |field, reason: String| DecodeError::Invalid { what: "artifact response", field, reason };
        match &frame.body {
            Self::Bytes { data } if data.len() as u64 > CHUNK_BYTES_MAX => {
                return Err(invalid("data", format!("is longer than {CHUNK_BYTES_MAX} bytes")));
            }
            Self::Error { reason } if reason.len() > ARTIFACT_REASON_BYTES_MAX => {
                return Err(invalid("reason", format!("is longer than {ARTIFACT_REASON_BYTES_MAX} bytes")));
            }
            _ => {}
        }
        Ok(frame.body)
    }
}

/// What a blob's fixed-size chunks must hash to, in order. Stored as a blob itself, named
/// by the artifact's manifest, so the publisher's signature covers every chunk.
///
/// Version 2 (written since chained verification) lists SHA-256's chaining value after
/// each chunk, the last entry being the content digest itself ([`Chain`]): a chunk checks
/// alone, and chunks that all check prove the content digest, so a pull hashes the bytes
/// once. Version 1 lists SHA-256 of each chunk alone; a pull of it must hash the whole
/// content again at the end. [`ChunkList::link`] is the check for either.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChunkList {
    // Fields are in canonical key order (see `codec`).
    /// Document version: [`CHUNK_LIST_VERSION`], or 1.
    pub v: u16,
    /// The blob's size in bytes.
    pub size: u64,
    /// One entry per chunk; the last chunk may be shorter than `chunk_size`.
    pub chunks: Vec<Digest>,
    /// Bytes per chunk (a whole number of SHA-256 blocks in version 2).
    pub chunk_size: u64,
}

impl ChunkList {
    /// The (version 2) chunk list of `bytes` in chunks of `chunk_size`, rounded down to whole
    /// 64-byte blocks and kept within 64..=[`CHUNK_BYTES_MAX`].
    #[must_use]
    pub fn of(bytes: &[u8], chunk_size: u64) -> Self {
        let block = Chain::BLOCK as u64;
        let step = chunk_size.clamp(block, CHUNK_BYTES_MAX) / block * block;
        let step = usize::try_from(step).unwrap_or(Chain::BLOCK);
        let mut chain = Chain::start();
        let mut chunks = Vec::with_capacity(bytes.len().div_ceil(step));
        let mut pieces = bytes.chunks(step).peekable();
        while let Some(piece) = pieces.next() {
            if pieces.peek().is_some() {
                chain.absorb(piece);
                chunks.push(chain.value());
            } else {
                chunks.push(chain.finish(piece, bytes.len() as u64));
            }
        }
        Self { v: CHUNK_LIST_VERSION, size: bytes.len() as u64, chunks, chunk_size: step as u64 }
    }

    /// The list of content small enough to be one chunk: its one entry is the content
    /// digest (the same in both versions).
    #[must_use]
    pub fn single(content: Digest, size: u64) -> Self {
        Self { v: CHUNK_LIST_VERSION, size, chunks: vec![content], chunk_size: size.max(1) }
    }

    /// What chunk `index` holding `bytes` links to: the value the list must hold at
    /// `index` for the bytes to be that chunk. `None` for bytes of the wrong length (or an
    /// index past the end), which can never be the chunk.
    #[must_use]
    pub fn link(&self, index: u32, bytes: &[u8]) -> Option<Digest> {
        let index = index as usize;
        let offset = (index as u64).saturating_mul(self.chunk_size);
        let expected_len = self.chunk_size.min(self.size.saturating_sub(offset));
        if index >= self.chunks.len() || bytes.len() as u64 != expected_len {
            return None;
        }
        if self.v == CHUNK_LIST_VERSION_PER_CHUNK {
            return Some(Digest::of(bytes));
        }
        let mut chain = match index.checked_sub(1) {
            Some(before) => Chain::resume(&self.chunks[before]),
            None => Chain::start(),
        };
        if index + 1 == self.chunks.len() {
            return Some(chain.finish(bytes, self.size));
        }
        // A chunk size that is not whole blocks (refused by `decode`) links to nothing.
        chain.absorb(bytes).then(|| chain.value())
    }

    /// Whether chunks that all match this list are, together, content with digest
    /// `content` (version 2 ending in it), so the whole need not be hashed again.
    #[must_use]
    pub fn proves(&self, content: &Digest) -> bool {
        self.v != CHUNK_LIST_VERSION_PER_CHUNK && self.chunks.last() == Some(content)
    }

    /// Checks that this list can describe content `content` of `size` bytes, before
    /// anything is fetched: the size must agree, and a version-2 list must end in the
    /// content digest (or no chunk could ever complete it). Says why not.
    pub fn describes(&self, content: &Digest, size: u64) -> Result<(), String> {
        if self.size != size {
            return Err(format!("describes {} bytes; the content is {size}", self.size));
        }
        if self.v != CHUNK_LIST_VERSION_PER_CHUNK && size > 0 && !self.proves(content) {
            return Err(format!("does not end in the content digest {content}"));
        }
        Ok(())
    }

    /// Canonical bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(self)
    }

    /// Decodes and checks a chunk list: its version, chunk size, and that it has exactly
    /// one entry per chunk of `size` bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let versioned =
            |v| crate::signed::decode_versioned("chunk list", bytes, CHUNK_LIST_BYTES_MAX, v, |l: &Self| l.v);
        let list = match versioned(CHUNK_LIST_VERSION) {
            Err(DecodeError::UnsupportedVersion { found, .. })
                if found == u64::from(CHUNK_LIST_VERSION_PER_CHUNK) =>
            {
                versioned(CHUNK_LIST_VERSION_PER_CHUNK)?
            }
            other => other?,
        };
        let invalid = |field, reason: String| DecodeError::Invalid { what: "chunk list", field, reason };
        if list.chunk_size == 0 || list.chunk_size > CHUNK_BYTES_MAX {
            return Err(invalid("chunk_size", format!("must be 1..={CHUNK_BYTES_MAX}")));
        }
        if list.v != CHUNK_LIST_VERSION_PER_CHUNK && list.chunk_size % Chain::BLOCK as u64 != 0 {
            return Err(invalid("chunk_size", format!("must be a multiple of {} bytes", Chain::BLOCK)));
        }
        if list.size > CHUNKED_BLOB_BYTES_MAX {
            return Err(invalid("size", format!("is more than {CHUNKED_BLOB_BYTES_MAX} bytes")));
        }
        let expected = list.size.div_ceil(list.chunk_size);
        if list.chunks.len() as u64 != expected {
            return Err(invalid(
                "chunks",
                format!("has {} entries; {} bytes make {expected} chunks", list.chunks.len(), list.size),
            ));
        }
        Ok(list)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::identity::SecretKey;
    use crate::signed::Signed;

    fn samples() -> Vec<(ArtifactRequest, ArtifactResponse)> {
        let key = SecretKey::from_seed([3; 32]);
        let manifest = Digest::of(b"m");
        let catalog = crate::catalog::Catalog::new(
            crate::time::Millis(1),
            vec![crate::catalog::CatalogArtifact {
                name: "wordcount".into(),
                version: "1.0.0".into(),
                manifest,
            }],
            vec![crate::catalog::CatalogBlob { size: 420, digest: manifest }],
        );
        let signature = Signed::sign(catalog, &key).unwrap().into_envelope();
        vec![
            (
                ArtifactRequest::Resolve { name: "wordcount".into(), version: "1.0.0".into() },
                ArtifactResponse::Resolved {
                    manifest: Digest::of(b"m"),
                    size: 420,
                    signature: Some(signature),
                },
            ),
            (
                ArtifactRequest::Blob { digest: Digest::of(b"c"), offset: 1 << 20, len: 1 << 20 },
                ArtifactResponse::Bytes { data: vec![7; 1000] },
            ),
            (
                ArtifactRequest::Blob { digest: Digest::of(b"c"), offset: 0, len: 1 },
                ArtifactResponse::Error { reason: "busy".into() },
            ),
        ]
    }

    #[test]
    fn messages_round_trip_canonically() {
        for (request, response) in samples() {
            let bytes = request.encode();
            crate::codec::tests::assert_canonical_key_order(&bytes);
            assert_eq!(ArtifactRequest::decode(&bytes).unwrap(), request);
            let bytes = response.encode();
            assert_eq!(ArtifactResponse::decode(&bytes).unwrap(), response);
        }
        let bytes = ArtifactResponse::NotFound.encode();
        assert_eq!(ArtifactResponse::decode(&bytes).unwrap(), ArtifactResponse::NotFound);
    }

    #[test]
    fn requests_out_of_bounds_are_refused() {
        let too_long =
            ArtifactRequest::Blob { digest: Digest::of(b"c"), offset: 0, len: CHUNK_BYTES_MAX + 1 };
        let err = ArtifactRequest::decode(&too_long.encode()).unwrap_err().to_string();
        assert!(err.contains("len"), "{err}");
        let overflow = ArtifactRequest::Blob { digest: Digest::of(b"c"), offset: u64::MAX, len: 2 };
        assert!(ArtifactRequest::decode(&overflow.encode()).is_err());
        let bad_name = ArtifactRequest::Resolve { name: "../etc".into(), version: "1".into() };
        assert!(ArtifactRequest::decode(&bad_name.encode()).is_err());
        let big = ArtifactResponse::Bytes { data: vec![0; CHUNK_BYTES_MAX as usize + 1] };
        assert!(ArtifactResponse::decode(&big.encode()).is_err());
    }

    #[test]
    fn chunk_lists_check_their_shape() {
        let bytes: Vec<u8> = (0..2_500_000u32).map(|i| (i % 251) as u8).collect();
        let list = ChunkList::of(&bytes, CHUNK_BYTES);
        assert_eq!(list.chunks.len(), 3);
        assert_eq!(list.chunks[2], Digest::of(&bytes));
        assert!(list.proves(&Digest::of(&bytes)));
        let encoded = list.encode();
        crate::codec::tests::assert_canonical_key_order(&encoded);
        assert_eq!(ChunkList::decode(&encoded).unwrap(), list);
        let mut short = list.clone();
        short.chunks.pop();
        assert!(ChunkList::decode(&short.encode()).unwrap_err().to_string().contains("chunks"));
        let mut zero = list.clone();
        zero.chunk_size = 0;
        assert!(ChunkList::decode(&zero.encode()).is_err());
        let mut unaligned = list;
        unaligned.chunk_size = 1000;
        unaligned.chunks = vec![Digest::of(b"x"); 2_500];
        let err = ChunkList::decode(&unaligned.encode()).unwrap_err().to_string();
        assert!(err.contains("multiple of 64"), "{err}");
        assert_eq!(ChunkList::of(&[], CHUNK_BYTES).chunks.len(), 0);
    }

    #[test]
    fn each_chunk_links_alone_and_only_its_own_bytes_do() {
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i % 253) as u8).collect();
        let list = ChunkList::of(&bytes, 4096);
        assert_eq!(list.chunks.len(), 3);
        // Checked in any order, each from the list alone.
        for index in [2u32, 0, 1] {
            let (from, to) = (index as usize * 4096, (index as usize * 4096 + 4096).min(bytes.len()));
            assert_eq!(list.link(index, &bytes[from..to]), Some(list.chunks[index as usize]));
            let mut flipped = bytes[from..to].to_vec();
            flipped[7] ^= 1;
            assert_ne!(list.link(index, &flipped), Some(list.chunks[index as usize]));
            assert_eq!(list.link(index, &bytes[from..to - 64]), None);
        }
        // Another chunk's bytes never link in its place; the whole content is not the last
        // chunk even though the last entry is its digest.
        assert_ne!(list.link(1, &bytes[..4096]), Some(list.chunks[1]));
        assert_eq!(list.link(2, &bytes), None);
        assert_eq!(list.link(3, &bytes[..16]), None);
        // A single-chunk list is the content digest, whatever the version.
        let single = ChunkList::single(Digest::of(&bytes), bytes.len() as u64);
        assert_eq!(single.link(0, &bytes), Some(single.chunks[0]));
        // A list fits only the content it ends in, and only its size.
        let content = Digest::of(&bytes);
        assert_eq!(list.describes(&content, bytes.len() as u64), Ok(()));
        assert!(
            list.describes(&Digest::of(b"other"), bytes.len() as u64).unwrap_err().contains("content digest")
        );
        assert!(list.describes(&content, 5).unwrap_err().contains("10000 bytes"));
        assert!(single.proves(&Digest::of(&bytes)));
    }

    #[test]
    fn version_1_lists_are_still_read_and_checked_per_chunk() {
        let bytes: Vec<u8> = (0..9_000u32).map(|i| (i % 249) as u8).collect();
        let v1 = ChunkList {
            v: 1,
            size: bytes.len() as u64,
            chunks: bytes.chunks(4096).map(Digest::of).collect(),
            chunk_size: 4096,
        };
        let read = ChunkList::decode(&v1.encode()).unwrap();
        assert_eq!(read, v1);
        assert_eq!(read.link(1, &bytes[4096..8192]), Some(v1.chunks[1]));
        assert_eq!(read.link(1, &bytes[4096..8000]), None);
        assert!(!read.proves(&Digest::of(&bytes)));
        let mut v3 = v1;
        v3.v = 3;
        let err = ChunkList::decode(&v3.encode()).unwrap_err().to_string();
        assert!(err.contains("version 3"), "{err}");
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = ArtifactRequest::decode(&bytes);
            let _ = ArtifactResponse::decode(&bytes);
            let _ = ChunkList::decode(&bytes);
        }

        #[test]
        fn flipped_requests_never_panic(flip in 0usize..64, bit in 0u8..8) {
            let bytes = ArtifactRequest::Blob { digest: Digest::of(b"x"), offset: 5, len: 9 }.encode();
            let mut bytes = bytes.clone();
            let i = flip % bytes.len();
            bytes[i] ^= 1 << bit;
            let _ = ArtifactRequest::decode(&bytes);
        }
    }
}
