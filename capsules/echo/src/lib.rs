//! `echo`: returns its input. The smallest useful tool, and the benchmark's subject.

wit_bindgen::generate!({
    path: ["../../wit/tool", "../../wit/task", "../../wit/text", "../../wit/tool-registry", "../../wit/capsule", "../../wit/runtime-guest"],
    world: "murmur:runtime-guest/tool@0.1.0",
    generate_all,
});

use exports::murmur::tool::run::{Guest, Status, ToolInput, ToolResult};

struct Echo;

impl Guest for Echo {
    fn run(input: ToolInput) -> ToolResult {
        ToolResult {
            status: Status::Passed,
            summary: Some("echoed the input".into()),
            data: input.data,
            data_path: None,
            truncated: false,
            metadata: vec![("state_effect".into(), "read".into())],
        }
    }
}

export!(Echo);
