//! The head of a version 3 bundle: a sealed manifest that says what the
//! compressed stream after it is (its length, its digest, and the length of
//! the plain form it holds), then the signature over the manifest. Import
//! reads both, judges the signature and checks the stream's digest before
//! it decompresses a byte, and then decompresses at most the length the
//! manifest gives (P8: a bundle that inflates past it is damage, refused
//! having staged no more than that).

use super::*;

/// What a version 3 bundle's manifest says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Manifest {
    /// The header of the plain form the stream holds.
    pub(super) header: BundleHeader,
    /// Bytes of the plain form the stream decompresses to.
    pub(super) plain_length: u64,
    /// Bytes of the compressed stream after the signature.
    pub(super) stream_length: u64,
    /// BLAKE3 of the compressed stream.
    pub(super) stream_digest: [u8; 32],
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

/// Writes a version 3 bundle's head: the magic, the version, the sealed
/// manifest and the signature section (empty when unsigned).
pub(super) fn write_head(
    out: &mut impl Write,
    sealed_manifest: &[u8],
    signature: Option<&[u8]>,
) -> io::Result<()> {
    let signature = signature.unwrap_or_default();
    let signature_length = u32::try_from(signature.len())
        .ok()
        .filter(|length| *length <= LARGEST_SIGNATURE)
        .ok_or_else(|| {
            io::Error::other(format!(
                "a signature of {} bytes is over the limit of {LARGEST_SIGNATURE}",
                signature.len()
            ))
        })?;
    out.write_all(MAGIC)?;
    out.write_all(&BUNDLE_VERSION.to_le_bytes())?;
    out.write_all(&(sealed_manifest.len() as u32).to_le_bytes())?;
    out.write_all(sealed_manifest)?;
    out.write_all(SIGNATURE_TAG)?;
    out.write_all(&signature_length.to_le_bytes())?;
    out.write_all(signature)
}

/// Reads `length` bytes of `input` through a fixed buffer: their digest.
pub(super) fn stream_digest(input: &mut impl Read, length: u64) -> io::Result<[u8; 32]> {
    scan(input, length, &[]).map(|(digest, _)| digest)
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
