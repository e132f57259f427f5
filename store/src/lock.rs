//! `murmur.lock`: the artifacts a capsule pinned with `pull`, in its work directory.
//!
//! ```toml
//! # murmur.lock: artifacts pinned by name@version. Written by murnode.
//! version = 1
//!
//! [[artifact]]
//! name = "wordcount"
//! version = "1.0.0"
//! digest = "sha256:…"      # the content (component) digest
//! manifest = "sha256:…"    # the store manifest digest
//! ```

use std::path::{Path, PathBuf};

use anyhow::Context;
use murmur_protocol::Digest;
use serde::{Deserialize, Serialize};

use crate::file::write_atomic;
use murmur_config::limits::LOCK_ENTRIES_MAX;

/// File name of the lock in a work directory.
pub const LOCK_FILE: &str = "murmur.lock";
/// The lock format this build reads and writes.
pub const LOCK_VERSION: u32 = 1;

/// One pinned artifact.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockEntry {
    pub name: String,
    pub version: String,
    pub digest: String,
    pub manifest: String,
}

impl LockEntry {
    /// The pinned content digest.
    pub fn digest(&self) -> anyhow::Result<Digest> {
        self.digest
            .parse()
            .with_context(|| format!("murmur.lock entry {}@{} has a bad digest", self.name, self.version))
    }
}

/// A lock file's contents.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    pub version: u32,
    #[serde(default, rename = "artifact")]
    pub artifacts: Vec<LockEntry>,
}

impl Lock {
    /// The lock of work directory `dir` (empty when there is none).
    pub fn read(dir: &Path) -> anyhow::Result<Self> {
        let path = path(dir);
        if !path.exists() {
            return Ok(Self { version: LOCK_VERSION, artifacts: Vec::new() });
        }
        let text =
            std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let lock: Self =
            toml::from_str(&text).with_context(|| format!("{} is not a valid lock file", path.display()))?;
        anyhow::ensure!(
            lock.version == LOCK_VERSION,
            "{} has version {}, this build reads {LOCK_VERSION}",
            path.display(),
            lock.version
        );
        Ok(lock)
    }

    /// The entry for `name`, if pinned.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&LockEntry> {
        self.artifacts.iter().find(|e| e.name == name)
    }

    /// Inserts or replaces the entry for `entry.name`, keeping entries sorted.
    pub fn upsert(&mut self, entry: LockEntry) -> anyhow::Result<()> {
        self.artifacts.retain(|e| e.name != entry.name);
        anyhow::ensure!(
            self.artifacts.len() < LOCK_ENTRIES_MAX,
            "murmur.lock holds {LOCK_ENTRIES_MAX} entries, its limit"
        );
        self.artifacts.push(entry);
        self.artifacts.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(())
    }

    /// Writes the lock atomically into work directory `dir`.
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        let body = toml::to_string(self)?;
        write_atomic(
            &path(dir),
            format!("# murmur.lock: artifacts pinned by name@version. Written by murnode.\n{body}")
                .as_bytes(),
        )
    }
}

fn path(dir: &Path) -> PathBuf {
    dir.join(LOCK_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_upserts() {
        let dir = tempfile::tempdir().unwrap();
        let mut lock = Lock::read(dir.path()).unwrap();
        let entry = |v: &str| LockEntry {
            name: "wc".into(),
            version: v.into(),
            digest: Digest::of(v.as_bytes()).to_string(),
            manifest: Digest::of(b"m").to_string(),
        };
        lock.upsert(entry("1")).unwrap();
        lock.upsert(entry("2")).unwrap();
        lock.write(dir.path()).unwrap();
        let again = Lock::read(dir.path()).unwrap();
        assert_eq!(again.artifacts, vec![entry("2")]);
        std::fs::write(dir.path().join(LOCK_FILE), "version = 9\n").unwrap();
        assert!(Lock::read(dir.path()).is_err());
    }
}
