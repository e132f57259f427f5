//! What processes leave behind in a data directory, cleaned up: the temporary files of
//! atomic writes (`.NAME.tmp-PID-N`) and bundle imports (`.NAME.partial-PID-N`) of a
//! process that is gone, pull files (`store/.pull/`) of pulls abandoned longer than the
//! retention, and capsules' shell logs (`work/*/logs/shell-*.log`) older than it.
//!
//! A temporary file of a live process (a `mur artifact add` running beside the node) is
//! never touched; a pull file touched within the retention resumes at the next pull.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// What one sweep removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Swept {
    pub temporary: usize,
    pub pulls: usize,
    pub shell_logs: usize,
}

/// Sweeps `data_dir` once; files modified within `keep` of `now` stay (but for the
/// temporary files of dead processes, which go whatever their age).
#[must_use]
pub fn sweep(data_dir: &Path, keep: Duration, now: SystemTime) -> Swept {
    let mut swept = Swept::default();
    let store = data_dir.join("store");
    for dir in [data_dir.to_path_buf(), store.clone(), store.join("blobs/sha256"), store.join("signatures")] {
        for path in files(&dir) {
            if left_by_dead_process(&path) && std::fs::remove_file(&path).is_ok() {
                swept.temporary += 1;
            }
        }
    }
    for path in files(&store.join(".pull")) {
        if older_than(&path, keep, now) && std::fs::remove_file(&path).is_ok() {
            swept.pulls += 1;
        }
    }
    for work in dirs(&data_dir.join("work")) {
        for path in files(&work.join("logs")) {
            let shell_log =
                path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("shell-"));
            if shell_log && older_than(&path, keep, now) && std::fs::remove_file(&path).is_ok() {
                swept.shell_logs += 1;
            }
            if left_by_dead_process(&path) && std::fs::remove_file(&path).is_ok() {
                swept.temporary += 1;
            }
        }
    }
    swept
}

/// Sweeps at start and then every `every`, for as long as the node runs.
pub async fn keep_clean(data_dir: PathBuf, keep: Duration, every: Duration) {
    loop {
        let dir = data_dir.clone();
        if let Ok(swept) = tokio::task::spawn_blocking(move || sweep(&dir, keep, SystemTime::now())).await
            && swept != Swept::default()
        {
            tracing::info!(
                temporary = swept.temporary,
                pulls = swept.pulls,
                shell_logs = swept.shell_logs,
                "removed files left behind: temporary files of dead processes, abandoned pulls, old shell logs"
            );
        }
        tokio::time::sleep(every).await;
    }
}

fn files(dir: &Path) -> impl Iterator<Item = PathBuf> {
    entries(dir, false)
}

fn dirs(dir: &Path) -> impl Iterator<Item = PathBuf> {
    entries(dir, true)
}

/// The files (or, `dirs`, the directories) right in `dir`; none when it cannot be read.
fn entries(dir: &Path, dirs: bool) -> impl Iterator<Item = PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(move |e| e.file_type().is_ok_and(|t| if dirs { t.is_dir() } else { t.is_file() }))
        .map(|e| e.path())
}

fn older_than(path: &Path, keep: Duration, now: SystemTime) -> bool {
    let modified = std::fs::metadata(path).and_then(|m| m.modified());
    modified.is_ok_and(|at| now.duration_since(at).is_ok_and(|age| age > keep))
}

/// Whether `path` is a temporary file (`.NAME.tmp-PID-…`, `.NAME.partial-PID-…`) whose
/// process no longer runs.
fn left_by_dead_process(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else { return false };
    if !name.starts_with('.') {
        return false;
    }
    let pid = [".tmp-", ".partial-"].iter().find_map(|marker| {
        let rest = &name[name.rfind(marker)? + marker.len()..];
        rest.split('-').next()?.parse::<u32>().ok()
    });
    pid.is_some_and(|pid| pid != 0 && !Path::new(&format!("/proc/{pid}")).exists())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn leftovers_of_dead_processes_and_old_files_go_and_the_rest_stays() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let blobs = root.join("store/blobs/sha256");
        let pulls = root.join("store/.pull");
        let logs = root.join("work/pipeline/logs");
        for d in [&blobs, &pulls, &logs] {
            std::fs::create_dir_all(d).unwrap();
        }
        let (dead, live) = (dead_pid(), std::process::id());
        let write = |path: PathBuf, age: Duration| {
            std::fs::write(&path, b"x").unwrap();
            let file = std::fs::File::options().write(true).open(&path).unwrap();
            file.set_modified(SystemTime::now() - age).unwrap();
            path
        };
        let fresh = Duration::from_secs(60);
        let old = Duration::from_secs(30 * 86_400);
        let gone = [
            write(blobs.join(format!(".abc.tmp-{dead}-1")), fresh),
            write(root.join(format!(".murnode.toml.tmp-{dead}-7")), fresh),
            write(root.join(format!("store/.bundle.tar.partial-{dead}-00ff")), fresh),
            write(pulls.join("sha256-abandoned.pull"), old),
            write(logs.join("shell-1.log"), old),
        ];
        let kept = [
            write(blobs.join(format!(".abc.tmp-{live}-2")), old),
            write(blobs.join("0123abcd"), old),
            write(pulls.join("sha256-resuming.pull"), fresh),
            write(logs.join("shell-2.log"), fresh),
            write(logs.join("notes.log"), old),
        ];
        let swept = sweep(root, Duration::from_secs(7 * 86_400), SystemTime::now());
        assert_eq!(swept, Swept { temporary: 3, pulls: 1, shell_logs: 1 });
        for path in gone {
            assert!(!path.exists(), "{} was left", path.display());
        }
        for path in kept {
            assert!(path.exists(), "{} was removed", path.display());
        }
    }
}
