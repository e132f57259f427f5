// Stamps the binaries' `--version` with the git revision they were built from:
// `MURMUR_VERSION` = `0.1.0 (git 1a2b3c4d5e)`, or `0.1.0` where there is no git (a source
// tarball, a container build without `.git`). `cli/build.rs` includes this file. The
// revision is HEAD's: uncommitted edits are not marked (the script reruns only when HEAD
// moves, so a mark could go stale).

use std::path::Path;
use std::process::Command;

fn main() {
    let version = env!("CARGO_PKG_VERSION");
    let git = |args: &[&str]| {
        let out = Command::new("git").args(args).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let stamped = match git(&["rev-parse", "--short=10", "HEAD"]) {
        Some(rev) => format!("{version} (git {rev})"),
        None => version.to_owned(),
    };
    println!("cargo:rustc-env=MURMUR_VERSION={stamped}");
    // Again when HEAD moves (a commit, a checkout) — not on every edit.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        let dir = Path::new(&dir);
        println!("cargo:rerun-if-changed={}", dir.join("HEAD").display());
        if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={}", dir.join(reference).display());
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
