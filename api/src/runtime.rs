//! The runtime's documents: what a node runs (`GET /v1/runtime/capsules`), a tool's input,
//! and what a tool or script capsule run produced (`POST /v1/tools/{name}/run`,
//! `POST /v1/capsules/{name}/run`, `mur tool run FILE.wasm`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One capsule the node runs (`GET /v1/runtime/capsules`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct InstalledView {
    pub name: String,
    pub version: String,
    pub kind: String,
    pub digest: String,
    pub description: String,
    pub tools_allow: Vec<String>,
    pub shell_allow: Vec<String>,
    pub network_allow: Vec<String>,
    pub memory_mb: u64,
    pub deadline_ms: u64,
    pub workdir: String,
}

/// A tool's input as JSON (`murmur:tool/run`'s `tool-input`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolInputJson {
    #[serde(default)]
    pub data: Option<String>,
    #[serde(default)]
    pub log_path: Option<String>,
}

/// What a tool run produced, with what the host recorded about it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ToolRun {
    pub result: ToolResultJson,
    /// The tool calls of this run: the call itself first, then any nested invocations.
    pub calls: Vec<ToolCallRecord>,
    pub elapsed_ms: u64,
}

/// What a capsule run printed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CapsuleRun {
    pub stdout: String,
    pub stderr: String,
    pub calls: Vec<ToolCallRecord>,
    pub elapsed_ms: u64,
}

/// A tool result as JSON (`murmur:tool/run`'s `tool-result`, fields in snake_case).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ToolResultJson {
    /// `passed`, `failed` or `error`.
    pub status: String,
    pub summary: Option<String>,
    pub data: Option<String>,
    pub data_path: Option<String>,
    pub truncated: bool,
    pub metadata: Vec<(String, String)>,
}

/// How a call affected the resource it addressed, as the tool declared it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StateEffect {
    /// Only observed state.
    Read,
    /// Changed state.
    Mutate,
    /// Not declared (or an unrecognized value): treated like a mutation, never credited
    /// as a redundant read.
    Unknown,
}

/// One tool call as the host records it (the `metadata` channel's `state_effect` and
/// `resource_id`, which the session trace carries). Only what the tool declared is
/// recorded: the path-field fallback belongs to redundant-call detection
/// ([`crate::session_trace::resource_of`]), never to the record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    pub tool: String,
    pub status: String,
    pub state_effect: StateEffect,
    /// Verbatim, never parsed or normalized: two calls address the same resource exactly
    /// when these strings are byte-equal.
    pub resource_id: Option<String>,
    pub duration_ms: u64,
}

/// Input fields redundant-call detection reads a resource from when a tool declares none.
pub const PATH_FIELDS: [&str; 5] = ["path", "file", "file_path", "filepath", "filename"];

impl ToolCallRecord {
    /// Records a finished call of `tool` that returned `result`.
    #[must_use]
    pub fn new(tool: &str, result: &ToolResultJson, elapsed: Duration) -> Self {
        let value = |key: &str| result.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        let state_effect = match value("state_effect") {
            Some("read") => StateEffect::Read,
            Some("mutate") => StateEffect::Mutate,
            _ => StateEffect::Unknown,
        };
        // The first `resource_id` in list order; an empty one is undeclared.
        let resource_id = value("resource_id").filter(|v| !v.is_empty()).map(str::to_owned);
        Self {
            tool: tool.to_owned(),
            status: result.status.clone(),
            state_effect,
            resource_id,
            duration_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(metadata: &[(&str, &str)]) -> ToolResultJson {
        ToolResultJson {
            status: "passed".into(),
            summary: None,
            data: None,
            data_path: None,
            truncated: false,
            metadata: metadata.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect(),
        }
    }

    #[test]
    fn state_effect_and_resource_id_follow_the_spec() {
        let r = ToolCallRecord::new(
            "t",
            &result(&[("state_effect", "read"), ("resource_id", "sym:a"), ("resource_id", "sym:b")]),
            Duration::ZERO,
        );
        assert_eq!(
            (r.state_effect, r.resource_id.as_deref()),
            (StateEffect::Read, Some("sym:a")),
            "first resource_id wins"
        );
        let r = ToolCallRecord::new("t", &result(&[("state_effect", "READ")]), Duration::ZERO);
        assert_eq!(r.state_effect, StateEffect::Unknown, "unrecognized values mean unknown");
        // An empty id is undeclared, and nothing is sniffed from the input into the record.
        let r = ToolCallRecord::new("t", &result(&[("resource_id", "")]), Duration::ZERO);
        assert_eq!(r.resource_id, None);
        let r = ToolCallRecord::new("t", &result(&[]), Duration::ZERO);
        assert_eq!((r.state_effect, r.resource_id), (StateEffect::Unknown, None));
        assert_eq!(r.status, "passed");
    }
}
