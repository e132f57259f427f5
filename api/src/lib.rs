//! What a Murmur node and its clients agree on, with nothing of how either is built: the
//! JSON documents of the node's HTTP API, the W3C `traceparent` every hop carries, the
//! records of an agent session's `trace.jsonl`, and the conventions both command-line
//! programs follow (exit codes, tables for people, one JSON object per line for scripts).
//!
//! It owns types and their serialized shape, field by field as `docs/src/api.md` specifies
//! them. It must not know how a node answers (no libp2p, wasmtime, axum, tokio or disk):
//! `mur` depends on it to read the node's answers without building any of that.
//!
//! ```
//! let view: murmur_api::views::PeersView =
//!     serde_json::from_str(r#"{"local_peer_id":"12D3KooW…","peers":[]}"#).unwrap();
//! assert!(view.peers.is_empty());
//! ```

pub mod exit;
pub mod output;
pub mod runtime;
pub mod session_trace;
pub mod trace;
pub mod views;

pub use trace::TraceContext;
