//! The session trace, `trace.jsonl`: one JSON object per line, one file per agent session
//! in the capsule's work directory. Every record has `ts_ms` (milliseconds since the Unix
//! epoch) and `event`, then the fields of its kind. The schema is specified in
//! `docs/src/agents.md`. The node's agent loop writes these records; `mur trace` reads them
//! back with the same types and summarises them ([`summarize`]), including redundant-call
//! detection.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::runtime::PATH_FIELDS;

/// Bytes of a tool call's arguments kept in its record (enough for the path-field fallback
/// of redundant-call detection; larger arguments are left out, never cut, so what is
/// recorded is always valid JSON).
pub const RECORDED_ARGUMENTS_BYTES_MAX: usize = 16 * 1024;

/// One line of `trace.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub ts_ms: u64,
    #[serde(flatten)]
    pub event: Event,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    SessionStart {
        session_id: String,
        capsule: String,
        version: String,
        model: String,
    },
    SessionEnd {
        session_id: String,
        turns: u32,
        input_tokens: u64,
        output_tokens: u64,
        tool_calls: u32,
        shell_calls: u32,
        duration_ms: u64,
        exit_status: String,
    },
    TaskStart {
        task_id: String,
        context_id: String,
        source: String,
        input_bytes: u64,
    },
    /// A hook's `reopen-task` re-ran the task's loop with its feedback.
    TaskReopen {
        task_id: String,
        reopen: u32,
        hook: String,
        feedback_bytes: u64,
    },
    TaskEnd {
        task_id: String,
        /// `completed`, `failed` or `canceled`.
        status: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        turns: u32,
        duration_ms: u64,
    },
    /// One completion: a turn of the loop, or (with `origin`) a hook's `run-inference`.
    Inference {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        turn: Option<u32>,
        model: String,
        input_tokens: u64,
        output_tokens: u64,
        /// `tool_calls`, `final`, or `error`.
        decision: String,
        /// Messages sent: all of them, or only the delta when `continued`.
        messages_sent: u32,
        continued: bool,
        duration_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    ToolCall {
        task_id: String,
        turn: u32,
        call_id: String,
        tool: String,
        /// `passed`, `failed`, `error` (the tool's own status) or `refused`.
        status: String,
        input_bytes: u64,
        output_bytes: u64,
        duration_ms: u64,
        /// The tool's declared `state_effect` (`read`, `mutate`), verbatim; absent when it
        /// declared none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        state_effect: Option<String>,
        /// The tool's declared `resource_id`, verbatim; absent when undeclared or empty.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resource_id: Option<String>,
        /// The call's arguments as the model wrote them, when at most
        /// [`RECORDED_ARGUMENTS_BYTES_MAX`] bytes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arguments: Option<String>,
    },
    Shell {
        task_id: String,
        turn: u32,
        call_id: String,
        binary: String,
        command: String,
        exit_code: i32,
        stdout_bytes: u64,
        stderr_bytes: u64,
        duration_ms: u64,
    },
    /// A `replace-context` commit at `on-compaction` replaced the history.
    Compaction {
        task_id: String,
        hook: String,
        session_tokens: u64,
        threshold: f64,
        context_window: u64,
        messages_before: u32,
        messages_after: u32,
        tokens_after: u64,
    },
    /// An `on-inference` hook's `artifact` commit, stored in the node's artifact store as a
    /// `data` artifact `name@version` whose content has `digest`.
    Artifact {
        task_id: String,
        turn: u32,
        hook: String,
        name: String,
        version: String,
        digest: String,
        bytes: u64,
    },
    /// A hook returned an arm its handler does not honour; it was discarded.
    HookDispatchError {
        hook: String,
        handler: String,
        arm: String,
    },
}

impl Record {
    /// The record as one line of `trace.jsonl`, newline included.
    #[must_use]
    pub fn to_line(&self) -> String {
        // A record holds only strings and numbers: serialising it cannot fail.
        let mut line = serde_json::to_string(self).expect("a trace record serialises");
        line.push('\n');
        line
    }
}

/// A trace file that cannot be read as records.
#[derive(Debug, PartialEq, Eq)]
pub struct TraceError {
    /// 1-based.
    pub line: usize,
    pub reason: String,
}

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {} is not a trace record: {}", self.line, self.reason)
    }
}

impl std::error::Error for TraceError {}

/// Reads `trace.jsonl` text: each non-empty line one record, with its 1-based line number.
pub fn parse(text: &str) -> Result<Vec<(usize, Record)>, TraceError> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            serde_json::from_str(line)
                .map(|r| (i + 1, r))
                .map_err(|e| TraceError { line: i + 1, reason: e.to_string() })
        })
        .collect()
}

