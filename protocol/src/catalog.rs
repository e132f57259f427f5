//! Bundle catalogs: the signed table of contents of an air-gapped artifact bundle.
//!
//! A bundle (`mur bundle export`) is a tar file holding an OCI image layout. Its first
//! entry is a catalog, signed by a publisher key, that lists every artifact the bundle
//! carries (name, version, manifest digest) and every blob with its digest and size. An
//! importer verifies the catalog against keys it already trusts, never against keys found
//! in the bundle, before it reads anything else; then every other entry must be a blob the
//! catalog lists, of the size it declares, whose bytes hash to its name.

use serde::{Deserialize, Serialize};

use crate::codec::DecodeError;
use crate::digest::Digest;
use crate::identity::PublicKey;
use crate::names::{check_capsule_name, check_version};
use crate::signed::{DocKind, Document, Envelope, Signed};
use crate::time::Millis;
use crate::trust::{TrustError, open_trusted};

/// The catalog version this build writes and reads.
pub const CATALOG_VERSION: u16 = 1;
/// Largest encoded catalog body.
pub const CATALOG_BYTES_MAX: usize = 512 * 1024;
/// Artifacts one bundle carries at most.
pub const CATALOG_ARTIFACTS_MAX: usize = 1_000;
/// Blobs one bundle carries at most (a manifest, a config and content per artifact).
pub const CATALOG_BLOBS_MAX: usize = 3 * CATALOG_ARTIFACTS_MAX;
/// Largest blob a catalog may declare (the importer applies its own, smaller, limits).
pub const CATALOG_BLOB_BYTES_MAX: u64 = 1 << 40;

/// One artifact in a bundle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogArtifact {
    // Fields are in canonical key order (see `codec`).
    pub name: String,
    pub version: String,
    /// Digest of its OCI manifest (one of the catalog's blobs).
    pub manifest: Digest,
}

/// One blob in a bundle: `blobs/sha256/<hex of digest>`, exactly `size` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogBlob {
    // Fields are in canonical key order (see `codec`).
    pub size: u64,
    pub digest: Digest,
}

/// The signed table of contents of a bundle. The signer is the publisher.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    // Fields are in canonical key order (see `codec`).
    /// Document version, [`CATALOG_VERSION`].
    pub v: u16,
    /// Every blob, sorted by digest, each once.
    pub blobs: Vec<CatalogBlob>,
    /// When the bundle was written (informational).
    pub created: Millis,
    /// Every artifact, sorted by name then version, each once.
    pub artifacts: Vec<CatalogArtifact>,
}

impl Catalog {
    /// A catalog of `artifacts` and `blobs`, sorted as the format requires.
    #[must_use]
    pub fn new(created: Millis, mut artifacts: Vec<CatalogArtifact>, mut blobs: Vec<CatalogBlob>) -> Self {
        artifacts.sort_by(|a, b| (&a.name, &a.version).cmp(&(&b.name, &b.version)));
        blobs.sort_by_key(|b| b.digest);
        blobs.dedup_by_key(|b| b.digest);
        Self { v: CATALOG_VERSION, blobs, created, artifacts }
    }

    /// The manifest this catalog names as `name@version`.
    #[must_use]
    pub fn manifest_of(&self, name: &str, version: &str) -> Option<Digest> {
        self.artifacts.iter().find(|a| a.name == name && a.version == version).map(|a| a.manifest)
    }

    /// The declared blob with `digest`.
    #[must_use]
    pub fn blob(&self, digest: &Digest) -> Option<&CatalogBlob> {
        self.blobs.binary_search_by_key(digest, |b| b.digest).ok().map(|i| &self.blobs[i])
    }

    /// Bytes of every blob together.
    #[must_use]
    pub fn total_bytes(&self) -> u64 {
        self.blobs.iter().map(|b| b.size).sum()
    }
}

impl Document for Catalog {
    const KIND: DocKind = DocKind::Catalog;
    const VERSION: u16 = CATALOG_VERSION;
    const BYTES_MAX: usize = CATALOG_BYTES_MAX;

    fn version(&self) -> u16 {
        self.v
    }

