//! The capsule runtime.

pub mod bindings;
