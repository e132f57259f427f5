//! Artifact routes: pulling from the mesh (`POST /v1/artifacts/pull`), optionally
//! installing what was pulled as a runnable capsule.
//!
//! The answer is a stream of JSON lines (`application/x-ndjson`): progress events as the
//! pull goes ([`Progress`]), then one `done` or `error` line. `mur artifact pull` and
//! `mur install` draw their progress bars from it; scripts read it with `--json`.

use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use murmur_protocol::Digest;
use murmur_protocol::names::{check_capsule_name, check_version};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;

use super::{ApiState, error};
use murmur_runtime::CapsuleManifest;
use murmur_store::CapsuleKind;
use murmur_store::lock::{Lock, LockEntry};

use crate::artifacts::{Progress, Pulled, Want};
use murmur_config::limits::PULL_PROGRESS_QUEUE_MAX;

/// The first line of a capsule manifest `mur install` writes; it only ever replaces a
/// manifest that starts with it.
pub const INSTALLED_MARKER: &str = "# Installed by `mur install`";

/// `POST /v1/artifacts/pull`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PullBody {
    /// `NAME@VERSION`.
    pub artifact: String,
    /// A manifest or content digest the artifact must have.
    #[serde(default)]
    pub digest: Option<String>,
    /// Also pin it in the node's `murmur.lock` and run it as a capsule.
    #[serde(default)]
    pub install: bool,
}

pub(super) async fn pull(State(state): State<Arc<ApiState>>, Json(body): Json<PullBody>) -> Response {
    let want = match parse_want(&body) {
        Ok(want) => want,
        Err(message) => return error(StatusCode::BAD_REQUEST, "bad_request", &message),
    };
    let (tx, rx) = mpsc::channel::<Bytes>(PULL_PROGRESS_QUEUE_MAX);
    tokio::spawn(async move {
        let progress_tx = tx.clone();
        let mut progress = move |event: Progress| {
            let _ = progress_tx.try_send(line(&event));
        };
        let result = if body.install {
            install(&state, want, &mut progress).await
        } else {
            state
                .puller
                .pull(&want, &mut progress)
                .await
                .map(|pulled| done(&pulled, false))
                .map_err(anyhow::Error::from)
        };
        let last = match result {
            Ok(done) => done,
            Err(err) => json!({ "event": "error", "message": format!("{err:#}") }),
        };
        let _ = tx.send(line(&last)).await;
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|bytes| (Ok::<_, Infallible>(bytes), rx))
    });
    ([(header::CONTENT_TYPE, "application/x-ndjson")], Body::from_stream(stream)).into_response()
}

fn parse_want(body: &PullBody) -> Result<Want, String> {
    let (name, version) =
        body.artifact.split_once('@').ok_or_else(|| format!("`{}` is not NAME@VERSION", body.artifact))?;
    check_capsule_name(name).map_err(|e| format!("name: {e}"))?;
    check_version(version).map_err(|e| format!("version: {e}"))?;
    let pin = match &body.digest {
        Some(text) => Some(text.parse::<Digest>().map_err(|e| format!("digest: {e}"))?),
        None => None,
    };
    Ok(Want { name: name.into(), version: version.into(), pin })
}

