//! The OCI documents of the store (image manifests, the image index, descriptors) and the
//! parsing of such documents when they arrive from peers or bundles, where every field is
//! checked before anything is believed.
//!
//! An artifact is an OCI image manifest whose config blob holds Murmur's metadata and whose
//! first layer is the content (a WebAssembly component, `application/wasm`); content of
//! more than one chunk has a second layer, its chunk list. Standard OCI tools (oras,
//! skopeo) read the layout.

use anyhow::{Context, bail};
use murmur_protocol::Digest;
use murmur_protocol::artifact::CHUNK_LIST_BYTES_MAX;
use serde::{Deserialize, Serialize};

use crate::artifact::ArtifactMeta;
use murmur_config::limits::{ARTIFACT_CONTENT_BYTES_MAX, ARTIFACT_METADATA_BYTES_MAX};

/// Media type of a Murmur artifact's manifest config.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.murmur.artifact.config.v1+json";
/// `artifactType` of Murmur artifacts.
pub const ARTIFACT_TYPE: &str = "application/vnd.murmur.artifact.v1";
/// Media type of WebAssembly component content.
pub const WASM_MEDIA_TYPE: &str = "application/wasm";
/// Media type of the content of a `data` artifact (bytes nothing runs).
pub const DATA_MEDIA_TYPE: &str = "application/octet-stream";
/// Media type of a content chunk list (the second layer of an artifact whose content is
/// more than one chunk; see `murmur_protocol::artifact::ChunkList`).
pub const CHUNKS_MEDIA_TYPE: &str = "application/vnd.murmur.chunks.v1+cbor";
pub(crate) const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub(crate) const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
pub(crate) const REF_NAME: &str = "org.opencontainers.image.ref.name";

/// An OCI content descriptor.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Descriptor {
    pub(crate) media_type: String,
    pub(crate) digest: String,
    pub(crate) size: u64,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub(crate) annotations: std::collections::BTreeMap<String, String>,
}

/// An OCI image manifest.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Manifest {
    pub(crate) schema_version: u32,
    pub(crate) media_type: String,
    pub(crate) artifact_type: String,
    pub(crate) config: Descriptor,
    pub(crate) layers: Vec<Descriptor>,
}

/// An OCI image index: one manifest per name@version.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Index {
    pub(crate) schema_version: u32,
    pub(crate) media_type: String,
    pub(crate) manifests: Vec<Descriptor>,
}

impl Index {
    /// Points `meta`'s NAME:VERSION at `manifest`, replacing what it named.
    pub(crate) fn name(&mut self, meta: &ArtifactMeta, manifest: Digest, size: u64) {
        let reference = reference(meta);
        self.manifests.retain(|d| d.annotations.get(REF_NAME) != Some(&reference));
        self.manifests.push(named(meta, manifest, size));
    }
}

/// An index entry naming `manifest` NAME:VERSION.
pub(crate) fn named(meta: &ArtifactMeta, manifest: Digest, size: u64) -> Descriptor {
    let mut entry = descriptor(MANIFEST_MEDIA_TYPE, manifest, size);
    entry.annotations.insert(REF_NAME.into(), reference(meta));
    entry
}

/// The blobs an artifact manifest names, each with its declared size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ManifestParts {
    pub config: (Digest, u64),
    pub content: (Digest, u64),
    pub chunk_list: Option<(Digest, u64)>,
}

/// Reads which blobs a manifest names (checking only its shape; [`parse_artifact`] checks
/// the rest once the config is at hand).
pub fn manifest_parts(manifest: &[u8]) -> anyhow::Result<ManifestParts> {
    let manifest: Manifest = serde_json::from_slice(manifest).context("not an OCI artifact manifest")?;
    if manifest.artifact_type != ARTIFACT_TYPE || manifest.config.media_type != CONFIG_MEDIA_TYPE {
        bail!("not a Murmur artifact (artifactType {})", manifest.artifact_type);
    }
    if manifest.config.size > ARTIFACT_METADATA_BYTES_MAX {
        bail!("its config is {} bytes, more than {ARTIFACT_METADATA_BYTES_MAX}", manifest.config.size);
    }
    let layer = manifest.layers.first().context("the manifest has no content layer")?;
    let chunk_list = match manifest.layers.get(1) {
        Some(chunks) if chunks.media_type == CHUNKS_MEDIA_TYPE => Some((chunks.digest.parse()?, chunks.size)),
        _ => None,
    };
    Ok(ManifestParts {
        config: (manifest.config.digest.parse()?, manifest.config.size),
        content: (layer.digest.parse()?, layer.size),
        chunk_list,
    })
}

/// Reads an artifact manifest (`manifest`, bytes) and its config (found by `blob`): the
/// metadata, validated, and every blob the manifest references (config, then content),
/// with their declared sizes. Nothing is read from or written to a store.
pub fn parse_artifact(
    manifest: &[u8],
    blob: &dyn Fn(&Digest) -> Option<Vec<u8>>,
) -> anyhow::Result<(ArtifactMeta, Vec<(Digest, u64)>)> {
    let manifest: Manifest = serde_json::from_slice(manifest).context("not an OCI artifact manifest")?;
    if manifest.artifact_type != ARTIFACT_TYPE || manifest.config.media_type != CONFIG_MEDIA_TYPE {
        bail!("not a Murmur artifact (artifactType {})", manifest.artifact_type);
    }
    let config_digest: Digest = manifest.config.digest.parse()?;
    let config = blob(&config_digest).with_context(|| format!("its config {config_digest} is missing"))?;
    let meta: ArtifactMeta =
        serde_json::from_slice(&config).context("its config is not artifact metadata")?;
    meta.validate()?;
    let layer = manifest.layers.first().context("the manifest has no content layer")?;
    if layer.size > ARTIFACT_CONTENT_BYTES_MAX {
        bail!("an artifact has one content layer of at most {ARTIFACT_CONTENT_BYTES_MAX} bytes");
    }
    let mut blobs = vec![(config_digest, manifest.config.size), (layer.digest.parse()?, layer.size)];
    match &manifest.layers[1..] {
        [] => {}
        [chunks] if chunks.media_type == CHUNKS_MEDIA_TYPE && chunks.size <= CHUNK_LIST_BYTES_MAX as u64 => {
            blobs.push((chunks.digest.parse()?, chunks.size));
        }
        _ => bail!("an artifact's layers are its content and, optionally, the content's chunk list"),
    }
    Ok((meta, blobs))
}

pub(crate) fn descriptor(media_type: &str, digest: Digest, size: u64) -> Descriptor {
    Descriptor {
        media_type: media_type.into(),
        digest: digest.to_string(),
        size,
        annotations: Default::default(),
    }
}

pub(crate) fn clone_descriptor(d: &Descriptor) -> Descriptor {
    Descriptor {
        media_type: d.media_type.clone(),
        digest: d.digest.clone(),
        size: d.size,
        annotations: d.annotations.clone(),
    }
}

fn reference(meta: &ArtifactMeta) -> String {
    format!("{}:{}", meta.name, meta.version)
}
