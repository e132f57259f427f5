//! Air-gapped bundles: artifacts carried between networks as one tar file.
//!
//! A bundle is a tar archive holding an OCI image layout, with a signed catalog first:
//!
//! ```text
//! murmur-catalog.cbor        the catalog: a signed envelope (kind `catalog`) listing every
//!                            artifact (name, version, manifest digest) and every blob
//!                            (digest, size); signed by the publisher's key
//! oci-layout                 {"imageLayoutVersion":"1.0.0"}
//! index.json                 an OCI image index naming the artifacts (ref names NAME:VERSION)
//! blobs/sha256/<hex>         manifests, configs and content, each once
//! ```
//!
//! Import trusts nothing in the file but what the catalog's signature covers, and checks
//! that signature against the node's own `trust.publishers` before it reads anything else.
//! Every later entry must be a regular file at an expected path, seen once, of the size
//! the catalog declares (checked before its bytes are read); blobs are hashed as they
//! stream into a staging directory and moved into the store only when the whole bundle
//! has checked out, then the artifacts are indexed. A bundle that fails any check leaves
//! the store as it was. Import is idempotent, and re-running it after an interrupted one
//! converges (the staging directory is cleared first).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, bail};
use murmur_protocol::catalog::{CATALOG_BYTES_MAX, Catalog, CatalogArtifact, CatalogBlob, verify_catalog};
use murmur_protocol::{Digest, Millis, PublicKey, SecretKey, Signed};
use serde::Serialize;

use crate::artifact::Stored;
use crate::file::hash_reader;
use crate::oci::parse_artifact;
use crate::store::ArtifactStore;
use murmur_config::limits::BUNDLE_LAYOUT_FILE_BYTES_MAX;
use murmur_config::limits::{
    ARTIFACT_CONTENT_BYTES_MAX, ARTIFACT_METADATA_BYTES_MAX, ARTIFACT_SIGNATURE_BYTES_MAX,
};

/// The catalog's entry name; always the first entry.
pub const CATALOG_ENTRY: &str = "murmur-catalog.cbor";

/// What an export or import did, or what a verification found.
#[derive(Debug, Clone, Serialize)]
pub struct BundleReport {
    /// The publisher's key (`mur key show` prints it).
    pub publisher: String,
    /// `NAME@VERSION` of every artifact.
    pub artifacts: Vec<String>,
    /// Blobs in the bundle, and of those, how many this import wrote (the rest the store
    /// already had).
    pub blobs: usize,
    pub blobs_written: usize,
    pub bytes: u64,
}

/// How far a long operation is: bytes of blobs done, of `total`.
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

