//! The native agent loop: agent capsules (manifest-only, `kind = "agent"`) think in turns
//! of inference, tool calls and hooks.
//!
//! This crate owns the loop's decisions and the formats around it:
//!
//! - [`session`]: the **turn machine**, sans-IO like the protocol's machines — one
//!   session per capsule launch with its tasks, `max_turns`, `max_task_reopens`, the
//!   compaction trigger, which hook fires when, stateful continuation, and the trace. The
//!   current time and token counts are passed in.
//! - [`hooks`]: the honoured-arm table of `murmur:hook/lifecycle@0.5.0` and what becomes of
//!   every other hook output.
//! - [`wire`]: `murmur.inference/1`, the message format inference drivers speak.
//! - [`runner`]: the async runner that carries out a session's outputs over the
//!   runtime (the agent's driver, hooks, allowlisted tools and shell) and writes its
//!   `trace.jsonl`.
//! - the records of `trace.jsonl` are `murmur_api::session_trace` (re-exported as
//!   [`trace`]), shared with `mur trace`.
//!
//! The machine knows no clock, thread or socket; the runner does the I/O through the
//! runtime. The crate must not know the task database, the network or the HTTP API: the
//! node hands it a task and a [`TaskPort`](murmur_runtime::ports::TaskPort) and takes back
//! how the task ended.
//!
//! ```
//! use murmur_agent::session::{Input, Output, Session, Settings, TaskStart, Tokenizer};
//! struct Words;
//! impl Tokenizer for Words {
//!     fn count(&self, text: &str) -> u64 { text.split_whitespace().count() as u64 }
//! }
//! let settings = Settings {
//!     capsule_name: "helper".into(), capsule_version: "0.1.0".into(), model: "m".into(),
//!     system_prompt: None, max_turns: 8, max_task_reopens: 1, context_window: 8192,
//!     compaction_threshold: 0.8, compaction_model: None, tools: vec![], shell_tool: None,
//!     capabilities: vec![], params: serde_json::Value::Null,
//! };
//! let mut session = Session::new(settings, "4f7c…".into(), Words);
//! let task = TaskStart { task_id: "t1".into(), context_id: "c1".into(), source: "a2a".into(), text: "hi".into() };
//! session.handle(0, Input::StartTask(task)).unwrap();
//! // The session starts: a trace record, then on-session-start for the hooks.
//! assert!(matches!(session.poll_output(), Some(Output::Trace(_))));
//! assert!(matches!(session.poll_output(), Some(Output::Dispatch(_))));
//! ```

pub mod hooks;
pub mod runner;
pub mod session;
pub use murmur_api::session_trace as trace;
pub mod wire;
