//! Brains as WebAssembly components: the `murmur:brain@0.1.0` host interface
//! (`wit/brain/brain.wit`) linked for components of kind `brain`, each function handed to
//! the run's [`BrainPort`] — the one host implementation (`murmur-brain`) that the rhai and
//! JavaScript brains call too.
//!
//! A run is one call of the component's `murmur:brain/agent@0.1.0.run`. It has no total
//! deadline (a brain lives for days); its limit is the time it runs without waiting: every
//! call that blocks (`recv`, `sleep-*`, `send-agent`) restarts the clock, so a brain stuck
//! in a loop is stopped after its manifest's `limits.deadline_ms` of uninterrupted work,
//! while one that waits in `recv` holds no CPU at all.

use std::sync::Arc;
use std::time::Instant;

use wasmtime::Result;

use crate::ports::{BrainPort, PortFuture};
use crate::state::HostState;
use crate::{Inner, Installed, RunError, Runtime};

/// The bindings of world `murmur:brain/brain@0.1.0`.
#[allow(missing_docs, missing_debug_implementations, clippy::all)]
pub mod bindings {
    wasmtime::component::bindgen!({
        path: ["../wit/brain"],
        world: "murmur:brain/brain",
        imports: { default: async | trappable },
    });
}

pub use bindings::murmur::brain::provider::ChatRequest;
pub use bindings::murmur::brain::types::{
    ChatDelta, ChatMessage, EndpointMessage, EndpointSessionEnd, Event, EventEnvelope, ResourceContent,
    ResourceInfo, ToolCall, ToolCallDelta, ToolResult as BrainToolResult, ToolSpec, Usage,
};

use bindings::murmur::brain::{host, provider, tooling, types};

/// How a brain component runs.
#[derive(Clone, Debug)]
pub struct BrainLimits {
    /// Work without waiting after which a run is stopped.
    pub busy: std::time::Duration,
    /// Linear memory of the instance.
    pub memory_bytes: u64,
    /// The agent's directory.
    pub workdir: std::path::PathBuf,
}

impl Runtime {
    /// Loads the brain component `bytes` of agent `agent`: compiled (or found in the
    /// cache), checked for `murmur:brain/agent@0.1.0`, linked with the brain interface
    /// alone (and WASI, granting nothing). The error names what is wrong with it.
    pub fn load_brain(
        &self,
        agent: &str,
        bytes: &[u8],
        limits: &BrainLimits,
    ) -> anyhow::Result<Arc<Installed>> {
        let loaded = self.inner.load(bytes, crate::CapsuleKind::Brain)?;
        let manifest = crate::CapsuleManifest {
            name: agent.to_owned(),
            version: "0.0.0".into(),
            kind: crate::CapsuleKind::Brain,
            artifact: crate::ArtifactRef::Digest(loaded.digest),
            description: String::new(),
            capabilities: crate::manifest::Capabilities::default(),
            memory_bytes: limits.memory_bytes,
            deadline: limits.busy,
            env: std::collections::BTreeMap::new(),
            workdir: limits.workdir.clone(),
            lifecycle: crate::manifest::Lifecycle::default(),
            grant: None,
            agent: None,
        };
        Ok(Arc::new(Installed { manifest, loaded }))
    }

    /// Runs brain component `brain` once, to its end: its host calls go to `port`. `Ok`
    /// when `run` returned `ok`; the error says why it did not (its own error text, a trap,
    /// a limit, or running longer than its deadline without waiting).
    pub async fn run_brain(&self, brain: &Arc<Installed>, port: Arc<dyn BrainPort>) -> Result<(), RunError> {
        self.inner.call_brain(brain, port).await
    }
}

impl Inner {
    async fn call_brain(
        self: &Arc<Self>,
        brain: &Arc<Installed>,
        port: Arc<dyn BrainPort>,
    ) -> Result<(), RunError> {
        let name = brain.manifest.name.clone();
        let mut store = self.new_store(brain, 0, None, None);
        store.data_mut().call.brain = Some(port);
        let outcome = async {
            let instance = brain.loaded.pre.instantiate_async(&mut store).await?;
            let run = brain.loaded.entry.run.as_ref().expect("brains resolve a run function");
            let func = instance.get_typed_func::<(), (Result<(), String>,)>(&mut store, run)?;
            let (answer,) = func.call_async(&mut store, ()).await?;
            wasmtime::Result::Ok(answer)
        }
        .await;
        match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(reason)) => {
                Err(RunError::Trap { name, reason: format!("run returned an error: {reason}") })
            }
            Err(error) => Err(self.call_error(&name, brain, &store, &error)),
        }
    }
}

impl HostState {
    fn brain(&self) -> Result<Arc<dyn BrainPort>> {
        match &self.call.brain {
            Some(port) => Ok(port.clone()),
            None => wasmtime::bail!("murmur:brain is provided to brains only"),
        }
    }

    /// Awaits a blocking host call: its time is waiting, so the run's clock restarts after.
    async fn blocking<T>(&mut self, call: impl FnOnce(&dyn BrainPort) -> PortFuture<'_, T>) -> Result<T> {
        let port = self.brain()?;
        let answer = call(port.as_ref()).await;
        self.call.started = Instant::now();
        self.call.waited = std::time::Duration::ZERO;
        Ok(answer)
    }
}

