//! `wordcount`: counts lines, words, bytes and (through the host's murmur:text/chunks)
//! tokens of its input text. Declares `state_effect=read` and a resource id scoped by
//! addressing scheme (`text:fnv64:<hash>`), so identical inputs are the same resource.

wit_bindgen::generate!({
    path: ["../../wit/tool", "../../wit/task", "../../wit/text", "../../wit/tool-registry", "../../wit/capsule", "../../wit/runtime-guest"],
    world: "murmur:runtime-guest/tool@0.1.0",
    generate_all,
});

use exports::murmur::tool::run::{Guest, Status, ToolInput, ToolResult};
use murmur::text::chunks;

struct WordCount;

impl Guest for WordCount {
    fn run(input: ToolInput) -> ToolResult {
        let Some(text) = input.data else {
            return ToolResult {
                status: Status::Error,
                summary: Some("wordcount needs text in `data`".into()),
                data: None,
                data_path: None,
                truncated: false,
                metadata: vec![],
            };
        };
        let words = text.split_whitespace().count();
        let lines = text.lines().count();
        let tokens = chunks::count_tokens(&text);
        let data = format!(r#"{{"lines":{lines},"words":{words},"bytes":{},"tokens":{tokens}}}"#, text.len());
        ToolResult {
            status: Status::Passed,
            summary: Some(format!("{words} words, {lines} lines")),
            data: Some(data),
            data_path: None,
            truncated: false,
            metadata: vec![
                ("state_effect".into(), "read".into()),
                ("resource_id".into(), format!("text:fnv64:{:016x}", fnv64(text.as_bytes()))),
            ],
        }
    }
}

fn fnv64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

export!(WordCount);
