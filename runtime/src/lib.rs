//! The capsule runtime: wasmtime hosting the murmur WIT worlds.
//!
//! One [`wasmtime::Engine`] per node, with the pooling allocator and epoch interruption.
//! Each installed capsule (a [`CapsuleManifest`] and its component) is compiled once (and
//! cached on disk by digest), checked for the exact versioned export its kind requires,
//! and kept as an `InstancePre`. Every call gets a fresh store: WASI with nothing granted
//! but the manifest's environment, a memory limit, and an epoch deadline. Host functions
//! (`murmur:tool-registry/invoke`, `murmur:shell/execute`, `murmur:message/send`,
//! `murmur:artifact-manager/manage`, `murmur:text/chunks`, …) check the calling capsule's
//! capabilities before they do anything.
//!
//! This crate owns the wasmtime host and every host interface. It reaches the rest of the
//! node only through the [`ports`] it is built with (where artifacts come from, how a
//! message reaches a peer, how a tool reaches its task, inference, hook dispatch); it must
//! not know about libp2p, the task database or the HTTP API.
//!
//! ```no_run
//! # async fn run() -> anyhow::Result<()> {
//! use std::sync::Arc;
//! use murmur_runtime::{CapsuleManifest, Runtime, RuntimeOptions, ports::Ports};
//! use murmur_store::{ArtifactStore, CapsuleKind};
//! let dir = std::path::Path::new("data");
//! let store = Arc::new(ArtifactStore::open(&dir.join("store"))?);
//! let options = RuntimeOptions::new(dir.into(), true);
//! let runtime = Runtime::new(options, store, Ports::standalone()?)?;
//! runtime.install(CapsuleManifest::for_file(std::path::Path::new("echo.wasm"), CapsuleKind::Tool, dir))?;
//! let input = murmur_runtime::ToolInput { data: Some("hi".into()), log_path: None };
//! let run = runtime.run_tool("echo", input).await?;
//! println!("{}", run.result.status);
//! # Ok(()) }
//! ```

pub mod agents;
mod artifacts;
pub mod bindings;
pub mod brain;
mod engine;
pub mod exports;
mod http;
mod inference;
pub mod manifest;
pub mod message;
pub mod ports;
pub mod registry;
mod shell;
mod state;
mod task;
mod text;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use anyhow::Context;
pub use murmur_api::runtime::{CapsuleRun, ToolCallRecord, ToolResultJson, ToolRun};
use murmur_protocol::{Digest, HostedCapsule};
use murmur_store::ArtifactStore;
pub use murmur_store::CapsuleKind;
use wasmtime::component::{HasSelf, InstancePre, Linker, ResourceTable};
use wasmtime::{Engine, Store};
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

pub use self::agents::{Agent, AgentHook, OfferedTool};
pub use self::bindings::murmur::tool::run::{ToolInput, ToolResult};
use self::engine::{CompileCache, EpochTicker};
use self::exports::EntryPoint;
pub use self::manifest::{ArtifactRef, CapsuleManifest};
pub use self::message::DirectHttp;
use self::ports::{Ports, TaskPort};
use self::state::{CallContext, HostState, Limits};
pub use self::text::count_tokens;
use murmur_config::limits::{CAPTURE_BYTES_MAX, INSTALLED_MAX, INVOKE_DEPTH_MAX};

/// How the runtime is set up.
#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    /// The node's data directory (work directories, compile cache).
    pub data_dir: PathBuf,
    /// Use the pooling allocator (the default) rather than on-demand allocation.
    pub pooling: bool,
    /// The node config's `[credentials]`, which agents' drivers may be given by key.
    pub credentials: BTreeMap<String, murmur_config::Credential>,
}

impl RuntimeOptions {
    /// Options for a runtime on `data_dir`, with no credentials.
    #[must_use]
    pub fn new(data_dir: PathBuf, pooling: bool) -> Self {
        Self { data_dir, pooling, credentials: BTreeMap::new() }
    }
}

/// Which linker a component is linked with: what its kind may import.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Linked {
    /// WASI (nothing granted) and the capsule host interfaces.
    Plain,
    /// Also `wasi:http` (drivers).
    Http,
    /// WASI and `murmur:brain` (brains).
    Brain,
}

