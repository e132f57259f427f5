//! `murnode` and `mur`: the Murmur daemon and its client.
//!
//! This crate holds adapters only: it feeds the sans-IO state machines of
//! `murmur-protocol` from the network, disk and clocks, and carries out what they decide.
//! Nothing here decides how the mesh behaves.

pub mod api;
pub mod bundle;
pub mod cli;
pub mod clock;
pub mod config;
pub mod daemon;
pub mod data_dir;
pub mod demo;
pub mod exit;
pub mod fetch;
pub mod fsutil;
pub mod keyfile;
pub mod mesh;
pub mod output;
pub mod runtime;
pub mod store;
pub mod tasks;
pub mod telemetry;
pub mod views;
