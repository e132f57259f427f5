//! `compactor`: the shipped compaction hook. When an agent's conversation crosses its
//! compaction threshold, it keeps the most recent messages verbatim and replaces the older
//! ones with one summary written by the agent's own driver (`murmur:runtime/inference`),
//! with `inference.compaction.model` when the manifest sets one (else the agent's model).
//! Every other handler answers `none`.
//!
//! `COMPACTOR_KEEP` (the agent's `[wasi] env`) is how many recent messages stay verbatim
//! (default 4). A failed summary is an `Err`: the host logs it and the history stays.

wit_bindgen::generate!({
    path: ["../../wit/hook", "../../wit/runtime"],
    world: "murmur:runtime/hook@0.2.0",
    generate_all,
});

use exports::murmur::hook::lifecycle::{
    CompactionEvent, Guest, HookOutput, InferenceEvent, Message, SessionContext, SessionEndEvent, ShellEvent,
    StageEvent, TaskEndEvent, TaskStartEvent, ToolEvent,
};
use murmur::runtime::inference::{self, InferenceRequest};

const INSTRUCTIONS: &str = "Summarise the conversation so far for the assistant that continues it: the task, what \
was done, every result and decision that still matters, and what remains. Be complete but brief; plain text.";

struct Compactor;

impl Guest for Compactor {
    fn on_compaction(event: CompactionEvent) -> Result<HookOutput, String> {
        let keep = std::env::var("COMPACTOR_KEEP").ok().and_then(|k| k.parse().ok()).unwrap_or(4usize);
        let messages = event.messages;
        if messages.len() <= keep {
            // Nothing old enough to fold: leave the history as it is.
            return Ok(HookOutput::None);
        }
        let (older, recent) = messages.split_at(messages.len() - keep);
        let transcript = older
            .iter()
            .map(|m| murmur::hook::lifecycle::Message { role: m.role.clone(), content: m.content.clone() })
            .collect();
        let request = InferenceRequest {
            messages: transcript,
            system_prompt: Some(event.system_prompt.unwrap_or_else(|| INSTRUCTIONS.into())),
            model: event.model,
        };
        let summary = inference::run_inference(&request)?;
        let mut history = vec![Message {
            role: "user".into(),
            content: format!("Summary of the earlier conversation:\n{}", summary.text),
        }];
        history.extend(recent.iter().cloned());
        Ok(HookOutput::ReplaceContext(history))
    }

    fn on_stage(_: StageEvent) -> Result<HookOutput, String> {
        Ok(HookOutput::None)
    }
    fn on_session_start(_: SessionContext) -> Result<HookOutput, String> {
        Ok(HookOutput::None)
    }
    fn on_task_start(_: TaskStartEvent) -> Result<HookOutput, String> {
        Ok(HookOutput::None)
    }
    fn on_inference(_: InferenceEvent) -> Result<HookOutput, String> {
        Ok(HookOutput::None)
    }
    fn on_tool_call(_: ToolEvent) -> Result<HookOutput, String> {
        Ok(HookOutput::None)
    }
    fn on_shell(_: ShellEvent) -> Result<HookOutput, String> {
        Ok(HookOutput::None)
    }
    fn on_task_end(_: TaskEndEvent) -> Result<HookOutput, String> {
        Ok(HookOutput::None)
    }
    fn on_session_end(_: SessionEndEvent) -> Result<HookOutput, String> {
        Ok(HookOutput::None)
    }
}

export!(Compactor);
