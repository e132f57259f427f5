//! Murmur's MCP client: the MCP servers configured on a node (`[[mcp]]` in
//! `murnode.toml`), each a child process spoken to over its stdin and stdout or a
//! streamable HTTP endpoint, through the official Rust SDK (`rmcp`).
//!
//! ```text
//! Servers::start(entries)
//!   └─ one supervisor per server (server.rs): connect → Up → ping every 15 s
//!        ├─ the connection ends, or a ping goes unanswered → Down(why) → back-off → connect
//!        └─ Servers::stop → the connection is cancelled, the child process killed
//! Server::call_tool / list / read   — on the current connection, bounded and timed out
//! Server::watch_list / watch_resource (watch.rs) — the state now, then every change,
//!                                      across restarts of the server
//! ```
//!
//! This crate owns the MCP side alone: what a brain may call is checked by the brain host
//! before it gets here, and answers leave as plain values ([`ResourceInfo`],
//! [`ResourceContent`]) the node hands on.
//!
//! # Concepts
//!
//! - **Link**: the current state of one server's connection — starting, up (with the
//!   protocol version agreed), down (with why, and when the next attempt is).
//! - **Back-off**: 1 s after a failure, doubling to 60 s; a connection that stayed up a
//!   minute starts the count again.
//! - **Change**: a server's notification that its resource list, or one resource,
//!   changed. Under protocol 2026-07-28 a watch opens a `subscriptions/listen` of its
//!   own; under older versions it subscribes with `resources/subscribe` and the changes
//!   come through the connection's handler. Either way a watch re-reads what changed and
//!   delivers it; bursts of changes are read once.

mod server;
mod watch;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use server::{LinkState, Server, ServerStatus};
pub use watch::{Watch, WatchEvent};

use murmur_config::{Credential, McpEntry};

/// One resource of a server's list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceInfo {
    pub uri: String,
    pub name: String,
    pub mime_type: Option<String>,
    pub description: Option<String>,
}

/// One resource as read: `content` is the text for textual contents and standard padded
/// base64 (as MCP carries blobs) for anything else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceContent {
    pub uri: String,
    pub mime_type: Option<String>,
    pub content: String,
}

/// The node's MCP servers, by name.
#[derive(Debug, Default)]
pub struct Servers {
    servers: BTreeMap<String, Arc<Server>>,
}

impl Servers {
    /// Starts a supervisor for each of `entries` (they connect in the background: a server
    /// that fails to start is retried, never fatal to the node). `credentials` resolve
    /// `api_key = "config:KEY"`; stdio servers start in `workdir`.
    #[must_use]
    pub fn start(
        entries: &[McpEntry],
        credentials: &BTreeMap<String, Credential>,
        workdir: &std::path::Path,
    ) -> Self {
        let servers = entries
            .iter()
            .map(|entry| (entry.name.clone(), Server::start(entry.clone(), credentials.clone(), workdir)))
            .collect();
        Self { servers }
    }

    /// Server `name`, or an error naming the configured ones.
    pub fn get(&self, name: &str) -> Result<&Arc<Server>, String> {
        self.servers.get(name).ok_or_else(|| {
            let known: Vec<&String> = self.servers.keys().collect();
            format!("no MCP server `{name}` is configured on this node (configured: {known:?})")
        })
    }

    /// Every server's state, for the API and metrics.
    #[must_use]
    pub fn status(&self) -> Vec<ServerStatus> {
        self.servers.values().map(|server| server.status()).collect()
    }

    /// Stops every server: connections cancelled, child processes killed; returns once
    /// every supervisor has ended.
    pub async fn stop(&self) {
        for server in self.servers.values() {
            server.stop().await;
        }
    }
}
