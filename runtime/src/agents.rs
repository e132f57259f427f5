//! Agents in the runtime. An agent is its manifest (`kind = "agent"`); installing one
//! loads the driver and hook components it names from the node's store, each checked for
//! its kind's exact export, so a task never meets a missing or mis-versioned hook. The
//! runtime then offers what the agent loop's runner needs, each under the agent's own
//! capabilities: one driver call, one hook handler, one allowlisted tool call, one
//! allowlisted shell command, and the tools it may offer the model.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use murmur_api::runtime::ToolCallRecord;
use wasmtime::component::{ComponentNamedList, Lower};

use crate::bindings::murmur::hook::lifecycle::HookOutput;
use crate::bindings::murmur::shell::execute::ShellResult;
use crate::manifest::{
    AgentSpec, ArtifactRef, Capabilities, CapsuleManifest, CredentialSource, ExecutionMode, Lifecycle,
    NamedArtifact,
};
use crate::ports::{HookEvent, InferencePort, TaskPort};
use crate::{CapsuleKind, Inner, Installed, RunError, Runtime, ToolInput, ToolResult};

/// An agent this node runs.
#[derive(Debug)]
pub struct Agent {
    pub manifest: CapsuleManifest,
    pub spec: AgentSpec,
    /// The loaded `inference.driver.artifact`, if the manifest names one.
    pub driver: Option<Arc<Installed>>,
    /// Its `[[hooks]]`, loaded, in manifest order.
    pub hooks: Vec<AgentHook>,
}

/// One loaded hook of an agent.
#[derive(Debug)]
pub struct AgentHook {
    /// The hook artifact's name (its log is `logs/hook-<name>.log`).
    pub name: String,
    pub mode: ExecutionMode,
    pub component: Arc<Installed>,
}

/// A tool an agent may offer its model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OfferedTool {
    pub name: String,
    pub description: String,
    /// The artifact's declared input schema (JSON text), if any.
    pub input_schema: Option<String>,
}

impl Inner {
    /// Loads what `manifest` (an agent's) names from the store.
    pub(crate) fn load_agent(&self, manifest: CapsuleManifest) -> anyhow::Result<Agent> {
        let spec = manifest.agent.clone().context("an agent manifest carries its [inference] section")?;
        let driver = match &spec.driver {
            Some(driver) => Some(
                self.load_part(&manifest, driver, CapsuleKind::Driver)
                    .with_context(|| format!("inference.driver.artifact {driver}"))?,
            ),
            None => None,
        };
        let hooks = spec
            .hooks
            .iter()
            .map(|hook| {
                let component = self
                    .load_part(&manifest, &hook.artifact, CapsuleKind::Hook)
                    .with_context(|| format!("hook {}", hook.artifact))?;
                Ok(AgentHook { name: hook.artifact.name.clone(), mode: hook.execution_mode, component })
            })
            .collect::<anyhow::Result<_>>()?;
        std::fs::create_dir_all(manifest.workdir.join("logs"))
            .with_context(|| format!("cannot create work directory {}", manifest.workdir.display()))?;
        Ok(Agent { manifest, spec, driver, hooks })
    }

    /// A driver or hook of `agent`, loaded from the store as a component of its own: it
    /// runs with the agent's limits and work directory; a driver may reach the agent's
    /// `capabilities.network.allow`, a hook nothing.
    fn load_part(
        &self,
        agent: &CapsuleManifest,
        artifact: &NamedArtifact,
        kind: CapsuleKind,
    ) -> anyhow::Result<Arc<Installed>> {
        let reference = ArtifactRef::Named { name: artifact.name.clone(), version: artifact.version.clone() };
        let bytes = self.artifact_bytes(&reference).map_err(|e| {
            anyhow::anyhow!(
                "{e:#}; add it first (`mur artifact add … --kind {kind}`, or `mur install {artifact}`)"
            )
        })?;
        let loaded = self.load(&bytes, kind)?;
        let network =
            if kind == CapsuleKind::Driver { agent.capabilities.network.clone() } else { Vec::new() };
        let mut env = agent.env.clone();
        if kind == CapsuleKind::Driver
            && let Some(spec) = &agent.agent
        {
            // Credentials come from the node (its environment or its config), never from
            // the artifact or the manifest itself; they are not logged.
            for (name, source) in &spec.credentials {
                let value = match source {
                    CredentialSource::Env(var) => std::env::var(var).map_err(|_| {
                        anyhow::anyhow!(
                            "inference.credentials.{name}: the node's environment has no {var} (set it for murnode, or remove the key)"
                        )
                    })?,
                    CredentialSource::Config(key) => self
                        .options
                        .credentials
                        .get(key)
                        .ok_or_else(|| {
                            anyhow::anyhow!(
                                "inference.credentials.{name}: the node's config has no [credentials] entry `{key}` (add it to murnode.toml, or remove the key)"
                            )
                        })?
                        .read()
                        .map_err(|why| anyhow::anyhow!("inference.credentials.{name}: [credentials] `{key}`: {why}"))?,
                };
                env.insert(name.clone(), value);
            }
        }
        let manifest = CapsuleManifest {
            name: artifact.name.clone(),
            version: artifact.version.clone(),
            kind,
            artifact: reference,
            description: String::new(),
            capabilities: Capabilities { tools: Vec::new(), shell: Vec::new(), network },
            memory_bytes: agent.memory_bytes,
            deadline: agent.deadline,
            env,
            workdir: agent.workdir.clone(),
            lifecycle: Lifecycle::default(),
            grant: None,
            agent: None,
        };
        Ok(Arc::new(Installed { manifest, loaded }))
    }
}

