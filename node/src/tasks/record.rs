//! A task as its owner keeps it: state, input, output, and a bounded event log.

use murmur_config::limits::TASK_EVENT_LOG_MAX;
use murmur_protocol::task::{TaskEvent, TaskId, TaskSnapshot, TaskState};
use serde::{Deserialize, Serialize};

/// Who sent a task, for the record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// An HTTP client of this node.
    Client,
    /// Another node, for its client or one of its capsules.
    Peer { node: String, capsule: Option<String> },
}

/// A task this node placed on another node: enough to find it again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteRecord {
    pub task: TaskId,
    pub owner: String,
    pub capsule: String,
    pub created_ms: u64,
    /// The API client that sent it (routes stored before clients were named have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
}

/// The stream number of the result artifact a `completed` event carries: the one its
/// status's number skipped.
#[must_use]
pub const fn artifact_seq(event: &TaskEvent) -> u64 {
    event.seq.saturating_sub(1)
}

/// One task owned by this node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub task: TaskId,
    pub context: String,
    pub capsule: String,
    pub message_id: String,
    pub input: String,
    pub state: TaskState,
    /// Result text (completed), reason (failed, rejected, canceled), or prompt (input-required).
    pub message: Option<String>,
    pub origin: Origin,
    pub trace_id: Option<String>,
    /// The trace context the task arrived with (its sender's span).
    #[serde(default)]
    pub traceparent: Option<String>,
    pub seq: u64,
    pub events: Vec<TaskEvent>,
    pub created_ms: u64,
    pub updated_ms: u64,
    /// Acceptance order at the owner: queued tasks run (and re-run after a restart) in
    /// this order.
    #[serde(default)]
    pub ticket: u64,
}

impl TaskRecord {
    /// A new task in state `submitted` (event 1).
    #[must_use]
    pub fn new(
        task: TaskId,
        capsule: &str,
        message_id: &str,
        context: Option<String>,
        input: String,
        origin: Origin,
        now_ms: u64,
    ) -> Self {
        let mut record = Self {
            task,
            context: context.unwrap_or_else(|| task.to_string()),
            capsule: capsule.into(),
            message_id: message_id.into(),
            input,
            state: TaskState::Submitted,
            message: None,
            origin,
            trace_id: None,
            traceparent: None,
            seq: 0,
            events: Vec::new(),
            created_ms: now_ms,
            updated_ms: now_ms,
            ticket: 0,
        };
        record.transition(TaskState::Submitted, None, now_ms);
        record
    }

    /// Moves to `state` (appending an event; `completed` with a result takes two numbers,
    /// see [`artifact_seq`]). Terminal states never change again: returns false, and
    /// changes nothing, if already terminal.
    pub fn transition(&mut self, state: TaskState, message: Option<String>, now_ms: u64) -> bool {
        if self.state.is_terminal() && self.seq > 0 {
            return false;
        }
        // A result goes out on streams as an event of its own (the artifact update) just
        // before the final status: it takes the number before the status's, so every
        // stream event has its own id to resume after.
        if state == TaskState::Completed && message.is_some() {
            self.seq += 1;
        }
        self.state = state;
        self.message = message.clone();
        self.seq += 1;
        self.updated_ms = now_ms;
        self.events.push(TaskEvent { seq: self.seq, text: message, state });
        if self.events.len() > TASK_EVENT_LOG_MAX {
            self.events.remove(0);
        }
        true
    }

    /// The snapshot peers and clients see.
    #[must_use]
    pub fn snapshot(&self) -> TaskSnapshot {
        TaskSnapshot {
            seq: self.seq,
            task: self.task,
            state: self.state,
            capsule: self.capsule.clone(),
            context: self.context.clone(),
            message: self.message.clone(),
        }
    }

    /// Events after `after`, and whether some were already dropped from the log.
    #[must_use]
    pub fn events_after(&self, after: u64) -> (Vec<TaskEvent>, bool) {
        let events: Vec<TaskEvent> = self.events.iter().filter(|e| e.seq > after).cloned().collect();
        let oldest_kept = self.events.first().map_or(self.seq + 1, |e| e.seq);
        (events, after.saturating_add(1) < oldest_kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_numbered_bounded_and_terminal_states_stick() {
        let mut r =
            TaskRecord::new(TaskId::derive("c", "m"), "echo", "m", None, "hi".into(), Origin::Client, 0);
        assert_eq!((r.seq, r.state), (1, TaskState::Submitted));
        for _ in 0..TASK_EVENT_LOG_MAX + 5 {
            r.transition(TaskState::Working, None, 1);
        }
        assert_eq!(r.events.len(), TASK_EVENT_LOG_MAX);
        let (events, gap) = r.events_after(0);
        assert!(gap && events.len() == TASK_EVENT_LOG_MAX);
        let (events, gap) = r.events_after(r.seq - 2);
        assert!(!gap && events.len() == 2);
        let before = r.seq;
        assert!(r.transition(TaskState::Completed, Some("done".into()), 2));
        // The result's artifact update has a number of its own, just before the status.
        assert_eq!(r.seq, before + 2);
        assert_eq!(artifact_seq(r.events.last().unwrap()), before + 1);
        assert!(!r.transition(TaskState::Failed, None, 3));
        assert_eq!(r.state, TaskState::Completed);
    }
}
