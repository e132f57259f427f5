//! Capsule manifests: what a node runs and what each capsule may do.
//!
//! ```toml
//! name = "pipeline"
//! version = "0.1.0"
//! kind = "capsule"                 # tool | capsule | driver | hook | agent
//! artifact = "pipeline.wasm"       # a file (relative to this manifest), or sha256:<hex>
//!                                  # or name@version in the node's artifact store
//!                                  # (agents have none: they are manifest-only)
//! description = "counts words and reports them to a peer"
//!
//! [capabilities]
//! tools = ["wordcount"]            # tools.allow: tools it may invoke (trailing * globs)
//! shell = { allow = ["wc"] }       # shell.allow: binaries it may run (resolved on PATH)
//! network = { allow = ["localhost:*", "mesh://echo"] }   # network.allow: peer URLs
//!
//! [limits]
//! memory_mb = 64                   # linear memory, 1..=1024
//! deadline_ms = 10000              # wall time per call, 1..=600000
//!
//! [wasi]
//! env = { PIPELINE_PEER = "127.0.0.1:9000" }   # environment the guest sees; nothing else
//!
//! workdir = "work/pipeline"        # relative to the data directory; default work/<name>
//! grant = "pipeline.grant"         # signed allowlist for mesh sends (mur grant sign)
//!
//! [lifecycle]
//! audience = "granted"             # local | granted | mesh; default: the node's runtime.audience
//! task_acceptance = "queue"        # none | single | queue
//! input_timeout_secs = 300         # request-input wait before the call traps
//! workers = 4                      # tasks run at once (queue)
//! ```
//!
//! An agent (`kind = "agent"`) has no `artifact`; it thinks through a driver:
//!
//! ```toml
//! [inference]
//! model = "gpt-4o-mini"
//! driver = { artifact = "openai-driver@0.1.0" }   # a `driver` component, NAME@VERSION
//! system_prompt = "You are terse."
//! max_turns = 16                   # inference turns per run of a task's loop, 1..=256
//! max_task_reopens = 1             # reopen-task commits per task, 0..=16
//! context_window = 128000          # tokens
//! compaction = { threshold = 0.8, model = "gpt-4o-mini" }   # fraction of the window
//! params = { temperature = 0 }     # passed to the driver unread
//! credentials = { OPENAI_API_KEY = "env:MURMUR_OPENAI_KEY" }   # driver env ← node env
//!                                  # or "config:KEY": the node config's [credentials]
//!
//! [[hooks]]
//! artifact = "audit@0.1.0"         # a `hook` component, NAME@VERSION
//! execution_mode = "sync"          # sync (in order, may commit) | async (detached)
//! ```
//!
//! Unknown keys are errors; each problem names its key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use murmur_protocol::names::{check_capsule_name, check_version};
/// How a capsule takes A2A tasks (`lifecycle.task_acceptance`); the protocol's owner
/// machine decides by it.
pub use murmur_protocol::owner::Acceptance;
/// Whose tasks a capsule takes (`lifecycle.audience`).
pub use murmur_protocol::owner::Audience;
use murmur_protocol::{AllowPattern, Digest};
use serde::Deserialize;

use murmur_config::ConfigErrors;
use murmur_config::limits::{
    AGENT_CONTEXT_WINDOW_MAX, AGENT_HOOKS_MAX, AGENT_REOPENS_MAX, AGENT_TURNS_MAX, DEADLINE_MS_MAX,
    MANIFEST_ALLOW_ENTRIES_MAX, MANIFEST_BYTES_MAX, MEMORY_MB_MAX,
};
use murmur_store::CapsuleKind;

/// The `[lifecycle]` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lifecycle {
    /// Whose tasks it takes; `None`: the node's `runtime.audience`.
    pub audience: Option<Audience>,
    pub task_acceptance: Acceptance,
    /// How long `murmur:task/task.request-input` waits for a reply before the call traps.
    pub input_timeout: Duration,
    /// Tasks run at once (queue mode).
    pub workers: usize,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Self {
            audience: None,
            task_acceptance: Acceptance::Queue,
            input_timeout: Duration::from_secs(300),
            workers: 4,
        }
    }
}

