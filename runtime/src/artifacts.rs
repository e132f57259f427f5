//! `murmur:artifact-manager/manage` for script capsules, against the node's artifact store.
//!
//! - `list` / `describe`: the tools this runtime runs, plus what the calling capsule pinned
//!   in its `murmur.lock`.
//! - `search`: the store, by name, tag or description (case-insensitive substring).
//! - `pull(name, version)`: resolves name@version in the store; verifies the bytes against
//!   the store's digest and against an existing lock entry — any mismatch errs before
//!   anything is written; then installs the component under `<workdir>/tools/<name>/`,
//!   upserts the lock, and registers the tool, so it is listed, describable and (for WASM
//!   tools allowed by `capabilities.tools`) invokable at once.
//! - `remove(name)`: refused while a capsule this node runs uses the artifact.
//! - `diagnostics`: the capsule's id, what it has installed, its capabilities.

use std::sync::Arc;

use murmur_protocol::Digest;
use wasmtime::Result;

use super::bindings::murmur::artifact_manager::manage::{
    self, ArtifactInfo, ArtifactSummary, RuntimeState, RuntimeType,
};
use murmur_store::lock::{Lock, LockEntry};
use murmur_store::{CapsuleKind, Platform, Stored};

use super::manifest::{ArtifactRef, CapsuleManifest};
use super::ports::Want;
use super::state::HostState;

impl manage::Host for HostState {
    async fn list(&mut self) -> Result<Vec<ArtifactSummary>> {
        Ok(self.summaries())
    }

    async fn describe(&mut self, name: String) -> Result<Result<ArtifactInfo, String>> {
        let runtime = &self.call.runtime;
        let caller = &self.call.capsule.manifest;
        // The version this capsule pulled (its lock), else the store's highest.
        let locked =
            Lock::read(&caller.workdir).ok().and_then(|lock| lock.get(&name).map(|e| e.version.clone()));
        if let Ok(Some(stored)) = runtime.store.find(&name, locked.as_deref()) {
            return Ok(Ok(info(&stored)));
        }
        Ok(match runtime.tool_for(&caller.name, &name) {
            Ok(installed) => Ok(ArtifactInfo {
                name: installed.manifest.name.clone(),
                version: installed.manifest.version.clone(),
                description: installed.manifest.description.clone(),
                tags: Vec::new(),
                runtime: RuntimeType::Wasm,
                input_schema: None,
                output_schema: None,
            }),
            Err(_) => Err(format!("no artifact named '{name}' is installed or in the store")),
        })
    }

    async fn search(&mut self, query: String) -> Result<Result<Vec<ArtifactSummary>, String>> {
        Ok(self
            .call
            .runtime
            .store
            .search(&query)
            .map(|found| found.iter().map(summary).collect())
            .map_err(|e| format!("{e:#}")))
    }

    async fn pull(&mut self, name: String, version: String) -> Result<Result<ArtifactSummary, String>> {
        Ok(self.pull_artifact(&name, &version).await.map_err(|e| format!("pull {name}@{version}: {e:#}")))
    }

    async fn remove(&mut self, name: String) -> Result<Result<bool, String>> {
        let runtime = &self.call.runtime;
        let Ok(Some(stored)) = runtime.store.find(&name, None) else { return Ok(Ok(false)) };
        let pulled = runtime.pulled.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let users: Vec<String> = runtime
            .installed()
            .values()
            .filter(|i| i.loaded.digest == stored.content)
            .map(|i| i.manifest.name.clone())
            .chain(
                pulled
                    .iter()
                    .filter(|(_, tool)| tool.loaded.digest == stored.content)
                    .map(|((capsule, tool), _)| format!("{tool} (pulled by {capsule})")),
            )
            .collect();
        drop(pulled);
        if !users.is_empty() {
            return Ok(Err(format!(
                "artifact '{name}' is in use by running capsule(s): {}",
                users.join(", ")
            )));
        }
        Ok(runtime.store.remove(&name).map_err(|e| format!("{e:#}")))
    }

    async fn diagnostics(&mut self) -> Result<Result<RuntimeState, String>> {
        Ok(Ok(RuntimeState {
            capsule_id: self.call.capsule.manifest.name.clone(),
            installed: self.summaries(),
            capabilities: self.call.capsule.manifest.capabilities.to_json(),
        }))
    }
}

