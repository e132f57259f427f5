//! Files as the node handles them: written whole or not at all (a crash at any point leaves
//! either the old file or the new one), read with a bound checked before reading, and hashed
//! while read.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::Path;

use anyhow::Context;
use murmur_protocol::Digest;

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, written and
/// fsynced, renamed over `path`, then the directory fsynced so the rename is durable.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    write_atomic_with(path, bytes, None)
}

/// [`write_atomic`] for a file only its owner may read (mode 0600 from its creation, so it
/// is never readable by others, not even for an instant): configs that hold secrets.
pub fn write_atomic_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    write_atomic_with(path, bytes, Some(0o600))
}

fn write_atomic_with(path: &Path, bytes: &[u8], mode: Option<u32>) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().context("path has no parent directory")?;
    create_dir_all_durable(dir)?;
    let name = path.file_name().and_then(|n| n.to_str()).context("path has no file name")?;
    let tmp = dir.join(format!(".{name}.tmp-{}-{}", std::process::id(), unique()));
    let result = (|| {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        if let Some(mode) = mode {
            options.mode(mode);
        }
        let mut file = options.open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.with_context(|| format!("cannot write {}", path.display()))
}

/// Creates `dir` and whatever parents it lacks, as `fs::create_dir_all` does, and makes
/// each creation durable: the parent of every directory made is fsynced after it. Without
/// that a power loss may take away a new directory with every synced file in it (an entry
/// in a directory is on disk only once the directory is synced).
pub fn create_dir_all_durable(dir: &Path) -> anyhow::Result<()> {
    create_dirs(dir, None)
}

/// [`create_dir_all_durable`], each directory made with `mode` (e.g. 0700).
pub fn create_dir_all_durable_mode(dir: &Path, mode: u32) -> anyhow::Result<()> {
    create_dirs(dir, Some(mode))
}

fn create_dirs(dir: &Path, mode: Option<u32>) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if dir.is_dir() {
        return Ok(());
    }
    let parent = match dir.parent() {
        Some(parent) if parent.as_os_str().is_empty() => Path::new("."),
        Some(parent) => parent,
        None => return Ok(()), // the root exists
    };
    create_dirs(parent, mode)?;
    let mut builder = fs::DirBuilder::new();
    if let Some(mode) = mode {
        builder.mode(mode);
    }
    match builder.create(dir) {
        Ok(()) => sync_dir(parent),
        // Made meanwhile by someone else, who syncs it.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot create {}", dir.display())),
    }
}

/// Fsyncs the directory `dir`: the entries made or renamed in it so far are durable.
pub fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot sync directory {}", dir.display()))
}

/// Fsyncs the directory holding `path`, for a file just created there: its name is durable.
pub fn sync_parent(path: &Path) -> anyhow::Result<()> {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => sync_dir(parent),
        _ => sync_dir(Path::new(".")),
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Reads a whole file, refusing one larger than `len_max` before reading it.
pub fn read_bounded(path: &Path, len_max: usize) -> anyhow::Result<Vec<u8>> {
    let len = std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?.len();
    if len > len_max as u64 {
        anyhow::bail!("{} is {len} bytes, more than the {len_max} a signed document can be", path.display());
    }
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

/// Reads `reader` to its end in 64 KiB pieces, hashing, and copying to `out` when given.
/// Returns the digest and the length.
pub fn hash_reader(reader: &mut dyn Read, mut out: Option<&mut dyn Write>) -> anyhow::Result<(Digest, u64)> {
    use sha2::Digest as _;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut len = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err.into()),
        };
        hasher.update(&buf[..n]);
        if let Some(out) = out.as_deref_mut() {
            out.write_all(&buf[..n])?;
        }
        len += n as u64;
    }
    Ok((Digest(hasher.finalize().into()), len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_whole_files_and_leaves_no_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b.json");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        let names: Vec<_> =
            fs::read_dir(dir.path().join("a")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["b.json"]);
    }
}