/// Where a capsule's component comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArtifactRef {
    /// None: an agent is its manifest.
    ManifestOnly,
    /// A file on this machine.
    File(PathBuf),
    /// Content in the artifact store, by digest.
    Digest(Digest),
    /// An artifact in the store, by name and version.
    Named { name: String, version: String },
}

/// What a capsule may do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// `tools.allow`.
    pub tools: Vec<String>,
    /// `shell.allow`.
    pub shell: Vec<String>,
    /// `network.allow`.
    pub network: Vec<AllowPattern>,
}

impl Capabilities {
    /// Whether tool `name` may be invoked (exact, or a trailing `*` glob).
    #[must_use]
    pub fn allows_tool(&self, name: &str) -> bool {
        self.tools.iter().any(|entry| match entry.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => entry == name,
        })
    }

    /// The capabilities as JSON, for diagnostics.
    #[must_use]
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "tools": { "allow": self.tools },
            "shell": { "allow": self.shell },
            "network": { "allow": self.network.iter().map(ToString::to_string).collect::<Vec<_>>() },
        })
        .to_string()
    }
}

/// A validated manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapsuleManifest {
    pub name: String,
    pub version: String,
    pub kind: CapsuleKind,
    pub artifact: ArtifactRef,
    pub description: String,
    pub capabilities: Capabilities,
    pub memory_bytes: u64,
    pub deadline: Duration,
    pub env: BTreeMap<String, String>,
    /// Absolute work directory.
    pub workdir: PathBuf,
    pub lifecycle: Lifecycle,
    /// The capsule's grant (signed allowlist) for sending tasks across the mesh.
    pub grant: Option<murmur_protocol::Envelope>,
    /// For `kind = "agent"`: its `[inference]` and `[[hooks]]`.
    pub agent: Option<AgentSpec>,
}

/// An artifact named `NAME@VERSION`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedArtifact {
    pub name: String,
    pub version: String,
}

impl std::fmt::Display for NamedArtifact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.name, self.version)
    }
}

/// What an agent's manifest says about its thinking.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentSpec {
    pub model: String,
    /// `inference.driver.artifact`; without one every turn fails naming the key.
    pub driver: Option<NamedArtifact>,
    pub system_prompt: Option<String>,
    pub max_turns: u32,
    pub max_task_reopens: u32,
    pub context_window: u64,
    pub compaction_threshold: f64,
    pub compaction_model: Option<String>,
    /// `inference.params` as JSON, passed to the driver unread.
    pub params: serde_json::Value,
    /// `inference.credentials`: driver environment variables and where each is read from
    /// when the agent is installed (`NAME = "env:VAR"` or `NAME = "config:KEY"`).
    pub credentials: BTreeMap<String, CredentialSource>,
    pub hooks: Vec<HookSpec>,
}

/// Where a driver's credential comes from: never the artifact or the manifest itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CredentialSource {
    /// The node's environment variable (`env:VAR`).
    Env(String),
    /// The node config's `[credentials]` entry (`config:KEY`).
    Config(String),
}

/// One `[[hooks]]` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookSpec {
    pub artifact: NamedArtifact,
    pub execution_mode: ExecutionMode,
}

/// How a hook runs: in the loop, in order, able to commit its honoured arm (`sync`), or
/// detached, observing only (`async`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecutionMode {
    #[default]
    Sync,
    Async,
}

// `CapsuleManifest` compares with `Eq` elsewhere; an agent's threshold is a finite number
// in (0, 1] (checked at parse), so equality is total.
impl Eq for AgentSpec {}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    name: String,
    version: String,
    kind: CapsuleKind,
    artifact: Option<String>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    capabilities: RawCapabilities,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    wasi: RawWasi,
    workdir: Option<PathBuf>,
    #[serde(default)]
    lifecycle: RawLifecycle,
    grant: Option<PathBuf>,
    inference: Option<RawInference>,
    #[serde(default)]
    hooks: Vec<RawHook>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInference {
    model: String,
    driver: Option<RawDriver>,
    system_prompt: Option<String>,
    #[serde(default = "default_max_turns")]
    max_turns: u32,
    #[serde(default = "default_max_task_reopens")]
    max_task_reopens: u32,
    #[serde(default = "default_context_window")]
    context_window: u64,
    #[serde(default)]
    compaction: RawCompaction,
    #[serde(default)]
    params: toml::Table,
    #[serde(default)]
    credentials: BTreeMap<String, String>,
}

