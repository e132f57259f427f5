//! Signed documents: a body in canonical CBOR, wrapped in an envelope that names its kind
//! and carries the signer's key and an ed25519 signature.
//!
//! The signature covers `SIGNING_CONTEXT || 0x00 || kind || 0x00 || body`, so a signature
//! made for one kind of document can never verify as another (domain separation), and it
//! covers the exact body bytes, which are also what the reader decodes: there is no second
//! serialization step between checking and using a document.
//!
//! ```
//! use murmur_protocol::{Advert, SecretKey, Signed, Millis};
//!
//! let key = SecretKey::from_seed([7; 32]);
//! let advert = Advert::new(1, Millis(1_700_000_000_000), 90_000);
//! let signed = Signed::sign(advert, &key).unwrap();
//! let bytes = signed.envelope().encode();
//!
//! let opened: Signed<Advert> = murmur_protocol::Envelope::decode(&bytes).unwrap().open().unwrap();
//! assert_eq!(opened.signer(), key.public());
//! ```

use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::codec::{self, DecodeError, byte_vec};
use crate::digest::Digest;
use crate::identity::{PublicKey, SecretKey, Signature};
use crate::limits::ENVELOPE_BYTES_MAX;

/// Prefix of every signed message; bump it only with a new envelope version.
pub const SIGNING_CONTEXT: &[u8] = b"murmur/signed/1";

/// The envelope format this build writes and reads.
pub const ENVELOPE_VERSION: u16 = 1;

/// What a signed document is. Part of the signed bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DocKind {
    /// A node's advert of what it hosts ([`crate::Advert`]), signed by the node.
    #[serde(rename = "node-advert")]
    NodeAdvert,
    /// A signed capability allowlist ([`crate::Grant`]), signed by an authority.
    #[serde(rename = "grant")]
    Grant,
    /// Closed-mesh admission of one node ([`crate::NodeCert`]), signed by an authority.
    #[serde(rename = "node-cert")]
    NodeCert,
    /// The table of contents of an artifact bundle ([`crate::catalog::Catalog`]), signed
    /// by a publisher.
    #[serde(rename = "catalog")]
    Catalog,
    /// A departure notice ([`crate::departure::Departure`]): a witness's statement that a
    /// node departed, signed by the witness. Its wire name predates the type's name.
    #[serde(rename = "node-gone")]
    NodeDeparture,
    /// An authority's revocation list ([`crate::revocation::Revocation`]), signed by the
    /// authority.
    #[serde(rename = "revocation")]
    Revocation,
}

impl DocKind {
    /// The kind's name, as written on the wire and in the signed message.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::NodeAdvert => "node-advert",
            Self::Grant => "grant",
            Self::NodeCert => "node-cert",
            Self::Catalog => "catalog",
            Self::NodeDeparture => "node-gone",
            Self::Revocation => "revocation",
        }
    }
}

impl fmt::Display for DocKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A document type that travels signed.
pub trait Document: Serialize + DeserializeOwned {
    /// The kind written in the envelope and mixed into the signature.
    const KIND: DocKind;
    /// The body version this build writes and reads.
    const VERSION: u16;
    /// Largest encoded body accepted.
    const BYTES_MAX: usize;

    /// The version field as decoded.
    fn version(&self) -> u16;

    /// Checks every field against its bound and grammar. A document that fails is never
    /// signed by us and never accepted from anyone else.
    fn validate(&self) -> Result<(), DecodeError>;
}

/// Why an envelope could not be opened as a document.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("expected a {expected} document, found a {found}")]
    WrongKind { expected: DocKind, found: DocKind },
    #[error("signature does not verify for signer {signer}")]
    BadSignature { signer: PublicKey },
    #[error(transparent)]
    Body(#[from] DecodeError),
}

/// The wire envelope around a signed document body.
///
/// Cheap to clone and compare: the fields live behind one shared pointer, so the copies a
/// directory keeps, a sync response carries or the simulator hands to thousands of nodes
/// are one allocation, and two copies of the same envelope compare by pointer first.
#[derive(Clone, PartialEq, Eq)]
pub struct Envelope(Arc<Fields>);

/// The envelope as it is encoded.
#[derive(PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Fields {
    // Fields are in canonical key order (see `codec`).
    v: u16,
    sig: Signature,
    #[serde(with = "byte_vec")]
    body: Vec<u8>,
    kind: DocKind,
    /// Not checked as a curve point when read: see [`crate::identity::claimed_key`].
    #[serde(with = "crate::identity::claimed_key")]
    signer: PublicKey,
}

impl Serialize for Envelope {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Envelope {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Fields::deserialize(deserializer).map(|fields| Self(Arc::new(fields)))
    }
}

