//! Logging: `tracing` to stderr, filtered by `MURNODE_LOG` (default `info`), as text or
//! JSON lines. Stdout is kept for the ready line and command output.

use tracing_subscriber::EnvFilter;

/// Log line format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber. Call once, first thing in `main`.
pub fn init(format: LogFormat) {
    // libp2p-kad warns "no known peers" on every periodic bootstrap of a node that has none
    // yet (the first node of a mesh); that is expected, so only its errors are shown.
    let filter =
        EnvFilter::try_from_env("MURNODE_LOG").unwrap_or_else(|_| EnvFilter::new("info,libp2p_kad=error"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    // A second init (in tests) keeps the first subscriber; that is fine.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
