//! The `mur` client's commands. Each module owns one noun (`mur key …`, `mur grant …`).

pub mod grant;
pub mod key;
