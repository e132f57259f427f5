//! Murmur's brain host: long-running agents ("brains") with an event inbox, messaging
//! across the mesh, timers (cron included), per-agent memory, logs and hot reload — the
//! host interface of `wit/brain/brain.wit` (`murmur:brain@0.1.0`), one implementation
//! behind three guest forms: a WebAssembly component (through `murmur-runtime`), a rhai
//! script and a JavaScript script (QuickJS).
//!
//! ```text
//! Brains::start(configs, runtime, store, memory_path, logs_dir, mesh, mcp)
//!   └─ one actor per agent (actor.rs): load → run → watch the source → reload / restart
//!        └─ a run: the brain calls its RunHost (run.rs): inbox, subscriptions, timers,
//!           sleeps, send-agent (local, or through the Mesh port to another node), memory,
//!           tools (the node's tool capsules, or MCP servers through the McpPort)
//! ```
//!
//! This crate owns the actors, the host functions and the interpreters. It must not know
//! libp2p or HTTP: messages to other nodes go through the [`Mesh`] port (the node
//! implements it over `/murmur/agent/1`), and messages from them arrive through
//! [`Brains::deliver`] once the network checked the sender.
//!
//! # Concepts
//!
//! - **Agent**: a configured name and a brain source (a file, or a `brain` artifact of the
//!   store), in one of three languages ([`source`]); its memory and log outlive its runs.
//! - **Run**: one execution of the brain. Subscriptions, timers and queued events belong
//!   to a run and end with it.
//! - **Inbox**: one bounded queue per agent ([`inbox`]); a full inbox refuses messages
//!   (the sender gets an error) and drops timer events (counted).
//! - **Timers**: a sans-IO set per agent ([`timers`]), fired by a task that sleeps until
//!   the next one is due; cron specs and strftime in [`clock`].
//! - **Memory**: strings per agent in `brains.redb` ([`memory`]).

pub mod actor;
pub mod agent;
pub mod brains;
pub mod clock;
pub mod endpoint;
pub mod inbox;
pub mod lang;
pub mod logs;
pub mod memory;
pub mod run;
pub mod source;
pub mod timers;
pub mod tooling;

pub use agent::{Agent, AgentConfig, State};
pub use brains::{
    AgentMetrics, BrainMetrics, Brains, ChatStream, Delivery, Mesh, NoMesh, SendError, SendErrorKind,
};
pub use endpoint::{OpenError, Session};
pub use source::{Language, Source};
pub use tooling::{McpPort, NoMcp, ResourceChange, ResourceWatch};
