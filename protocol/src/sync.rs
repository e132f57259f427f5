//! Anti-entropy messages (`/murmur/sync/1`): "here is what I hold" and "here is what you
//! lack".
//!
//! When a connection opens, each side sends a [`SyncRequest`] with its directory digest
//! (and, in a closed mesh, its node certificate); the other answers with a
//! [`SyncResponse`] holding the adverts the digest shows missing or older. A response that
//! could not hold everything says `more`, and the requester asks again.

use serde::{Deserialize, Serialize};

use crate::codec::{self, DecodeError};
use crate::directory::DirectoryDigest;
use crate::limits::{SYNC_ADVERTS_MAX, SYNC_NOTICES_MAX, SYNC_REQUEST_BYTES_MAX, SYNC_RESPONSE_BYTES_MAX};
use crate::signed::{DocKind, Envelope, decode_versioned};

/// The sync message version this build writes and reads.
pub const SYNC_VERSION: u16 = 1;

/// "This is what I hold."
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncRequest {
    // Fields are in canonical key order (see `codec`).
    pub v: u16,
    /// The requester's node certificate (closed mesh), so the responder can admit it.
    pub cert: Option<Envelope>,
    /// What the requester holds.
    pub digest: DirectoryDigest,
}

/// "This is what you lack."
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncResponse {
    // Fields are in canonical key order (see `codec`).
    pub v: u16,
    /// Departure notices for adverts the requester's digest lists but that are gone
    /// (omitted when empty, so a response without notices is the same bytes as before
    /// notices existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gone: Vec<Envelope>,
    /// More adverts were missing than fit; ask again.
    pub more: bool,
    /// Advert envelopes, each to be judged by the requester's directory.
    pub adverts: Vec<Envelope>,
}

impl SyncRequest {
    /// A request carrying `digest` and an optional certificate.
    #[must_use]
    pub const fn new(cert: Option<Envelope>, digest: DirectoryDigest) -> Self {
        Self { v: SYNC_VERSION, cert, digest }
    }

    /// Canonical bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(self)
    }

    /// Decodes and validates a request from a peer.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let request: Self =
            decode_versioned("sync request", bytes, SYNC_REQUEST_BYTES_MAX, SYNC_VERSION, |r: &Self| r.v)?;
        request.digest.validate()?;
        if let Some(cert) = &request.cert
            && cert.kind() != DocKind::NodeCert
        {
            return Err(DecodeError::Invalid {
                what: "sync request",
                field: "cert",
                reason: format!("holds a {} document", cert.kind()),
            });
        }
        Ok(request)
    }
}

impl SyncResponse {
    /// A response carrying `adverts`.
    #[must_use]
    pub const fn new(adverts: Vec<Envelope>, more: bool) -> Self {
        Self { v: SYNC_VERSION, gone: Vec::new(), more, adverts }
    }

    /// The response with departure notices added.
    #[must_use]
    pub fn with_notices(mut self, gone: Vec<Envelope>) -> Self {
        self.gone = gone;
        self
    }

    /// Canonical bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(self)
    }

    /// Decodes and validates a response from a peer.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let response: Self =
            decode_versioned("sync response", bytes, SYNC_RESPONSE_BYTES_MAX, SYNC_VERSION, |r: &Self| r.v)?;
        if response.adverts.len() > SYNC_ADVERTS_MAX {
            return Err(DecodeError::Invalid {
                what: "sync response",
                field: "adverts",
                reason: format!("has {} entries, more than {SYNC_ADVERTS_MAX}", response.adverts.len()),
            });
        }
        if response.gone.len() > SYNC_NOTICES_MAX {
            return Err(DecodeError::Invalid {
                what: "sync response",
                field: "gone",
                reason: format!("has {} entries, more than {SYNC_NOTICES_MAX}", response.gone.len()),
            });
        }
        if let Some(other) = response.gone.iter().find(|n| n.kind() != DocKind::NodeGone) {
            return Err(DecodeError::Invalid {
                what: "sync response",
                field: "gone",
                reason: format!("holds a {} document", other.kind()),
            });
        }
        Ok(response)
    }
}