    fn validate(&self) -> Result<(), DecodeError> {
        let invalid = |field, reason: String| DecodeError::Invalid { what: "catalog", field, reason };
        if self.artifacts.is_empty() || self.artifacts.len() > CATALOG_ARTIFACTS_MAX {
            return Err(invalid("artifacts", format!("must hold 1 to {CATALOG_ARTIFACTS_MAX} artifacts")));
        }
        if self.blobs.len() > CATALOG_BLOBS_MAX {
            return Err(invalid(
                "blobs",
                format!("has {} entries, more than {CATALOG_BLOBS_MAX}", self.blobs.len()),
            ));
        }
        for pair in self.artifacts.windows(2) {
            if (&pair[0].name, &pair[0].version) >= (&pair[1].name, &pair[1].version) {
                return Err(invalid("artifacts", "must be sorted by name and version, each once".into()));
            }
        }
        for pair in self.blobs.windows(2) {
            if pair[0].digest >= pair[1].digest {
                return Err(invalid("blobs", "must be sorted by digest, each once".into()));
            }
        }
        for artifact in &self.artifacts {
            check_capsule_name(&artifact.name).map_err(|r| invalid("artifacts.name", r))?;
            check_version(&artifact.version).map_err(|r| invalid("artifacts.version", r))?;
            if self.blob(&artifact.manifest).is_none() {
                return Err(invalid(
                    "artifacts.manifest",
                    format!(
                        "{}@{}: manifest {} is not among the blobs",
                        artifact.name, artifact.version, artifact.manifest
                    ),
                ));
            }
        }
        if let Some(blob) = self.blobs.iter().find(|b| b.size > CATALOG_BLOB_BYTES_MAX) {
            return Err(invalid("blobs.size", format!("blob {} declares {} bytes", blob.digest, blob.size)));
        }
        Ok(())
    }
}

/// Opens a bundle's catalog: a catalog envelope (up to [`CATALOG_BYTES_MAX`] of body),
/// signed by one of `publishers`, well formed.
pub fn verify_catalog(bytes: &[u8], publishers: &[PublicKey]) -> Result<Signed<Catalog>, TrustError> {
    let envelope =
        Envelope::decode_bounded(bytes, CATALOG_BYTES_MAX + 1024).map_err(TrustError::Malformed)?;
    open_trusted::<Catalog>(envelope, publishers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::SecretKey;

    fn catalog() -> Catalog {
        let manifest = Digest::of(b"manifest");
        Catalog::new(
            Millis(1_800_000_000_000),
            vec![CatalogArtifact { name: "echo".into(), version: "1.0.0".into(), manifest }],
            vec![
                CatalogBlob { size: 8, digest: manifest },
                CatalogBlob { size: 7, digest: Digest::of(b"content") },
            ],
        )
    }

    #[test]
    fn a_catalog_signed_by_a_trusted_publisher_opens_and_nothing_else_does() {
        let publisher = SecretKey::from_seed([1; 32]);
        let stranger = SecretKey::from_seed([2; 32]);
        let bytes = Signed::sign(catalog(), &publisher).unwrap().envelope().encode();
        let opened = verify_catalog(&bytes, &[publisher.public()]).unwrap();
        assert_eq!(opened.doc().total_bytes(), 15);
        assert!(opened.doc().blob(&Digest::of(b"content")).is_some());
        let err = verify_catalog(&bytes, &[stranger.public()]).unwrap_err();
        assert_eq!(err.reason(), "untrusted_issuer");
        // One flipped byte anywhere: refused (bad signature or undecodable), never opened.
        for i in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[i] ^= 0x01;
            assert!(verify_catalog(&flipped, &[publisher.public()]).is_err(), "byte {i}");
        }
    }

    #[test]
    fn a_catalog_must_list_the_manifests_it_names_and_stay_sorted() {
        let publisher = SecretKey::from_seed([1; 32]);
        let mut missing = catalog();
        missing.artifacts[0].manifest = Digest::of(b"elsewhere");
        assert!(Signed::sign(missing, &publisher).is_err());
        let mut unsorted = catalog();
        unsorted.blobs.reverse();
        assert!(Signed::sign(unsorted, &publisher).is_err());
        let mut empty = catalog();
        empty.artifacts.clear();
        assert!(Signed::sign(empty, &publisher).is_err());
    }
}