impl Envelope {
    /// Decodes an envelope from the wire. The signature is not checked here: see
    /// [`Envelope::open`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        Self::decode_bounded(bytes, ENVELOPE_BYTES_MAX)
    }

    /// [`Envelope::decode`] for documents that travel outside gossip and may be larger
    /// (a bundle's catalog): at most `len_max` bytes.
    pub fn decode_bounded(bytes: &[u8], len_max: usize) -> Result<Self, DecodeError> {
        decode_versioned("envelope", bytes, len_max, ENVELOPE_VERSION, |e: &Self| e.0.v)
    }

    /// The canonical bytes of this envelope.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(self)
    }

    /// The kind the envelope claims (unverified until opened).
    #[must_use]
    pub fn kind(&self) -> DocKind {
        self.0.kind
    }

    /// The key the envelope claims signed it (unverified until opened: until then it may
    /// not even be a curve point, and only identifies, never verifies or dials, anything).
    #[must_use]
    pub fn signer(&self) -> PublicKey {
        self.0.signer
    }

    /// The body bytes as carried.
    #[must_use]
    pub fn body(&self) -> &[u8] {
        &self.0.body
    }

    /// The signature as carried.
    #[must_use]
    pub fn signature(&self) -> &Signature {
        &self.0.sig
    }

    /// A content id for the whole envelope: the SHA-256 of its canonical bytes.
    #[must_use]
    pub fn digest(&self) -> Digest {
        Digest::of(&self.encode())
    }

    /// Checks kind and signature, then decodes and validates the body as a `T`.
    pub fn open<T: Document>(self) -> Result<Signed<T>, OpenError> {
        self.open_with(&crate::verify::Ed25519Verifier)
    }

    /// As [`Envelope::open`], with the signature checked by `verifier` (the simulator
    /// shares one check per distinct envelope between all its nodes).
    pub fn open_with<T: Document>(
        self,
        verifier: &dyn crate::verify::Verifier,
    ) -> Result<Signed<T>, OpenError> {
        let doc = self.peek::<T>()?;
        if !verifier.verify(&self) {
            return Err(OpenError::BadSignature { signer: self.0.signer });
        }
        Ok(Signed { doc, envelope: self })
    }

    /// Checks the kind, then decodes and validates the body as a `T` **without** checking
    /// the signature: what it returns is a claim, not a fact. For cheap refusals (a stale
    /// sequence number) before paying for a signature check; see [`Envelope::open`].
    pub fn peek<T: Document>(&self) -> Result<T, OpenError> {
        if self.0.kind != T::KIND {
            return Err(OpenError::WrongKind { expected: T::KIND, found: self.0.kind });
        }
        Ok(decode_document::<T>(&self.0.body)?)
    }

    /// Whether the signature verifies for the claimed signer over this kind and body.
    #[must_use]
    pub fn verify_signature(&self) -> bool {
        self.0.signer.verify(&signed_message(self.0.kind, &self.0.body), &self.0.sig)
    }
}

impl fmt::Debug for Envelope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Envelope")
            .field("kind", &self.0.kind)
            .field("signer", &self.0.signer)
            .field("body_len", &self.0.body.len())
            .finish_non_exhaustive()
    }
}

/// A document whose signature has been verified (or which we signed ourselves).
#[derive(Clone, Debug)]
pub struct Signed<T> {
    doc: T,
    envelope: Envelope,
}

impl<T: Document> Signed<T> {
    /// Validates `doc` and signs it with `key`.
    pub fn sign(doc: T, key: &SecretKey) -> Result<Self, DecodeError> {
        doc.validate()?;
        let body = codec::encode(&doc);
        if body.len() > T::BYTES_MAX {
            return Err(DecodeError::TooLarge {
                what: T::KIND.as_str(),
                len: body.len(),
                len_max: T::BYTES_MAX,
            });
        }
        let sig = key.sign(&signed_message(T::KIND, &body));
        let envelope = Envelope(Arc::new(Fields {
            v: ENVELOPE_VERSION,
            sig,
            body,
            kind: T::KIND,
            signer: key.public(),
        }));
        Ok(Self { doc, envelope })
    }

    /// The verified document.
    #[must_use]
    pub const fn doc(&self) -> &T {
        &self.doc
    }

    /// Who signed it.
    #[must_use]
    pub fn signer(&self) -> PublicKey {
        self.envelope.0.signer
    }

    /// The envelope as it travels.
    #[must_use]
    pub const fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    /// Gives up the document, keeping the envelope.
    #[must_use]
    pub fn into_envelope(self) -> Envelope {
        self.envelope
    }
}

/// The exact bytes an ed25519 signature of a `kind` document covers.
fn signed_message(kind: DocKind, body: &[u8]) -> Vec<u8> {
    let kind = kind.as_str().as_bytes();
    let mut message = Vec::with_capacity(SIGNING_CONTEXT.len() + kind.len() + body.len() + 2);
    message.extend_from_slice(SIGNING_CONTEXT);
    message.push(0);
    message.extend_from_slice(kind);
    message.push(0);
    message.extend_from_slice(body);
    message
}

