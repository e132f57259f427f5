//! `murmur:task/task`: `request-input` suspends a tool until a follow-up message answers.
//!
//! It is only available while a tool runs an A2A task; tasks reach capsules with the mesh
//! task router. Outside a task the call traps at once, as the runtime specification says
//! ("calling it outside that context returns an error immediately": the function returns a
//! plain string, so the error is a trap).

use wasmtime::Result;

use super::bindings::murmur::task::task;
use super::state::HostState;

impl task::Host for HostState {
    async fn request_input(&mut self, prompt: String) -> Result<String> {
        let capsule = &self.call.capsule.manifest.name;
        let prompt: String = prompt.chars().take(80).collect();
        wasmtime::bail!(
            "murmur:task/task.request-input is only available while a tool runs an A2A task; \
             `{capsule}` called it outside one (prompt: {prompt:?})"
        )
    }
}