/// Writes `artifacts` from `store` to a bundle at `out`, signed with `key`. The file
/// appears only when complete (written beside it, then renamed). Every blob is verified
/// against its digest as it is copied.
pub fn export(
    store: &ArtifactStore,
    artifacts: &[Stored],
    key: &SecretKey,
    now: Millis,
    out: &Path,
    progress: Progress<'_>,
) -> anyhow::Result<BundleReport> {
    if artifacts.is_empty() {
        bail!("nothing to export: name at least one artifact");
    }
    let mut entries = Vec::new();
    let mut blobs = BTreeMap::new();
    for stored in artifacts {
        entries.push(CatalogArtifact {
            name: stored.meta.name.clone(),
            version: stored.meta.version.clone(),
            manifest: stored.manifest,
        });
        for (digest, size) in store.blobs_of(stored)? {
            blobs.insert(digest, size);
        }
    }
    let catalog = Catalog::new(
        now,
        entries,
        blobs.iter().map(|(digest, size)| CatalogBlob { size: *size, digest: *digest }).collect(),
    );
    let total = catalog.total_bytes();
    let report = BundleReport {
        publisher: key.public().to_string(),
        artifacts: catalog.artifacts.iter().map(|a| format!("{}@{}", a.name, a.version)).collect(),
        blobs: catalog.blobs.len(),
        blobs_written: catalog.blobs.len(),
        bytes: total,
    };
    let envelope = Signed::sign(catalog, key).context("cannot sign the catalog")?.envelope().encode();
    let index = store.index_json_for(artifacts)?;

    let dir = out.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = out.file_name().and_then(|n| n.to_str()).context("the output needs a file name")?;
    // A fresh name, created exclusively: never follows a link someone left in its place.
    let nonce: u64 = rand::random();
    let tmp = dir.join(format!(".{name}.partial-{}-{nonce:016x}", std::process::id()));
    let result = (|| {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        let mut tar = tar::Builder::new(BufWriter::with_capacity(1 << 20, file));
        append(&mut tar, CATALOG_ENTRY, envelope.len() as u64, &mut envelope.as_slice())?;
        let layout = br#"{"imageLayoutVersion":"1.0.0"}"#;
        append(&mut tar, "oci-layout", layout.len() as u64, &mut layout.as_slice())?;
        append(&mut tar, "index.json", index.len() as u64, &mut index.as_slice())?;
        let mut done = 0;
        for (digest, size) in &blobs {
            let mut reader = Verifying::new(store.open_blob(digest)?.take(*size), *digest, *size);
            append(&mut tar, &format!("blobs/sha256/{}", digest.hex()), *size, &mut reader)?;
            reader.finish()?;
            done += size;
            progress(done, total);
        }
        let mut writer = tar.into_inner()?;
        writer.flush()?;
        let file = writer.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        std::fs::rename(&tmp, out).with_context(|| format!("cannot write {}", out.display()))?;
        File::open(dir)?.sync_all()?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map(|()| report)
}

/// Checks a bundle completely without importing it: the catalog's signature against
/// `publishers`, every entry, every blob's bytes, every artifact's manifest.
pub fn verify(path: &Path, publishers: &[PublicKey], progress: Progress<'_>) -> anyhow::Result<BundleReport> {
    let mut small = BTreeMap::new();
    let catalog = walk(path, publishers, progress, &mut |blob, reader| keep_small(blob, reader, &mut small))?;
    check_artifacts(catalog.doc(), &small)?;
    Ok(report(&catalog, 0))
}

/// Imports a bundle into `store`: everything [`verify`] checks, with the blobs staged as
/// they are read, then moved into the store and the artifacts indexed, all under the
/// store's write lock. On any failure the store is left as it was.
pub fn import(
    store: &ArtifactStore,
    path: &Path,
    publishers: &[PublicKey],
    progress: Progress<'_>,
) -> anyhow::Result<BundleReport> {
    let lock = store.lock()?;
    let staging = store.staging(&lock)?;
    let result = (|| {
        let mut small = BTreeMap::new();
        let mut staged = Vec::new();
        let catalog = walk(path, publishers, progress, &mut |blob, reader| {
            let received = if blob.size <= ARTIFACT_METADATA_BYTES_MAX {
                // Small enough to be a manifest or config: kept to check the artifacts,
                // and staged from what was kept.
                keep_small(blob, reader, &mut small)?;
                store.receive_blob(&mut small[&blob.digest].as_slice(), &blob.digest, blob.size, &staging)?
            } else {
                store.receive_blob(reader, &blob.digest, blob.size, &staging)?
            };
            if let Some(file) = received {
                staged.push((file, blob.digest));
            }
            Ok(())
        })?;
        check_artifacts(catalog.doc(), &small)?;
        let artifacts: Vec<(String, String, Digest)> =
            catalog.doc().artifacts.iter().map(|a| (a.name.clone(), a.version.clone(), a.manifest)).collect();
        // Everything that could refuse the bundle is checked before the store changes: a
        // name@version already present as another artifact, the store's limit.
        store.check_index(&lock, &artifacts)?;
        store.adopt(&lock, &staged)?;
        store.index_artifacts(&lock, &artifacts)?;
        // The catalog is a publisher's signature of every artifact it names: kept beside
        // each manifest that has none yet (when small enough), so peers that trust the same
        // publisher can pull them from this node by name. After indexing: a refused import
        // leaves no signature behind; a signature the store already has is kept.
        let envelope = catalog.envelope();
        if envelope.encode().len() <= ARTIFACT_SIGNATURE_BYTES_MAX {
            for (_, _, manifest) in &artifacts {
                if store.signature(manifest).is_none() {
                    store.keep_signature(&lock, manifest, envelope)?;
                }
            }
        }
        Ok(report(&catalog, staged.len()))
    })();
    let _ = std::fs::remove_dir_all(&staging);
    result
}

fn report(catalog: &Signed<Catalog>, written: usize) -> BundleReport {
    let doc = catalog.doc();
    BundleReport {
        publisher: catalog.signer().to_string(),
        artifacts: doc.artifacts.iter().map(|a| format!("{}@{}", a.name, a.version)).collect(),
        blobs: doc.blobs.len(),
        blobs_written: written,
        bytes: doc.total_bytes(),
    }
}

/// Checks a blob's bytes; a small one (a manifest or config, perhaps) is kept whole in
/// `small`, to check the artifacts after.
fn keep_small(
    blob: &CatalogBlob,
    reader: &mut dyn Read,
    small: &mut BTreeMap<Digest, Vec<u8>>,
) -> anyhow::Result<()> {
    if blob.size > ARTIFACT_METADATA_BYTES_MAX {
        let (found, len) = hash_reader(reader, None)?;
        return check_blob(blob, found, len);
    }
    let mut bytes = Vec::with_capacity(usize::try_from(blob.size).unwrap_or(0));
    reader.take(blob.size + 1).read_to_end(&mut bytes)?;
    check_blob(blob, Digest::of(&bytes), bytes.len() as u64)?;
    small.insert(blob.digest, bytes);
    Ok(())
}

fn check_blob(blob: &CatalogBlob, found: Digest, len: u64) -> anyhow::Result<()> {
    if len != blob.size {
        bail!("blob {}: {len} bytes in the bundle, {} declared", blob.digest, blob.size);
    }
    if found != blob.digest {
        bail!("blob {}: its bytes hash to {found}, not to its name (tampered or corrupt)", blob.digest);
    }
    Ok(())
}

/// Every artifact's manifest and config are in the bundle, well formed, name the
/// artifact the catalog says, and reference only blobs the catalog lists with their sizes.
fn check_artifacts(catalog: &Catalog, small: &BTreeMap<Digest, Vec<u8>>) -> anyhow::Result<()> {
    for artifact in &catalog.artifacts {
        let label = format!("{}@{}", artifact.name, artifact.version);
        let manifest = small.get(&artifact.manifest).with_context(|| format!("{label}: manifest missing"))?;
        let (meta, blobs) = parse_artifact(manifest, &|d| small.get(d).cloned())
            .with_context(|| format!("{label}: manifest {}", artifact.manifest))?;
        if meta.name != artifact.name || meta.version != artifact.version {
            bail!("{label}: its manifest describes {}@{}", meta.name, meta.version);
        }
        for (digest, size) in blobs {
            match catalog.blob(&digest) {
                Some(blob) if blob.size == size => {}
                _ => bail!("{label}: blob {digest} ({size} bytes) is not in the catalog as such"),
            }
        }
    }
    Ok(())
}

/// Reads the bundle entry by entry: the catalog first (verified), then every entry checked
/// for type, path, uniqueness and size before `blob` reads it.
fn walk(
    path: &Path,
    publishers: &[PublicKey],
    progress: Progress<'_>,
    blob: &mut dyn FnMut(&CatalogBlob, &mut dyn Read) -> anyhow::Result<()>,
) -> anyhow::Result<Signed<Catalog>> {
    if publishers.is_empty() {
        bail!("this node trusts no publisher: add the publisher's key to trust.publishers in murnode.toml");
    }
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut archive = tar::Archive::new(BufReader::with_capacity(1 << 20, file));
    let mut entries = archive.entries().context("not a tar file")?;
    let catalog = {
        let mut first = entries.next().context("the bundle is empty")?.context("not a tar file")?;
        let name = entry_path(&first)?;
        if name != CATALOG_ENTRY {
            bail!("the first entry is `{name}`, not the catalog `{CATALOG_ENTRY}`");
        }
        regular(&first, &name)?;
        // `size()` is the entry's real length (a PAX record may override the header's).
        let size = first.size();
        let limit = (CATALOG_BYTES_MAX + 1024) as u64;
        if size > limit {
            bail!("the catalog declares {size} bytes, more than {limit}");
        }
        let mut bytes = Vec::new();
        (&mut first).take(limit).read_to_end(&mut bytes)?;
        verify_catalog(&bytes, publishers)
            .map_err(|e| anyhow::anyhow!("catalog refused ({}): {e}", e.reason()))?
    };
    let doc = catalog.doc();
    if let Some(big) = doc.blobs.iter().find(|b| b.size > ARTIFACT_CONTENT_BYTES_MAX) {
        bail!(
            "blob {} declares {} bytes, more than the {ARTIFACT_CONTENT_BYTES_MAX} a store accepts",
            big.digest,
            big.size
        );
    }
    let total = doc.total_bytes();
    let mut seen = BTreeSet::new();
    let mut done = 0;
    for entry in entries {
        let mut entry = entry.context("the tar file is damaged")?;
        let name = entry_path(&entry)?;
        regular(&entry, &name)?;
        if !seen.insert(name.clone()) {
            bail!("`{name}` appears twice");
        }
        let size = entry.size();
        match name.as_str() {
            "oci-layout" | "index.json" => {
                if size > BUNDLE_LAYOUT_FILE_BYTES_MAX {
                    bail!("`{name}` declares {size} bytes, more than {BUNDLE_LAYOUT_FILE_BYTES_MAX}");
                }
                let mut bytes = Vec::new();
                (&mut entry).take(BUNDLE_LAYOUT_FILE_BYTES_MAX).read_to_end(&mut bytes)?;
                let json: serde_json::Value =
                    serde_json::from_slice(&bytes).with_context(|| format!("`{name}` is not JSON"))?;
                if name == "oci-layout" && json["imageLayoutVersion"] != "1.0.0" {
                    bail!("`oci-layout` does not say imageLayoutVersion 1.0.0");
                }
            }
            _ => {
                let digest = name
                    .strip_prefix("blobs/sha256/")
                    .filter(|hex| hex.len() == 64)
                    .and_then(|hex| format!("sha256:{hex}").parse::<Digest>().ok())
                    .with_context(|| format!("unexpected entry `{name}`"))?;
                let declared =
                    doc.blob(&digest).with_context(|| format!("`{name}` is not in the catalog"))?;
                if size != declared.size {
                    bail!("`{name}` is {size} bytes in the tar header, the catalog says {}", declared.size);
                }
                blob(declared, &mut entry)?;
                done += size;
                progress(done, total);
            }
        }
    }
    end_of_archive(archive.into_inner())?;
    for name in ["oci-layout", "index.json"] {
        if !seen.contains(name) {
            bail!("`{name}` is missing: not an OCI image layout");
        }
    }
    if let Some(missing) =
        doc.blobs.iter().find(|b| !seen.contains(&format!("blobs/sha256/{}", b.digest.hex())))
    {
        bail!("blob {} is in the catalog but not in the bundle", missing.digest);
    }
    Ok(catalog)
}

/// What may follow the last entry: the rest of the end-of-archive marker (two zero blocks,
/// the first already read) and zero padding up to one 10 KiB tar record, as `tar` and `dd`
/// write. Anything else — data appended to an exported bundle, or a second archive — is
/// bytes the catalog's signature does not cover, so the bundle is refused.
fn end_of_archive(mut rest: BufReader<File>) -> anyhow::Result<()> {
    use std::io::Seek;
    const BLOCK: u64 = 512;
    const RECORD: u64 = 20 * BLOCK;
    // Where the last entry ended: the first zero block is behind us.
    let last = rest.stream_position()?.saturating_sub(BLOCK);
    let mut tail = Vec::new();
    (&mut rest).take(RECORD + 1).read_to_end(&mut tail)?;
    if tail.len() as u64 > RECORD || tail.iter().any(|b| *b != 0) {
        let size = rest.get_ref().metadata().map_or(0, |m| m.len());
        bail!(
            "the file goes on {} bytes past its last entry (from byte {last}), where only the \
             end-of-archive marker and zero padding belong: a bundle holds exactly what \
             `mur bundle export` wrote, so these bytes are refused; get the file again from its source",
            size.saturating_sub(last)
        );
    }
    if (tail.len() as u64) < BLOCK {
        bail!("the archive ends without its end-of-archive marker: the file is truncated");
    }
    Ok(())
}

/// The entry's path, which must be relative and plain (no `..`, no root, no `.`).
fn entry_path<R: Read>(entry: &tar::Entry<'_, R>) -> anyhow::Result<String> {
    let path: PathBuf = entry.path().context("an entry's path is not readable")?.into_owned();
    let text = path.to_str().context("an entry's path is not UTF-8")?.to_owned();
    if path.components().any(|c| !matches!(c, Component::Normal(_))) || text.contains('\\') {
        bail!("entry `{text}`: paths must be relative, without `..` or `.`");
    }
    Ok(text)
}

fn regular<R: Read>(entry: &tar::Entry<'_, R>, name: &str) -> anyhow::Result<()> {
    let kind = entry.header().entry_type();
    if !kind.is_file() {
        bail!("entry `{name}` is a {kind:?}, not a regular file (links and devices are refused)");
    }
    Ok(())
}

fn append(
    tar: &mut tar::Builder<BufWriter<File>>,
    name: &str,
    size: u64,
    data: &mut dyn Read,
) -> anyhow::Result<()> {
    let mut header = tar::Header::new_ustar();
    header.set_path(name)?;
    header.set_size(size);
    header.set_mode(0o644);
    header.set_mtime(0);
    header.set_entry_type(tar::EntryType::Regular);
    header.set_cksum();
    tar.append(&header, data).with_context(|| format!("cannot write `{name}`"))?;
    Ok(())
}

/// A reader that hashes what passes through, to check a blob as it is copied.
struct Verifying<R> {
    inner: R,
    hasher: sha2::Sha256,
    len: u64,
    digest: Digest,
    size: u64,
}

impl<R: Read> Verifying<R> {
    fn new(inner: R, digest: Digest, size: u64) -> Self {
        use sha2::Digest as _;
        Self { inner, hasher: sha2::Sha256::new(), len: 0, digest, size }
    }

    fn finish(self) -> anyhow::Result<()> {
        use sha2::Digest as _;
        let found = Digest(self.hasher.finalize().into());
        if self.len != self.size || found != self.digest {
            bail!("blob {} is corrupt in the store; nothing was exported", self.digest);
        }
        Ok(())
    }
}

impl<R: Read> Read for Verifying<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use sha2::Digest as _;
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
}
