//! `murmur:tool-registry/invoke`: a capsule invokes an allowlisted, installed tool by name.
//! Every call is recorded ([`murmur_api::runtime::ToolCallRecord`]: the `metadata` channel's
//! `state_effect` and `resource_id`, which the session trace carries).

use wasmtime::Result;

use super::INVOKE_DEPTH_MAX;
use super::bindings::murmur::tool::run::{ToolInput, ToolResult};
use super::bindings::murmur::tool_registry::invoke;
use super::state::HostState;

impl invoke::Host for HostState {
    async fn invoke(&mut self, name: String, input: ToolInput) -> Result<Result<ToolResult, String>> {
        let caller = &self.call.capsule.manifest;
        if !caller.capabilities.allows_tool(&name) {
            return Ok(Err(format!(
                "tool policy: '{name}' not in capabilities.tools of capsule '{}'",
                caller.name
            )));
        }
        if self.call.depth >= INVOKE_DEPTH_MAX {
            return Ok(Err(format!(
                "tool invocations nest deeper than {INVOKE_DEPTH_MAX}; refusing '{name}'"
            )));
        }
        let Ok(tool) = self.call.runtime.get(&name) else {
            return Ok(Err(format!("tool '{name}' is not installed on this node")));
        };
        if !tool.manifest.kind.runs_as_tool() {
            return Ok(Err(format!("'{name}' is a {}, not a tool", tool.manifest.kind.as_str())));
        }
        let runtime = self.call.runtime.clone();
        // Boxed: this call runs inside the caller's own `call_tool` future.
        match Box::pin(runtime.call_tool(tool, input, self.call.depth + 1, None)).await {
            Ok((result, records)) => {
                self.call.records.extend(records);
                Ok(Ok(result))
            }
            Err(err) => Ok(Err(err.to_string())),
        }
    }
}
