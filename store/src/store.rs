//! The node's artifact store: an OCI image layout under the data directory.
//!
//! ```text
//! DIR/store/oci-layout                  {"imageLayoutVersion":"1.0.0"}
//! DIR/store/index.json                  an OCI image index: one manifest per name@version
//! DIR/store/blobs/sha256/<64 hex>       manifests, configs and content, by SHA-256
//! ```
//!
//! The documents themselves, and the checks of those arriving from peers, are
//! [`crate::oci`]'s. Every write goes to a temporary file, is fsynced and renamed (see
//! [`crate::file`]), blobs before the index that names them, so a crash leaves either the old
//! store or the new one. Blobs are verified against their digest whenever they are read.
//! Writers are serialized within a process and, through a lock on `DIR/store/.lock`, across
//! processes (`mur artifact add` and `mur bundle import` next to a running node).

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use anyhow::{Context, bail};
use murmur_protocol::artifact::{CHUNK_BYTES, ChunkList};
use murmur_protocol::{Digest, Envelope, Millis, SecretKey};

use crate::artifact::{ArtifactMeta, CapsuleKind, Stored, sign_release};
use crate::file::{hash_reader, write_atomic};
use crate::oci::{
    ARTIFACT_TYPE, CHUNKS_MEDIA_TYPE, CONFIG_MEDIA_TYPE, DATA_MEDIA_TYPE, Descriptor, INDEX_MEDIA_TYPE,
    Index, MANIFEST_MEDIA_TYPE, Manifest, REF_NAME, WASM_MEDIA_TYPE, clone_descriptor, descriptor, named,
};
use murmur_config::limits::{
    ARTIFACT_CONTENT_BYTES_MAX, ARTIFACT_METADATA_BYTES_MAX, ARTIFACT_SIGNATURE_BYTES_MAX,
    STORE_ARTIFACTS_MAX,
};

/// Proof that the store's write lock is held (see [`ArtifactStore::lock`]).
#[derive(Debug)]
pub struct WriteGuard<'a> {
    _guard: MutexGuard<'a, ()>,
    _file: File,
}

/// The store. Writers are serialized; readers see a consistent index.
#[derive(Debug)]
pub struct ArtifactStore {
    root: PathBuf,
    write: Mutex<()>,
}

