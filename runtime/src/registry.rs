//! `murmur:tool-registry/invoke`: a capsule invokes an allowlisted, installed tool by name.
//! Every call is recorded ([`murmur_api::runtime::ToolCallRecord`]: the `metadata` channel's
//! `state_effect` and `resource_id`, which the session trace carries).

use std::sync::Arc;

use murmur_api::runtime::ToolCallRecord;
use wasmtime::Result;

use super::bindings::murmur::tool::run::{ToolInput, ToolResult};
use super::bindings::murmur::tool_registry::invoke;
use super::manifest::CapsuleManifest;
use super::ports::TaskPort;
use super::state::HostState;
use super::{INVOKE_DEPTH_MAX, Inner};

impl invoke::Host for HostState {
    async fn invoke(&mut self, name: String, input: ToolInput) -> Result<Result<ToolResult, String>> {
        let runtime = self.call.runtime.clone();
        let caller = self.call.capsule.clone();
        // Boxed: this call runs inside the caller's own `call_tool` future.
        let outcome =
            Box::pin(runtime.invoke_allowed(&caller.manifest, &name, input, self.call.depth + 1, None)).await;
        Ok(outcome.map(|(result, records)| {
            self.call.records.extend(records);
            result
        }))
    }
}

impl Inner {
    /// Runs tool `name` for `caller` at nesting `depth` if `caller`'s `capabilities.tools`
    /// allows it, the nesting bound holds, and `name` is an installed tool; the result and
    /// the calls recorded, or why not.
    pub(crate) async fn invoke_allowed(
        self: &Arc<Self>,
        caller: &CapsuleManifest,
        name: &str,
        input: ToolInput,
        depth: u32,
        task: Option<Arc<dyn TaskPort>>,
    ) -> std::result::Result<(ToolResult, Vec<ToolCallRecord>), String> {
        if !caller.capabilities.allows_tool(name) {
            return Err(format!(
                "tool policy: '{name}' not in capabilities.tools of capsule '{}'",
                caller.name
            ));
        }
        if depth > INVOKE_DEPTH_MAX {
            return Err(format!("tool invocations nest deeper than {INVOKE_DEPTH_MAX}; refusing '{name}'"));
        }
        let Ok(tool) = self.tool_for(&caller.name, name) else {
            return Err(format!("tool '{name}' is not installed on this node"));
        };
        if !tool.manifest.kind.runs_as_tool() {
            return Err(format!("'{name}' is a {}, not a tool", tool.manifest.kind.as_str()));
        }
        self.call_tool(tool, input, depth, task).await.map_err(|err| err.to_string())
    }
}
