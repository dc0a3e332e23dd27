//! The frames between a loader and its worker processes: a little-endian
//! `u32` length, then one message in kiln-engine's encoding (bincode's
//! standard one).

use std::io::{self, Read, Write};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::diagnostic::{CompileFailure, Diagnostic};
use crate::encoding;

/// The protocol a loader and its workers speak; a worker of another version
/// refuses to start.
pub(crate) const PROTOCOL: &str = "kiln-worker-1";

/// The largest frame read: an artifact of a gigabyte is a broken frame.
const LARGEST_FRAME: usize = 1 << 30;

/// What a loader asks of a worker.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Request {
    /// The first request: become a worker of this compiler.
    Start {
        /// [`PROTOCOL`] of the loader.
        protocol: String,
        /// [`ProcessCompiler::NAME`](super::ProcessCompiler::NAME).
        compiler: String,
        /// The encoded [`ProcessCompiler::Recipe`](super::ProcessCompiler::Recipe).
        recipe: Vec<u8>,
    },
    /// Finalize one kernel.
    Finalize {
        /// The encoded `ArtifactId<Variant>`.
        id: Vec<u8>,
        /// The encoded lowered form.
        lowered: Vec<u8>,
    },
}

/// What a worker answers.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Reply {
    /// Ready for `Finalize` requests.
    Started,
    /// Cannot serve this compiler, and why.
    Refused {
        /// The reason, for the loader's warning.
        reason: String,
    },
    /// One kernel's finalize, and how long the compiler worked on it.
    Finalized {
        /// What came of it.
        outcome: Outcome,
        /// The compile time inside the worker.
        work: Duration,
    },
}

/// How one finalize in a worker ended.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Outcome {
    /// The encoded artifact and the compile's warnings.
    Built {
        /// The encoded artifact.
        artifact: Vec<u8>,
        /// Warnings and remarks of the compile.
        diagnostics: Vec<Diagnostic>,
    },
    /// The compiler reported errors.
    Failed(CompileFailure),
    /// The compiler panicked, with this message.
    Panicked(String),
}

/// `value` in the protocol's encoding.
pub(crate) fn encode<T: Serialize + ?Sized>(value: &T) -> io::Result<Vec<u8>> {
    encoding::encode(value).map_err(io::Error::other)
}

/// A value of the protocol's encoding.
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> io::Result<T> {
    encoding::decode(bytes)
        .map(|(value, _)| value)
        .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))
}

/// Writes one frame and flushes it.
pub(crate) fn write_frame<T: Serialize>(output: &mut impl Write, message: &T) -> io::Result<()> {
    let payload = encode(message)?;
    let length = u32::try_from(payload.len())
        .ok()
        .filter(|&length| length as usize <= LARGEST_FRAME)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a frame over 1 GiB"))?;
    output.write_all(&length.to_le_bytes())?;
    output.write_all(&payload)?;
    output.flush()
}

/// Reads one frame: `None` when the other side closed the pipe between
/// frames.
pub(crate) fn read_frame<T: DeserializeOwned>(input: &mut impl Read) -> io::Result<Option<T>> {
    let mut length = [0u8; 4];
    match input.read_exact(&mut length) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(error) => return Err(error),
    }
    let length = u32::from_le_bytes(length) as usize;
    if length > LARGEST_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {length} bytes is not one kiln sends"),
        ));
    }
    // Allocated as it arrives, not at the length the frame claims.
    let mut payload = Vec::new();
    let read = input.take(length as u64).read_to_end(&mut payload)?;
    if read != length {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("the pipe closed {read} bytes into a frame of {length}"),
        ));
    }
    decode(&payload).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_reads_back_as_written_and_a_closed_pipe_reads_as_none() {
        let mut pipe = Vec::new();
        write_frame(
            &mut pipe,
            &Request::Finalize {
                id: vec![1, 2],
                lowered: vec![3; 70_000],
            },
        )
        .expect("writes");
        let mut input = pipe.as_slice();
        let Some(Request::Finalize { id, lowered }) = read_frame(&mut input).expect("reads") else {
            panic!("a finalize request comes back");
        };
        assert_eq!((id, lowered.len()), (vec![1, 2], 70_000));
        assert!(
            read_frame::<Request>(&mut input)
                .expect("clean end")
                .is_none()
        );
    }

    #[test]
    fn a_frame_longer_than_any_kiln_sends_is_an_error_not_an_allocation() {
        let mut input: &[u8] = &u32::MAX.to_le_bytes();
        assert!(read_frame::<Reply>(&mut input).is_err());
    }
}