impl Linked {
    const fn of(kind: CapsuleKind) -> Self {
        match kind {
            CapsuleKind::Driver => Self::Http,
            CapsuleKind::Brain => Self::Brain,
            _ => Self::Plain,
        }
    }
}

/// A component compiled and linked, ready to instantiate.
pub struct Loaded {
    pub digest: Digest,
    pre: InstancePre<HostState>,
    entry: EntryPoint,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded").field("digest", &self.digest).finish_non_exhaustive()
    }
}

/// A capsule or tool the node runs.
#[derive(Debug)]
pub struct Installed {
    pub manifest: CapsuleManifest,
    pub loaded: Arc<Loaded>,
}

impl Installed {
    /// What `GET /v1/runtime/capsules` says about it.
    #[must_use]
    pub fn view(&self) -> murmur_api::runtime::InstalledView {
        let m = &self.manifest;
        murmur_api::runtime::InstalledView {
            name: m.name.clone(),
            version: m.version.clone(),
            kind: m.kind.as_str().into(),
            digest: self.loaded.digest.to_string(),
            description: m.description.clone(),
            tools_allow: m.capabilities.tools.clone(),
            shell_allow: m.capabilities.shell.clone(),
            network_allow: m.capabilities.network.iter().map(ToString::to_string).collect(),
            memory_mb: m.memory_bytes >> 20,
            deadline_ms: u64::try_from(m.deadline.as_millis()).unwrap_or(u64::MAX),
            workdir: m.workdir.display().to_string(),
        }
    }
}

/// A tool instance kept alive for repeated calls.
pub struct LiveTool {
    tool: Arc<Installed>,
    store: Store<HostState>,
    func: wasmtime::component::TypedFunc<(ToolInput,), (ToolResult,)>,
}

impl std::fmt::Debug for LiveTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveTool").field("tool", &self.tool.manifest.name).finish_non_exhaustive()
    }
}

impl LiveTool {
    /// Calls the tool's `run` on the live instance. After a trap the instance is unusable
    /// (wasmtime refuses to re-enter it); make a new one.
    pub async fn call(&mut self, input: ToolInput) -> Result<ToolResult, RunError> {
        self.store.set_epoch_deadline(engine::YIELD_TICKS);
        self.store.data_mut().call.started = Instant::now();
        self.store.data_mut().call.waited = std::time::Duration::ZERO;
        match self.func.call_async(&mut self.store, (input,)).await {
            Ok((result,)) => Ok(result),
            Err(error) => {
                let inner = self.store.data().call.runtime.clone();
                Err(inner.call_error(&self.tool.manifest.name, &self.tool, &self.store, &error))
            }
        }
    }
}

impl From<&ToolResult> for ToolResultJson {
    fn from(r: &ToolResult) -> Self {
        use self::bindings::murmur::tool::run::Status;
        let status = match r.status {
            Status::Passed => "passed",
            Status::Failed => "failed",
            Status::Error => "error",
        };
        Self {
            status: status.into(),
            summary: r.summary.clone(),
            data: r.data.clone(),
            data_path: r.data_path.clone(),
            truncated: r.truncated,
            metadata: r.metadata.clone(),
        }
    }
}

/// Why a run of a capsule or tool failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("no capsule or tool named `{0}` runs on this node")]
    NotFound(String),
    #[error("`{name}` is a {kind}, not a {expected}")]
    WrongKind { name: String, kind: &'static str, expected: &'static str },
    #[error("`{name}` exceeded its deadline of {deadline_ms} ms and was stopped")]
    Deadline { name: String, deadline_ms: u64 },
    #[error("`{name}` was stopped: {reason}")]
    Limit { name: String, reason: String },
    #[error("`{name}` trapped: {reason}")]
    Trap { name: String, reason: String },
    #[error("cannot start `{name}`: {reason}")]
    Start { name: String, reason: String },
}

/// The runtime. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Runtime {
    inner: Arc<Inner>,
}

