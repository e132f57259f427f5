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
//! - the records of `trace.jsonl` are `murmur_api::session_trace` (re-exported as
//!   [`trace`]), shared with `mur trace`.
//!
//! It must not know how a turn reaches a provider, how a tool runs or where a trace is
//! written: the runner that carries out the machine's outputs over the runtime's ports
//! does that. It knows no clock, thread or socket.
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
pub mod session;
pub use murmur_api::session_trace as trace;
pub mod wire;