impl types::Host for HostState {}

impl host::Host for HostState {
    async fn subscribe_agent(&mut self, agent: String) -> Result<Result<String, String>> {
        Ok(self.brain()?.subscribe_agent(agent))
    }
    async fn unsubscribe_agent(&mut self, id: String) -> Result<Result<(), String>> {
        Ok(self.brain()?.unsubscribe_agent(id))
    }
    async fn subscribe_lifecycle(&mut self) -> Result<Result<String, String>> {
        Ok(self.brain()?.subscribe_lifecycle())
    }
    async fn unsubscribe_lifecycle(&mut self, id: String) -> Result<()> {
        self.brain()?.unsubscribe_lifecycle(id);
        Ok(())
    }
    async fn send_agent(&mut self, agent: String, payload: String) -> Result<Result<(), String>> {
        self.blocking(|port| port.send_agent(agent, payload)).await
    }
    async fn recv(&mut self) -> Result<Result<EventEnvelope, String>> {
        self.blocking(|port| port.recv()).await
    }
    async fn try_recv(&mut self) -> Result<Option<EventEnvelope>> {
        Ok(self.brain()?.try_recv())
    }
    async fn time_now(&mut self) -> Result<u64> {
        Ok(self.brain()?.time_now())
    }
    async fn time_format(&mut self, ts: u64, format: String) -> Result<Result<String, String>> {
        Ok(self.brain()?.time_format(ts, format))
    }
    async fn wait_until(&mut self, ts: u64) -> Result<Result<String, String>> {
        Ok(self.brain()?.wait_until(ts))
    }
    async fn wait_for(&mut self, ms: u64) -> Result<Result<String, String>> {
        Ok(self.brain()?.wait_for(ms))
    }
    async fn wait_cron(&mut self, spec: String) -> Result<Result<String, String>> {
        Ok(self.brain()?.wait_cron(spec))
    }
    async fn cancel_timer(&mut self, id: String) -> Result<bool> {
        Ok(self.brain()?.cancel_timer(id))
    }
    async fn sleep_for(&mut self, ms: u64) -> Result<Result<(), String>> {
        self.blocking(|port| port.sleep_for(ms)).await
    }
    async fn sleep_until(&mut self, ts: u64) -> Result<Result<(), String>> {
        self.blocking(|port| port.sleep_until(ts)).await
    }
    async fn sleep_cron(&mut self, spec: String) -> Result<Result<(), String>> {
        self.blocking(|port| port.sleep_cron(spec)).await
    }
    async fn whoami(&mut self) -> Result<String> {
        Ok(self.brain()?.whoami())
    }
    async fn log(&mut self, level: String, message: String) -> Result<()> {
        self.brain()?.log(level, message);
        Ok(())
    }
    async fn new_uuid(&mut self) -> Result<String> {
        Ok(self.brain()?.new_uuid())
    }
    async fn base64_encode(&mut self, bytes: Vec<u8>) -> Result<String> {
        Ok(self.brain()?.base64_encode(bytes))
    }
    async fn base64_decode(&mut self, data: String) -> Result<Result<Vec<u8>, String>> {
        Ok(self.brain()?.base64_decode(data))
    }
    async fn memory_get(&mut self, key: String) -> Result<Result<Option<String>, String>> {
        self.blocking(|port| port.memory_get(key)).await
    }
    async fn memory_set(&mut self, key: String, value: String) -> Result<Result<(), String>> {
        self.blocking(|port| port.memory_set(key, value)).await
    }
    async fn memory_remove(&mut self, key: String) -> Result<Result<bool, String>> {
        self.blocking(|port| port.memory_remove(key)).await
    }
    async fn subscribe_endpoint(&mut self, model: String) -> Result<Result<String, String>> {
        Ok(self.brain()?.subscribe_endpoint(model))
    }
    async fn unsubscribe_endpoint(&mut self, id: String) -> Result<Result<(), String>> {
        Ok(self.brain()?.unsubscribe_endpoint(id))
    }
    async fn stream_endpoint(&mut self, session: String, delta: ChatDelta) -> Result<Result<(), String>> {
        Ok(self.brain()?.stream_endpoint(session, delta))
    }
}

impl provider::Host for HostState {
    async fn chat_stream(&mut self, request: ChatRequest) -> Result<Result<String, String>> {
        Ok(self.brain()?.chat_stream(request))
    }
    async fn cancel_stream(&mut self, id: String) -> Result<bool> {
        Ok(self.brain()?.cancel_stream(id))
    }
}

impl tooling::Host for HostState {
    async fn call_tool(
        &mut self,
        server: String,
        name: String,
        arguments: String,
    ) -> Result<Result<String, String>> {
        Ok(self.brain()?.call_tool(server, name, arguments))
    }
    async fn subscribe_resource_list(&mut self, server: String) -> Result<Result<String, String>> {
        Ok(self.brain()?.subscribe_resource_list(server))
    }
    async fn subscribe_resource(&mut self, server: String, uri: String) -> Result<Result<String, String>> {
        Ok(self.brain()?.subscribe_resource(server, uri))
    }
    async fn unsubscribe_resource(&mut self, id: String) -> Result<bool> {
        Ok(self.brain()?.unsubscribe_resource(id))
    }
}
