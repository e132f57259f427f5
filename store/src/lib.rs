//! What a Murmur node keeps on disk, apart from its task database: the data directory's
//! layout and key ([`data_dir`]), the content-addressed artifact store (an OCI image
//! layout), air-gapped bundles, a capsule's `murmur.lock`, ed25519 key files, and the
//! crash-safe file helpers all of them write through.
//!
//! It owns file formats and the order of writes that makes them survive a crash. It must
//! not know about the network, the runtime or the command line: no libp2p, wasmtime, clap
//! or async runtime. The node, the runtime and `mur` all open the same store this way, and
//! a write lock on `DIR/store/.lock` serializes them.
//!
//! ```no_run
//! use murmur_store::{ArtifactMeta, ArtifactStore, CapsuleKind, Platform};
//! let store = ArtifactStore::open(std::path::Path::new("data/store"))?;
//! let meta = ArtifactMeta {
//!     name: "echo".into(),
//!     version: "1.0.0".into(),
//!     kind: CapsuleKind::Tool,
//!     runtime: Platform::Wasm,
//!     description: String::new(),
//!     tags: vec![],
//!     input_schema: None,
//!     output_schema: None,
//! };
//! let stored = store.add(&meta, b"\0asm\x01\0\0\0", None)?;
//! assert_eq!(store.find("echo", Some("1.0.0"))?, Some(stored));
//! # anyhow::Ok(())
//! ```

pub mod artifact;
pub mod bundle;
pub mod data_dir;
pub mod file;
pub mod keyfile;
pub mod lock;
pub mod oci;
pub mod store;

pub use artifact::{ArtifactMeta, CapsuleKind, Platform, Stored, sign_release};
pub use store::{ArtifactStore, WriteGuard};
