//! The head of a bundle file: the magic, the version and the sealed
//! header, in the compressed or the plain form; and for a version 3
//! bundle: a sealed manifest that says what the
//! compressed stream after it is (its length, its digest, and the length of
//! the plain form it holds), then the signature over the manifest. Import
//! reads both, judges the signature and checks the stream's digest before
//! it decompresses a byte, and then decompresses at most the length the
//! manifest gives (P8: a bundle that inflates past it is damage, refused
//! having staged no more than that).

use std::io::{self, Read, Write};
use std::path::Path;

use crate::bundle::format::{
    BUNDLE_VERSION, BundleHeader, HEADER_TAG, LARGEST_SEALED, LARGEST_SIGNATURE, MAGIC,
    MANIFEST_TAG, Manifest, PLAIN_VERSION, SIGNATURE_TAG, damaged,
};
use crate::envelope;
use crate::error::{Error, Result};
use crate::record::{self};

/// Reads the magic, the version and the header of the bundle `reader`
/// starts with, compressed or plain.
///
/// # Errors
///
/// It is not a bundle this version reads.
pub fn read_header(path: &Path, reader: &mut impl Read) -> Result<BundleHeader> {
    match read_head(path, reader)? {
        PLAIN_VERSION => return read_header_after_head(path, reader).map(|(header, _)| header),
        BUNDLE_VERSION => {
            return read_manifest(path, reader, None).map(|opened| opened.manifest.header);
        }
        _ => {}
    }
    let mut plain =
        zstd::stream::read::Decoder::new(reader).map_err(|error| Error::NotABundle {
            path: path.to_path_buf(),
            reason: format!("its compressed stream cannot be read: {error}"),
        })?;
    read_header_sealed(path, &mut plain).map(|(header, _)| header)
}

/// Reads the magic and the version a bundle starts with: one this version
/// reads.
pub(super) fn read_head(path: &Path, reader: &mut impl Read) -> Result<u32> {
    let not_a_bundle = |reason: String| Error::NotABundle {
        path: path.to_path_buf(),
        reason,
    };
    let mut head = [0u8; 12];
    reader
        .read_exact(&mut head)
        .map_err(|_| not_a_bundle("too short".into()))?;
    if &head[..8] != MAGIC {
        return Err(not_a_bundle("it does not start with kiln's magic".into()));
    }
    let version = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    if !(PLAIN_VERSION..=BUNDLE_VERSION).contains(&version) {
        return Err(not_a_bundle(format!(
            "bundle version {version}; this kiln reads {PLAIN_VERSION} to {BUNDLE_VERSION}"
        )));
    }
    Ok(version)
}

/// Reads a plain bundle's magic, version and header.
pub(super) fn read_header_sealed(
    path: &Path,
    reader: &mut impl Read,
) -> Result<(BundleHeader, Vec<u8>)> {
    let version = read_head(path, reader)?;
    if version != PLAIN_VERSION {
        return Err(Error::NotABundle {
            path: path.to_path_buf(),
            reason: format!("its compressed stream holds a bundle of version {version}"),
        });
    }
    read_header_after_head(path, reader)
}

pub(super) fn read_header_after_head(
    path: &Path,
    reader: &mut impl Read,
) -> Result<(BundleHeader, Vec<u8>)> {
    let not_a_bundle = |reason: String| Error::NotABundle {
        path: path.to_path_buf(),
        reason,
    };
    let mut head = [0u8; 4];
    reader
        .read_exact(&mut head)
        .map_err(|_| not_a_bundle("too short".into()))?;
    let length = u32::from_le_bytes(head);
    if u64::from(length) > LARGEST_SEALED {
        return Err(not_a_bundle(format!("a header of {length} bytes")));
    }
    // Read as it comes rather than into a buffer of the length it claims:
    // what is allocated is what the file holds.
    let mut sealed = Vec::new();
    let read = reader
        .take(u64::from(length))
        .read_to_end(&mut sealed)
        .map_err(|error| not_a_bundle(format!("its header cannot be read: {error}")))?;
    if read != length as usize {
        return Err(not_a_bundle("its header is truncated".into()));
    }
    let payload = envelope::open(HEADER_TAG, &sealed)
        .map_err(|defect| not_a_bundle(format!("its header is {defect}")))?;
    let header =
        record::decode(payload).map_err(|defect| not_a_bundle(format!("its header {defect}")))?;
    Ok((header, sealed))
}

