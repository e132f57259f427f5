//! `murmur:task/task`: `request-input` suspends a tool until a follow-up message answers.
//!
//! It is available while a tool runs an A2A task: the call waits (the guest is suspended,
//! the task is `input-required`) until a follow-up `message/send` for the same task
//! delivers the reply, or until `lifecycle.input_timeout_secs` passes, when it traps and the
//! task fails. The wait does not count against the call's deadline. Outside a task the call
//! traps at once, as the runtime specification says ("calling it outside that context
//! returns an error immediately": the function returns a plain string, so the error is a
//! trap).

use std::time::Instant;

use wasmtime::Result;

use super::bindings::murmur::task::task;
use super::state::HostState;
use murmur_config::limits::INPUT_PROMPT_BYTES_MAX;

impl task::Host for HostState {
    async fn request_input(&mut self, prompt: String) -> Result<String> {
        let capsule = self.call.capsule.manifest.name.clone();
        let Some(link) = self.call.task.clone() else {
            let prompt: String = prompt.chars().take(80).collect();
            wasmtime::bail!(
                "murmur:task/task.request-input is only available while a tool runs an A2A task; \
                 `{capsule}` called it outside one (prompt: {prompt:?})"
            )
        };
        let mut prompt = prompt;
        if prompt.len() > INPUT_PROMPT_BYTES_MAX {
            let cut = (0..=INPUT_PROMPT_BYTES_MAX).rev().find(|i| prompt.is_char_boundary(*i)).unwrap_or(0);
            prompt.truncate(cut);
        }
        let timeout = self.call.capsule.manifest.lifecycle.input_timeout;
        let started = Instant::now();
        let answer = link.request_input(prompt, timeout).await;
        self.call.waited += started.elapsed();
        match answer {
            Ok(text) => Ok(text),
            Err(reason) => wasmtime::bail!("`{capsule}` asked for input: {reason}"),
        }
    }
}