impl ArtifactStore {
    /// Opens (creating if needed) the store at `root`.
    pub fn open(root: &Path) -> anyhow::Result<Self> {
        crate::file::create_dir_all_durable(&root.join("blobs/sha256"))
            .with_context(|| format!("cannot create {}", root.display()))?;
        let layout = root.join("oci-layout");
        if !layout.exists() {
            write_atomic(&layout, br#"{"imageLayoutVersion":"1.0.0"}"#)?;
        }
        let store = Self { root: root.to_path_buf(), write: Mutex::new(()) };
        if !store.index_path().exists() {
            store.write_index(&Index::default())?;
        }
        Ok(store)
    }

    /// Where the layout lives.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Adds `content` as artifact `meta`, replacing an existing name@version. Returns it.
    /// Content of more than one chunk gets a chunk list (a second layer), so peers can pull
    /// it in verified pieces. With `publisher`, the manifest is signed: a catalog naming
    /// this name@version and its blobs, kept beside the manifest and served with it.
    pub fn add(
        &self,
        meta: &ArtifactMeta,
        content: &[u8],
        publisher: Option<(&SecretKey, Millis)>,
    ) -> anyhow::Result<Stored> {
        meta.validate()?;
        if content.len() as u64 > ARTIFACT_CONTENT_BYTES_MAX {
            bail!(
                "content is {} bytes, more than the {ARTIFACT_CONTENT_BYTES_MAX} a store accepts",
                content.len()
            );
        }
        let _lock = self.write_lock()?;
        let content_digest = self.put_blob(content)?;
        let config = serde_json::to_vec(meta)?;
        let config_digest = self.put_blob(&config)?;
        let media_type = if meta.kind == CapsuleKind::Data { DATA_MEDIA_TYPE } else { WASM_MEDIA_TYPE };
        let mut layers = vec![descriptor(media_type, content_digest, content.len() as u64)];
        let mut chunk_list = None;
        if content.len() as u64 > CHUNK_BYTES {
            let list = ChunkList::of(content, CHUNK_BYTES).encode();
            let digest = self.put_blob(&list)?;
            layers.push(descriptor(CHUNKS_MEDIA_TYPE, digest, list.len() as u64));
            chunk_list = Some(digest);
        }
        let manifest = Manifest {
            schema_version: 2,
            media_type: MANIFEST_MEDIA_TYPE.into(),
            artifact_type: ARTIFACT_TYPE.into(),
            config: descriptor(CONFIG_MEDIA_TYPE, config_digest, config.len() as u64),
            layers,
        };
        let manifest_bytes = serde_json::to_vec(&manifest)?;
        let manifest_digest = self.put_blob(&manifest_bytes)?;
        let stored = Stored {
            meta: meta.clone(),
            manifest: manifest_digest,
            content: content_digest,
            size: content.len() as u64,
            chunk_list,
        };
        if let Some((key, now)) = publisher {
            let blobs = self.blobs_of(&stored)?;
            let envelope = sign_release(&stored, &blobs, key, now)?;
            self.put_signature(&stored.manifest, &envelope)?;
        }
        self.index_entry(meta, manifest_digest, manifest_bytes.len() as u64)?;
        Ok(stored)
    }

    /// The publisher's signed catalog naming `manifest`, when the store has one.
    #[must_use]
    pub fn signature(&self, manifest: &Digest) -> Option<Envelope> {
        let bytes = std::fs::read(self.signature_path(manifest)).ok()?;
        if bytes.len() > ARTIFACT_SIGNATURE_BYTES_MAX {
            return None;
        }
        Envelope::decode(&bytes).ok()
    }

    /// Keeps `envelope` (a catalog naming `manifest`) beside the manifest. The caller has
    /// checked it; the write lock is held.
    fn put_signature(&self, manifest: &Digest, envelope: &Envelope) -> anyhow::Result<()> {
        self.put_signature_bytes(manifest, &signature_bytes(envelope)?)
    }

    /// Writes a signature already checked against its bound.
    fn put_signature_bytes(&self, manifest: &Digest, bytes: &[u8]) -> anyhow::Result<()> {
        crate::file::create_dir_all_durable(&self.root.join("signatures"))?;
        write_atomic(&self.signature_path(manifest), bytes)
    }

    /// Commits an artifact pulled from peers: `blobs` (manifest, config, chunk list: bytes
    /// already verified against their digests), the content (already in the store, or the
    /// verified and fsynced file `content_file`), the publisher's `signature` if it came
    /// with one; then names it `name@version`. Refuses, changing nothing, to re-point a
    /// name@version the store has as another artifact.
    pub fn commit_pulled(
        &self,
        (name, version, manifest): (&str, &str, Digest),
        blobs: &[(Digest, Vec<u8>)],
        content: (Digest, Option<&Path>),
        signature: Option<&Envelope>,
    ) -> anyhow::Result<Stored> {
        let lock = self.lock()?;
        let artifact = [(name.to_owned(), version.to_owned(), manifest)];
        self.check_index(&lock, &artifact)?;
        for (digest, bytes) in blobs {
            anyhow::ensure!(Digest::of(bytes) == *digest, "blob {digest}: its bytes hash to something else");
        }
        // Checked before anything is written.
        let signature = signature.map(signature_bytes).transpose()?;
        if let (digest, Some(file)) = content {
            std::fs::rename(file, self.blob_path(&digest))
                .with_context(|| format!("cannot move blob {digest} into the store"))?;
        }
        // The manifest last: a crash before the index write leaves only unnamed blobs. A
        // copy already in the store that no longer matches its digest is replaced.
        let ordered =
            blobs.iter().filter(|(d, _)| *d != manifest).chain(blobs.iter().filter(|(d, _)| *d == manifest));
        for (digest, bytes) in ordered {
            if self.read_blob(digest, bytes.len() as u64).is_err() {
                write_atomic(&self.blob_path(digest), bytes)?;
            }
        }
        File::open(self.root.join("blobs/sha256"))?.sync_all()?;
        if let Some(bytes) = &signature {
            self.put_signature_bytes(&manifest, bytes)?;
        }
        let mut stored = self.index_artifacts(&lock, &artifact)?;
        stored.pop().context("nothing was indexed")
    }

    /// A directory for pulls in progress (kept across restarts, so a pull resumes).
    pub fn pulls_dir(&self) -> anyhow::Result<PathBuf> {
        let dir = self.root.join(".pull");
        // Durable: a pull resumes from what it fsynced here, after a power loss too.
        crate::file::create_dir_all_durable(&dir).context("cannot create the store's pull directory")?;
        Ok(dir)
    }

    /// Records a signature received with a pulled or imported manifest.
    pub fn keep_signature(
        &self,
        _lock: &WriteGuard<'_>,
        manifest: &Digest,
        envelope: &Envelope,
    ) -> anyhow::Result<()> {
        self.put_signature(manifest, envelope)
    }

    fn signature_path(&self, manifest: &Digest) -> PathBuf {
        self.root.join("signatures").join(manifest.hex())
    }

    /// Checks that `artifacts` (name, version, manifest digest) can be indexed: none would
    /// re-point a name@version the store already has at another manifest (remove it first),
    /// and the store's limit holds. Changes nothing.
    pub fn check_index(
        &self,
        _lock: &WriteGuard<'_>,
        artifacts: &[(String, String, Digest)],
    ) -> anyhow::Result<()> {
        let index = self.read_index()?;
        let mut new = 0;
        for (name, version, manifest) in artifacts {
            let reference = format!("{name}:{version}");
            match index.manifests.iter().find(|d| d.annotations.get(REF_NAME) == Some(&reference)) {
                Some(existing) if existing.digest != manifest.to_string() => bail!(
                    "the store already has {name}@{version} as another artifact (manifest {}); `mur artifact rm {name}` first to replace it",
                    existing.digest
                ),
                Some(_) => {}
                None => new += 1,
            }
        }
        if index.manifests.len() + new > STORE_ARTIFACTS_MAX {
            bail!(
                "the store holds {} artifacts; {new} more would pass its limit of {STORE_ARTIFACTS_MAX}",
                index.manifests.len()
            );
        }
        Ok(())
    }

    /// Names each manifest (already stored, with every blob it references) as its
    /// name@version, in one index write. Each must be a Murmur artifact whose metadata says
    /// that name and version, with its content present at its size (the bytes were
    /// verified when they were received, and are on every read).
    pub fn index_artifacts(
        &self,
        _lock: &WriteGuard<'_>,
        artifacts: &[(String, String, Digest)],
    ) -> anyhow::Result<Vec<Stored>> {
        let mut index = self.read_index()?;
        let mut stored_all = Vec::new();
        for (name, version, manifest) in artifacts {
            let size = self
                .blob_size(manifest)
                .with_context(|| format!("manifest {manifest} is not in the store"))?;
            let stored = self.load(&descriptor(MANIFEST_MEDIA_TYPE, *manifest, size))?;
            stored.meta.validate().with_context(|| format!("manifest {manifest}: its metadata"))?;
            if stored.meta.name != *name || stored.meta.version != *version {
                bail!(
                    "manifest {manifest} describes {}@{}, not {name}@{version}",
                    stored.meta.name,
                    stored.meta.version
                );
            }
            if stored.size > ARTIFACT_CONTENT_BYTES_MAX
                || self.blob_size(&stored.content) != Some(stored.size)
            {
                bail!(
                    "{name}@{version}: content {} is not in the store at {} bytes",
                    stored.content,
                    stored.size
                );
            }
            index.name(&stored.meta, *manifest, size);
            stored_all.push(stored);
        }
        if index.manifests.len() > STORE_ARTIFACTS_MAX {
            bail!(
                "the store would hold {} artifacts, more than its limit of {STORE_ARTIFACTS_MAX}",
                index.manifests.len()
            );
        }
        self.write_index(&index)?;
        Ok(stored_all)
    }

    /// Writes the index with `meta`'s reference pointing at `manifest` (the write lock held).
    fn index_entry(&self, meta: &ArtifactMeta, manifest: Digest, size: u64) -> anyhow::Result<()> {
        let mut index = self.read_index()?;
        index.name(meta, manifest, size);
        if index.manifests.len() > STORE_ARTIFACTS_MAX {
            bail!("the store holds {STORE_ARTIFACTS_MAX} artifacts, its limit");
        }
        self.write_index(&index)
    }

    /// The blobs an artifact consists of, manifest first: (digest, size) of the manifest,
    /// its config and its content.
    pub fn blobs_of(&self, stored: &Stored) -> anyhow::Result<Vec<(Digest, u64)>> {
        let manifest_size = self.blob_size(&stored.manifest).context("manifest missing")?;
        let manifest: Manifest =
            serde_json::from_slice(&self.read_blob(&stored.manifest, ARTIFACT_METADATA_BYTES_MAX)?)?;
        let mut blobs =
            vec![(stored.manifest, manifest_size), (manifest.config.digest.parse()?, manifest.config.size)];
        for layer in &manifest.layers {
            blobs.push((layer.digest.parse()?, layer.size));
        }
        Ok(blobs)
    }

    /// The OCI index (`index.json`) naming exactly `artifacts`, as a layout holding only
    /// them (a bundle) writes it.
    pub fn index_json_for(&self, artifacts: &[Stored]) -> anyhow::Result<Vec<u8>> {
        let mut manifests = Vec::new();
        for stored in artifacts {
            let size = self.blob_size(&stored.manifest).context("manifest missing")?;
            manifests.push(named(&stored.meta, stored.manifest, size));
        }
        let index = Index { schema_version: 2, media_type: INDEX_MEDIA_TYPE.into(), manifests };
        Ok(serde_json::to_vec_pretty(&index)?)
    }

    /// The size of blob `digest`, if the store has it.
    #[must_use]
    pub fn blob_size(&self, digest: &Digest) -> Option<u64> {
        std::fs::metadata(self.blob_path(digest)).ok().filter(std::fs::Metadata::is_file).map(|m| m.len())
    }

    /// Opens blob `digest` for reading (the caller verifies what it reads).
    pub fn open_blob(&self, digest: &Digest) -> anyhow::Result<File> {
        File::open(self.blob_path(digest)).with_context(|| format!("blob {digest} is missing from the store"))
    }

    /// Hashes blob `digest` on disk, in pieces, and checks it is `size` bytes of it.
    pub fn verify_blob(&self, digest: &Digest, size: u64) -> anyhow::Result<()> {
        let mut file = self.open_blob(digest)?;
        let (found, len) = hash_reader(&mut file, None)?;
        if len != size || found != *digest {
            bail!("blob {digest} is corrupt in the store ({len} bytes hashing to {found})");
        }
        Ok(())
    }

    /// Receives the next `size` bytes of `reader` as blob `digest`: hashed as they stream
    /// into a new file in `staging` (same file system as the store), fsynced, and kept only
    /// when the bytes match. Returns the staged file, or `None` when the store already has
    /// a good copy of the blob (the bytes are still read and checked; a damaged copy is
    /// replaced). [`ArtifactStore::adopt`] moves staged blobs into the store.
    pub fn receive_blob(
        &self,
        reader: &mut dyn Read,
        digest: &Digest,
        size: u64,
        staging: &Path,
    ) -> anyhow::Result<Option<PathBuf>> {
        if self.blob_size(digest) == Some(size) && self.verify_blob(digest, size).is_ok() {
            let (found, len) = hash_reader(&mut reader.take(size), None)?;
            if len != size || found != *digest {
                bail!("blob {digest}: its bytes hash to {found} ({len} bytes), not to its name");
            }
            return Ok(None);
        }
        let path = staging.join(digest.hex());
        let result = (|| {
            let mut file = OpenOptions::new().write(true).create_new(true).open(&path)?;
            let (found, len) = hash_reader(&mut reader.take(size), Some(&mut file))?;
            if len != size {
                bail!("blob {digest}: {len} bytes arrived, {size} were declared");
            }
            if found != *digest {
                bail!("blob {digest}: its bytes hash to {found}, not to its name");
            }
            file.sync_all()?;
            Ok(())
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&path);
        }
        result.map(|()| Some(path))
    }

    /// Moves blobs staged by [`ArtifactStore::receive_blob`] into the store (each was
    /// verified and fsynced), then fsyncs the blob directory.
    pub fn adopt(&self, _lock: &WriteGuard<'_>, staged: &[(PathBuf, Digest)]) -> anyhow::Result<()> {
        let dir = self.root.join("blobs/sha256");
        for (path, digest) in staged {
            std::fs::rename(path, self.blob_path(digest))
                .with_context(|| format!("cannot move blob {digest} into the store"))?;
        }
        File::open(&dir)?.sync_all()?;
        Ok(())
    }

    /// A directory for staging blobs, emptied of whatever an interrupted import left.
    pub fn staging(&self, _lock: &WriteGuard<'_>) -> anyhow::Result<PathBuf> {
        let dir = self.root.join(".import");
        if dir.exists() {
            std::fs::remove_dir_all(&dir).context("cannot clear the store's staging directory")?;
        }
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    /// The write lock: this process's writers, then other processes' (`store/.lock`). Held
    /// by whoever changes the store in several steps (a bundle import).
    pub fn lock(&self) -> anyhow::Result<WriteGuard<'_>> {
        self.write_lock()
    }

    fn write_lock(&self) -> anyhow::Result<WriteGuard<'_>> {
        let guard = self.write.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.root.join(".lock"))
            .context("cannot open the store's lock file")?;
        file.lock().context("cannot lock the store")?;
        Ok(WriteGuard { _guard: guard, _file: file })
    }

    /// Every artifact, sorted by name then version.
    pub fn list(&self) -> anyhow::Result<Vec<Stored>> {
        self.read_index()?.manifests.iter().map(|d| self.load(d)).collect()
    }

    /// The artifact `name` at `version`, or the highest version when `version` is `None`
    /// (compared as dotted numbers where possible).
    pub fn find(&self, name: &str, version: Option<&str>) -> anyhow::Result<Option<Stored>> {
        let mut matching: Vec<Stored> = self.list()?.into_iter().filter(|s| s.meta.name == name).collect();
        if let Some(version) = version {
            return Ok(matching.into_iter().find(|s| s.meta.version == version));
        }
        matching.sort_by_key(|s| version_key(&s.meta.version));
        Ok(matching.pop())
    }

    /// The artifact whose content or manifest has `digest`.
    pub fn by_digest(&self, digest: &Digest) -> anyhow::Result<Option<Stored>> {
        Ok(self.list()?.into_iter().find(|s| s.content == *digest || s.manifest == *digest))
    }

    /// Artifacts whose name, tags or description contain `query` (case-insensitive).
    pub fn search(&self, query: &str) -> anyhow::Result<Vec<Stored>> {
        let needle = query.trim().to_lowercase();
        if needle.is_empty() {
            bail!("search needs a non-empty query");
        }
        Ok(self
            .list()?
            .into_iter()
            .filter(|s| {
                s.meta.name.contains(&needle)
                    || s.meta.tags.iter().any(|t| t.to_lowercase().contains(&needle))
                    || s.meta.description.to_lowercase().contains(&needle)
            })
            .collect())
    }

    /// Removes every version of `name` from the index; unreferenced blobs are deleted.
    /// Returns whether anything was removed.
    pub fn remove(&self, name: &str) -> anyhow::Result<bool> {
        let _lock = self.write_lock()?;
        let mut index = self.read_index()?;
        let before = index.manifests.len();
        let prefix = format!("{name}:");
        index.manifests.retain(|d| !d.annotations.get(REF_NAME).is_some_and(|r| r.starts_with(&prefix)));
        if index.manifests.len() == before {
            return Ok(false);
        }
        self.write_index(&index)?;
        self.collect_garbage(&index)?;
        Ok(true)
    }

    /// Reads a blob, verifying it against its digest.
    pub fn read_blob(&self, digest: &Digest, len_max: u64) -> anyhow::Result<Vec<u8>> {
        let path = self.blob_path(digest);
        let len = std::fs::metadata(&path)
            .with_context(|| format!("blob {digest} is missing from the store"))?
            .len();
        if len > len_max {
            bail!("blob {digest} is {len} bytes, more than {len_max}");
        }
        let bytes = std::fs::read(&path)?;
        if Digest::of(&bytes) != *digest {
            bail!("blob {digest} is corrupt: its bytes hash to {}", Digest::of(&bytes));
        }
        Ok(bytes)
    }

    /// Up to `len` bytes of blob `digest` from `offset` (fewer at its end), as they are on
    /// disk; `None` when the store lacks the blob. For serving chunks to peers, who verify
    /// them.
    pub fn read_range(&self, digest: &Digest, offset: u64, len: u64) -> anyhow::Result<Option<Vec<u8>>> {
        use std::io::{Seek, SeekFrom};
        let Ok(mut file) = File::open(self.blob_path(digest)) else { return Ok(None) };
        let size = file.metadata()?.len();
        if offset >= size && !(offset == 0 && size == 0) {
            bail!("offset {offset} is beyond blob {digest} ({size} bytes)");
        }
        let len = len.min(size - offset);
        // Read into spare capacity (no zeroing first): a served chunk is read once.
        let mut data = Vec::with_capacity(usize::try_from(len)?);
        file.seek(SeekFrom::Start(offset))?;
        file.take(len).read_to_end(&mut data)?;
        anyhow::ensure!(data.len() as u64 == len, "blob {digest} ended early");
        Ok(Some(data))
    }

    /// The content of an artifact, verified.
    pub fn content(&self, stored: &Stored) -> anyhow::Result<Vec<u8>> {
        self.read_blob(&stored.content, ARTIFACT_CONTENT_BYTES_MAX)
    }

    fn load(&self, entry: &Descriptor) -> anyhow::Result<Stored> {
        let manifest_digest: Digest = entry.digest.parse()?;
        let manifest: Manifest =
            serde_json::from_slice(&self.read_blob(&manifest_digest, ARTIFACT_METADATA_BYTES_MAX)?)
                .with_context(|| format!("manifest {manifest_digest} is not an artifact manifest"))?;
        let config_digest: Digest = manifest.config.digest.parse()?;
        let meta: ArtifactMeta =
            serde_json::from_slice(&self.read_blob(&config_digest, ARTIFACT_METADATA_BYTES_MAX)?)
                .with_context(|| format!("config {config_digest} is not artifact metadata"))?;
        let layer = manifest.layers.first().context("manifest has no content layer")?;
        let chunk_list = match manifest.layers.get(1) {
            Some(chunks) if chunks.media_type == CHUNKS_MEDIA_TYPE => Some(chunks.digest.parse()?),
            _ => None,
        };
        Ok(Stored {
            meta,
            manifest: manifest_digest,
            content: layer.digest.parse()?,
            size: layer.size,
            chunk_list,
        })
    }

    fn put_blob(&self, bytes: &[u8]) -> anyhow::Result<Digest> {
        let digest = Digest::of(bytes);
        let path = self.blob_path(&digest);
        if !path.exists() {
            write_atomic(&path, bytes)?;
        }
        Ok(digest)
    }

    fn blob_path(&self, digest: &Digest) -> PathBuf {
        self.root.join("blobs/sha256").join(digest.hex())
    }

    fn index_path(&self) -> PathBuf {
        self.root.join("index.json")
    }

    fn read_index(&self) -> anyhow::Result<Index> {
        let bytes = std::fs::read(self.index_path()).context("cannot read the store index")?;
        serde_json::from_slice(&bytes).context("the store index is not valid JSON")
    }

    /// Writes the index, its entries sorted by reference.
    fn write_index(&self, index: &Index) -> anyhow::Result<()> {
        let mut manifests: Vec<Descriptor> = index.manifests.iter().map(clone_descriptor).collect();
        manifests.sort_by(|a, b| a.annotations.get(REF_NAME).cmp(&b.annotations.get(REF_NAME)));
        let index = Index { schema_version: 2, media_type: INDEX_MEDIA_TYPE.into(), manifests };
        write_atomic(&self.index_path(), &serde_json::to_vec_pretty(&index)?)
    }

    /// Deletes blobs no indexed manifest references (after the index no longer names them).
    fn collect_garbage(&self, index: &Index) -> anyhow::Result<()> {
        let mut live = BTreeSet::new();
        for entry in &index.manifests {
            let digest: Digest = entry.digest.parse()?;
            live.insert(digest.hex());
            let manifest: Manifest =
                serde_json::from_slice(&self.read_blob(&digest, ARTIFACT_METADATA_BYTES_MAX)?)?;
            live.insert(manifest.config.digest.trim_start_matches("sha256:").to_owned());
            for layer in &manifest.layers {
                live.insert(layer.digest.trim_start_matches("sha256:").to_owned());
            }
        }
        for entry in std::fs::read_dir(self.root.join("blobs/sha256"))? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.len() == 64 && !live.contains(&name) {
                std::fs::remove_file(entry.path())?;
            }
        }
        if let Ok(signatures) = std::fs::read_dir(self.root.join("signatures")) {
            for entry in signatures {
                let entry = entry?;
                if !live.contains(&*entry.file_name().to_string_lossy()) {
                    std::fs::remove_file(entry.path())?;
                }
            }
        }
        Ok(())
    }
}

