//! A byte buffer in an artifact, written and read as bytes
//! (`#[serde(with = "kiln_engine::store::bytes")]`): the same encoding
//! as a `Vec<u8>` field, so stored entries read as before, but decoded in
//! one copy instead of byte by byte, which was most of a warm hit's work
//! (a cubin of tens of KiB).

use std::fmt;

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserializer, Serializer};

/// Writes `bytes` as one byte string.
///
/// # Errors
///
/// The serializer's.
pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_bytes(bytes)
}

/// Reads a byte string, or a sequence of bytes from a format that writes
/// one so.
///
/// # Errors
///
/// The deserializer's, or a value that is not bytes.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
    deserializer.deserialize_bytes(BytesVisitor)
}

struct BytesVisitor;

impl<'de> Visitor<'de> for BytesVisitor {
    type Value = Vec<u8>;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("bytes")
    }

    fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<Vec<u8>, E> {
        Ok(bytes.to_vec())
    }

    fn visit_byte_buf<E: de::Error>(self, bytes: Vec<u8>) -> Result<Vec<u8>, E> {
        Ok(bytes)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
        // Never trust a length read from the bytes for more than a page.
        let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(byte) = seq.next_element()? {
            bytes.push(byte);
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Plain {
        bytes: Vec<u8>,
        after: String,
    }

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct AsBytes {
        #[serde(with = "super")]
        bytes: Vec<u8>,
        after: String,
    }

    /// Entries stored with a plain `Vec<u8>` read the same, and are
    /// written the same, byte for byte.
    #[test]
    fn f11_bytes_encode_as_a_plain_vec_does() {
        for length in [0usize, 1, 250, 251, 70_000] {
            let bytes: Vec<u8> = (0..length).map(|index| (index % 251) as u8).collect();
            let plain = Plain {
                bytes: bytes.clone(),
                after: "tail".into(),
            };
            let as_bytes = AsBytes {
                bytes,
                after: "tail".into(),
            };
            let encoded = crate::encoding::encode(&plain).expect("encodes");
            assert_eq!(
                crate::encoding::encode(&as_bytes).expect("encodes"),
                encoded
            );
            let (decoded, read): (AsBytes, usize) =
                crate::encoding::decode(&encoded).expect("decodes");
            assert_eq!(read, encoded.len());
            assert_eq!(decoded, as_bytes);
        }
    }

    /// A format that writes bytes as a sequence reads back.
    #[test]
    fn a_sequence_of_bytes_reads_back() {
        let json = serde_json::to_string(&AsBytes {
            bytes: vec![1, 2, 255],
            after: String::new(),
        })
        .expect("json");
        let plain: Plain = serde_json::from_str(&json).expect("plain");
        assert_eq!(plain.bytes, vec![1, 2, 255]);
        let back: AsBytes = serde_json::from_str(&json).expect("as bytes");
        assert_eq!(back.bytes, vec![1, 2, 255]);
    }
}
