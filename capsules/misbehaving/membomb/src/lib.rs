//! Misbehaving guest: allocates until something stops it. The runtime's memory limit must.

wit_bindgen::generate!({
    path: ["../../../wit/tool", "../../../wit/task", "../../../wit/text", "../../../wit/tool-registry", "../../../wit/capsule", "../../../wit/runtime-guest"],
    world: "murmur:runtime-guest/tool@0.1.0",
    generate_all,
});

use exports::murmur::tool::run::{Guest, Status, ToolInput, ToolResult};

struct MemBomb;

impl Guest for MemBomb {
    fn run(_: ToolInput) -> ToolResult {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            let mut block = vec![0u8; 4 << 20];
            block[0] = 1;
            hoard.push(std::hint::black_box(block));
            if hoard.len() > 1 << 20 {
                break;
            }
        }
        ToolResult {
            status: Status::Passed,
            summary: None,
            data: None,
            data_path: None,
            truncated: false,
            metadata: vec![],
        }
    }
}

export!(MemBomb);