/// The runtime's shared state (also reachable from host functions, for nested calls).
pub struct Inner {
    engine: Engine,
    linker: Linker<HostState>,
    /// `linker` plus `wasi:http`: drivers only.
    driver_linker: Linker<HostState>,
    /// WASI and `murmur:brain`: brains only.
    brain_linker: Linker<HostState>,
    cache: CompileCache,
    store: Arc<ArtifactStore>,
    ports: Ports,
    options: RuntimeOptions,
    /// Compiled and linked components, by digest and the linker they were linked with.
    loaded: Mutex<BTreeMap<(Digest, Linked), Arc<Loaded>>>,
    installed: RwLock<BTreeMap<String, Arc<Installed>>>,
    agents: RwLock<BTreeMap<String, Arc<Agent>>>,
    /// Tools a capsule pulled with `artifact-manager.pull`, by (capsule, tool): callable by
    /// that capsule only, never replacing what the node itself runs under the name.
    pulled: RwLock<BTreeMap<(String, String), Arc<Installed>>>,
    _ticker: EpochTicker,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner").field("options", &self.options).finish_non_exhaustive()
    }
}

impl Runtime {
    /// Creates the engine, the linker with every host interface, and the epoch ticker; the
    /// runtime reaches the world only through `ports`.
    pub fn new(options: RuntimeOptions, store: Arc<ArtifactStore>, ports: Ports) -> anyhow::Result<Self> {
        let engine = engine::engine(options.pooling)?;
        let mut linker: Linker<HostState> = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| anyhow::anyhow!("{e:#}"))?;
        bindings::Host_::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| state)
            .map_err(|e| anyhow::anyhow!("{e:#}"))?;
        let mut driver_linker = linker.clone();
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut driver_linker)
            .map_err(|e| anyhow::anyhow!("{e:#}"))?;
        let mut brain_linker: Linker<HostState> = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut brain_linker).map_err(|e| anyhow::anyhow!("{e:#}"))?;
        brain::bindings::Brain::add_to_linker::<HostState, HasSelf<HostState>>(&mut brain_linker, |state| {
            state
        })
        .map_err(|e| anyhow::anyhow!("{e:#}"))?;
        let cache = CompileCache::new(&options.data_dir.join("cache/components"), &engine);
        let ticker = EpochTicker::start(&engine);
        Ok(Self {
            inner: Arc::new(Inner {
                engine,
                linker,
                driver_linker,
                brain_linker,
                cache,
                store,
                ports,
                options,
                loaded: Mutex::new(BTreeMap::new()),
                installed: RwLock::new(BTreeMap::new()),
                agents: RwLock::new(BTreeMap::new()),
                pulled: RwLock::new(BTreeMap::new()),
                _ticker: ticker,
            }),
        })
    }

    /// Loads, checks and registers a component capsule; replaces one of the same name.
    /// An agent manifest goes to [`Runtime::install_agent`].
    pub fn install(&self, manifest: CapsuleManifest) -> anyhow::Result<Arc<Installed>> {
        self.inner.install(manifest)
    }

    /// Registers an agent, with the driver and hooks its manifest names loaded from the
    /// store; replaces one of the same name.
    pub fn install_agent(&self, manifest: CapsuleManifest) -> anyhow::Result<Arc<Agent>> {
        let name = manifest.name.clone();
        let agent = Arc::new(self.inner.load_agent(manifest).with_context(|| format!("agent `{name}`"))?);
        let installed = self.inner.installed();
        anyhow::ensure!(
            !installed.contains_key(&name),
            "agent `{name}`: a tool or capsule of that name already runs on this node"
        );
        let pulled = self.inner.pulled_count();
        let mut agents = self.inner.agents.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !agents.contains_key(&name) && agents.len() + installed.len() + pulled >= INSTALLED_MAX {
            anyhow::bail!("this node already runs {INSTALLED_MAX} capsules, its limit");
        }
        agents.insert(name.clone(), agent.clone());
        tracing::info!(capsule = %name, kind = "agent", hooks = agent.hooks.len(), "agent installed");
        Ok(agent)
    }

    /// Installs every manifest (`*.toml`, or `*/capsule.toml`) in `dir`; returns the
    /// problems of those that failed, each naming its file (the others still run).
    pub fn install_dir(&self, dir: &Path) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter_map(|p| {
                if p.is_dir() { Some(p.join("capsule.toml")).filter(|m| m.is_file()) } else { Some(p) }
            })
            .filter(|p| p.extension().is_some_and(|e| e == "toml"))
            .collect();
        paths.sort();
        paths
            .into_iter()
            .filter_map(|path| {
                CapsuleManifest::load(&path, &self.inner.options.data_dir)
                    .and_then(|m| {
                        if m.kind == CapsuleKind::Agent {
                            self.install_agent(m).map(drop)
                        } else {
                            self.install(m).map(drop)
                        }
                    })
                    .err()
                    .map(|e| format!("{}: {e:#}", path.display()))
            })
            .collect()
    }

    /// What the node runs, for its adverts: name, version, artifact digest.
    #[must_use]
    pub fn hosted(&self) -> Vec<HostedCapsule> {
        let components = self
            .inner
            .installed()
            .values()
            .map(|i| HostedCapsule {
                name: i.manifest.name.clone(),
                digest: Some(i.loaded.digest),
                version: i.manifest.version.clone(),
            })
            .collect::<Vec<_>>();
        // An agent has no component: it is advertised by name and version alone.
        let agents = self
            .inner
            .agents()
            .values()
            .map(|a| HostedCapsule {
                name: a.manifest.name.clone(),
                digest: None,
                version: a.manifest.version.clone(),
            })
            .collect::<Vec<_>>();
        components.into_iter().chain(agents).collect()
    }

    /// Every installed capsule.
    #[must_use]
    pub fn installed(&self) -> Vec<Arc<Installed>> {
        self.inner.installed().values().cloned().collect()
    }

    /// Runs tool `name` once with `input`.
    pub async fn run_tool(&self, name: &str, input: ToolInput) -> Result<ToolRun, RunError> {
        self.run_tool_with(name, input, None).await
    }

    /// Runs tool `name` for an A2A task: like [`Runtime::run_tool`], and the tool may ask
    /// the task for input (`murmur:task/task`) through `task`.
    pub async fn run_tool_for_task(
        &self,
        name: &str,
        input: ToolInput,
        task: Arc<dyn TaskPort>,
    ) -> Result<ToolRun, RunError> {
        self.run_tool_with(name, input, Some(task)).await
    }

    async fn run_tool_with(
        &self,
        name: &str,
        input: ToolInput,
        task: Option<Arc<dyn TaskPort>>,
    ) -> Result<ToolRun, RunError> {
        let tool = self.inner.get(name)?;
        if !matches!(tool.manifest.kind, CapsuleKind::Tool | CapsuleKind::Driver) {
            return Err(RunError::WrongKind {
                name: name.into(),
                kind: tool.manifest.kind.as_str(),
                expected: "tool",
            });
        }
        let started = Instant::now();
        let (result, records) = self.inner.call_tool(tool, input, 0, task).await?;
        Ok(ToolRun {
            result: (&result).into(),
            calls: records,
            elapsed_ms: started.elapsed().as_millis() as u64,
        })
    }

    /// Runs script capsule `name` once.
    pub async fn run_capsule(&self, name: &str) -> Result<CapsuleRun, RunError> {
        let capsule = self.inner.get(name)?;
        if capsule.manifest.kind != CapsuleKind::Capsule {
            return Err(RunError::WrongKind {
                name: name.into(),
                kind: capsule.manifest.kind.as_str(),
                expected: "capsule",
            });
        }
        self.inner.call_capsule(capsule).await
    }

    /// Instantiates tool `name` once and keeps the instance for repeated calls (each call
    /// gets a fresh deadline). For callers that call one tool many times in a row.
    pub async fn live_tool(&self, name: &str) -> Result<LiveTool, RunError> {
        let tool = self.inner.get(name)?;
        if !matches!(tool.manifest.kind, CapsuleKind::Tool | CapsuleKind::Driver) {
            return Err(RunError::WrongKind {
                name: name.into(),
                kind: tool.manifest.kind.as_str(),
                expected: "tool",
            });
        }
        let mut store = self.inner.new_store(&tool, 0, None, None);
        let run = tool.loaded.entry.run.expect("tools resolve a run function");
        let func = async {
            let instance = tool.loaded.pre.instantiate_async(&mut store).await?;
            instance.get_typed_func::<(ToolInput,), (ToolResult,)>(&mut store, &run)
        }
        .await
        .map_err(|e| RunError::Start { name: name.into(), reason: format!("{e:#}") })?;
        Ok(LiveTool { tool, store, func })
    }

    /// The node's artifact store.
    #[must_use]
    pub fn store(&self) -> &Arc<ArtifactStore> {
        &self.inner.store
    }
}

