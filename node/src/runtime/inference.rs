//! `murmur:runtime/inference`: one completion through the capsule's inference driver.
//!
//! Drivers are configured by `inference.driver.artifact` in an agent's manifest, which
//! arrives with the native agent loop. Until a capsule has one, the import still links (so
//! hooks load and run) and every call returns the error the specification prescribes,
//! naming the missing setting.

use wasmtime::Result;

use super::bindings::murmur::runtime::inference;
use super::state::HostState;

impl inference::Host for HostState {
    async fn run_inference(
        &mut self,
        _request: inference::InferenceRequest,
    ) -> Result<Result<inference::InferenceResponse, String>> {
        Ok(Err(format!(
            "no inference driver configured for capsule `{}`: set inference.driver.artifact in its manifest",
            self.call.capsule.manifest.name
        )))
    }
}
