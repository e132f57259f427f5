//! `invoke-loop`: a script capsule that invokes one tool `INVOKE_COUNT` times (default 1)
//! through murmur:tool-registry; `INVOKE_TOOL` names it (default `echo`). The benchmark
//! uses it to price one invoke hop from a capsule to a tool.

wit_bindgen::generate!({
    path: ["../../wit/tool", "../../wit/task", "../../wit/text", "../../wit/tool-registry", "../../wit/capsule", "../../wit/runtime-guest"],
    world: "murmur:runtime-guest/capsule@0.1.0",
    generate_all,
});

use exports::murmur::capsule::run::Guest;
use murmur::tool::run::ToolInput;
use murmur::tool_registry::invoke;

struct InvokeLoop;

impl Guest for InvokeLoop {
    fn run() {
        let tool = std::env::var("INVOKE_TOOL").unwrap_or_else(|_| "echo".into());
        let count: u32 = std::env::var("INVOKE_COUNT").ok().and_then(|n| n.parse().ok()).unwrap_or(1);
        let input = ToolInput { data: Some("x".into()), log_path: None };
        for _ in 0..count {
            invoke::invoke(&tool, &input).unwrap_or_else(|err| panic!("{err}"));
        }
    }
}

export!(InvokeLoop);
