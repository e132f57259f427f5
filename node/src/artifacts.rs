//! What the node does with artifacts on the mesh: it pulls them ([`Puller`]: resolve
//! `name@version` to a manifest this node can trust, fetch the small blobs whole and the
//! content in verified chunks from every provider at once, commit it to the store in one
//! step), advertises what its store holds ([`Advertiser`]), and keeps pinned artifacts on
//! their share of nodes ([`keep_pins`]).
//!
//! Trust comes first and never from a provider: the manifest digest is one the caller
//! pinned (a `--digest`, a `murmur.lock` entry) or one a publisher in `trust.publishers`
//! signed for `name@version`. Every byte after that is checked against a digest the
//! manifest names before it is kept. Which chunk to ask of whom, when to hedge a slow
//! request and when to drop a provider is decided by the protocol's
//! [`Pull`](murmur_protocol::pull::Pull); [`transfer`] carries its requests over
//! `/murmur/artifact/1` and writes what it approves into the pull file ([`part`]).
//!
//! A pull in progress lives in `store/.pull/<content hex>.part`, pre-sized to the content.
//! A pull started again after a crash (or a failed attempt) hashes that file's chunks and
//! asks only for those that do not match, so nothing trusted is kept in a side file.

mod advertise;
mod part;
mod pins;
mod pull;
mod transfer;

pub use self::advertise::Advertiser;
pub use self::pins::keep_pins;
pub use self::pull::{Progress, PullError, Pulled, Puller, RESOLVE, RESOLVE_TIMEOUT, Want};
