//! Power-loss crash tests: run a process with `tests/crash/fsync_shim.c` preloaded, kill
//! it, and rebuild its data directory as a machine that lost power would have it — only
//! what an fsync covered.
//!
//! The shim journals each fsync of a file (its content then) and of a directory (its
//! entries then). [`Journal::replay`] builds a fresh directory from the latest listing of
//! each directory, starting at the root, and the latest content of each file. So a name
//! survives only if its directory was fsynced after the name was made, and a file keeps
//! only what its last fsync saw: a name whose file was never synced comes back empty.
//! [`Journal::baseline`] records a directory as already durable (as after `sync`), for a
//! state the test set up itself.

use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail, ensure};

/// A file or directory as the journal names it: its inode number and birth time
/// (`sec.nsec`), so a freed inode number taken by a new file is another inode.
type Inode = (u64, String);

fn identity(meta: &std::fs::Metadata) -> Inode {
    let born = meta
        .created()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or_else(|| "0.000000000".to_owned(), |d| format!("{}.{:09}", d.as_secs(), d.subsec_nanos()));
    (meta.ino(), born)
}

/// A journal of what processes made durable under one root directory.
#[derive(Debug)]
pub struct Journal {
    dir: tempfile::TempDir,
    root: PathBuf,
    shim: PathBuf,
}

/// What a replay rebuilt.
#[derive(Debug, Default)]
pub struct Replayed {
    /// Files whose name was durable but whose content never was (they come back empty).
    pub unsynced_files: Vec<PathBuf>,
    /// Files rebuilt with content.
    pub files: usize,
}