impl Runtime {
    /// The agent `name`, if this node runs it.
    #[must_use]
    pub fn agent(&self, name: &str) -> Option<Arc<Agent>> {
        self.inner.agents().get(name).cloned()
    }

    /// Every agent this node runs.
    #[must_use]
    pub fn agents(&self) -> Vec<Arc<Agent>> {
        self.inner.agents().values().cloned().collect()
    }

    /// One inference turn: calls the agent's driver with `data` (a `murmur.inference/1`
    /// request). Without a driver, the error names the manifest key.
    pub async fn run_driver(&self, agent: &Agent, data: String) -> Result<ToolResult, String> {
        let Some(driver) = &agent.driver else {
            return Err(format!(
                "no inference driver configured for capsule `{}`: set inference.driver.artifact in its manifest",
                agent.manifest.name
            ));
        };
        let input = ToolInput { data: Some(data), log_path: None };
        self.inner
            .call_tool(driver.clone(), input, 0, None)
            .await
            .map(|(result, _)| result)
            .map_err(|e| e.to_string())
    }

    /// Calls `hook`'s handler for `event`; `None` when the hook leaves out an optional
    /// handler (`on-task-start`, `on-task-end`), which is then never dispatched. The hook's
    /// `run-inference` goes to `inference`.
    pub async fn call_hook(
        &self,
        hook: &AgentHook,
        event: HookEvent,
        inference: Arc<dyn InferencePort>,
    ) -> Result<Option<Result<HookOutput, String>>, RunError> {
        let component = &hook.component;
        let mut store = self.inner.new_store(component, 0, None, None);
        store.data_mut().call.inference = Some(inference);
        let interface = component.loaded.entry.interface;
        let outcome = async {
            let instance = component.loaded.pre.instantiate_async(&mut store).await?;
            let mut call =
                HandlerCall { store: &mut store, instance: &instance, interface: &interface, component };
            match event {
                HookEvent::Stage(e) => call.handler("on-stage", (e,)).await,
                HookEvent::SessionStart(e) => call.handler("on-session-start", (e,)).await,
                HookEvent::TaskStart(e) => call.handler("on-task-start", (e,)).await,
                HookEvent::Inference(e) => call.handler("on-inference", (e,)).await,
                HookEvent::ToolCall(e) => call.handler("on-tool-call", (e,)).await,
                HookEvent::Shell(e) => call.handler("on-shell", (e,)).await,
                HookEvent::Compaction(e) => call.handler("on-compaction", (e,)).await,
                HookEvent::TaskEnd(e) => call.handler("on-task-end", (e,)).await,
                HookEvent::SessionEnd(e) => call.handler("on-session-end", (e,)).await,
            }
        }
        .await;
        outcome.map_err(|error| self.inner.call_error(&hook.name, component, &store, &error))
    }

    /// Runs tool `name` for `agent` (its `capabilities.tools` decides; the nesting bound
    /// applies), for the A2A task behind `task`.
    pub async fn call_for_agent(
        &self,
        agent: &Agent,
        name: &str,
        input: ToolInput,
        task: Option<Arc<dyn TaskPort>>,
    ) -> Result<(ToolResult, Vec<ToolCallRecord>), String> {
        self.inner.invoke_allowed(&agent.manifest, name, input, 1, task).await
    }

    /// Runs a shell command for `agent` (its `capabilities.shell.allow` decides, before
    /// anything is spawned; its deadline bounds it); the result and the program that ran.
    pub async fn shell_for_agent(
        &self,
        agent: &Agent,
        binary: &str,
        args: &[String],
    ) -> Result<(ShellResult, std::path::PathBuf), String> {
        crate::shell::run_allowed(&agent.manifest, binary, args, &[], agent.manifest.deadline).await
    }

    /// The installed tools `agent` may call, with what the model is told about each: the
    /// artifact's description and input schema when its content is in the store, else the
    /// manifest's description and no schema.
    #[must_use]
    pub fn offered_tools(&self, agent: &Agent) -> Vec<OfferedTool> {
        let stored = self.inner.store.list().unwrap_or_default();
        self.inner
            .installed()
            .values()
            .filter(|i| {
                i.manifest.kind == CapsuleKind::Tool
                    && agent.manifest.capabilities.allows_tool(&i.manifest.name)
            })
            .map(|tool| {
                let meta = stored.iter().find(|s| s.content == tool.loaded.digest).map(|s| &s.meta);
                let description = meta
                    .map(|m| m.description.clone())
                    .filter(|d| !d.is_empty())
                    .unwrap_or_else(|| tool.manifest.description.clone());
                OfferedTool {
                    name: tool.manifest.name.clone(),
                    description,
                    input_schema: meta.and_then(|m| m.input_schema.clone()),
                }
            })
            .collect()
    }
}

/// One instantiated hook, for calling a handler by name.
struct HandlerCall<'a> {
    store: &'a mut wasmtime::Store<crate::state::HostState>,
    instance: &'a wasmtime::component::Instance,
    interface: &'a wasmtime::component::ComponentExportIndex,
    component: &'a Installed,
}

impl HandlerCall<'_> {
    async fn handler<P>(
        &mut self,
        name: &str,
        params: P,
    ) -> wasmtime::Result<Option<Result<HookOutput, String>>>
    where
        P: ComponentNamedList + Lower + Send + Sync + 'static,
    {
        let component = self.component.loaded.pre.component();
        let Some(index) = component.get_export_index(Some(self.interface), name) else {
            // Loading checked every required handler: only an optional one can be absent.
            return Ok(None);
        };
        let func =
            self.instance.get_typed_func::<P, (Result<HookOutput, String>,)>(&mut *self.store, &index)?;
        self.store.data_mut().call.started = Instant::now();
        let (output,) = func.call_async(&mut *self.store, params).await?;
        Ok(Some(output))
    }
}
