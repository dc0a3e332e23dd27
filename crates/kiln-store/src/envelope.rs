//! The sealed forms of the files the store writes. Opening one tells an
//! empty, truncated, foreign or altered file from a whole one (P2).
//!
//! - **Leading** (records, kernel histories, the targets list, a bundle's
//!   header): a magic tag that says what the file is, the payload's length,
//!   the payload, and a BLAKE3 digest of all three.
//! - **Trailing** (a record that carries its artifact): the artifact bytes
//!   first, then the payload, its length, the tag and a BLAKE3 digest of all
//!   of it. The bytes come first so that a reader who read the file into
//!   one buffer hands the artifact out by cutting the buffer short, without
//!   copying it.

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

/// Bytes after the body and payload of a trailing seal: the 4-byte
/// payload length, the 8-byte tag and the digest.
pub(crate) const TRAILER: usize = 4 + 8 + TAIL;

/// `body` followed by `payload`, sealed under `tag` at the end.
pub(crate) fn seal_trailing(tag: &[u8; 8], body: &[u8], payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).expect("sealed payloads are small");
    let mut sealed = Vec::with_capacity(body.len() + payload.len() + TRAILER);
    sealed.extend_from_slice(body);
    sealed.extend_from_slice(payload);
    sealed.extend_from_slice(&length.to_le_bytes());
    sealed.extend_from_slice(tag);
    let digest = blake3::hash(&sealed);
    sealed.extend_from_slice(digest.as_bytes());
    sealed
}

/// Whether `sealed` ends the way a trailing seal under `tag` does: the tag
/// in its place. Says nothing of whether it is whole.
pub(crate) fn is_trailing(tag: &[u8; 8], sealed: &[u8]) -> bool {
    sealed.len() >= TRAILER && &sealed[sealed.len() - TAIL - 8..sealed.len() - TAIL] == tag
}

/// The body and payload of a trailing seal under `tag` if it is whole, else
/// what is wrong with it.
pub(crate) fn open_trailing<'a>(
    tag: &[u8; 8],
    sealed: &'a [u8],
) -> Result<(&'a [u8], &'a [u8]), String> {
    if sealed.is_empty() {
        return Err("empty file".into());
    }
    if !is_trailing(tag, sealed) {
        return Err(format!(
            "not a {} file",
            String::from_utf8_lossy(tag).trim_end_matches(char::is_numeric)
        ));
    }
    let (covered, digest) = sealed.split_at(sealed.len() - TAIL);
    if blake3::hash(covered).as_bytes() != digest {
        return Err("digest mismatch".into());
    }
    let length_at = covered.len() - 12;
    let length = u32::from_le_bytes(
        covered[length_at..length_at + 4]
            .try_into()
            .expect("4 bytes"),
    ) as usize;
    let Some(payload_at) = length_at.checked_sub(length) else {
        return Err(format!(
            "a payload of {length} bytes in {} bytes",
            sealed.len()
        ));
    };
    Ok((&covered[..payload_at], &covered[payload_at..length_at]))
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

    #[test]
    fn a_trailing_seal_opens_to_its_body_and_payload() {
        let sealed = seal_trailing(TAG, b"artifact bytes", b"payload");
        assert!(sealed.starts_with(b"artifact bytes"));
        assert_eq!(
            open_trailing(TAG, &sealed),
            Ok((&b"artifact bytes"[..], &b"payload"[..]))
        );
        let empty_body = seal_trailing(TAG, b"", b"payload");
        assert_eq!(
            open_trailing(TAG, &empty_body),
            Ok((&b""[..], &b"payload"[..]))
        );
    }

    #[test]
    fn a_trailing_seal_refuses_a_flipped_byte_a_truncation_and_another_tag() {
        // P2
        let sealed = seal_trailing(TAG, b"artifact bytes", b"payload");
        for at in [0, 15, sealed.len() - 40, sealed.len() - 1] {
            let mut flipped = sealed.clone();
            flipped[at] ^= 1;
            assert!(open_trailing(TAG, &flipped).is_err(), "byte {at}");
        }
        assert!(open_trailing(TAG, &sealed[1..]).is_err());
        assert!(open_trailing(TAG, &sealed[..sealed.len() - 1]).is_err());
        assert!(open_trailing(TAG, &[]).unwrap_err().contains("empty"));
        assert!(open_trailing(b"kilnoth1", &sealed).is_err());
        assert!(open_trailing(TAG, &seal(TAG, b"payload")).is_err());
    }
}
