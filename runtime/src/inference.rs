//! `murmur:runtime/inference`: one completion through the capsule's inference driver, asked
//! of the runtime's [`InferencePort`](super::ports::InferencePort).
//!
//! Drivers are configured by `inference.driver.artifact` in an agent's manifest, which
//! arrives with the native agent loop. Until then the node's port is
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
        let port = self.call.runtime.ports.inference.clone();
        let capsule = self.call.capsule.clone();
        Ok(port.complete(&capsule, request).await)
    }
}
