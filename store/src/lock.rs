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
//!
//! A change is a read-modify-write under an exclusive advisory lock on `murmur.lock.guard`
//! beside it ([`Lock::update`]), so two installs at once both land. Whatever loads an
//! artifact by name@version checks it against the pin first ([`Lock::check`]).

use std::path::{Path, PathBuf};

use anyhow::Context;
use murmur_protocol::Digest;
use serde::{Deserialize, Serialize};

use crate::file::write_atomic;
use murmur_config::limits::LOCK_ENTRIES_MAX;

/// File name of the lock in a work directory.
pub const LOCK_FILE: &str = "murmur.lock";
/// The file whose advisory lock serializes changes to [`LOCK_FILE`] (the lock file itself
/// is replaced on every write, so it cannot carry the advisory lock).
pub const GUARD_FILE: &str = "murmur.lock.guard";
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

    /// Reads the lock of `dir`, lets `change` modify it and writes it back, holding the
    /// guard's exclusive lock throughout: a concurrent update waits, and sees this one's
    /// result. When `change` fails nothing is written.
    pub fn update<T>(dir: &Path, change: impl FnOnce(&mut Self) -> anyhow::Result<T>) -> anyhow::Result<T> {
        crate::file::create_dir_all_durable(dir)?;
        let guard_path = dir.join(GUARD_FILE);
        let guard = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&guard_path)
            .with_context(|| format!("cannot open {}", guard_path.display()))?;
        guard.lock().with_context(|| format!("cannot lock {}", guard_path.display()))?;
        let mut lock = Self::read(dir)?;
        let before = lock.clone();
        let value = change(&mut lock)?;
        if lock != before {
            lock.write(dir)?;
        }
        // Dropping `guard` closes it, which releases the lock.
        Ok(value)
    }

    /// Whether `stored` may be loaded as `name@version`: when the lock pins that version,
    /// the store's artifact must be exactly the pinned one (content and manifest). An
    /// artifact that was removed and replaced by other bytes under the same name is refused.
    pub fn check(
        &self,
        name: &str,
        version: &str,
        content: &Digest,
        manifest: &Digest,
    ) -> anyhow::Result<()> {
        let Some(entry) = self.get(name).filter(|e| e.version == version) else { return Ok(()) };
        let pinned = entry.digest()?;
        anyhow::ensure!(
            pinned == *content && entry.manifest == manifest.to_string(),
            "murmur.lock pins {name}@{version} to {pinned} (manifest {}), but the store's {name}@{version} is {content} (manifest {manifest}); it was replaced since it was installed. Restore the pinned one (`mur artifact rm {name}`, then `mur install {name}@{version}` pulls it pinned), or delete its entry from murmur.lock to accept the new bytes",
            entry.manifest
        );
        Ok(())
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

    fn entry(name: &str) -> LockEntry {
        LockEntry {
            name: name.into(),
            version: "1.0.0".into(),
            digest: Digest::of(name.as_bytes()).to_string(),
            manifest: Digest::of(b"m").to_string(),
        }
    }

    #[test]
    fn concurrent_updates_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let dir = dir.path().to_path_buf();
                std::thread::spawn(move || {
                    Lock::update(&dir, |lock| {
                        // Widen the window between read and write: without the guard,
                        // every thread reads the same lock and all but one update is lost.
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        lock.upsert(entry(&format!("tool-{i}")))
                    })
                    .unwrap();
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(Lock::read(dir.path()).unwrap().artifacts.len(), 8);
    }

    #[test]
    fn a_failed_update_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        Lock::update(dir.path(), |lock| lock.upsert(entry("a"))).unwrap();
        let before = std::fs::read(dir.path().join(LOCK_FILE)).unwrap();
        let err = Lock::update(dir.path(), |lock| -> anyhow::Result<()> {
            lock.upsert(entry("b"))?;
            anyhow::bail!("changed my mind")
        })
        .unwrap_err();
        assert!(err.to_string().contains("changed my mind"));
        assert_eq!(std::fs::read(dir.path().join(LOCK_FILE)).unwrap(), before);
    }

    #[test]
    fn check_refuses_a_pinned_version_with_other_bytes() {
        let mut lock = Lock::default();
        lock.upsert(entry("wc")).unwrap();
        let (pinned, manifest) = (Digest::of(b"wc"), Digest::of(b"m"));
        lock.check("wc", "1.0.0", &pinned, &manifest).unwrap();
        lock.check("wc", "2.0.0", &Digest::of(b"other"), &manifest).unwrap();
        lock.check("other", "1.0.0", &Digest::of(b"other"), &manifest).unwrap();
        let err = lock.check("wc", "1.0.0", &Digest::of(b"evil"), &manifest).unwrap_err().to_string();
        assert!(err.contains("murmur.lock pins wc@1.0.0") && err.contains("delete its entry"), "{err}");
        assert!(lock.check("wc", "1.0.0", &pinned, &Digest::of(b"other manifest")).is_err());
    }
}
