//! The `mur` client's commands. Each module owns one noun (`mur key …`, `mur grant …`).

pub mod artifact;
pub mod capsule;
pub mod capsules;
pub mod cert;
pub mod client;
pub mod grant;
pub mod key;
pub mod peers;
pub mod pull;
pub mod task;
pub mod tool;
