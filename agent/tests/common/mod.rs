//! What the agent crate's integration tests share: guest components from `capsules/`
//! (run `bash capsules/build.sh` first; `tests/run.sh` does), a node-like runtime on a
//! temporary data directory with `wordcount` installed, and a task that never asks for
//! input.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use murmur_runtime::ports::{PortFuture, Ports, TaskPort};
use murmur_runtime::{CapsuleManifest, Runtime, RuntimeOptions};
use murmur_store::{ArtifactMeta, ArtifactStore, CapsuleKind, Platform};

pub fn wasm(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../capsules/target/wasm32-wasip2/release")
        .join(format!("{name}.wasm"));
    assert!(path.is_file(), "{} is missing: run `bash capsules/build.sh`", path.display());
    path
}

/// A runtime on its own data directory, with the `wordcount` tool installed.
pub struct Node {
    pub dir: tempfile::TempDir,
    pub runtime: Runtime,
}

impl Node {
    pub fn new() -> Self {
        Self::with_credentials(std::collections::BTreeMap::new())
    }

    /// A node whose config holds `credentials` (its `[credentials]`).
    pub fn with_credentials(
        credentials: std::collections::BTreeMap<String, murmur_config::Credential>,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(ArtifactStore::open(&dir.path().join("store")).unwrap());
        let mut options = RuntimeOptions::new(dir.path().to_path_buf(), false);
        options.credentials = credentials;
        let runtime = Runtime::new(options, store, Ports::standalone().unwrap()).unwrap();
        let tool = format!(
            "name = \"wordcount\"\nversion = \"1.0.0\"\nkind = \"tool\"\nartifact = \"{}\"\ndescription = \"counts words\"\n",
            wasm("wordcount").display()
        );
        runtime.install(CapsuleManifest::parse(&tool, Path::new("/"), dir.path()).unwrap()).unwrap();
        Self { dir, runtime }
    }

    /// Adds guest `wasm_name` to the store as `name@0.1.0` of `kind`.
    pub fn stock(&self, name: &str, wasm_name: &str, kind: CapsuleKind) {
        let meta = ArtifactMeta {
            name: name.into(),
            version: "0.1.0".into(),
            kind,
            runtime: Platform::Wasm,
            description: String::new(),
            tags: vec![],
            input_schema: None,
            output_schema: None,
        };
        self.runtime.store().add(&meta, &std::fs::read(wasm(wasm_name)).unwrap(), None).unwrap();
    }

    /// Installs the agent `manifest` (TOML).
    #[allow(
        dead_code,
        reason = "each test crate compiles this module; the driver tests use try_install_agent"
    )]
    pub fn install_agent(&self, manifest: &str) -> Arc<murmur_runtime::Agent> {
        self.try_install_agent(manifest).unwrap()
    }

    /// Installs the agent `manifest` (TOML), or says why not.
    pub fn try_install_agent(&self, manifest: &str) -> anyhow::Result<Arc<murmur_runtime::Agent>> {
        let manifest = CapsuleManifest::parse(manifest, Path::new("/"), self.dir.path())?;
        self.runtime.install_agent(manifest)
    }
}

/// A task that never asks for input.
pub struct NoInput;

impl TaskPort for NoInput {
    fn request_input(&self, _prompt: String, _timeout: Duration) -> PortFuture<'_, Result<String, String>> {
        Box::pin(async { Err("no input here".to_owned()) })
    }

    fn traceparent(&self) -> Option<String> {
        None
    }
}