const fn default_max_turns() -> u32 {
    16
}

const fn default_max_task_reopens() -> u32 {
    1
}

const fn default_context_window() -> u64 {
    128_000
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDriver {
    artifact: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawCompaction {
    threshold: f64,
    model: Option<String>,
}

impl Default for RawCompaction {
    fn default() -> Self {
        Self { threshold: 0.8, model: None }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHook {
    artifact: String,
    #[serde(default)]
    execution_mode: ExecutionMode,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawLifecycle {
    audience: Option<Audience>,
    task_acceptance: Acceptance,
    input_timeout_secs: u64,
    workers: usize,
}

impl Default for RawLifecycle {
    fn default() -> Self {
        Self { audience: None, task_acceptance: Acceptance::Queue, input_timeout_secs: 300, workers: 4 }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCapabilities {
    #[serde(default)]
    tools: Vec<String>,
    #[serde(default)]
    shell: RawAllow,
    #[serde(default)]
    network: RawAllow,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAllow {
    #[serde(default)]
    allow: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawLimits {
    memory_mb: u64,
    deadline_ms: u64,
}

impl Default for RawLimits {
    fn default() -> Self {
        Self { memory_mb: 64, deadline_ms: 10_000 }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWasi {
    #[serde(default)]
    env: BTreeMap<String, String>,
}

impl CapsuleManifest {
    /// Reads and validates the manifest at `path`; relative artifact paths are resolved
    /// against its directory and the work directory against `data_dir`.
    pub fn load(path: &Path, data_dir: &Path) -> anyhow::Result<Self> {
        let len = std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?.len();
        anyhow::ensure!(
            len <= MANIFEST_BYTES_MAX,
            "{} is larger than {MANIFEST_BYTES_MAX} bytes",
            path.display()
        );
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, base, data_dir).with_context(|| format!("manifest {}", path.display()))
    }

    /// Parses manifest text; `base` resolves a relative artifact path.
    pub fn parse(text: &str, base: &Path, data_dir: &Path) -> anyhow::Result<Self> {
        let raw: Raw = toml::from_str(text).map_err(|e| anyhow::anyhow!("{}", e.to_string().trim_end()))?;
        let mut errors = Vec::new();
        let mut err = |key: &str, msg: String| errors.push(format!("manifest key `{key}`: {msg}"));
        if let Err(msg) = check_capsule_name(&raw.name) {
            err("name", msg);
        }
        if let Err(msg) = check_version(&raw.version) {
            err("version", msg);
        }
        let artifact = match (&raw.artifact, raw.kind) {
            (_, CapsuleKind::Data) => {
                err(
                    "kind",
                    "`data` artifacts run nothing: a capsule is a tool, capsule, driver, hook or agent"
                        .into(),
                );
                ArtifactRef::ManifestOnly
            }
            (_, CapsuleKind::Brain) => {
                err(
                    "kind",
                    "a brain is not a capsule: name it in the node's config, `[[agents]] brain = …`".into(),
                );
                ArtifactRef::ManifestOnly
            }
            (None, CapsuleKind::Agent) => ArtifactRef::ManifestOnly,
            (Some(_), CapsuleKind::Agent) => {
                err("artifact", "an agent has no component of its own: remove the key, and name its driver in inference.driver.artifact".into());
                ArtifactRef::ManifestOnly
            }
            (None, kind) => {
                err(
                    "artifact",
                    format!("a {kind} needs its component: a file, sha256:<hex> or name@version"),
                );
                ArtifactRef::ManifestOnly
            }
            (Some(text), _) => parse_artifact(text, base).unwrap_or_else(|msg| {
                err("artifact", msg);
                ArtifactRef::ManifestOnly
            }),
        };
        let agent = parse_agent(&raw, &mut err);
        let caps = &raw.capabilities;
        for (key, len) in [
            ("capabilities.tools", caps.tools.len()),
            ("capabilities.shell.allow", caps.shell.allow.len()),
            ("capabilities.network.allow", caps.network.allow.len()),
            ("wasi.env", raw.wasi.env.len()),
        ] {
            if len > MANIFEST_ALLOW_ENTRIES_MAX {
                err(key, format!("has {len} entries, more than {MANIFEST_ALLOW_ENTRIES_MAX}"));
            }
        }
        for tool in &caps.tools {
            let name = tool.strip_suffix('*').unwrap_or(tool);
            if !(name.is_empty() && tool == "*")
                && let Err(msg) = check_capsule_name(name)
            {
                err("capabilities.tools", msg);
            }
        }
        for binary in &caps.shell.allow {
            if binary.is_empty() || binary.contains('\0') {
                err("capabilities.shell.allow", "entries must be non-empty, without NUL".into());
            }
        }
        let network: Vec<AllowPattern> = caps
            .network
            .allow
            .iter()
            .filter_map(|p| {
                p.parse()
                    .map_err(|e: murmur_protocol::UrlError| err("capabilities.network.allow", e.to_string()))
                    .ok()
            })
            .collect();
        if !(1..=MEMORY_MB_MAX).contains(&raw.limits.memory_mb) {
            err("limits.memory_mb", format!("must be 1..={MEMORY_MB_MAX}"));
        }
        if !(1..=DEADLINE_MS_MAX).contains(&raw.limits.deadline_ms) {
            err("limits.deadline_ms", format!("must be 1..={DEADLINE_MS_MAX}"));
        }
        for key in raw.wasi.env.keys() {
            if key.is_empty() || key.contains(['=', '\0']) {
                err("wasi.env", format!("`{key}` is not a valid variable name"));
            }
        }
        if !(1..=86_400).contains(&raw.lifecycle.input_timeout_secs) {
            err("lifecycle.input_timeout_secs", "must be 1..=86400".into());
        }
        if !(1..=64).contains(&raw.lifecycle.workers) {
            err("lifecycle.workers", "must be 1..=64".into());
        }
        let grant = raw.grant.as_ref().and_then(|path| {
            let path = if path.is_absolute() { path.clone() } else { base.join(path) };
            read_grant(&path).map_err(|e| err("grant", e)).ok()
        });
        if !errors.is_empty() {
            return Err(ConfigErrors(errors).into());
        }
        let workdir = match raw.workdir {
            Some(dir) if dir.is_absolute() => dir,
            Some(dir) => data_dir.join(dir),
            None => data_dir.join("work").join(&raw.name),
        };
        Ok(Self {
            capabilities: Capabilities {
                tools: caps.tools.clone(),
                shell: caps.shell.allow.clone(),
                network,
            },
            name: raw.name,
            version: raw.version,
            kind: raw.kind,
            artifact,
            description: raw.description,
            memory_bytes: raw.limits.memory_mb << 20,
            deadline: Duration::from_millis(raw.limits.deadline_ms),
            env: raw.wasi.env,
            workdir,
            lifecycle: Lifecycle {
                audience: raw.lifecycle.audience,
                task_acceptance: raw.lifecycle.task_acceptance,
                input_timeout: Duration::from_secs(raw.lifecycle.input_timeout_secs),
                workers: raw.lifecycle.workers,
            },
            grant,
            agent,
        })
    }

    /// A manifest for a component run directly (`mur tool run FILE`): no capabilities,
    /// default limits.
    #[must_use]
    pub fn for_file(path: &Path, kind: CapsuleKind, data_dir: &Path) -> Self {
        let stem =
            path.file_stem().and_then(|s| s.to_str()).unwrap_or("tool").to_lowercase().replace('_', "-");
        let name = if check_capsule_name(&stem).is_ok() { stem } else { "tool".into() };
        Self {
            workdir: data_dir.join("work").join(&name),
            name,
            version: "0.0.0".into(),
            kind,
            artifact: ArtifactRef::File(path.to_path_buf()),
            description: String::new(),
            capabilities: Capabilities::default(),
            memory_bytes: 64 << 20,
            deadline: Duration::from_secs(10),
            env: BTreeMap::new(),
            lifecycle: Lifecycle::default(),
            grant: None,
            agent: None,
        }
    }
}

/// `[inference]` and `[[hooks]]`: required and allowed for agents only.
fn parse_agent(raw: &Raw, err: &mut impl FnMut(&str, String)) -> Option<AgentSpec> {
    if raw.kind != CapsuleKind::Agent {
        if raw.inference.is_some() {
            err("inference", format!("only agents think through a driver; this is a {}", raw.kind));
        }
        if !raw.hooks.is_empty() {
            err("hooks", format!("only agents have lifecycle hooks; this is a {}", raw.kind));
        }
        return None;
    }
    let Some(inference) = &raw.inference else {
        err("inference", "an agent needs an [inference] table with at least `model`".into());
        return None;
    };
    if inference.model.is_empty() {
        err("inference.model", "must name the model".into());
    }
    let driver = inference
        .driver
        .as_ref()
        .and_then(|d| named_artifact(&d.artifact).map_err(|msg| err("inference.driver.artifact", msg)).ok());
    if !(1..=AGENT_TURNS_MAX).contains(&inference.max_turns) {
        err("inference.max_turns", format!("must be 1..={AGENT_TURNS_MAX}"));
    }
    if inference.max_task_reopens > AGENT_REOPENS_MAX {
        err("inference.max_task_reopens", format!("must be 0..={AGENT_REOPENS_MAX}"));
    }
    if !(1..=AGENT_CONTEXT_WINDOW_MAX).contains(&inference.context_window) {
        err("inference.context_window", format!("must be 1..={AGENT_CONTEXT_WINDOW_MAX} tokens"));
    }
    let threshold = inference.compaction.threshold;
    if !(threshold.is_finite() && threshold > 0.0 && threshold <= 1.0) {
        err("inference.compaction.threshold", "must be a fraction of the context window in (0, 1]".into());
    }
    let mut credentials = BTreeMap::new();
    for (name, source) in &inference.credentials {
        let plain = |text: &str| !text.is_empty() && !text.contains(['=', '\0']);
        let parsed = match (source.split_once(':'), plain(name)) {
            (Some(("env", var)), true) if plain(var) => Some(CredentialSource::Env(var.to_owned())),
            (Some(("config", key)), true) if murmur_config::credential_key(key) => {
                Some(CredentialSource::Config(key.to_owned()))
            }
            _ => None,
        };
        match parsed {
            Some(parsed) => {
                credentials.insert(name.clone(), parsed);
            }
            None => err(
                "inference.credentials",
                format!(
                    "`{name}` must be read from the node: `{name} = \"env:VARIABLE\"` (its environment) or `{name} = \"config:KEY\"` (its config's [credentials])"
                ),
            ),
        }
    }
    if raw.hooks.len() > AGENT_HOOKS_MAX {
        err("hooks", format!("has {} entries, more than {AGENT_HOOKS_MAX}", raw.hooks.len()));
    }
    let hooks = raw
        .hooks
        .iter()
        .filter_map(|h| {
            let artifact = named_artifact(&h.artifact).map_err(|msg| err("hooks.artifact", msg)).ok()?;
            Some(HookSpec { artifact, execution_mode: h.execution_mode })
        })
        .collect();
    // TOML values are JSON values (dates become strings).
    let params = serde_json::to_value(&inference.params).unwrap_or(serde_json::Value::Null);
    Some(AgentSpec {
        model: inference.model.clone(),
        driver,
        system_prompt: inference.system_prompt.clone(),
        max_turns: inference.max_turns,
        max_task_reopens: inference.max_task_reopens,
        context_window: inference.context_window,
        compaction_threshold: threshold,
        compaction_model: inference.compaction.model.clone(),
        params: if inference.params.is_empty() { serde_json::Value::Null } else { params },
        credentials,
        hooks,
    })
}

fn named_artifact(text: &str) -> Result<NamedArtifact, String> {
    let (name, version) =
        text.split_once('@').ok_or_else(|| format!("`{text}` is not NAME@VERSION of an artifact"))?;
    check_capsule_name(name)?;
    check_version(version)?;
    Ok(NamedArtifact { name: name.into(), version: version.into() })
}

/// Reads a grant file (a signed envelope of kind `grant`); the signature is checked where
/// it is used, against the node's trusted authorities.
fn read_grant(path: &Path) -> Result<murmur_protocol::Envelope, String> {
    let bytes = murmur_store::file::read_bounded(path, murmur_protocol::limits::ENVELOPE_BYTES_MAX)
        .map_err(|e| format!("{e:#}"))?;
    let envelope = murmur_protocol::Envelope::decode(&bytes)
        .map_err(|e| format!("{} is not a grant file: {e}", path.display()))?;
    if envelope.kind() != murmur_protocol::DocKind::Grant {
        return Err(format!("{} holds a {} document, not a grant", path.display(), envelope.kind()));
    }
    Ok(envelope)
}

fn parse_artifact(text: &str, base: &Path) -> Result<ArtifactRef, String> {
    if text.starts_with("sha256:") {
        return text.parse::<Digest>().map(ArtifactRef::Digest).map_err(|e| e.to_string());
    }
    if let Some((name, version)) = text.split_once('@')
        && !name.contains('/')
    {
        check_capsule_name(name)?;
        check_version(version)?;
        return Ok(ArtifactRef::Named { name: name.into(), version: version.into() });
    }
    if text.is_empty() {
        return Err("must name a file, sha256:<hex> or name@version".into());
    }
    let path = Path::new(text);
    Ok(ArtifactRef::File(if path.is_absolute() { path.to_path_buf() } else { base.join(path) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> anyhow::Result<CapsuleManifest> {
        CapsuleManifest::parse(text, Path::new("/m"), Path::new("/data"))
    }

    #[test]
    fn a_full_manifest_parses() {
        let m = parse(
            r#"
name = "pipeline"
version = "0.1.0"
kind = "capsule"
artifact = "pipeline.wasm"
[capabilities]
tools = ["wordcount", "text-*"]
shell = { allow = ["wc"] }
network = { allow = ["localhost:*"] }
[limits]
memory_mb = 32
deadline_ms = 500
[wasi]
env = { A = "b" }
"#,
        )
        .unwrap();
        assert_eq!(m.artifact, ArtifactRef::File("/m/pipeline.wasm".into()));
        assert_eq!(m.memory_bytes, 32 << 20);
        assert!(m.capabilities.allows_tool("text-chunks") && !m.capabilities.allows_tool("echo"));
        assert_eq!(m.workdir, PathBuf::from("/data/work/pipeline"));
        assert_eq!(m.env["A"], "b");
    }

    #[test]
    fn artifacts_can_be_digests_or_store_names() {
        let digest = Digest::of(b"x");
        let m = parse(&format!("name = \"a\"\nversion = \"1\"\nkind = \"tool\"\nartifact = \"{digest}\"\n"))
            .unwrap();
        assert_eq!(m.artifact, ArtifactRef::Digest(digest));
        let m = parse("name = \"a\"\nversion = \"1\"\nkind = \"tool\"\nartifact = \"wordcount@1.0.0\"\n")
            .unwrap();
        assert_eq!(m.artifact, ArtifactRef::Named { name: "wordcount".into(), version: "1.0.0".into() });
    }

    #[test]
    fn problems_name_their_keys() {
        let err = parse(
            "name = \"Bad\"\nversion = \"1\"\nkind = \"tool\"\nartifact = \"x\"\n[limits]\nmemory_mb = 0\n[capabilities]\nnetwork = { allow = [\"mesh://a*b\"] }\n",
        )
        .unwrap_err();
        let text = format!("{err:#}");
        for key in ["`name`", "`limits.memory_mb`", "`capabilities.network.allow`"] {
            assert!(text.contains(key), "{key} missing in {text}");
        }
        let err = parse("name = \"a\"\nversion = \"1\"\nkind = \"tool\"\nartifact = \"x\"\nsecret = 1\n")
            .unwrap_err();
        assert!(format!("{err:#}").contains("unknown field `secret`"));
        let err = parse("name = \"a\"\nversion = \"1\"\nkind = \"daemon\"\nartifact = \"x\"\n").unwrap_err();
        assert!(format!("{err:#}").contains("unknown variant `daemon`"));
        let err = parse("name = \"a\"\nversion = \"1\"\nkind = \"agent\"\nartifact = \"x\"\n").unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("`artifact`") && text.contains("`inference`"), "{text}");
        let err = parse("name = \"a\"\nversion = \"1\"\nkind = \"data\"\nartifact = \"x@1\"\n").unwrap_err();
        assert!(format!("{err:#}").contains("`data` artifacts run nothing"), "{err:#}");
    }

    #[test]
    fn an_agent_is_its_manifest() {
        let m = parse(
            r#"
name = "helper"
version = "0.1.0"
kind = "agent"
[capabilities]
tools = ["wordcount"]
shell = { allow = ["wc"] }
[inference]
model = "gpt-4o-mini"
driver = { artifact = "openai-driver@0.1.0" }
max_turns = 8
compaction = { threshold = 0.5, model = "small" }
params = { temperature = 0, stop = ["x"] }
[[hooks]]
artifact = "audit@0.1.0"
[[hooks]]
artifact = "compactor@0.2.0"
execution_mode = "async"
"#,
        )
        .unwrap();
        assert_eq!(m.artifact, ArtifactRef::ManifestOnly);
        let agent = m.agent.unwrap();
        assert_eq!(agent.driver.unwrap().to_string(), "openai-driver@0.1.0");
        assert_eq!((agent.max_turns, agent.max_task_reopens, agent.context_window), (8, 1, 128_000));
        assert_eq!((agent.compaction_threshold, agent.compaction_model.as_deref()), (0.5, Some("small")));
        assert_eq!(agent.params, serde_json::json!({"temperature": 0, "stop": ["x"]}));
        let modes: Vec<_> = agent.hooks.iter().map(|h| h.execution_mode).collect();
        assert_eq!(modes, [ExecutionMode::Sync, ExecutionMode::Async]);
    }

    #[test]
    fn the_documented_example_agent_parses() {
        let m = parse(include_str!("../../docs/examples/helper.toml")).unwrap();
        let agent = m.agent.unwrap();
        assert_eq!(agent.driver.unwrap().to_string(), "scripted-driver@0.1.0");
        let script: serde_json::Value = serde_json::from_str(&m.env["SCRIPT"]).unwrap();
        assert_eq!(script[0]["tool_calls"][0]["name"], "shell");
    }

    #[test]
    fn agent_settings_are_checked_by_key() {
        let err = parse(
            "name = \"a\"\nversion = \"1\"\nkind = \"agent\"\n[inference]\nmodel = \"m\"\nmax_turns = 0\ndriver = { artifact = \"nodash\" }\ncompaction = { threshold = 1.5 }\n[[hooks]]\nartifact = \"h@1\"\nexecution_mode = \"later\"\n",
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("unknown variant `later`"), "{err:#}");
        let err = parse(
            "name = \"a\"\nversion = \"1\"\nkind = \"agent\"\n[inference]\nmodel = \"m\"\nmax_turns = 0\ndriver = { artifact = \"nodash\" }\ncompaction = { threshold = 1.5 }\n",
        )
        .unwrap_err();
        let text = format!("{err:#}");
        for key in
            ["`inference.max_turns`", "`inference.driver.artifact`", "`inference.compaction.threshold`"]
        {
            assert!(text.contains(key), "{key} missing in {text}");
        }
        let err = parse(
            "name = \"a\"\nversion = \"1\"\nkind = \"tool\"\nartifact = \"x\"\n[inference]\nmodel = \"m\"\n",
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("only agents"), "{err:#}");
    }
}
