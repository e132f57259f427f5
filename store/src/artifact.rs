//! An artifact as Murmur knows it: its metadata (name, version, kind, platform,
//! description, tags, schemas), how the store holds it, and its publisher's signature (a
//! signed catalog naming it and its blobs).

use anyhow::{Context, bail};
use murmur_config::limits::{ARTIFACT_TAGS_MAX, ARTIFACT_TEXT_BYTES_MAX};
use murmur_protocol::catalog::{Catalog, CatalogArtifact, CatalogBlob};
use murmur_protocol::names::{check_capsule_name, check_version};
use murmur_protocol::{Digest, Envelope, Millis, SecretKey, Signed};
use serde::{Deserialize, Serialize};

/// What a capsule is, and so which export a runtime calls: the one name for an artifact's
/// `kind` and a manifest's `kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CapsuleKind {
    /// Exports `murmur:tool/run@0.1.0`; runs once per input.
    Tool,
    /// Exports `murmur:capsule/run@0.1.0`; a script that drives tools.
    Capsule,
    /// An inference driver: exports `murmur:tool/run@0.1.0`.
    Driver,
    /// A lifecycle hook: exports `murmur:hook/lifecycle@0.5.0`.
    Hook,
    /// A manifest-only agent run by the native agent loop (no component of its own).
    Agent,
    /// A long-running brain: a component of world `murmur:brain/brain@0.1.0` (runtime
    /// `wasm`), or a rhai or JavaScript script (runtime `native`: the node interprets it).
    /// Agents name it in the node's config; no capsule runs it.
    Brain,
    /// Content nothing runs: what an agent's `on-inference` hook returned as `artifact`,
    /// or any file that travels with the mesh's artifacts. Its `runtime` is `native` (it is
    /// no component); no node installs or pulls it into a capsule.
    Data,
}

impl CapsuleKind {
    /// Every kind, in the order manifests and help texts list them.
    pub const ALL: [Self; 7] =
        [Self::Tool, Self::Capsule, Self::Driver, Self::Hook, Self::Agent, Self::Brain, Self::Data];

    /// The kind's name as manifests, metadata and flags write it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Tool => "tool",
            Self::Capsule => "capsule",
            Self::Driver => "driver",
            Self::Hook => "hook",
            Self::Agent => "agent",
            Self::Brain => "brain",
            Self::Data => "data",
        }
    }

    /// Whether tasks run it through `murmur:tool/run` (tools and drivers).
    #[must_use]
    pub const fn runs_as_tool(self) -> bool {
        matches!(self, Self::Tool | Self::Driver)
    }
}

impl std::fmt::Display for CapsuleKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for CapsuleKind {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|k| k.as_str() == text).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|k| k.as_str()).collect();
            format!("unknown kind `{text}` (one of: {})", names.join(", "))
        })
    }
}

/// What an artifact's content runs on: a WebAssembly component or a native program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    Wasm,
    Native,
}

/// An artifact's metadata, stored as its manifest's config blob.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactMeta {
    pub name: String,
    pub version: String,
    pub kind: CapsuleKind,
    /// Written `runtime` (the field name of the runtime specification).
    pub runtime: Platform,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub input_schema: Option<String>,
    #[serde(default)]
    pub output_schema: Option<String>,
}

impl ArtifactMeta {
    /// Checks every field's grammar and bound.
    pub fn validate(&self) -> anyhow::Result<()> {
        check_capsule_name(&self.name).map_err(|e| anyhow::anyhow!("name: {e}"))?;
        check_version(&self.version).map_err(|e| anyhow::anyhow!("version: {e}"))?;
        if self.tags.len() > ARTIFACT_TAGS_MAX {
            bail!("tags: at most {ARTIFACT_TAGS_MAX}");
        }
        for text in [Some(&self.description), self.input_schema.as_ref(), self.output_schema.as_ref()]
            .into_iter()
            .flatten()
        {
            if text.len() > ARTIFACT_TEXT_BYTES_MAX {
                bail!("description and schemas: at most {ARTIFACT_TEXT_BYTES_MAX} bytes each");
            }
        }
        Ok(())
    }
}

/// An artifact as the store holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub meta: ArtifactMeta,
    /// Digest of the OCI manifest (the artifact's identity in the store).
    pub manifest: Digest,
    /// Digest and size of the content (the component).
    pub content: Digest,
    pub size: u64,
    /// The content's chunk list (a blob), when the content is more than one chunk.
    pub chunk_list: Option<Digest>,
}

/// The publisher's signature of one artifact: a catalog naming it and listing its blobs.
pub fn sign_release(
    stored: &Stored,
    blobs: &[(Digest, u64)],
    key: &SecretKey,
    now: Millis,
) -> anyhow::Result<Envelope> {
    let catalog = Catalog::new(
        now,
        vec![CatalogArtifact {
            name: stored.meta.name.clone(),
            version: stored.meta.version.clone(),
            manifest: stored.manifest,
        }],
        blobs.iter().map(|&(digest, size)| CatalogBlob { size, digest }).collect(),
    );
    Ok(Signed::sign(catalog, key).context("cannot sign the artifact")?.into_envelope())
}