impl Journal {
    /// A journal for the directory `root` (which must exist), with the shim built for it.
    pub fn new(root: &Path) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let root = root.canonicalize().with_context(|| format!("{} must exist", root.display()))?;
        let shim = dir.path().join("fsync_shim.so");
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("crash/fsync_shim.c");
        let out = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&shim)
            .arg(&source)
            .arg("-ldl")
            .output()
            .context("cannot run cc to build the fsync shim (a C compiler is needed)")?;
        ensure!(
            out.status.success(),
            "cc failed on {}: {}",
            source.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::create_dir(dir.path().join("blobs"))?;
        Ok(Self { dir, root, shim })
    }

    /// The environment that makes a process journal its fsyncs here.
    #[must_use]
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("LD_PRELOAD", self.shim.display().to_string()),
            ("MURMUR_CRASH_ROOT", self.root.display().to_string()),
            ("MURMUR_CRASH_JOURNAL", self.dir.path().display().to_string()),
        ]
    }

    /// Records the root as it is now as durable, every file and directory under it (what a
    /// test wrote itself, before the process under test starts).
    pub fn baseline(&self) -> anyhow::Result<()> {
        let mut records = String::new();
        let mut next = 0u64;
        self.baseline_dir(&self.root.clone(), &mut records, &mut next)?;
        self.append(&records)
    }

    fn baseline_dir(&self, dir: &Path, records: &mut String, next: &mut u64) -> anyhow::Result<()> {
        let mut listing = String::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let meta = std::fs::symlink_metadata(entry.path())?;
            let kind = if meta.is_dir() {
                'd'
            } else if meta.is_file() {
                'f'
            } else {
                continue;
            };
            let name = entry.file_name().into_string().map_err(|n| anyhow::anyhow!("{n:?} is not UTF-8"))?;
            let (ino, born) = identity(&meta);
            listing.push_str(&format!("{kind} {ino} {born} {:o} {name}\n", meta.mode() & 0o7777));
            if meta.is_dir() {
                self.baseline_dir(&entry.path(), records, next)?;
            } else {
                let blob = self.blob(next);
                std::fs::copy(entry.path(), self.dir.path().join("blobs").join(&blob))?;
                let (ino, born) = identity(&meta);
                records.push_str(&format!("F {ino} {born} {blob}\n"));
            }
        }
        let meta = std::fs::metadata(dir)?;
        let blob = self.blob(next);
        std::fs::write(self.dir.path().join("blobs").join(&blob), listing)?;
        let (ino, born) = identity(&meta);
        records.push_str(&format!("D {ino} {born} {blob}\n"));
        Ok(())
    }

    fn blob(&self, next: &mut u64) -> String {
        *next += 1;
        format!("baseline-{next}")
    }

    fn append(&self, records: &str) -> anyhow::Result<()> {
        use std::io::Write;
        let mut journal =
            std::fs::OpenOptions::new().create(true).append(true).open(self.dir.path().join("journal"))?;
        journal.write_all(records.as_bytes())?;
        Ok(())
    }

    /// How many fsyncs of files and of directories the journal holds.
    pub fn counts(&self) -> anyhow::Result<(usize, usize)> {
        let text = std::fs::read_to_string(self.dir.path().join("journal")).unwrap_or_default();
        let files = text.lines().filter(|l| l.starts_with("F ")).count();
        let dirs = text.lines().filter(|l| l.starts_with("D ")).count();
        Ok((files, dirs))
    }

    /// Rebuilds the root as a power loss now would leave it, into `into` (which must not
    /// exist). The root itself is taken as durable (it existed before the test).
    pub fn replay(&self, into: &Path) -> anyhow::Result<Replayed> {
        let text = std::fs::read_to_string(self.dir.path().join("journal")).unwrap_or_default();
        let mut files: HashMap<Inode, String> = HashMap::new();
        let mut dirs: HashMap<Inode, String> = HashMap::new();
        for line in text.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            match fields.as_slice() {
                ["F", ino, born, blob] => {
                    files.insert((ino.parse()?, (*born).to_owned()), (*blob).to_owned());
                }
                ["D", ino, born, blob] => {
                    dirs.insert((ino.parse()?, (*born).to_owned()), (*blob).to_owned());
                }
                ["X", call] => bail!("the process called {call}(2), which the shim does not model"),
                _ => bail!("unreadable journal line {line:?}"),
            }
        }
        let meta = std::fs::metadata(&self.root)?;
        let mut replayed = Replayed::default();
        std::fs::create_dir(into).with_context(|| format!("cannot create {}", into.display()))?;
        self.rebuild(identity(&meta), into, &files, &dirs, &mut replayed)?;
        std::fs::set_permissions(into, std::fs::Permissions::from_mode(meta.mode() & 0o7777))?;
        Ok(replayed)
    }

    fn rebuild(
        &self,
        dir: Inode,
        into: &Path,
        files: &HashMap<Inode, String>,
        dirs: &HashMap<Inode, String>,
        replayed: &mut Replayed,
    ) -> anyhow::Result<()> {
        let Some(blob) = dirs.get(&dir) else { return Ok(()) };
        let listing = std::fs::read_to_string(self.dir.path().join("blobs").join(blob))?;
        for line in listing.lines() {
            let mut fields = line.splitn(5, ' ');
            let (Some(kind), Some(ino), Some(born), Some(mode), Some(name)) =
                (fields.next(), fields.next(), fields.next(), fields.next(), fields.next())
            else {
                bail!("unreadable directory listing line {line:?}");
            };
            let inode: Inode = (ino.parse()?, born.to_owned());
            let mode = u32::from_str_radix(mode, 8)?;
            let path = into.join(name);
            match kind {
                "d" => {
                    std::fs::create_dir(&path)?;
                    self.rebuild(inode, &path, files, dirs, replayed)?;
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
                }
                "f" => {
                    match files.get(&inode) {
                        Some(blob) => {
                            std::fs::copy(self.dir.path().join("blobs").join(blob), &path)?;
                            replayed.files += 1;
                        }
                        None => {
                            std::fs::write(&path, b"")?;
                            replayed.unsynced_files.push(path.clone());
                        }
                    }
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
                }
                // A symlink's target is in its directory entry; none of ours makes one.
                _ => bail!("{} is a {kind}, which the replay does not rebuild", path.display()),
            }
        }
        Ok(())
    }
}
