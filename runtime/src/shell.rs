//! `murmur:shell/execute`: native commands for capsules, allowlisted.
//!
//! The requested binary and every `capabilities.shell.allow` entry are resolved the same
//! way: a name without `/` is searched on the host's `PATH`, then canonicalized (so
//! `/usr/bin/../bin/ls` and `ls` meet). Entries that resolve to nothing are skipped. The
//! check happens before anything is spawned. The child gets exactly the environment the
//! guest passed, runs in the capsule's work directory, and is killed at the capsule's
//! deadline. A non-zero exit is data. Each stream keeps at most 16 KiB; when either is cut,
//! `truncated` is set and the full output is written under the work directory's `logs/`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::io::AsyncReadExt;
use wasmtime::Result;

use super::bindings::murmur::shell::execute::{self, ShellResult};
use super::manifest::CapsuleManifest;
use super::state::HostState;
use murmur_config::limits::{SHELL_ARGS_MAX, SHELL_FULL_OUTPUT_BYTES_MAX, SHELL_OUTPUT_BYTES_MAX};
use murmur_store::file::write_atomic;

impl execute::Host for HostState {
    async fn run(
        &mut self,
        binary: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
    ) -> Result<Result<ShellResult, String>> {
        let manifest = &self.call.capsule.manifest;
        let deadline = manifest.deadline.saturating_sub(self.call.started.elapsed());
        Ok(run_allowed(manifest, &binary, &args, &env, deadline).await.map(|(result, _)| result))
    }
}

/// Runs `binary` for the capsule of `manifest` if its `capabilities.shell.allow` admits
/// it (checked before anything is spawned), within `deadline`; the result and the program
/// that ran (canonical absolute path).
pub(crate) async fn run_allowed(
    manifest: &CapsuleManifest,
    binary: &str,
    args: &[String],
    env: &[(String, String)],
    deadline: std::time::Duration,
) -> Result<(ShellResult, PathBuf), String> {
    if args.len() > SHELL_ARGS_MAX || env.len() > SHELL_ARGS_MAX {
        return Err(format!(
            "shell: at most {SHELL_ARGS_MAX} arguments and {SHELL_ARGS_MAX} environment entries"
        ));
    }
    let Some(resolved) = resolve(binary) else {
        return Err(format!("shell: '{binary}' not found (not an executable path, nor on PATH)"));
    };
    let allowed =
        manifest.capabilities.shell.iter().filter_map(|entry| resolve(entry)).any(|entry| entry == resolved);
    if !allowed {
        return Err(format!("shell policy: '{binary}' not in capabilities.shell.allow"));
    }
    let result = execute(&resolved, args, env, &manifest.workdir, deadline).await?;
    Ok((result, resolved))
}

/// Resolves a binary name or path to a canonical executable path.
fn resolve(binary: &str) -> Option<PathBuf> {
    if binary.is_empty() || binary.contains('\0') {
        return None;
    }
    let candidate = if binary.contains('/') {
        PathBuf::from(binary)
    } else {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path).map(|dir| dir.join(binary)).find(|p| is_executable(p))?
    };
    let canonical = candidate.canonicalize().ok()?;
    is_executable(&canonical).then_some(canonical)
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

async fn execute(
    binary: &Path,
    args: &[String],
    env: &[(String, String)],
    workdir: &Path,
    deadline: std::time::Duration,
) -> Result<ShellResult, String> {
    let mut child = tokio::process::Command::new(binary)
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(workdir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("shell: cannot start '{}': {e}", binary.display()))?;
    let (mut out, mut err) =
        (child.stdout.take().ok_or("shell: no stdout")?, child.stderr.take().ok_or("shell: no stderr")?);
    let run = async {
        let (stdout, stderr, status) =
            tokio::join!(read_bounded(&mut out), read_bounded(&mut err), child.wait());
        (stdout, stderr, status)
    };
    let Ok((stdout, stderr, status)) = tokio::time::timeout(deadline, run).await else {
        return Err(format!(
            "shell: '{}' did not finish within the capsule's deadline ({} ms) and was killed",
            binary.display(),
            deadline.as_millis()
        ));
    };
    let status = status.map_err(|e| format!("shell: waiting for '{}': {e}", binary.display()))?;
    let exit_code = status.code().unwrap_or_else(|| {
        use std::os::unix::process::ExitStatusExt;
        128 + status.signal().unwrap_or(0)
    });
    let (stdout, stdout_dropped) = stdout.map_err(|e| format!("shell: reading stdout: {e}"))?;
    let (stderr, stderr_dropped) = stderr.map_err(|e| format!("shell: reading stderr: {e}"))?;
    let truncated = stdout.len() > SHELL_OUTPUT_BYTES_MAX || stderr.len() > SHELL_OUTPUT_BYTES_MAX;
    let full_output_path = if truncated {
        Some(write_full_output(workdir, binary, &stdout, &stderr, stdout_dropped || stderr_dropped)?)
    } else {
        None
    };
    Ok(ShellResult { exit_code, stdout: cut(&stdout), stderr: cut(&stderr), truncated, full_output_path })
}

