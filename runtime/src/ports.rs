//! How the runtime reaches the world outside wasmtime: four ports, each a trait the node
//! (or `mur`, for a component run in process) implements and hands to [`crate::Runtime::new`]
//! once, at construction. Nothing is attached later: a runtime has every port from its first
//! call, so no host function ever finds one missing.
//!
//! | port | asked by | the node's implementation |
//! |---|---|---|
//! | [`ArtifactPort`] | `murmur:artifact-manager/manage.pull` for what the store lacks | a mesh pull, trusted as any pull |
//! | [`MessagePort`] | `murmur:message/send`, after the sender's allowlist check | `mesh://` → the task service, direct peers → A2A over HTTP |
//! | [`TaskPort`] | `murmur:task/task.request-input`, per call that runs a task | the task's owner record |
//! | [`InferencePort`] | `murmur:runtime/inference.run-inference` | outside an agent session: none (every call errs, naming the setting); a hook an agent session dispatches gets the session's own port (`murmur-agent`), set per call |
//!
//! Hooks are not a port: the agent loop's runner (`murmur-agent`) calls them through
//! [`crate::Runtime::call_hook`], with a [`HookEvent`]. A brain's host functions are the
//! [`BrainPort`] its run is given ([`crate::Runtime::run_brain`]), not a port of the
//! runtime: each run has its own.
//!
//! Every future a port returns is `Send` and bounded by the caller's own deadline or
//! timeout; a port never blocks a thread.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use murmur_protocol::{Digest, PeerUrl};
use murmur_store::Stored;

use crate::Installed;
use crate::bindings::murmur::hook::lifecycle;
use crate::bindings::murmur::message::send::{Message, TaskResult};
use crate::bindings::murmur::runtime::inference::{InferenceRequest, InferenceResponse};
use crate::brain;

/// A boxed, sendable future: what every port method returns.
pub type PortFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Every port a runtime is built with.
#[derive(Clone, Debug)]
pub struct Ports {
    pub artifacts: Arc<dyn ArtifactPort>,
    pub messages: Arc<dyn MessagePort>,
    pub inference: Arc<dyn InferencePort>,
}

impl Ports {
    /// Ports for a runtime outside a node (`mur tool run FILE.wasm`, tests): artifacts only
    /// from the store, messages only to direct peers, no inference driver.
    pub fn standalone() -> anyhow::Result<Self> {
        Ok(Self {
            artifacts: Arc::new(StoreOnly),
            messages: Arc::new(crate::message::DirectHttp::new()?),
            inference: Arc::new(NoInference),
        })
    }
}

/// An artifact a capsule asked for by name and version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Want {
    pub name: String,
    pub version: String,
    /// A manifest or content digest the artifact must have (from `--digest` or a lock
    /// entry). Without one, a trusted publisher's signature decides.
    pub pin: Option<Digest>,
}

/// Where artifacts the store lacks come from.
pub trait ArtifactPort: Send + Sync + Debug {
    /// Brings `want` into the store, verified, and returns what the store then holds; the
    /// error says what failed and what the user can do.
    fn fetch<'a>(&'a self, want: &'a Want) -> PortFuture<'a, anyhow::Result<Stored>>;
}

/// No source beyond the store: a pull of what the store lacks fails.
#[derive(Clone, Copy, Debug, Default)]
pub struct StoreOnly;

impl ArtifactPort for StoreOnly {
    fn fetch<'a>(&'a self, want: &'a Want) -> PortFuture<'a, anyhow::Result<Stored>> {
        Box::pin(async move {
            anyhow::bail!(
                "{}@{} is not in this store, and outside a node nothing can be pulled (run it on a node, or `mur artifact add` it first)",
                want.name,
                want.version
            )
        })
    }
}

/// How a capsule's message reaches a peer, once its allowlist admitted the target.
pub trait MessagePort: Send + Sync + Debug {
    /// Sends `message` from capsule `from` (its manifest carries its grant) to `target`,
    /// continuing the trace `traceparent` (the task `from` runs, if any); the answer is the
    /// peer's immediate task state, or why there is none.
    fn send<'a>(
        &'a self,
        from: &'a Installed,
        traceparent: Option<String>,
        target: PeerUrl,
        message: Message,
    ) -> PortFuture<'a, Result<TaskResult, String>>;
}

/// The A2A task a tool call runs, as the runtime sees it: where `request-input` goes.
pub trait TaskPort: Send + Sync {
    /// Marks the task input-required with `prompt` and waits up to `timeout` for the
    /// follow-up message's text.
    fn request_input(&self, prompt: String, timeout: Duration) -> PortFuture<'_, Result<String, String>>;

    /// The task's trace context (`traceparent`), continued by messages the tool sends.
    fn traceparent(&self) -> Option<String>;

    /// Resolves once the task is canceled, for runs that can stop between steps (the
    /// agent loop); the default never resolves.
    fn canceled(&self) -> PortFuture<'_, ()> {
        Box::pin(std::future::pending())
    }
}

