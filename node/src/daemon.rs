//! `murnode run`: load the data directory and config, start the node, print one ready
//! line, serve until SIGINT or SIGTERM, then shut down cleanly.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};
use tracing::info;

use crate::api::{self, ApiState};
use crate::config::{CONFIG_FILE, Config, RawConfig};
use crate::data_dir;
use crate::exit::{CliError, CliResult, UsageContext};
use crate::output::print_json;

/// `murnode run`'s inputs after flag and environment parsing.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub data_dir: PathBuf,
    /// Overrides `api.listen`.
    pub api: Option<String>,
    /// Replaces `network.listen` when not empty.
    pub listen: Vec<String>,
    /// Replaces `network.bootstrap` when not empty.
    pub bootstrap: Vec<String>,
    /// Turns mDNS off whatever the config says.
    pub no_mdns: bool,
    /// Print the ready line as JSON.
    pub json: bool,
}

/// The ready line: what scripts need to talk to the node.
#[derive(Debug, Serialize)]
pub struct Ready {
    pub event: &'static str,
    pub peer_id: String,
    pub api_addr: SocketAddr,
    pub data_dir: String,
}

/// Loads the configuration with the flags applied on top.
pub fn load_config(options: &RunOptions) -> CliResult<Config> {
    let path = options.data_dir.join(CONFIG_FILE);
    let mut raw =
        if path.exists() { RawConfig::load(&path).map_err(CliError::usage)? } else { RawConfig::default() };
    if let Some(api) = &options.api {
        raw.api.listen.clone_from(api);
    }
    if !options.listen.is_empty() {
        raw.network.listen.clone_from(&options.listen);
    }
    if !options.bootstrap.is_empty() {
        raw.network.bootstrap.clone_from(&options.bootstrap);
    }
    if options.no_mdns {
        raw.network.mdns = false;
    }
    Config::from_raw(&raw, &options.data_dir)
        .usage_context(format!("invalid configuration ({})", path.display()))
}

/// Runs the node until a shutdown signal.
pub async fn run(options: RunOptions) -> CliResult {
    let key = data_dir::node_key(&options.data_dir).map_err(CliError::usage)?;
    let config = load_config(&options)?;
    let peer_id = key.node_id().to_string();

    let listener = TcpListener::bind(config.api_listen)
        .await
        .with_context(|| format!("cannot listen for the API on {}", config.api_listen))?;
    let api_addr = listener.local_addr().context("cannot read the API address")?;
    let state = Arc::new(ApiState { peer_id: peer_id.clone(), started: Instant::now() });

    let ready = Ready { event: "ready", peer_id, api_addr, data_dir: options.data_dir.display().to_string() };
    if options.json {
        print_json(&ready);
    } else {
        println!("murnode ready: peer {} api http://{}", ready.peer_id, ready.api_addr);
    }
    info!(peer = %ready.peer_id, api = %api_addr, "node started");

    axum::serve(listener, api::app(state))
        .with_graceful_shutdown(shutdown_signal())
        .await
        .context("API server failed")?;
    info!("node stopped");
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler succeeds on Unix");
    let mut int = signal(SignalKind::interrupt()).expect("installing a SIGINT handler succeeds on Unix");
    let which = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    info!(signal = which, "shutting down");
}
