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
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
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