/// Orders versions by their numeric dotted parts, then as text.
fn version_key(version: &str) -> (Vec<u64>, String) {
    let numbers = version.split(['.', '-', '+']).map_while(|p| p.parse().ok()).collect();
    (numbers, version.to_owned())
}

/// A publisher's signature as the store keeps it, refused past its bound.
fn signature_bytes(envelope: &Envelope) -> anyhow::Result<Vec<u8>> {
    let bytes = envelope.encode();
    anyhow::ensure!(
        bytes.len() <= ARTIFACT_SIGNATURE_BYTES_MAX,
        "the publisher's signature is {} bytes, more than the {ARTIFACT_SIGNATURE_BYTES_MAX} a store keeps",
        bytes.len()
    );
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact::{CapsuleKind, Platform};

    impl ArtifactStore {
        fn add_plain(&self, meta: &ArtifactMeta, content: &[u8]) -> anyhow::Result<Stored> {
            self.add(meta, content, None)
        }
    }

    fn meta(name: &str, version: &str) -> ArtifactMeta {
        ArtifactMeta {
            name: name.into(),
            version: version.into(),
            kind: CapsuleKind::Tool,
            runtime: Platform::Wasm,
            description: if name == "wordcount" { "counts words".into() } else { "echoes input".into() },
            tags: vec!["text".into()],
            input_schema: None,
            output_schema: None,
        }
    }

    #[test]
    fn add_list_find_search_remove() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::open(dir.path()).unwrap();
        let a = store.add_plain(&meta("wordcount", "1.0.0"), b"wasm-1").unwrap();
        store.add_plain(&meta("wordcount", "1.10.0"), b"wasm-2").unwrap();
        store.add_plain(&meta("echo", "0.1.0"), b"wasm-3").unwrap();
        assert_eq!(store.list().unwrap().len(), 3);
        assert_eq!(store.find("wordcount", None).unwrap().unwrap().meta.version, "1.10.0");
        assert_eq!(store.find("wordcount", Some("1.0.0")).unwrap().unwrap(), a);
        assert_eq!(store.content(&a).unwrap(), b"wasm-1");
        assert_eq!(store.search("WORDS").unwrap().len(), 2);
        assert!(store.search(" ").is_err());
        assert!(store.remove("wordcount").unwrap());
        assert!(!store.remove("wordcount").unwrap());
        assert_eq!(store.list().unwrap().len(), 1);
        assert!(store.read_blob(&a.content, 100).is_err(), "unreferenced blobs are collected");
        assert!(dir.path().join("oci-layout").exists());
        let index: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("index.json")).unwrap()).unwrap();
        assert_eq!(index["manifests"][0]["annotations"][REF_NAME], "echo:0.1.0");
    }

    #[test]
    fn corrupt_blobs_are_refused_on_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::open(dir.path()).unwrap();
        let a = store.add_plain(&meta("echo", "0.1.0"), b"wasm").unwrap();
        std::fs::write(dir.path().join("blobs/sha256").join(a.content.hex()), b"evil").unwrap();
        assert!(store.content(&a).unwrap_err().to_string().contains("corrupt"));
    }

    #[test]
    fn a_pulled_artifact_with_an_oversized_signature_is_refused_and_nothing_is_written() {
        let (from, to) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let source = ArtifactStore::open(from.path()).unwrap();
        let a = source.add_plain(&meta("echo", "0.1.0"), b"wasm").unwrap();
        let blobs: Vec<(Digest, Vec<u8>)> = source
            .blobs_of(&a)
            .unwrap()
            .into_iter()
            .map(|(d, size)| (d, source.read_blob(&d, size).unwrap()))
            .collect();
        // A genuine release signature, padded with blobs past the bound.
        let mut padding = source.blobs_of(&a).unwrap();
        padding.extend((0..400u32).map(|i| (Digest::of(&i.to_le_bytes()), 1)));
        let key = SecretKey::from_seed([3; 32]);
        let large = sign_release(&a, &padding, &key, Millis(1)).unwrap();
        let small = sign_release(&a, &source.blobs_of(&a).unwrap(), &key, Millis(1)).unwrap();

        let target = ArtifactStore::open(to.path()).unwrap();
        let err = target
            .commit_pulled(("echo", "0.1.0", a.manifest), &blobs, (a.content, None), Some(&large))
            .unwrap_err();
        assert!(err.to_string().contains("more than the"), "{err}");
        assert!(target.list().unwrap().is_empty());
        assert!(target.read_blob(&a.manifest, 1 << 16).is_err(), "no blob was written");
        assert!(target.signature(&a.manifest).is_none());

        target.commit_pulled(("echo", "0.1.0", a.manifest), &blobs, (a.content, None), Some(&small)).unwrap();
        assert_eq!(target.signature(&a.manifest), Some(small));
    }

    #[test]
    fn invalid_metadata_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::open(dir.path()).unwrap();
        assert!(store.add_plain(&meta("Bad Name", "1"), b"x").is_err());
        assert!(store.list().unwrap().is_empty());
    }
}
