//! Misbehaving guest: never returns. The runtime must stop it at its deadline.

wit_bindgen::generate!({
    path: ["../../../wit/tool", "../../../wit/task", "../../../wit/text", "../../../wit/tool-registry", "../../../wit/capsule", "../../../wit/runtime-guest"],
    world: "murmur:runtime-guest/tool@0.1.0",
    generate_all,
});

use exports::murmur::tool::run::{Guest, ToolInput, ToolResult};

struct Spin;

impl Guest for Spin {
    fn run(_: ToolInput) -> ToolResult {
        let mut n: u64 = 0;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }
}

export!(Spin);
