//! `murmur:tool-registry/invoke`: a capsule invokes an allowlisted, installed tool by name;
//! and the record the host keeps of every tool call (the `metadata` channel's
//! `state_effect` and `resource_id`, which the session trace will carry).

use std::time::Duration;

use serde::Serialize;
use wasmtime::Result;

use super::bindings::murmur::tool::run::{ToolInput, ToolResult};
use super::bindings::murmur::tool_registry::invoke;
use super::state::HostState;
use super::{CapsuleKind, INVOKE_DEPTH_MAX};

/// How a call affected the resource it addressed, as the tool declared it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
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

/// Where a call's resource id came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResourceIdSource {
    /// The tool returned a non-empty `resource_id`.
    Declared,
    /// Sniffed from a path-like field of the input (`path`, `file`, `file_path`,
    /// `filepath`, `filename`), because the tool declared none.
    Input,
}

/// One tool call as the host records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ToolCallRecord {
    pub tool: String,
    pub status: String,
    pub state_effect: StateEffect,
    /// Verbatim, never parsed or normalized: two calls address the same resource exactly
    /// when these strings are byte-equal.
    pub resource_id: Option<String>,
    pub resource_id_source: Option<ResourceIdSource>,
    pub duration_ms: u64,
}

/// Input fields a resource id is sniffed from when a tool declares none.
pub const PATH_FIELDS: [&str; 5] = ["path", "file", "file_path", "filepath", "filename"];

impl ToolCallRecord {
    /// Records a finished call of `tool` with `input` (its `data`, if any).
    #[must_use]
    pub fn new(tool: &str, result: &ToolResult, input: Option<&str>, elapsed: Duration) -> Self {
        let value = |key: &str| result.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        let state_effect = match value("state_effect") {
            Some("read") => StateEffect::Read,
            Some("mutate") => StateEffect::Mutate,
            _ => StateEffect::Unknown,
        };
        let (resource_id, resource_id_source) = match value("resource_id").filter(|v| !v.is_empty()) {
            Some(id) => (Some(id.to_owned()), Some(ResourceIdSource::Declared)),
            None => match input.and_then(sniff_path) {
                Some(path) => (Some(path), Some(ResourceIdSource::Input)),
                None => (None, None),
            },
        };
        Self {
            tool: tool.to_owned(),
            status: super::ToolResultJson::from(result).status,
            state_effect,
            resource_id,
            resource_id_source,
            duration_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

fn sniff_path(input: &str) -> Option<String> {
    let json: serde_json::Value = serde_json::from_str(input).ok()?;
    PATH_FIELDS.iter().find_map(|field| json.get(field)?.as_str().map(str::to_owned))
}

impl invoke::Host for HostState {
    async fn invoke(&mut self, name: String, input: ToolInput) -> Result<Result<ToolResult, String>> {
        let caller = &self.call.capsule.manifest;
        if !caller.capabilities.allows_tool(&name) {
            return Ok(Err(format!(
                "tool policy: '{name}' not in capabilities.tools of capsule '{}'",
                caller.name
            )));
        }
        if self.call.depth >= INVOKE_DEPTH_MAX {
            return Ok(Err(format!(
                "tool invocations nest deeper than {INVOKE_DEPTH_MAX}; refusing '{name}'"
            )));
        }
        let Ok(tool) = self.call.runtime.get(&name) else {
            return Ok(Err(format!("tool '{name}' is not installed on this node")));
        };
        if !matches!(tool.manifest.kind, CapsuleKind::Tool | CapsuleKind::Driver) {
            return Ok(Err(format!("'{name}' is a {}, not a tool", tool.manifest.kind.as_str())));
        }
        let runtime = self.call.runtime.clone();
        // Boxed: this call runs inside the caller's own `call_tool` future.
        match Box::pin(runtime.call_tool(tool, input, self.call.depth + 1, None)).await {
            Ok((result, records)) => {
                self.call.records.extend(records);
                Ok(Ok(result))
            }
            Err(err) => Ok(Err(err.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::bindings::murmur::tool::run::Status;
    use super::*;

    fn result(metadata: &[(&str, &str)]) -> ToolResult {
        ToolResult {
            status: Status::Passed,
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
            None,
            Duration::ZERO,
        );
        assert_eq!(
            (r.state_effect, r.resource_id.as_deref()),
            (StateEffect::Read, Some("sym:a")),
            "first resource_id wins"
        );
        let r = ToolCallRecord::new("t", &result(&[("state_effect", "READ")]), None, Duration::ZERO);
        assert_eq!(r.state_effect, StateEffect::Unknown, "unrecognized values mean unknown");
        let r = ToolCallRecord::new(
            "t",
            &result(&[("resource_id", "")]),
            Some(r#"{"file_path":"/a/b"}"#),
            Duration::ZERO,
        );
        assert_eq!(
            (r.resource_id.as_deref(), r.resource_id_source),
            (Some("/a/b"), Some(ResourceIdSource::Input))
        );
        let r = ToolCallRecord::new("t", &result(&[]), Some("not json"), Duration::ZERO);
        assert_eq!((r.state_effect, r.resource_id), (StateEffect::Unknown, None));
    }
}