fn decode_document<T: Document>(body: &[u8]) -> Result<T, DecodeError> {
    let doc: T = decode_versioned(T::KIND.as_str(), body, T::BYTES_MAX, T::VERSION, T::version)?;
    doc.validate()?;
    Ok(doc)
}

/// Decodes a document that starts with a version field `v`. If the strict decode fails
/// and the version is not `supported`, the error says so, since "unknown field" would hide
/// the real cause (a newer peer).
pub(crate) fn decode_versioned<T>(
    what: &'static str,
    bytes: &[u8],
    len_max: usize,
    supported: u16,
    version_of: impl Fn(&T) -> u16,
) -> Result<T, DecodeError>
where
    T: DeserializeOwned + Serialize,
{
    #[derive(Deserialize)]
    struct VersionProbe {
        v: u64,
    }

    let unsupported = |found: u64| DecodeError::UnsupportedVersion { what, found, supported };
    match codec::decode::<T>(what, bytes, len_max) {
        Ok(value) if version_of(&value) == supported => Ok(value),
        Ok(value) => Err(unsupported(version_of(&value).into())),
        Err(err) => match codec::decode_lenient::<VersionProbe>(what, bytes, len_max) {
            Ok(probe) if probe.v != u64::from(supported) => Err(unsupported(probe.v)),
            _ => Err(err),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grant::Grant;
    use crate::time::Millis;

    #[test]
    fn a_signature_for_one_kind_never_verifies_as_another() {
        let key = SecretKey::from_seed([1; 32]);
        let grant = Grant::new("echo", 1, Millis(0), Millis(1));
        let body = codec::encode(&grant);
        // The same body signed as a node certificate, then relabelled as a grant.
        let relabelled = Envelope(Arc::new(Fields {
            v: ENVELOPE_VERSION,
            sig: key.sign(&signed_message(DocKind::NodeCert, &body)),
            body,
            kind: DocKind::Grant,
            signer: key.public(),
        }));
        assert!(!relabelled.verify_signature());
        assert!(matches!(relabelled.open::<Grant>(), Err(OpenError::BadSignature { .. })));
    }

    #[test]
    fn a_signer_that_is_no_curve_point_decodes_but_never_opens() {
        // The first of [n, 0, …, 0] that is no point on the curve.
        let bytes = (0..=u8::MAX)
            .map(|n| {
                let mut bytes = [0u8; 32];
                bytes[0] = n;
                bytes
            })
            .find(|bytes| PublicKey::from_bytes(*bytes).is_err())
            .expect("some small y is not on the curve");
        let key = SecretKey::from_seed([1; 32]);
        let grant = Grant::new("echo", 1, Millis(0), Millis(1));
        let body = codec::encode(&grant);
        let forged = Envelope(Arc::new(Fields {
            v: ENVELOPE_VERSION,
            sig: key.sign(&signed_message(DocKind::Grant, &body)),
            body,
            kind: DocKind::Grant,
            signer: PublicKey::from_validated(bytes),
        }));
        let decoded = Envelope::decode(&forged.encode()).expect("the signer is read as a claim");
        assert_eq!(decoded.signer().as_bytes(), &bytes);
        assert!(!decoded.verify_signature());
        assert!(matches!(decoded.open::<Grant>(), Err(OpenError::BadSignature { .. })));
    }

    #[test]
    fn the_wrong_kind_is_named() {
        let key = SecretKey::from_seed([1; 32]);
        let env = Signed::sign(Grant::new("echo", 1, Millis(0), Millis(1)), &key).unwrap().into_envelope();
        let err = env.open::<crate::advert::Advert>().unwrap_err();
        assert_eq!(err.to_string(), "expected a node-advert document, found a grant");
    }

    #[test]
    fn unknown_versions_are_refused_by_name() {
        let key = SecretKey::from_seed([1; 32]);
        let mut grant = Grant::new("echo", 1, Millis(0), Millis(1));
        grant.v = 2;
        let body = codec::encode(&grant);
        let env = Envelope(Arc::new(Fields {
            v: ENVELOPE_VERSION,
            sig: key.sign(&signed_message(DocKind::Grant, &body)),
            body,
            kind: DocKind::Grant,
            signer: key.public(),
        }));
        let err = env.clone().open::<Grant>().unwrap_err();
        assert_eq!(err.to_string(), "grant version 2 is not supported (this build reads version 1)");

        // A future envelope with an extra field is refused as a version problem too.
        let mut value: ciborium::Value = ciborium::de::from_reader(env.encode().as_slice()).unwrap();
        let map = value.as_map_mut().unwrap();
        map[0].1 = ciborium::Value::Integer(3.into());
        map.push((ciborium::Value::Text("zzz".into()), ciborium::Value::Bool(true)));
        let err = Envelope::decode(&codec::encode(&value)).unwrap_err();
        assert_eq!(err.to_string(), "envelope version 3 is not supported (this build reads version 1)");
    }
}
