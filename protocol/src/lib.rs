//! Murmur's protocol core: wire types, identities, signed documents, capability grants,
//! peer URLs and the mesh state machines, with no I/O.
//!
//! Everything that decides how the mesh behaves lives here, as plain data and sans-IO state
//! machines (the quinn-proto pattern): the caller passes time in, feeds inputs, and drains
//! outputs. `murnode` drives these machines from libp2p and tokio; the simulator drives the
//! same code from a virtual clock and a modelled network. So the crate reads no clock,
//! draws no OS randomness, spawns no thread and awaits nothing.
//!
//! # Concepts
//!
//! - **Identities** ([`identity`]): ed25519 keys; a node is named by its libp2p `PeerId`.
//! - **Signed documents** ([`signed`]): canonical CBOR bodies in an envelope whose
//!   signature is domain-separated by document kind.
//! - **Grants** ([`grant`]): what a capsule may do, signed by a mesh authority.
//! - **Node certificates** ([`cert`]): closed-mesh admission.
//! - **Adverts** ([`advert`]) and the **directory** ([`directory`]): who hosts what;
//!   **departure notices** ([`departure`]): who left.
//! - **Agents** ([`agent`]): long-running brains, addressed by name across the mesh, and
//!   the `/murmur/agent/1` messages between them.
//! - **Tasks** ([`task`]): the wire types; the **router** ([`route`]) places a task on an
//!   owner, the **exchange** ([`exchange`]) carries `/murmur/task/1` for it, the **owner**
//!   ([`owner`]) admits, queues, runs and recovers the tasks a node accepted.
//! - **Plants** ([`plant`]): known bugs the simulator plants in this code to prove its
//!   checkers catch them (only with the `plant` feature).
//! - **Peer URLs** ([`peer_url`]): `mesh://NAME[@PEERID]`, `HOST:PORT`, `http(s)://…`, and
//!   allowlist patterns over them.
//! - **Limits** ([`limits`]): every bound, in one place.
//!
//! ```
//! use murmur_protocol::*;
//!
//! let authority = SecretKey::from_seed([1; 32]);
//! let now = Millis(1_800_000_000_000);
//! let mut grant = Grant::new("pipeline", 1, now, now.plus(86_400_000));
//! grant.network.push("mesh://echo".parse().unwrap());
//! let envelope = Signed::sign(grant, &authority).unwrap().into_envelope();
//!
//! let verified = verify_grant(envelope, &[authority.public()], now, GrantExpectation {
//!     capsule: Some("pipeline"),
//!     artifact: None,
//! })
//! .unwrap();
//! assert!(verified.doc().allows_target(&"mesh://echo".parse().unwrap()));
//! ```

pub mod advert;
pub mod agent;
pub mod artifact;
pub mod catalog;
pub mod cert;
pub mod codec;
pub mod departure;
pub mod digest;
pub mod directory;
pub mod exchange;
pub mod grant;
pub mod identity;
pub mod limits;
pub mod mesh;
pub mod model;
pub mod names;
pub mod owner;
pub mod peer_url;
pub mod placement;
pub mod plant;
pub mod pull;
pub mod replicate;
pub mod resolve;
pub mod revocation;
pub mod route;
pub mod signed;
pub mod sync;
pub mod task;
pub mod time;
pub mod trust;
pub mod verify;
pub mod version;

pub use advert::{Advert, HostedCapsule};
pub use cert::{CertError, NodeCert, verify_cert};
pub use codec::DecodeError;
pub use digest::Digest;
pub use directory::{Directory, DirectoryConfig, DirectoryDigest};
pub use grant::{Grant, GrantError, GrantExpectation, verify_grant};
pub use identity::{KeyError, NodeId, PublicKey, SecretKey, Signature};
pub use peer_url::{AllowPattern, PeerUrl, UrlError};
pub use signed::{DocKind, Document, Envelope, OpenError, Signed};
pub use time::Millis;
pub use trust::TrustError;