impl Inner {
    fn installed(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<Installed>>> {
        self.installed.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn agents(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<Agent>>> {
        self.agents.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn get(&self, name: &str) -> Result<Arc<Installed>, RunError> {
        self.installed().get(name).cloned().ok_or_else(|| RunError::NotFound(name.into()))
    }

    /// The tool `name` as `caller` sees it: one it pulled itself, else the node's.
    fn tool_for(&self, caller: &str, name: &str) -> Result<Arc<Installed>, RunError> {
        let pulled = self.pulled.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        match pulled.get(&(caller.to_owned(), name.to_owned())) {
            Some(tool) => Ok(tool.clone()),
            None => self.get(name),
        }
    }

    fn pulled_count(&self) -> usize {
        self.pulled.read().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    /// Registers `tool`, pulled by `caller`, for `caller` alone; it counts toward the
    /// node's [`INSTALLED_MAX`] like any install.
    fn register_pulled(&self, caller: &str, tool: Arc<Installed>) -> anyhow::Result<()> {
        let mut pulled = self.pulled.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = (caller.to_owned(), tool.manifest.name.clone());
        self.room_for_pulled(&pulled, &key)?;
        pulled.insert(key, tool);
        Ok(())
    }

    /// Whether `caller` may pull tool `name` now (checked before anything is written).
    fn may_pull(&self, caller: &str, name: &str) -> anyhow::Result<()> {
        let pulled = self.pulled.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.room_for_pulled(&pulled, &(caller.to_owned(), name.to_owned()))
    }

    fn room_for_pulled(
        &self,
        pulled: &BTreeMap<(String, String), Arc<Installed>>,
        key: &(String, String),
    ) -> anyhow::Result<()> {
        let others = self.installed().len() + self.agents().len();
        if !pulled.contains_key(key) && others + pulled.len() >= INSTALLED_MAX {
            anyhow::bail!(
                "this node already runs {INSTALLED_MAX} capsules and tools, its limit; nothing was installed"
            );
        }
        Ok(())
    }

    fn install(&self, manifest: CapsuleManifest) -> anyhow::Result<Arc<Installed>> {
        anyhow::ensure!(
            manifest.kind != CapsuleKind::Agent,
            "capsule `{}` is an agent, which has no component to load (install it as an agent)",
            manifest.name
        );
        anyhow::ensure!(
            !self.agents().contains_key(&manifest.name),
            "capsule `{}`: an agent of that name already runs on this node",
            manifest.name
        );
        let bytes = self.artifact_bytes(&manifest.artifact)?;
        let loaded =
            self.load(&bytes, manifest.kind).with_context(|| format!("capsule `{}`", manifest.name))?;
        std::fs::create_dir_all(&manifest.workdir)
            .with_context(|| format!("cannot create work directory {}", manifest.workdir.display()))?;
        let installed = Arc::new(Installed { manifest, loaded });
        let others = self.agents().len() + self.pulled_count();
        let mut all = self.installed.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !all.contains_key(&installed.manifest.name) && all.len() + others >= INSTALLED_MAX {
            anyhow::bail!("this node already runs {INSTALLED_MAX} capsules, its limit");
        }
        all.insert(installed.manifest.name.clone(), installed.clone());
        tracing::info!(capsule = %installed.manifest.name, kind = installed.manifest.kind.as_str(), artifact = %installed.loaded.digest, "capsule installed");
        Ok(installed)
    }

    fn artifact_bytes(&self, artifact: &ArtifactRef) -> anyhow::Result<Vec<u8>> {
        match artifact {
            ArtifactRef::ManifestOnly => anyhow::bail!("an agent has no component to load"),
            ArtifactRef::File(path) => {
                let len = std::fs::metadata(path)
                    .with_context(|| format!("cannot read artifact {}", path.display()))?
                    .len();
                anyhow::ensure!(
                    len <= murmur_config::limits::ARTIFACT_CONTENT_BYTES_MAX,
                    "artifact {} is too large ({len} bytes)",
                    path.display()
                );
                std::fs::read(path).with_context(|| format!("cannot read artifact {}", path.display()))
            }
            ArtifactRef::Digest(digest) => {
                let stored = self
                    .store
                    .by_digest(digest)?
                    .with_context(|| format!("artifact {digest} is not in the store"))?;
                self.store.content(&stored)
            }
            ArtifactRef::Named { name, version } => {
                let stored = self
                    .store
                    .find(name, Some(version))?
                    .with_context(|| format!("artifact {name}@{version} is not in the store"))?;
                // `mur install` pinned what it installed in the node's lock.
                murmur_store::lock::Lock::read(&self.options.data_dir)?.check(
                    name,
                    version,
                    &stored.content,
                    &stored.manifest,
                )?;
                self.store.content(&stored)
            }
        }
    }

    /// Compiles (or finds) a component and checks its entry point for `kind`.
    fn load(&self, bytes: &[u8], kind: CapsuleKind) -> anyhow::Result<Arc<Loaded>> {
        let digest = Digest::of(bytes);
        let linked = Linked::of(kind);
        if let Some(loaded) =
            self.loaded.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&(digest, linked))
        {
            exports::resolve(&self.engine, loaded.pre.component(), kind).map_err(anyhow::Error::msg)?;
            return Ok(loaded.clone());
        }
        let component = self.cache.load(&self.engine, &digest, bytes)?;
        let entry = exports::resolve(&self.engine, &component, kind).map_err(anyhow::Error::msg)?;
        let linker = match linked {
            Linked::Plain => &self.linker,
            Linked::Http => &self.driver_linker,
            Linked::Brain => &self.brain_linker,
        };
        let pre = linker.instantiate_pre(&component).map_err(|e| {
            let hint = match linked {
                Linked::Plain => {
                    " (wasi:http is linked for inference drivers only, murmur:brain for brains only)"
                }
                Linked::Http | Linked::Brain => "",
            };
            anyhow::anyhow!("cannot link: {e:#}{hint}")
        })?;
        let loaded = Arc::new(Loaded { digest, pre, entry });
        self.loaded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert((digest, linked), loaded.clone());
        Ok(loaded)
    }

    /// A fresh store for a call into `capsule`.
    fn new_store(
        self: &Arc<Self>,
        capsule: &Arc<Installed>,
        depth: u32,
        stdio: Option<(MemoryOutputPipe, MemoryOutputPipe)>,
        task: Option<Arc<dyn TaskPort>>,
    ) -> Store<HostState> {
        let manifest = &capsule.manifest;
        let mut wasi = WasiCtxBuilder::new();
        wasi.allow_tcp(false).allow_udp(false).allow_ip_name_lookup(false);
        for (key, value) in &manifest.env {
            wasi.env(key, value);
        }
        if let Some((out, err)) = stdio {
            wasi.stdout(out).stderr(err);
        }
        let gate =
            http::Gate { capsule: manifest.name.clone(), allow: manifest.capabilities.network.clone() };
        let state = HostState {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            http: wasmtime_wasi_http::WasiHttpCtx::new(),
            gate,
            limits: Limits {
                memory_bytes: usize::try_from(manifest.memory_bytes).unwrap_or(usize::MAX),
                table_elements: 100_000,
                hit: None,
            },
            call: CallContext {
                runtime: self.clone(),
                capsule: capsule.clone(),
                depth,
                records: Vec::new(),
                started: Instant::now(),
                waited: std::time::Duration::ZERO,
                task,
                inference: None,
                brain: None,
            },
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limits);
        store.set_epoch_deadline(engine::YIELD_TICKS);
        // The deadline counts running time, not time spent waiting for task input: every
        // few ticks the callback compares what ran with the deadline.
        let deadline = manifest.deadline;
        store.epoch_deadline_callback(move |store| {
            let call = &store.data().call;
            let ran = call.started.elapsed().saturating_sub(call.waited);
            if ran >= deadline {
                Ok(wasmtime::UpdateDeadline::Interrupt)
            } else {
                // A long run yields to the executor every few ticks: other tasks go on, and
                // whoever awaits it may drop it (a canceled agent task stops its tool call).
                Ok(wasmtime::UpdateDeadline::Yield(engine::ticks(deadline - ran).min(engine::YIELD_TICKS)))
            }
        });
        store
    }

    /// Calls a tool's `run`, returning its result and the tool calls made.
    async fn call_tool(
        self: &Arc<Self>,
        tool: Arc<Installed>,
        input: ToolInput,
        depth: u32,
        task: Option<Arc<dyn TaskPort>>,
    ) -> Result<(ToolResult, Vec<ToolCallRecord>), RunError> {
        let name = tool.manifest.name.clone();
        let mut store = self.new_store(&tool, depth, None, task);
        let started = Instant::now();
        let outcome = async {
            let instance = tool.loaded.pre.instantiate_async(&mut store).await?;
            let run = tool.loaded.entry.run.as_ref().expect("tools resolve a run function");
            let func = instance.get_typed_func::<(ToolInput,), (ToolResult,)>(&mut store, run)?;
            let (result,) = func.call_async(&mut store, (input,)).await?;
            wasmtime::Result::Ok(result)
        }
        .await;
        let result = outcome.map_err(|err| self.call_error(&name, &tool, &store, &err))?;
        let mut records = vec![ToolCallRecord::new(&name, &ToolResultJson::from(&result), started.elapsed())];
        records.append(&mut store.data_mut().call.records);
        Ok((result, records))
    }

    async fn call_capsule(self: &Arc<Self>, capsule: Arc<Installed>) -> Result<CapsuleRun, RunError> {
        let name = capsule.manifest.name.clone();
        let (out, err) = (MemoryOutputPipe::new(CAPTURE_BYTES_MAX), MemoryOutputPipe::new(CAPTURE_BYTES_MAX));
        let mut store = self.new_store(&capsule, 0, Some((out.clone(), err.clone())), None);
        let started = Instant::now();
        let outcome = async {
            let instance = capsule.loaded.pre.instantiate_async(&mut store).await?;
            let run = capsule.loaded.entry.run.as_ref().expect("capsules resolve a run function");
            let func = instance.get_typed_func::<(), ()>(&mut store, run)?;
            func.call_async(&mut store, ()).await?;
            wasmtime::Result::Ok(())
        }
        .await;
        let text = |pipe: &MemoryOutputPipe| String::from_utf8_lossy(&pipe.contents()).into_owned();
        if let Err(error) = outcome {
            let mut failure = self.call_error(&name, &capsule, &store, &error);
            if let RunError::Trap { reason, .. } = &mut failure {
                let stderr = text(&err);
                if !stderr.trim().is_empty() {
                    reason.push_str(&format!("; stderr: {}", stderr.trim()));
                }
            }
            return Err(failure);
        }
        Ok(CapsuleRun {
            stdout: text(&out),
            stderr: text(&err),
            calls: std::mem::take(&mut store.data_mut().call.records),
            elapsed_ms: started.elapsed().as_millis() as u64,
        })
    }

    /// Says why a call failed: deadline, a limit, or another trap.
    fn call_error(
        &self,
        name: &str,
        capsule: &Installed,
        store: &Store<HostState>,
        error: &wasmtime::Error,
    ) -> RunError {
        if let Some(limit) = &store.data().limits.hit {
            return RunError::Limit { name: name.into(), reason: limit.clone() };
        }
        if matches!(error.downcast_ref::<wasmtime::Trap>(), Some(wasmtime::Trap::Interrupt)) {
            return RunError::Deadline {
                name: name.into(),
                deadline_ms: capsule.manifest.deadline.as_millis() as u64,
            };
        }
        RunError::Trap { name: name.into(), reason: format!("{error:#}") }
    }
}