fn line(value: &impl serde::Serialize) -> Bytes {
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

fn done(pulled: &Pulled, installed: bool) -> serde_json::Value {
    let stored = &pulled.stored;
    json!({
        "event": "done",
        "name": stored.meta.name,
        "version": stored.meta.version,
        "kind": stored.meta.kind,
        "manifest": stored.manifest.to_string(),
        "content": stored.content.to_string(),
        "size": stored.size,
        "already": pulled.already,
        "fetched": pulled.fetched,
        "resumed_chunks": pulled.resumed_chunks,
        "providers": pulled.providers,
        "penalized": pulled.penalized.iter().map(|(node, reason)| json!({"provider": node.to_string(), "reason": reason})).collect::<Vec<_>>(),
        "bad_chunks": pulled.stats.bad_chunks,
        "hedges": pulled.stats.hedges,
        "elapsed_ms": pulled.elapsed.as_millis() as u64,
        "installed": installed,
    })
}

/// Pulls `want` (pinned to the node's `murmur.lock` when it has this version), then pins
/// it there, writes a capsule manifest for it under the capsules directory and runs it.
/// A manifest the operator wrote for that name is never overwritten.
async fn install(
    state: &ApiState,
    mut want: Want,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> anyhow::Result<serde_json::Value> {
    let data_dir = state.install.data_dir.clone();
    let lock = Lock::read(&data_dir)?;
    if let Some(entry) = lock.get(&want.name).filter(|e| e.version == want.version) {
        let pinned = entry.digest()?;
        match want.pin {
            Some(pin) if pin != pinned && pin.to_string() != entry.manifest => anyhow::bail!(
                "murmur.lock pins {}@{} to {pinned}, not {pin}; nothing was changed",
                want.name,
                want.version
            ),
            // The lock's manifest digest pins the whole artifact (its metadata too).
            _ => want.pin = Some(entry.manifest.parse().unwrap_or(pinned)),
        }
    }
    let pulled = state.puller.pull(&want, progress).await?;
    let stored = &pulled.stored;
    let kind = match stored.meta.kind {
        CapsuleKind::Agent => {
            anyhow::bail!("{}@{} is an agent; agents are not run as capsules yet", want.name, want.version)
        }
        CapsuleKind::Brain => {
            anyhow::bail!(
                "{}@{} is a brain; name it in the node's config (`[[agents]] brain = \"{}@{}\"`), it is in the store",
                want.name,
                want.version,
                want.name,
                want.version
            )
        }
        CapsuleKind::Data => {
            anyhow::bail!("{}@{} is data, which runs nothing; it stays in the store", want.name, want.version)
        }
        kind => kind.as_str(),
    };
    let dir = &state.install.capsules_dir;
    murmur_store::file::create_dir_all_durable(dir)?;
    let path = dir.join(format!("{}.toml", want.name));
    if let Ok(existing) = std::fs::read_to_string(&path)
        && !existing.starts_with(INSTALLED_MARKER)
    {
        anyhow::bail!(
            "{} exists and was not written by `mur install`; set `artifact = \"{}@{}\"` in it yourself (the artifact is in the store)",
            path.display(),
            want.name,
            want.version
        );
    }
    let text = installed_manifest(&want.name, &want.version, kind, &stored.meta.description);
    let manifest = CapsuleManifest::parse(&text, dir, &data_dir)?;
    state.runtime.install(manifest)?;
    murmur_store::file::write_atomic(&path, text.as_bytes())?;
    let entry = LockEntry {
        name: want.name.clone(),
        version: want.version.clone(),
        digest: stored.content.to_string(),
        manifest: stored.manifest.to_string(),
    };
    // Under the lock's guard: an install of another artifact at the same moment keeps its
    // entry, and one that pinned this version to other bytes meanwhile wins.
    Lock::update(&data_dir, |lock| {
        lock.check(&want.name, &want.version, &stored.content, &stored.manifest)?;
        lock.upsert(entry)
    })?;
    let hosted = crate::daemon::hosted_capsules(&state.runtime, &state.install.declared);
    state.net.set_hosted(hosted).await?;
    Ok(done(&pulled, true))
}

/// The manifest `mur install` writes: the marker line, then the keys written by the TOML
/// serializer (every value escaped, whatever it holds).
fn installed_manifest(name: &str, version: &str, kind: &str, description: &str) -> String {
    let mut table = toml::Table::new();
    for (key, value) in [
        ("name", name.to_owned()),
        ("version", version.to_owned()),
        ("kind", kind.to_owned()),
        ("artifact", format!("{name}@{version}")),
        ("description", description.to_owned()),
    ] {
        table.insert(key.into(), toml::Value::String(value));
    }
    // The marker line names the artifact: the name and version passed their grammar (no
    // newline can end the comment early).
    format!("{INSTALLED_MARKER} {name}@{version}; murmur.lock pins its digest.\n{table}")
}

/// Where `install` writes, from the node's configuration.
#[derive(Clone, Debug, Default)]
pub struct InstallTarget {
    /// The data directory (its `murmur.lock`).
    pub data_dir: std::path::PathBuf,
    /// Where capsule manifests live.
    pub capsules_dir: std::path::PathBuf,
    /// Capsules the config declares without running them (kept in the advert).
    pub declared: Vec<murmur_protocol::HostedCapsule>,
}

impl InstallTarget {
    #[must_use]
    pub fn new(data_dir: &Path, capsules_dir: &Path, declared: Vec<murmur_protocol::HostedCapsule>) -> Self {
        Self { data_dir: data_dir.to_path_buf(), capsules_dir: capsules_dir.to_path_buf(), declared }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_installed_manifest_says_exactly_what_it_was_given() {
        let hostile = "counts\"\n[capabilities]\nshell = { allow = [\"sh\"] }\n# ";
        let text = installed_manifest("wordcount", "1.0.0", "tool", hostile);
        let dir = std::path::Path::new("/");
        let manifest = CapsuleManifest::parse(&text, dir, dir).unwrap();
        assert_eq!((manifest.name.as_str(), manifest.version.as_str()), ("wordcount", "1.0.0"));
        assert_eq!(manifest.description, hostile);
        assert!(manifest.capabilities.shell.is_empty(), "the description escaped into a key: {text}");
        assert!(text.starts_with(INSTALLED_MARKER));
    }
}