/// One session, summarised.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub session_id: String,
    pub capsule: String,
    pub model: String,
    pub tasks: u32,
    pub turns: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub tool_calls: u32,
    pub shell_calls: u32,
    pub compactions: u32,
    pub hook_dispatch_errors: u32,
    /// `on-inference` artifacts stored in the node's store.
    #[serde(default)]
    pub artifacts: u32,
    /// From the first record to the last.
    pub duration_ms: u64,
    /// Whether the file ends with the session's end (a crashed or running session does not).
    pub ended: bool,
    pub redundant: Vec<Redundant>,
}

/// A read the agent did not need: the same resource, read before, with nothing in between
/// that could have changed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redundant {
    /// 1-based lines of the redundant call and of the read it repeats.
    pub line: usize,
    pub first_line: usize,
    pub task_id: String,
    pub turn: u32,
    pub tool: String,
    pub resource_id: String,
    /// `declared` (the tool's `resource_id`) or `input` (a path-like field of its arguments).
    pub resource_from: String,
}

/// The resource a recorded call addressed: its declared `resource_id`, else the first
/// path-like field of its arguments (`path`, `file`, `file_path`, `filepath`, `filename`).
#[must_use]
pub fn resource_of(resource_id: Option<&str>, arguments: Option<&str>) -> Option<(String, &'static str)> {
    if let Some(id) = resource_id.filter(|id| !id.is_empty()) {
        return Some((id.to_owned(), "declared"));
    }
    let json: serde_json::Value = serde_json::from_str(arguments?).ok()?;
    PATH_FIELDS.iter().find_map(|field| json.get(field)?.as_str().map(|p| (p.to_owned(), "input")))
}

