//! `murmur:runtime/inference`: one completion through the capsule's inference driver, asked
//! of the runtime's [`InferencePort`](super::ports::InferencePort).
//!
//! A hook dispatched by an agent session calls that session's port (set per call by
//! [`Runtime::call_hook`](crate::Runtime::call_hook)): the agent's own driver, counted and
//! traced like a turn. Anywhere else the runtime's port answers, by default
//! [`NoInference`](super::ports::NoInference): the import still links (so hooks load and
//! run) and every call returns the error the specification prescribes, naming the missing
//! setting.

use wasmtime::Result;

use super::bindings::murmur::runtime::inference;
use super::state::HostState;

impl inference::Host for HostState {
    async fn run_inference(
        &mut self,
        request: inference::InferenceRequest,
    ) -> Result<Result<inference::InferenceResponse, String>> {
        let port = self.call.inference.clone().unwrap_or_else(|| self.call.runtime.ports.inference.clone());
        let capsule = self.call.capsule.clone();
        // The completion is the driver's time, not the hook's: like a wait for task input,
        // it does not count toward the hook's deadline.
        let started = std::time::Instant::now();
        let answer = port.complete(&capsule, request).await;
        self.call.waited += started.elapsed();
        Ok(answer)
    }
}