impl HostState {
    fn summaries(&self) -> Vec<ArtifactSummary> {
        let mut all: Vec<ArtifactSummary> = self
            .call
            .runtime
            .installed()
            .values()
            .filter(|i| matches!(i.manifest.kind, CapsuleKind::Tool | CapsuleKind::Driver))
            .map(|i| ArtifactSummary {
                name: i.manifest.name.clone(),
                version: i.manifest.version.clone(),
                runtime: RuntimeType::Wasm,
            })
            .collect();
        if let Ok(lock) = Lock::read(&self.call.capsule.manifest.workdir) {
            for entry in lock.artifacts {
                if !all.iter().any(|s| s.name == entry.name) {
                    all.push(ArtifactSummary {
                        name: entry.name,
                        version: entry.version,
                        runtime: RuntimeType::Wasm,
                    });
                }
            }
        }
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    async fn pull_artifact(&mut self, name: &str, version: &str) -> anyhow::Result<ArtifactSummary> {
        let runtime = self.call.runtime.clone();
        let workdir = self.call.capsule.manifest.workdir.clone();
        let lock = Lock::read(&workdir)?;
        // The lock pins an artifact by name, whatever version is asked for: a pull must
        // bring exactly what it pinned.
        let pinned = lock.get(name).cloned();
        let stored = match runtime.store.find(name, Some(version))? {
            Some(stored) => stored,
            None => {
                // From the mesh, pinned to the lock's digest: a mismatch fails before
                // anything is written.
                let pin = match &pinned {
                    // The same version: its manifest pins the whole artifact.
                    Some(entry) if entry.version == version => {
                        Some(entry.manifest.parse().unwrap_or(entry.digest()?))
                    }
                    // Another version may only bring the pinned content.
                    Some(entry) => Some(entry.digest()?),
                    None => None,
                };
                let want = Want { name: name.into(), version: version.into(), pin };
                runtime.ports.artifacts.fetch(&want).await?
            }
        };
        // Verify everything before writing anything.
        let bytes = runtime.store.content(&stored)?;
        if let Some(pinned) = &pinned
            && pinned.digest()? != stored.content
        {
            anyhow::bail!(
                "murmur.lock pins {name}@{} to {} but {name}@{version} is {}; nothing was installed (remove its lock entry to take another version)",
                pinned.version,
                pinned.digest,
                stored.content
            );
        }
        anyhow::ensure!(
            stored.meta.runtime == Platform::Wasm,
            "only WASM artifacts can be pulled into a capsule"
        );
        let kind = match stored.meta.kind {
            kind @ (CapsuleKind::Tool | CapsuleKind::Driver) => kind,
            other => anyhow::bail!("a {other} artifact cannot be pulled as a tool"),
        };
        let loaded = runtime.load(&bytes, kind)?;
        runtime.may_pull(&self.call.capsule.manifest.name, name)?;
        let dir = workdir.join("tools").join(name);
        let file = dir.join(format!("{name}.wasm"));
        murmur_store::file::write_atomic(&file, &bytes)?;
        let entry = LockEntry {
            name: name.into(),
            version: version.into(),
            digest: stored.content.to_string(),
            manifest: stored.manifest.to_string(),
        };
        // Under the lock's guard, pinned by name as above: a concurrent pull of another
        // tool keeps its entry, one that pinned this name to other bytes meanwhile wins.
        Lock::update(&workdir, |lock| {
            if let Some(pinned) = lock.get(name)
                && pinned.digest()? != stored.content
            {
                anyhow::bail!(
                    "murmur.lock pinned {name} to {} meanwhile; nothing was installed",
                    pinned.digest
                );
            }
            lock.upsert(entry)
        })?;
        let mut manifest = CapsuleManifest::for_file(&file, kind, &runtime.options.data_dir);
        manifest.name = name.into();
        manifest.version = version.into();
        manifest.description.clone_from(&stored.meta.description);
        manifest.artifact = ArtifactRef::Digest(Digest::of(&bytes));
        manifest.workdir = dir;
        let installed = Arc::new(super::Installed { manifest, loaded });
        runtime.register_pulled(&self.call.capsule.manifest.name, installed)?;
        Ok(summary(&stored))
    }
}

fn summary(stored: &Stored) -> ArtifactSummary {
    ArtifactSummary {
        name: stored.meta.name.clone(),
        version: stored.meta.version.clone(),
        runtime: runtime_type(stored.meta.runtime),
    }
}

fn info(stored: &Stored) -> ArtifactInfo {
    ArtifactInfo {
        name: stored.meta.name.clone(),
        version: stored.meta.version.clone(),
        description: stored.meta.description.clone(),
        tags: stored.meta.tags.clone(),
        runtime: runtime_type(stored.meta.runtime),
        input_schema: stored.meta.input_schema.clone(),
        output_schema: stored.meta.output_schema.clone(),
    }
}

const fn runtime_type(platform: Platform) -> RuntimeType {
    match platform {
        Platform::Wasm => RuntimeType::Wasm,
        Platform::Native => RuntimeType::Native,
    }
}
