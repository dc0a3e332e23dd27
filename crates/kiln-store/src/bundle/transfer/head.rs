//! The head of a bundle file: the magic, the version and the sealed
//! header, in the compressed or the plain form.

use super::*;

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
            return super::manifest::read_manifest(path, reader, None)
                .map(|opened| opened.manifest.header);
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
