//! `ask`: asks the task's sender a question with murmur:task/task, then answers with what
//! it was told. Input: the question. Output: `QUESTION -> ANSWER`.
//!
//! While it waits, its task is `input-required`; a follow-up message/send with the same
//! task id resumes it. Past `lifecycle.input_timeout_secs` the call traps and the task fails.

wit_bindgen::generate!({
    path: ["../../wit/tool", "../../wit/task", "../../wit/text", "../../wit/tool-registry", "../../wit/capsule", "../../wit/runtime-guest"],
    world: "murmur:runtime-guest/tool@0.1.0",
    generate_all,
});

use exports::murmur::tool::run::{Guest, Status, ToolInput, ToolResult};
use murmur::task::task::request_input;

struct Ask;

impl Guest for Ask {
    fn run(input: ToolInput) -> ToolResult {
        let question = input.data.unwrap_or_else(|| "What next?".into());
        let answer = request_input(&question);
        ToolResult {
            status: Status::Passed,
            summary: Some("asked and was answered".into()),
            data: Some(format!("{question} -> {answer}")),
            data_path: None,
            truncated: false,
            metadata: vec![("state_effect".into(), "read".into())],
        }
    }
}

export!(Ask);
