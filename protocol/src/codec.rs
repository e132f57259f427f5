//! Canonical CBOR: one encoding per value, bounded decoding.
//!
//! Every wire type is a serde struct whose fields are declared in RFC 8949 §4.2.1 order
//! (map keys sorted by their encoded bytes: shorter keys first, then bytewise). ciborium
//! writes integers and lengths in their shortest form, so encoding a struct yields the
//! deterministic ("canonical") CBOR for it. Decoding is strict: the input must be within
//! its named size limit, nest no deeper than [`CBOR_DEPTH_MAX`], contain nothing after the
//! value, and re-encode to exactly the bytes that arrived, so no two byte strings decode to
//! the same document.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::limits::CBOR_DEPTH_MAX;

/// Why bytes could not be decoded as a wire type. `what` names the type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{what} is {len} bytes, more than the limit of {len_max}")]
    TooLarge { what: &'static str, len: usize, len_max: usize },
    #[error("{what} is not valid: {detail}")]
    Malformed { what: &'static str, detail: String },
    #[error("{what} has {len} bytes after its end")]
    TrailingBytes { what: &'static str, len: usize },
    #[error("{what} is not in canonical CBOR form")]
    NonCanonical { what: &'static str },
    #[error("{what} version {found} is not supported (this build reads version {supported})")]
    UnsupportedVersion { what: &'static str, found: u64, supported: u16 },
    #[error("{what} field `{field}` {reason}")]
    Invalid { what: &'static str, field: &'static str, reason: String },
}

/// Encodes `value` as canonical CBOR (see the module docs for why this is canonical).
#[must_use]
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    // Writing to a Vec cannot fail, and every wire type is plain data serde can express.
    ciborium::ser::into_writer(value, &mut out).expect("CBOR encoding into a Vec is infallible");
    out
}

/// Decodes one `T` from `bytes`, enforcing `len_max`, the depth limit, no trailing bytes
/// and canonical form.
pub fn decode<T>(what: &'static str, bytes: &[u8], len_max: usize) -> Result<T, DecodeError>
where
    T: DeserializeOwned + Serialize,
{
    let value: T = decode_lenient(what, bytes, len_max)?;
    if encode(&value) != bytes {
        return Err(DecodeError::NonCanonical { what });
    }
    Ok(value)
}

/// Like [`decode`] but without the canonical-form check; for probing a field (such as a
/// version) before the strict decode.
pub(crate) fn decode_lenient<T>(what: &'static str, bytes: &[u8], len_max: usize) -> Result<T, DecodeError>
where
    T: DeserializeOwned,
{
    if bytes.len() > len_max {
        return Err(DecodeError::TooLarge { what, len: bytes.len(), len_max });
    }
    let mut reader = bytes;
    let value: T = ciborium::de::from_reader_with_recursion_limit(&mut reader, CBOR_DEPTH_MAX)
        .map_err(|err| DecodeError::Malformed { what, detail: describe(&err) })?;
    if !reader.is_empty() {
        return Err(DecodeError::TrailingBytes { what, len: reader.len() });
    }
    Ok(value)
}

fn describe<E: std::fmt::Debug>(err: &ciborium::de::Error<E>) -> String {
    match err {
        ciborium::de::Error::Io(_) => "input ends early".to_owned(),
        ciborium::de::Error::Syntax(offset) => format!("CBOR syntax error at byte {offset}"),
        ciborium::de::Error::Semantic(Some(offset), msg) => format!("{msg} (at byte {offset})"),
        ciborium::de::Error::Semantic(None, msg) => msg.clone(),
        ciborium::de::Error::RecursionLimitExceeded => {
            format!("nested deeper than {CBOR_DEPTH_MAX} levels")
        }
    }
}

/// serde helpers that put fixed-size byte arrays on the wire as CBOR byte strings
/// (serde's default for arrays is a list of integers, four times larger).
pub(crate) mod byte_array {
    use std::fmt;

    use serde::de::{self, Deserializer, Visitor};
    use serde::ser::Serializer;

    pub fn serialize<S: Serializer, const N: usize>(
        bytes: &[u8; N],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(bytes)
    }

    pub fn deserialize<'de, D: Deserializer<'de>, const N: usize>(
        deserializer: D,
    ) -> Result<[u8; N], D::Error> {
        deserializer.deserialize_bytes(ArrayVisitor::<N>)
    }

    struct ArrayVisitor<const N: usize>;

    impl<const N: usize> Visitor<'_> for ArrayVisitor<N> {
        type Value = [u8; N];

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a byte string of length {N}")
        }

        fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Self::Value, E> {
            v.try_into().map_err(|_| E::invalid_length(v.len(), &self))
        }
    }
}

/// serde helpers for variable-length byte strings (`Vec<u8>`) as CBOR byte strings.
pub(crate) mod byte_vec {
    use std::fmt;

    use serde::de::{self, Deserializer, Visitor};
    use serde::ser::Serializer;

    #[allow(clippy::ptr_arg)] // serde's `with` passes `&Vec<u8>`.
    pub fn serialize<S: Serializer>(bytes: &Vec<u8>, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(bytes)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        deserializer.deserialize_byte_buf(VecVisitor)
    }

    struct VecVisitor;

    impl Visitor<'_> for VecVisitor {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a byte string")
        }

        fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Self::Value, E> {
            Ok(v.to_vec())
        }

        fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Self::Value, E> {
            Ok(v)
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use ciborium::Value;

    use super::*;

    /// Asserts that every map in `bytes` has its keys in canonical order: the property the
    /// field order of every wire struct must keep.
    pub(crate) fn assert_canonical_key_order(bytes: &[u8]) {
        let value: Value = ciborium::de::from_reader(bytes).expect("valid CBOR");
        check(&value);
    }

    fn check(value: &Value) {
        match value {
            Value::Map(entries) => {
                let keys: Vec<Vec<u8>> = entries.iter().map(|(k, _)| encode(k)).collect();
                for pair in keys.windows(2) {
                    assert!(pair[0] < pair[1], "map keys out of canonical order: {entries:?}");
                }
                entries.iter().for_each(|(_, v)| check(v));
            }
            Value::Array(items) => items.iter().for_each(check),
            Value::Tag(_, inner) => check(inner),
            _ => {}
        }
    }

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Pair {
        a: u64,
        #[serde(with = "byte_array")]
        bb: [u8; 4],
    }

    #[test]
    fn round_trip_is_canonical() {
        let pair = Pair { a: 7, bb: [1, 2, 3, 4] };
        let bytes = encode(&pair);
        assert_canonical_key_order(&bytes);
        assert_eq!(decode::<Pair>("pair", &bytes, 64).unwrap(), pair);
    }

    #[test]
    fn refuses_oversized_input_before_parsing() {
        let err = decode::<Pair>("pair", &[0u8; 65], 64).unwrap_err();
        assert_eq!(err, DecodeError::TooLarge { what: "pair", len: 65, len_max: 64 });
    }

    #[test]
    fn refuses_trailing_bytes() {
        let mut bytes = encode(&Pair { a: 7, bb: [0; 4] });
        bytes.push(0);
        let err = decode::<Pair>("pair", &bytes, 64).unwrap_err();
        assert_eq!(err, DecodeError::TrailingBytes { what: "pair", len: 1 });
    }

    #[test]
    fn refuses_non_shortest_integer() {
        // {"a": 7 as a two-byte integer, "bb": h'00000000'}
        let bytes = [0xa2, 0x61, b'a', 0x19, 0x00, 0x07, 0x62, b'b', b'b', 0x44, 0, 0, 0, 0];
        let err = decode::<Pair>("pair", &bytes, 64).unwrap_err();
        assert_eq!(err, DecodeError::NonCanonical { what: "pair" });
    }

    #[test]
    fn refuses_wrong_array_length() {
        let bytes = [0xa2, 0x61, b'a', 0x07, 0x62, b'b', b'b', 0x43, 0, 0, 0];
        assert!(matches!(decode::<Pair>("pair", &bytes, 64), Err(DecodeError::Malformed { .. })));
    }

    #[test]
    fn deep_nesting_is_refused_not_a_stack_overflow() {
        let bytes = vec![0x81; 100_000]; // [[[[…
        assert!(decode::<Value>("value", &bytes, 1 << 20).is_err());
    }

    #[test]
    fn huge_declared_length_does_not_allocate_it() {
        // A byte string claiming 2^62 bytes, followed by nothing.
        let bytes = [0x5b, 0x40, 0, 0, 0, 0, 0, 0, 0];
        assert!(decode::<Value>("value", &bytes, 64).is_err());
    }
}
