//! The inference message format, `murmur.inference/1`: what the host puts in a driver's
//! `tool-input.data` for one turn, and what it expects back in `tool-result.data`.
//!
//! A driver is a component of the `driver` world: it exports `murmur:tool/run@0.1.0`, so a
//! turn is one `run` call. The request is one JSON object:
//!
//! ```json
//! { "format": "murmur.inference/1",
//!   "model": "gpt-4o-mini",
//!   "system_prompt": "You are terse.",
//!   "messages": [
//!     { "role": "user", "content": "How many words are in notes.txt?" },
//!     { "role": "assistant", "content": "",
//!       "tool_calls": [{ "id": "c1", "name": "wordcount", "arguments": "{\"path\":\"notes.txt\"}" }] },
//!     { "role": "tool", "tool_call_id": "c1", "content": "42" } ],
//!   "tools": [{ "name": "wordcount", "description": "counts words", "input_schema": { "type": "object" } }],
//!   "continuation_id": null,
//!   "params": { "temperature": 0 } }
//! ```
//!
//! and the reply is `{ "text": "...", "tool_calls": [...], "finish_reason": "stop" }`. A
//! driver that holds the conversation provider-side opts into continuation by returning
//! `("continuation_id", "<id>")` in `tool-result.metadata` (not in the JSON): the next turn
//! of the same context then carries only the messages appended since, plus that id.
//!
//! Neither side carries token usage or the model the provider used: the host counts tokens
//! itself, so a driver cannot misreport them.
//!
//! Versioning: `format` names the version. A field added to either object is a new
//! version unless a driver that ignores it behaves the same (unknown fields are ignored
//! on both sides); a driver refuses a `format` it does not know, naming the one it speaks.

use serde::{Deserialize, Serialize};

/// The version of the format this host writes.
pub const FORMAT: &str = "murmur.inference/1";

/// Tool calls one reply may carry: a model that asks for more in one turn is misbehaving,
/// and each call runs a component or a process.
pub const TOOL_CALLS_PER_TURN_MAX: usize = 64;

/// Bytes of one tool call's name, or of its id.
pub const TOOL_CALL_NAME_BYTES_MAX: usize = 256;

/// Who wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
    /// The result of one tool call, answering the assistant message that made it.
    Tool,
}

impl Role {
    /// The role's name on the wire (and in hook events).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
        }
    }

    /// Parses a hook's role string; unknown roles are users (the conservative reading:
    /// text a hook supplied is not the model's own).
    #[must_use]
    pub fn parse_lenient(text: &str) -> Self {
        match text {
            "system" => Self::System,
            "assistant" => Self::Assistant,
            "tool" => Self::Tool,
            _ => Self::User,
        }
    }
}

/// One message of the conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    #[serde(default)]
    pub content: String,
    /// Calls the assistant made in this message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a `tool` message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    #[must_use]
    pub fn user(content: impl Into<String>) -> Self {
        Self { role: Role::User, content: content.into(), tool_calls: Vec::new(), tool_call_id: None }
    }

    #[must_use]
    pub fn assistant(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        Self { role: Role::Assistant, content: content.into(), tool_calls, tool_call_id: None }
    }

    #[must_use]
    pub fn tool(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: Role::Tool,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: Some(call_id.into()),
        }
    }

    /// The text a tokenizer counts for this message: its content and every call's name and
    /// arguments.
    pub fn countable(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.content.as_str())
            .chain(self.tool_calls.iter().flat_map(|call| [call.name.as_str(), call.arguments.as_str()]))
    }
}

/// A tool the model asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id for the call, echoed in the `tool` message that answers it.
    pub id: String,
    pub name: String,
    /// The arguments as the model wrote them: JSON text, not yet validated.
    #[serde(default)]
    pub arguments: String,
}

/// A tool offered to the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// A JSON Schema of the tool's input (an object schema; `{"type":"object"}` when the
    /// artifact declares none).
    pub input_schema: serde_json::Value,
}

/// One turn, host → driver.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnRequest {
    pub format: String,
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// The whole conversation, or with `continuation_id` only what was appended since the
    /// driver last answered.
    pub messages: Vec<Message>,
    #[serde(default)]
    pub tools: Vec<ToolSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuation_id: Option<String>,
    /// Provider parameters from the manifest (`inference.params`), passed through unread.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub params: serde_json::Value,
}

/// Why the model stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// It answered.
    Stop,
    /// It wants the tool calls run.
    ToolCalls,
    /// It hit the provider's output limit.
    Length,
    /// The provider withheld the answer.
    ContentFilter,
    /// Anything else the provider said.
    #[serde(other)]
    Other,
}

impl FinishReason {
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::ToolCalls => "tool_calls",
            Self::Length => "length",
            Self::ContentFilter => "content_filter",
            Self::Other => "other",
        }
    }
}

