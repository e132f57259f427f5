//! Murmur's deterministic simulator: thousands of nodes running the real protocol state
//! machines over a modelled network, with faults, reproducible from one seed.
//!
//! The simulator drives the very [`murmur_protocol::mesh::MeshNode`] that `murnode` runs;
//! what it models is the world around it: time (a virtual clock that jumps to the next
//! event), the network (latency per region pair, jitter, loss, duplication, bandwidth,
//! partitions), libp2p's contracts (gossipsub's flood publish, mesh relay of accepted
//! messages and duplicate suppression; request-response with timeouts), crashes, restarts,
//! churn and byzantine peers. Checkers compare every node's state against ground truth.
//!
//! ```
//! use murmur_sim::{Options, Scenario, Sim};
//!
//! let scenario = Scenario { nodes: 10, duration_s: 40, ..Scenario::default() };
//! let outcome = Sim::new(scenario, Options { seed: 7, canary: false, uncached: false, plant: None }).run();
//! assert_eq!(outcome.exit_code, 0, "{:?}", outcome.findings);
//! ```
//!
//! # Concepts
//!
//! - [`scenario`]: the TOML description of a run.
//! - [`rng`]: seeded ChaCha streams, one per purpose.
//! - [`world`]: the event loop, nodes, network model, faults.
//! - [`check`]: the oracle and the safety and liveness checks.
//! - [`report`]: verdicts, exit codes, metrics.

pub mod check;
pub mod engine;
pub mod fxhash;
pub mod placement;
pub mod report;
pub mod rng;
pub mod scenario;
pub mod trace;
pub mod verifier;
pub mod world;

pub use report::{Outcome, Verdict};
pub use scenario::Scenario;
pub use world::{Options, Sim, ViewTimeline};