/// Summarises every session in `records` (a file normally holds one).
///
/// Redundant-call detection, per session: a `tool_call` whose `state_effect` is `read` and
/// whose resource (see [`resource_of`]) is byte-equal to an earlier read's, with no
/// `mutate` or unknown-effect call to that resource in between. A mutate or unknown call
/// with no resource, and every shell command, may have changed anything: they invalidate
/// every earlier read. Refused calls ran nothing and change nothing; a read that did not
/// pass read nothing to repeat. A compaction clears every read: the model no longer has
/// what they returned.
#[must_use]
pub fn summarize(records: &[(usize, Record)]) -> Vec<Summary> {
    let mut sessions: Vec<Summary> = Vec::new();
    let mut reads: BTreeMap<String, usize> = BTreeMap::new();
    let mut first_ts = 0;
    for (line, record) in records {
        if sessions.is_empty() || matches!(record.event, Event::SessionStart { .. }) {
            sessions.push(Summary::default());
            reads.clear();
            first_ts = record.ts_ms;
        }
        let summary = sessions.last_mut().expect("pushed above");
        summary.duration_ms = record.ts_ms.saturating_sub(first_ts);
        match &record.event {
            Event::SessionStart { session_id, capsule, model, .. } => {
                summary.session_id.clone_from(session_id);
                summary.capsule.clone_from(capsule);
                summary.model.clone_from(model);
            }
            Event::SessionEnd { .. } => summary.ended = true,
            Event::TaskStart { .. } => summary.tasks += 1,
            Event::TaskReopen { .. } | Event::TaskEnd { .. } => {}
            Event::Inference { input_tokens, output_tokens, origin, .. } => {
                if origin.is_none() {
                    summary.turns += 1;
                }
                // Saturating: the numbers come from a file anyone may have written.
                summary.input_tokens = summary.input_tokens.saturating_add(*input_tokens);
                summary.output_tokens = summary.output_tokens.saturating_add(*output_tokens);
            }
            Event::ToolCall { task_id, turn, tool, status, state_effect, resource_id, arguments, .. } => {
                summary.tool_calls += 1;
                if status == "refused" {
                    continue;
                }
                let resource = resource_of(resource_id.as_deref(), arguments.as_deref());
                match (state_effect.as_deref(), resource) {
                    (Some("read"), Some((resource_id, from))) => {
                        if status != "passed" {
                            // It read nothing the model could reuse.
                        } else if let Some(&first_line) = reads.get(&resource_id) {
                            summary.redundant.push(Redundant {
                                line: *line,
                                first_line,
                                task_id: task_id.clone(),
                                turn: *turn,
                                tool: tool.clone(),
                                resource_id,
                                resource_from: from.into(),
                            });
                        } else {
                            reads.insert(resource_id, *line);
                        }
                    }
                    // A read of nothing nameable: nothing to credit, nothing it could change.
                    (Some("read"), None) => {}
                    (_, Some((resource_id, _))) => {
                        reads.remove(&resource_id);
                    }
                    (_, None) => reads.clear(),
                }
            }
            Event::Shell { .. } => {
                summary.shell_calls += 1;
                reads.clear();
            }
            Event::Compaction { .. } => {
                summary.compactions += 1;
                reads.clear();
            }
            Event::HookDispatchError { .. } => summary.hook_dispatch_errors += 1,
            Event::Artifact { .. } => summary.artifacts += 1,
        }
    }
    sessions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(effect: Option<&str>, resource: Option<&str>, arguments: Option<&str>) -> Event {
        Event::ToolCall {
            task_id: "t".into(),
            turn: 1,
            call_id: "c".into(),
            tool: "fs".into(),
            status: "passed".into(),
            input_bytes: 0,
            output_bytes: 0,
            duration_ms: 1,
            state_effect: effect.map(Into::into),
            resource_id: resource.map(Into::into),
            arguments: arguments.map(Into::into),
        }
    }

    fn detect(events: Vec<Event>) -> Vec<(usize, usize, String)> {
        let records: Vec<_> = events
            .into_iter()
            .enumerate()
            .map(|(i, event)| (i + 1, Record { ts_ms: i as u64, event }))
            .collect();
        summarize(&records)[0]
            .redundant
            .iter()
            .map(|r| (r.line, r.first_line, r.resource_id.clone()))
            .collect()
    }

    #[test]
    fn a_repeated_read_is_redundant_until_something_may_change_it() {
        let read_a = || call(Some("read"), Some("file:a"), None);
        assert_eq!(detect(vec![read_a(), read_a()]), [(2, 1, "file:a".to_owned())]);
        // A mutate of the same resource in between clears it; of another resource does not.
        assert!(detect(vec![read_a(), call(Some("mutate"), Some("file:a"), None), read_a()]).is_empty());
        assert_eq!(detect(vec![read_a(), call(Some("mutate"), Some("file:b"), None), read_a()]).len(), 1);
        // Unknown effects count as mutations; with no resource they may have touched anything.
        assert!(detect(vec![read_a(), call(None, Some("file:a"), None), read_a()]).is_empty());
        assert!(detect(vec![read_a(), call(Some("weird"), None, None), read_a()]).is_empty());
        // Byte-equal only: no normalising.
        assert!(detect(vec![read_a(), call(Some("read"), Some("file:a/"), None)]).is_empty());
    }

    #[test]
    fn failed_reads_and_compaction_leave_nothing_to_repeat() {
        let read_a = || call(Some("read"), Some("file:a"), None);
        let mut failed = read_a();
        if let Event::ToolCall { status, .. } = &mut failed {
            *status = "error".into();
        }
        assert!(detect(vec![failed, read_a()]).is_empty(), "a retry after a failed read is not redundant");
        let compaction = Event::Compaction {
            task_id: "t".into(),
            hook: "c".into(),
            session_tokens: 10,
            threshold: 0.8,
            context_window: 10,
            messages_before: 3,
            messages_after: 1,
            tokens_after: 2,
        };
        assert!(detect(vec![read_a(), compaction, read_a()]).is_empty());
    }

    #[test]
    fn without_a_declared_resource_the_detector_falls_back_to_path_fields() {
        let read = |args: &str| call(Some("read"), None, Some(args));
        let found = detect(vec![read(r#"{"file_path":"/x"}"#), read(r#"{"path":"/x","n":2}"#)]);
        assert_eq!(found, [(2, 1, "/x".to_owned())]);
        assert!(detect(vec![read(r#"{"query":"/x"}"#), read(r#"{"query":"/x"}"#)]).is_empty());
        // A declared id wins over the arguments.
        let declared = call(Some("read"), Some("sym:x"), Some(r#"{"path":"/x"}"#));
        assert!(detect(vec![read(r#"{"path":"/x"}"#), declared]).is_empty());
    }

    #[test]
    fn a_truncated_file_names_the_bad_line() {
        let good = Record {
            ts_ms: 1,
            event: Event::Shell {
                task_id: "t".into(),
                turn: 1,
                call_id: "c".into(),
                binary: "wc".into(),
                command: String::new(),
                exit_code: 0,
                stdout_bytes: 0,
                stderr_bytes: 0,
                duration_ms: 0,
            },
        }
        .to_line();
        let text = format!("{good}{{\"ts_ms\":2,\"ev");
        assert_eq!(parse(&text).unwrap_err().line, 2);
        assert_eq!(parse(&good).unwrap().len(), 1);
    }

    #[test]
    fn records_are_flat_json_lines_and_read_back() {
        let record = Record {
            ts_ms: 7,
            event: Event::HookDispatchError {
                hook: "h".into(),
                handler: "on-shell".into(),
                arm: "artifact".into(),
            },
        };
        let line = record.to_line();
        assert_eq!(
            line,
            "{\"ts_ms\":7,\"event\":\"hook_dispatch_error\",\"hook\":\"h\",\"handler\":\"on-shell\",\"arm\":\"artifact\"}\n"
        );
        assert_eq!(serde_json::from_str::<Record>(&line).unwrap(), record);
    }
}