/// Reads a stream to its end, keeping at most [`SHELL_FULL_OUTPUT_BYTES_MAX`]; says whether
/// bytes were dropped.
async fn read_bounded<R: tokio::io::AsyncRead + Unpin>(reader: &mut R) -> std::io::Result<(Vec<u8>, bool)> {
    let mut kept = Vec::new();
    let mut dropped = false;
    let mut buf = [0u8; 8192];
    loop {
        let n = reader.read(&mut buf).await?;
        if n == 0 {
            return Ok((kept, dropped));
        }
        let room = SHELL_FULL_OUTPUT_BYTES_MAX - kept.len();
        kept.extend_from_slice(&buf[..n.min(room)]);
        dropped |= n > room;
    }
}

/// At most [`SHELL_OUTPUT_BYTES_MAX`] bytes as text, cut on a character boundary.
fn cut(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(SHELL_OUTPUT_BYTES_MAX)]);
    let mut end = text.len().min(SHELL_OUTPUT_BYTES_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

fn write_full_output(
    workdir: &Path,
    binary: &Path,
    stdout: &[u8],
    stderr: &[u8],
    dropped: bool,
) -> Result<String, String> {
    let stamp = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let path = workdir.join("logs").join(format!("shell-{stamp}.log"));
    let mut text = format!("# {}\n== stdout ==\n", binary.display()).into_bytes();
    text.extend_from_slice(stdout);
    text.extend_from_slice(b"\n== stderr ==\n");
    text.extend_from_slice(stderr);
    if dropped {
        text.extend_from_slice(
            format!("\n== output beyond {SHELL_FULL_OUTPUT_BYTES_MAX} bytes per stream was discarded ==\n")
                .as_bytes(),
        );
    }
    write_atomic(&path, &text).map_err(|e| format!("shell: cannot write the full output: {e:#}"))?;
    Ok(path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths_resolve_to_the_same_binary() {
        let sh = resolve("sh").expect("sh is on PATH");
        assert!(sh.is_absolute());
        assert_eq!(resolve(sh.to_str().unwrap()), Some(sh.clone()));
        assert_eq!(resolve("no-such-binary-murmur"), None);
        assert_eq!(resolve(""), None);
    }

    #[test]
    fn output_is_cut_on_a_character_boundary() {
        let text = "é".repeat(SHELL_OUTPUT_BYTES_MAX);
        let out = cut(text.as_bytes());
        assert!(out.len() <= SHELL_OUTPUT_BYTES_MAX && out.len() >= SHELL_OUTPUT_BYTES_MAX - 1);
    }

    #[tokio::test]
    async fn truncation_starts_one_byte_past_16_kib() {
        let dir = tempfile::tempdir().unwrap();
        let sh = resolve("sh").unwrap();
        for (len, truncated) in [(SHELL_OUTPUT_BYTES_MAX, false), (SHELL_OUTPUT_BYTES_MAX + 1, true)] {
            let script = format!("head -c {len} /dev/zero | tr '\\0' x");
            let result = execute(
                &sh,
                &["-c".into(), script],
                &[("PATH".into(), "/usr/bin:/bin".into())],
                dir.path(),
                std::time::Duration::from_secs(10),
            )
            .await
            .unwrap();
            assert_eq!(
                (result.truncated, result.stdout.len()),
                (truncated, SHELL_OUTPUT_BYTES_MAX),
                "len {len}"
            );
            assert_eq!(result.full_output_path.is_some(), truncated);
            if let Some(path) = result.full_output_path {
                assert!(std::fs::read_to_string(path).unwrap().contains(&"x".repeat(len)));
            }
        }
    }

    #[tokio::test]
    async fn a_non_zero_exit_is_data_and_env_is_exactly_what_was_passed() {
        let dir = tempfile::tempdir().unwrap();
        let sh = resolve("sh").unwrap();
        let result = execute(
            &sh,
            &["-c".into(), "echo \"[$GREETING][$HOME]\"; exit 3".into()],
            &[("GREETING".into(), "hi".into())],
            dir.path(),
            std::time::Duration::from_secs(10),
        )
        .await
        .unwrap();
        assert_eq!(result.exit_code, 3);
        assert_eq!(result.stdout, "[hi][]\n", "HOME is not inherited");
    }

    #[tokio::test]
    async fn the_deadline_kills_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let sh = resolve("sh").unwrap();
        let err = execute(
            &sh,
            &["-c".into(), "sleep 5".into()],
            &[],
            dir.path(),
            std::time::Duration::from_millis(200),
        )
        .await
        .unwrap_err();
        assert!(err.contains("deadline"), "{err}");
    }
}
