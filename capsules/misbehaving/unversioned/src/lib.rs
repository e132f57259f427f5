//! Misbehaving guest: built against the unversioned `murmur:tool` package. The runtime must
//! refuse it with an error naming `murmur:tool/run@0.1.0` and a rebuild hint.

wit_bindgen::generate!({
    path: "wit",
    world: "legacy-tool",
});

use exports::murmur::tool::run::{Guest, Status, ToolInput, ToolResult};

struct Legacy;

impl Guest for Legacy {
    fn run(input: ToolInput) -> ToolResult {
        ToolResult {
            status: Status::Passed,
            summary: None,
            data: input.data,
            data_path: None,
            truncated: false,
            metadata: vec![],
        }
    }
}

export!(Legacy);