/// One completion through a capsule's inference driver: `murmur-agent` implements it per
/// agent session (the agent's `inference.driver.artifact`, `model: none` replaced by the
/// manifest's primary model, tokens counted host-side with tiktoken, one trace record per
/// call); anywhere else [`NoInference`] answers.
pub trait InferencePort: Send + Sync + Debug {
    /// Runs `request` for `capsule`.
    fn complete<'a>(
        &'a self,
        capsule: &'a Installed,
        request: InferenceRequest,
    ) -> PortFuture<'a, Result<InferenceResponse, String>>;
}

/// No inference driver: every call errs, naming the manifest setting that would provide one
/// (the runtime specification's prescribed error).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoInference;

impl InferencePort for NoInference {
    fn complete<'a>(
        &'a self,
        capsule: &'a Installed,
        _request: InferenceRequest,
    ) -> PortFuture<'a, Result<InferenceResponse, String>> {
        let name = capsule.manifest.name.clone();
        Box::pin(async move {
            Err(format!(
                "no inference driver configured for capsule `{name}`: set inference.driver.artifact in its manifest"
            ))
        })
    }
}

/// A lifecycle stage of an agent session, with its event (`murmur:hook/lifecycle@0.5.0`):
/// what [`crate::Runtime::call_hook`] dispatches.
#[derive(Clone, Debug)]
pub enum HookEvent {
    Stage(lifecycle::StageEvent),
    SessionStart(lifecycle::SessionContext),
    TaskStart(lifecycle::TaskStartEvent),
    Inference(lifecycle::InferenceEvent),
    ToolCall(lifecycle::ToolEvent),
    Shell(lifecycle::ShellEvent),
    Compaction(lifecycle::CompactionEvent),
    TaskEnd(lifecycle::TaskEndEvent),
    SessionEnd(lifecycle::SessionEndEvent),
}

/// What a brain's host functions do: the one implementation (`murmur-brain`'s, per run)
/// behind the `murmur:brain@0.1.0` interface, which the rhai and JavaScript brains call
/// too. Functions that block (wait for an event, a timer, a peer, the disk) return a
/// future; the others answer at once. Every `Err` is the guest's in-band error.
#[allow(missing_docs)]
pub trait BrainPort: Send + Sync + Debug {
    fn subscribe_agent(&self, agent: String) -> Result<String, String>;
    fn unsubscribe_agent(&self, id: String) -> Result<(), String>;
    fn subscribe_lifecycle(&self) -> Result<String, String>;
    fn unsubscribe_lifecycle(&self, id: String);
    fn send_agent(&self, agent: String, payload: String) -> PortFuture<'_, Result<(), String>>;
    fn recv(&self) -> PortFuture<'_, Result<brain::EventEnvelope, String>>;
    fn try_recv(&self) -> Option<brain::EventEnvelope>;
    fn time_now(&self) -> u64;
    fn time_format(&self, ts: u64, format: String) -> Result<String, String>;
    fn wait_until(&self, ts: u64) -> Result<String, String>;
    fn wait_for(&self, ms: u64) -> Result<String, String>;
    fn wait_cron(&self, spec: String) -> Result<String, String>;
    fn cancel_timer(&self, id: String) -> bool;
    fn sleep_for(&self, ms: u64) -> PortFuture<'_, Result<(), String>>;
    fn sleep_until(&self, ts: u64) -> PortFuture<'_, Result<(), String>>;
    fn sleep_cron(&self, spec: String) -> PortFuture<'_, Result<(), String>>;
    fn whoami(&self) -> String;
    fn log(&self, level: String, message: String);
    fn new_uuid(&self) -> String;
    fn base64_encode(&self, bytes: Vec<u8>) -> String;
    fn base64_decode(&self, data: String) -> Result<Vec<u8>, String>;
    fn memory_get(&self, key: String) -> PortFuture<'_, Result<Option<String>, String>>;
    fn memory_set(&self, key: String, value: String) -> PortFuture<'_, Result<(), String>>;
    fn memory_remove(&self, key: String) -> PortFuture<'_, Result<bool, String>>;
    fn subscribe_endpoint(&self, model: String) -> Result<String, String>;
    fn unsubscribe_endpoint(&self, id: String) -> Result<(), String>;
    fn stream_endpoint(&self, session: String, delta: brain::ChatDelta) -> Result<(), String>;
    fn chat_stream(&self, request: brain::ChatRequest) -> Result<String, String>;
    fn cancel_stream(&self, id: String) -> bool;
    fn call_tool(&self, server: String, name: String, arguments: String) -> Result<String, String>;
    fn subscribe_resource_list(&self, server: String) -> Result<String, String>;
    fn subscribe_resource(&self, server: String, uri: String) -> Result<String, String>;
    fn unsubscribe_resource(&self, id: String) -> bool;
}