/// A version 3 bundle's head, read and checked against the file.
pub(super) struct OpenedManifest {
    pub(super) manifest: Manifest,
    /// The sealed manifest: what the signature covers.
    pub(super) sealed: Vec<u8>,
    pub(super) signature: Option<Vec<u8>>,
    /// Where the stream starts in the file.
    pub(super) stream_start: u64,
}

/// Reads the manifest and the signature after a version 3 head, with every
/// length checked before it is read.
pub(super) fn read_manifest(
    path: &Path,
    reader: &mut impl Read,
    file_length: Option<u64>,
) -> Result<OpenedManifest> {
    let not_a_bundle = |reason: String| Error::NotABundle {
        path: path.to_path_buf(),
        reason,
    };
    let mut length = [0u8; 4];
    reader
        .read_exact(&mut length)
        .map_err(|_| not_a_bundle("it ends before its manifest".into()))?;
    let length = u32::from_le_bytes(length);
    if u64::from(length) > LARGEST_SEALED {
        return Err(not_a_bundle(format!("a manifest of {length} bytes")));
    }
    let mut sealed = Vec::new();
    let read = reader
        .take(u64::from(length))
        .read_to_end(&mut sealed)
        .map_err(|error| not_a_bundle(format!("its manifest cannot be read: {error}")))?;
    if read != length as usize {
        return Err(not_a_bundle(format!(
            "its manifest is cut short: {read} of {length} bytes"
        )));
    }
    let payload = envelope::open(MANIFEST_TAG, &sealed)
        .map_err(|defect| not_a_bundle(format!("its manifest is {defect}")))?;
    let manifest: Manifest =
        record::decode(payload).map_err(|defect| not_a_bundle(format!("its manifest {defect}")))?;
    let mut head = [0u8; 12];
    reader
        .read_exact(&mut head)
        .map_err(|_| not_a_bundle("it ends before its signature section".into()))?;
    let signature_length = u32::from_le_bytes(head[8..].try_into().expect("4 bytes"));
    if &head[..8] != SIGNATURE_TAG || signature_length > LARGEST_SIGNATURE {
        return Err(not_a_bundle(
            "its signature section is not one kiln writes".into(),
        ));
    }
    let mut signature = vec![0u8; signature_length as usize];
    reader
        .read_exact(&mut signature)
        .map_err(|_| not_a_bundle("its signature is cut short".into()))?;
    let stream_start = 12 + 4 + u64::from(length) + 12 + u64::from(signature_length);
    if let Some(file_length) = file_length
        && file_length.checked_sub(stream_start) != Some(manifest.stream_length)
    {
        return Err(damaged(format!(
            "its manifest promises a stream of {} bytes, and the file holds {}",
            manifest.stream_length,
            file_length.saturating_sub(stream_start)
        )));
    }
    Ok(OpenedManifest {
        manifest,
        sealed,
        signature: (signature_length > 0).then_some(signature),
        stream_start,
    })
}

/// Decompresses the zstd stream `input` into `output`, writing at most
/// `limit` bytes: a stream that holds more is damage, found before the
/// byte past the limit is written. Returns the bytes written.
pub(super) fn inflate_bounded(
    path: &Path,
    input: impl Read,
    output: &mut impl Write,
    limit: u64,
    why: &str,
) -> Result<u64> {
    let stream_error = |error: io::Error| {
        if matches!(
            error.kind(),
            io::ErrorKind::Other | io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof
        ) {
            damaged(format!("its compressed stream is damaged: {error}"))
        } else {
            Error::io("decompress", path)(error)
        }
    };
    let mut decoder = zstd::stream::read::Decoder::new(input).map_err(Error::io("read", path))?;
    let written = io::copy(&mut (&mut decoder).take(limit), output).map_err(stream_error)?;
    if written == limit {
        let mut more = [0u8; 1];
        let extra = loop {
            match decoder.read(&mut more) {
                Ok(read) => break read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(stream_error(error)),
            }
        };
        if extra > 0 {
            return Err(damaged(format!(
                "its compressed stream inflates past {limit} bytes, {why}: a decompression bomb, \
                 refused before more was written"
            )));
        }
    }
    Ok(written)
}
