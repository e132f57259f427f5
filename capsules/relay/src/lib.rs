//! `relay`: forwards a message to another capsule with murmur:message/send.
//!
//! Input: `TARGET TEXT…`, where TARGET is a peer URL (`mesh://wordcount`,
//! `mesh://wordcount@PEER`, `HOST:PORT`). The message id is derived from the input, so the
//! same input sent twice names the same task at the target (idempotent); put a nonce in the
//! text to send it again. The result is the target task's id and state as JSON (state
//! `rejected`, with no id, when the target refused it); a send refused at this end (network
//! policy, grant check) or with nowhere to go is a failed result carrying the host's error.

wit_bindgen::generate!({
    path: [
        "../../wit/tool", "../../wit/task", "../../wit/text", "../../wit/tool-registry", "../../wit/capsule",
        "../../wit/runtime-guest", "../../wit/message", "wit",
    ],
    world: "murmur:relay/relay@0.1.0",
    generate_all,
});

use exports::murmur::tool::run::{Guest, Status, ToolInput, ToolResult};
use murmur::message::send;

struct Relay;

/// FNV-1a, for a stable message id from the input.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

fn result(status: Status, summary: String, data: Option<String>) -> ToolResult {
    ToolResult {
        status,
        summary: Some(summary),
        data,
        data_path: None,
        truncated: false,
        metadata: vec![("state_effect".into(), "mutate".into())],
    }
}

impl Guest for Relay {
    fn run(input: ToolInput) -> ToolResult {
        let input = input.data.unwrap_or_default();
        let Some((target, text)) = input.trim().split_once(' ') else {
            return result(Status::Error, "input must be `TARGET TEXT…`".into(), None);
        };
        let message = send::Message {
            message_id: format!("relay-{:016x}", fnv(&input)),
            context_id: Some("relay".into()),
            text: text.to_owned(),
        };
        match send::send(target, &message) {
            Ok(sent) => {
                let data = format!(
                    r#"{{"target":"{target}","task_id":"{}","state":"{}"}}"#,
                    sent.task_id, sent.state
                );
                result(Status::Passed, format!("sent to {target}: task {} is {}", sent.task_id, sent.state), Some(data))
            }
            Err(err) => result(Status::Failed, format!("send to {target} failed: {err}"), None),
        }
    }
}

export!(Relay);
