//! `murnode`, the Murmur daemon: the task service, artifact pulls, pins and advertising,
//! installs, telemetry and the HTTP API, wired to the network (`murmur-net`), the capsule
//! runtime (`murmur-runtime`) and the disk (`murmur-store`) once, in [`daemon`].
//!
//! It owns what only a running node does: tasks it owns and places (with their database),
//! pulls it makes, the capsules it installs, the API it serves. It decides nothing about
//! how the mesh behaves (that is `murmur-protocol`'s) and speaks no libp2p itself (that is
//! `murmur-net`'s): it implements the ports the network and the runtime define.

pub mod api;
pub mod artifacts;
pub mod brains;
pub mod daemon;
pub mod demo;
pub mod housekeeping;
pub mod models;
pub mod notify;
pub mod revocations;
pub mod tasks;
pub mod telemetry;
pub mod upstream;

pub use murmur_api::{exit, output};
pub use murmur_config::clock;
pub use murmur_store::data_dir;

/// This build's version with its git revision (`0.1.0 (git 1a2b3c4d5e)`; see `build.rs`).
pub const VERSION: &str = env!("MURMUR_VERSION");
