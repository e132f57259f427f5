//! Key files: a 32-byte ed25519 seed, readable by its owner only.
//!
//! Node keys and authority keys use the same format. A key file is created with mode 0600
//! and never overwritten; reading one that others can read, or that is not exactly 32
//! bytes, is an error that says how to fix it.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use anyhow::{Context, bail};
use murmur_protocol::SecretKey;

/// Size of a key file: one ed25519 seed.
pub const KEY_FILE_BYTES: usize = 32;

/// Reads a key file, refusing one with loose permissions or the wrong size.
pub fn read(path: &Path) -> anyhow::Result<SecretKey> {
    let meta = fs::metadata(path).with_context(|| format!("cannot read key file {}", path.display()))?;
    if !meta.is_file() {
        bail!("key file {} is not a regular file", path.display());
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        bail!(
            "key file {} is readable by others (mode {mode:04o}); run `chmod 600 {}`",
            path.display(),
            path.display()
        );
    }
    if meta.len() != KEY_FILE_BYTES as u64 {
        bail!(
            "key file {} is {} bytes; a murmur key file holds exactly {KEY_FILE_BYTES} bytes",
            path.display(),
            meta.len()
        );
    }
    let bytes = fs::read(path).with_context(|| format!("cannot read key file {}", path.display()))?;
    Ok(SecretKey::from_slice(&bytes)?)
}

/// Writes `key` to a new file with mode 0600. An existing file is never overwritten.
pub fn create(path: &Path, key: &SecretKey) -> anyhow::Result<()> {
    let mut file =
        OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).with_context(|| {
            if path.exists() {
                format!("refusing to overwrite existing key file {}", path.display())
            } else {
                format!("cannot create key file {}", path.display())
            }
        })?;
    file.write_all(&key.to_seed())?;
    file.sync_all()?;
    // The name too: a key whose file is on disk but not its directory entry is lost.
    crate::file::sync_parent(path)
}

/// A new key from the operating system's random source.
#[must_use]
pub fn generate() -> SecretKey {
    let mut seed = [0u8; 32];
    rand::fill(&mut seed);
    SecretKey::from_seed(seed)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn round_trips_and_never_overwrites() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        let key = generate();
        create(&path, &key).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        assert_eq!(read(&path).unwrap().public(), key.public());
        let err = create(&path, &generate()).unwrap_err();
        assert!(format!("{err:#}").contains("refusing to overwrite"), "{err:#}");
        assert_eq!(read(&path).unwrap().public(), key.public());
    }

    #[test]
    fn refuses_loose_permissions_and_wrong_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        create(&path, &generate()).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let err = read(&path).unwrap_err().to_string();
        assert!(err.contains("readable by others (mode 0644)") && err.contains("chmod 600"), "{err}");

        let short = dir.path().join("short");
        fs::write(&short, [0u8; 31]).unwrap();
        fs::set_permissions(&short, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(read(&short).unwrap_err().to_string().contains("is 31 bytes"));
    }
}
