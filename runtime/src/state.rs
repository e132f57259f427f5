//! What a store holds while a guest runs: WASI context, resource table, limits, and the
//! call's context (which capsule is calling, with which capabilities).

use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Result};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::http::Gate;

use super::bindings::murmur::hook::lifecycle;
use super::bindings::murmur::tool::run::{self, ToolInput, ToolResult};
use super::{Inner, Installed};
use murmur_api::runtime::ToolCallRecord;

/// The per-store state.
pub struct HostState {
    pub(super) wasi: WasiCtx,
    pub(super) table: ResourceTable,
    /// `wasi:http`, linked for drivers only; its requests pass the gate.
    pub(super) http: WasiHttpCtx,
    pub(super) gate: Gate,
    pub(super) limits: Limits,
    pub(super) call: CallContext,
}

impl std::fmt::Debug for HostState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostState").field("capsule", &self.call.capsule.manifest.name).finish_non_exhaustive()
    }
}

/// Who is running, for host functions that check capabilities.
pub struct CallContext {
    pub(super) runtime: Arc<Inner>,
    pub(super) capsule: Arc<Installed>,
    /// Nesting of tool invocations (a capsule invoking a tool invoking a tool…).
    pub(super) depth: u32,
    /// Tool calls made during this run, with their declared state effects.
    pub(super) records: Vec<ToolCallRecord>,
    pub(super) started: Instant,
    /// Time spent waiting for task input, which the deadline does not count.
    pub(super) waited: std::time::Duration,
    /// The A2A task this call runs, when it runs one (for `request-input`).
    pub(super) task: Option<Arc<dyn super::ports::TaskPort>>,
    /// Where this call's `run-inference` goes: the session of the agent a hook serves
    /// (the runtime's own port, which has no driver, otherwise).
    pub(super) inference: Option<Arc<dyn super::ports::InferencePort>>,
    /// A brain run's host: where its `murmur:brain` calls go.
    pub(super) brain: Option<Arc<dyn super::ports::BrainPort>>,
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.gate }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// Memory and table limits of one store. Growing past them traps, and the trap says why.
#[derive(Debug)]
pub struct Limits {
    pub(super) memory_bytes: usize,
    pub(super) table_elements: usize,
    /// Set when a limit stopped the guest.
    pub(super) hit: Option<String>,
}

impl ResourceLimiter for Limits {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> Result<bool> {
        if desired > self.memory_bytes {
            let message = format!(
                "memory limit of {} MiB reached (the guest asked to grow from {} to {} MiB)",
                self.memory_bytes >> 20,
                current >> 20,
                desired.div_ceil(1 << 20)
            );
            self.hit = Some(message.clone());
            wasmtime::bail!(message);
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> Result<bool> {
        if desired > self.table_elements {
            let message = format!("table limit of {} elements reached", self.table_elements);
            self.hit = Some(message.clone());
            wasmtime::bail!(message);
        }
        Ok(true)
    }
}

// The world imports `murmur:tool/run` and `murmur:hook/lifecycle` only for the types other
// interfaces `use` from them; their functions are exported by guests, never provided by the
// host. A guest calling them gets a trap that says so.
impl run::Host for HostState {
    async fn run(&mut self, _input: ToolInput) -> Result<ToolResult> {
        wasmtime::bail!(
            "murmur:tool/run is exported by tools; the host does not provide it (use murmur:tool-registry/invoke)"
        )
    }
}

impl lifecycle::Host for HostState {
    async fn on_stage(&mut self, _: lifecycle::StageEvent) -> Result<Result<lifecycle::HookOutput, String>> {
        not_provided()
    }
    async fn on_session_start(
        &mut self,
        _: lifecycle::SessionContext,
    ) -> Result<Result<lifecycle::HookOutput, String>> {
        not_provided()
    }
    async fn on_task_start(
        &mut self,
        _: lifecycle::TaskStartEvent,
    ) -> Result<Result<lifecycle::HookOutput, String>> {
        not_provided()
    }
    async fn on_inference(
        &mut self,
        _: lifecycle::InferenceEvent,
    ) -> Result<Result<lifecycle::HookOutput, String>> {
        not_provided()
    }
    async fn on_tool_call(
        &mut self,
        _: lifecycle::ToolEvent,
    ) -> Result<Result<lifecycle::HookOutput, String>> {
        not_provided()
    }
    async fn on_shell(&mut self, _: lifecycle::ShellEvent) -> Result<Result<lifecycle::HookOutput, String>> {
        not_provided()
    }
    async fn on_compaction(
        &mut self,
        _: lifecycle::CompactionEvent,
    ) -> Result<Result<lifecycle::HookOutput, String>> {
        not_provided()
    }
    async fn on_task_end(
        &mut self,
        _: lifecycle::TaskEndEvent,
    ) -> Result<Result<lifecycle::HookOutput, String>> {
        not_provided()
    }
    async fn on_session_end(
        &mut self,
        _: lifecycle::SessionEndEvent,
    ) -> Result<Result<lifecycle::HookOutput, String>> {
        not_provided()
    }
}

fn not_provided<T>() -> Result<T> {
    wasmtime::bail!("murmur:hook/lifecycle is exported by hooks; the host does not provide it")
}