/// One turn, driver → host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnReply {
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: FinishReason,
}

/// A driver's reply the host cannot use.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReplyError {
    #[error("the driver's reply is not a {FORMAT} reply: {0}")]
    Json(String),
    #[error("the driver's reply carries {0} tool calls, more than {TOOL_CALLS_PER_TURN_MAX}")]
    TooManyCalls(usize),
    #[error("tool call {index} of the driver's reply has an empty or oversized {field}")]
    BadCall { index: usize, field: &'static str },
    #[error("tool call id `{0}` appears twice in one reply")]
    DuplicateId(String),
}

impl TurnReply {
    /// Decodes and checks a driver's `tool-result.data`.
    pub fn decode(data: &str) -> Result<Self, ReplyError> {
        let reply: Self = serde_json::from_str(data).map_err(|e| ReplyError::Json(e.to_string()))?;
        if reply.tool_calls.len() > TOOL_CALLS_PER_TURN_MAX {
            return Err(ReplyError::TooManyCalls(reply.tool_calls.len()));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (index, call) in reply.tool_calls.iter().enumerate() {
            for (field, value) in [("id", &call.id), ("name", &call.name)] {
                if value.is_empty() || value.len() > TOOL_CALL_NAME_BYTES_MAX {
                    return Err(ReplyError::BadCall { index, field });
                }
            }
            if !seen.insert(call.id.as_str()) {
                return Err(ReplyError::DuplicateId(call.id.clone()));
            }
        }
        Ok(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_request_reads_as_documented() {
        let request = TurnRequest {
            format: FORMAT.into(),
            model: "m".into(),
            system_prompt: None,
            messages: vec![
                Message::user("hi"),
                Message::assistant(
                    "",
                    vec![ToolCall { id: "c1".into(), name: "t".into(), arguments: "{}".into() }],
                ),
                Message::tool("c1", "ok"),
            ],
            tools: vec![],
            continuation_id: None,
            params: serde_json::Value::Null,
        };
        let json: serde_json::Value = serde_json::to_value(&request).unwrap();
        assert_eq!(json["format"], "murmur.inference/1");
        assert_eq!(json["messages"][1]["tool_calls"][0]["name"], "t");
        assert_eq!(json["messages"][2]["tool_call_id"], "c1");
        assert!(json.get("continuation_id").is_none() && json.get("params").is_none());
        assert!(json["messages"][0].get("tool_calls").is_none());
    }

    #[test]
    fn replies_are_checked() {
        let ok = TurnReply::decode(r#"{"text":"hi","finish_reason":"stop","usage":{"x":1}}"#).unwrap();
        assert_eq!(ok.text, "hi");
        assert_eq!(
            TurnReply::decode(r#"{"finish_reason":"weird"}"#).unwrap().finish_reason,
            FinishReason::Other
        );
        assert!(matches!(TurnReply::decode("{}"), Err(ReplyError::Json(_))));
        let dup =
            r#"{"finish_reason":"tool_calls","tool_calls":[{"id":"a","name":"t"},{"id":"a","name":"u"}]}"#;
        assert_eq!(TurnReply::decode(dup), Err(ReplyError::DuplicateId("a".into())));
        let empty = r#"{"finish_reason":"tool_calls","tool_calls":[{"id":"","name":"t"}]}"#;
        assert_eq!(TurnReply::decode(empty), Err(ReplyError::BadCall { index: 0, field: "id" }));
        let many: Vec<_> = (0..=TOOL_CALLS_PER_TURN_MAX)
            .map(|i| serde_json::json!({"id": i.to_string(), "name": "t"}))
            .collect();
        let many = serde_json::json!({"finish_reason": "tool_calls", "tool_calls": many}).to_string();
        assert_eq!(TurnReply::decode(&many), Err(ReplyError::TooManyCalls(TOOL_CALLS_PER_TURN_MAX + 1)));
    }

    fn arb_call() -> impl Strategy<Value = ToolCall> {
        ("[a-z]{1,8}", "[a-z-]{1,12}", ".{0,40}").prop_map(|(id, name, arguments)| ToolCall {
            id,
            name,
            arguments,
        })
    }

    proptest! {
        #[test]
        fn replies_round_trip(text in ".{0,64}", calls in proptest::collection::vec(arb_call(), 0..4)) {
            let mut ids = std::collections::BTreeSet::new();
            let calls: Vec<_> = calls.into_iter().filter(|c| ids.insert(c.id.clone())).collect();
            let reply = TurnReply { text, tool_calls: calls, finish_reason: FinishReason::ToolCalls };
            let back = TurnReply::decode(&serde_json::to_string(&reply).unwrap()).unwrap();
            prop_assert_eq!(back, reply);
        }

        #[test]
        fn random_replies_never_panic(data in ".{0,200}") {
            let _ = TurnReply::decode(&data);
        }
    }
}
