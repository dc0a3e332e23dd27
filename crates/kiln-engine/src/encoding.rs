//! Serde data as bytes: bincode's standard encoding, the one encoding of
//! everything kiln-engine writes — store keys and artifacts, compiler recipes,
//! and the frames between a loader and its worker processes.

use bincode::error::{DecodeError, EncodeError};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// `value` as bytes.
pub(crate) fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, EncodeError> {
    bincode::serde::encode_to_vec(value, bincode::config::standard())
}

/// The value at the start of `bytes`, and how many bytes it took.
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<(T, usize), DecodeError> {
    bincode::serde::decode_from_slice(bytes, bincode::config::standard())
}

/// `value` written to `writer` as [`encode`] would return it, with no buffer
/// of its own: a store key's digest is taken on every lookup.
pub(crate) fn encode_to<T: Serialize + ?Sized, W: std::io::Write>(
    value: &T,
    writer: &mut W,
) -> Result<usize, EncodeError> {
    bincode::serde::encode_into_std_write(value, writer, bincode::config::standard())
}
