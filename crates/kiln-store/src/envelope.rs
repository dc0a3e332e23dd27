//! The sealed form of every small file the store writes (records, kernel
//! histories, the targets list, a bundle's header): a magic tag that says
//! what the file is, the payload's length, the payload, and a BLAKE3 digest
//! of all three. Opening one tells an empty, truncated, foreign or altered
//! file from a whole one (P2).

/// Bytes before the payload: the 8-byte tag and the 4-byte length.
const HEAD: usize = 12;
/// Bytes after it: the digest.
const TAIL: usize = 32;

/// `payload`, sealed under `tag`.
pub(crate) fn seal(tag: &[u8; 8], payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).expect("sealed payloads are small");
    let mut sealed = Vec::with_capacity(HEAD + payload.len() + TAIL);
    sealed.extend_from_slice(tag);
    sealed.extend_from_slice(&length.to_le_bytes());
    sealed.extend_from_slice(payload);
    let digest = blake3::hash(&sealed);
    sealed.extend_from_slice(digest.as_bytes());
    sealed
}

/// The payload of `sealed` if it is whole and tagged `tag`, else what is
/// wrong with it.
pub(crate) fn open<'a>(tag: &[u8; 8], sealed: &'a [u8]) -> Result<&'a [u8], String> {
    if sealed.is_empty() {
        return Err("empty file".into());
    }
    if sealed.len() < HEAD + TAIL {
        return Err(format!("truncated to {} bytes", sealed.len()));
    }
    if &sealed[..8] != tag {
        return Err(format!(
            "not a {} file",
            String::from_utf8_lossy(tag).trim_end_matches(char::is_numeric)
        ));
    }
    let length = u32::from_le_bytes(sealed[8..12].try_into().expect("4 bytes")) as usize;
    let expected = HEAD + length + TAIL;
    if sealed.len() != expected {
        return Err(format!(
            "{} bytes where the header promises {expected}",
            sealed.len()
        ));
    }
    let (body, digest) = sealed.split_at(HEAD + length);
    if blake3::hash(body).as_bytes() != digest {
        return Err("digest mismatch".into());
    }
    Ok(&body[HEAD..])
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAG: &[u8; 8] = b"kilntst1";

    #[test]
    fn a_sealed_payload_opens_whole() {
        let sealed = seal(TAG, b"payload");
        assert_eq!(open(TAG, &sealed), Ok(&b"payload"[..]));
    }

    #[test]
    fn a_flipped_byte_a_truncation_an_empty_file_and_another_tag_are_refused() {
        // P2
        let sealed = seal(TAG, b"payload");
        let mut flipped = sealed.clone();
        flipped[14] ^= 1;
        assert!(open(TAG, &flipped).unwrap_err().contains("digest"));
        assert!(open(TAG, &sealed[..sealed.len() - 1]).is_err());
        assert!(open(TAG, &[]).unwrap_err().contains("empty"));
        assert!(open(b"kilnoth1", &sealed).is_err());
    }
}
