//! A batch pack: one object holding the artifacts of a batch's first
//! lookup, so that a node with an empty disk reads a whole batch in one
//! GET instead of one per kernel.
//!
//! A pack is one remote-tier entry (`kiln_remote::entry`: the same
//! authenticator, keys and checks as every object of the bucket), of the
//! blob kind, whose subject is the digest of the lookup's key set
//! ([`set_digest_of`], derived under a context of its own: no key or blob
//! digest is ever the same) and whose payload is a zstd stream of
//!
//! ```text
//! count u32 | count × ( index u32 | work_nanos u64 | length u32 | artifact [length] )
//! ```
//!
//! where `index` is the key's place in the set's digests, sorted. The
//! authenticator covers the set and every index, work and byte, so each
//! artifact is bound to its key by a trusted key exactly as a per-key
//! object binds its bytes to its key's digest: a pack written by a
//! stranger, cut short, altered, or moved to another set's name does not
//! open, and every key of the lookup goes to its per-key object.
//!
//! One authenticator for the batch rather than one per entry keeps a
//! pack of small artifacts small (64 per-key authenticators and digests
//! are 4 KiB that do not compress) and its check one signature.

use std::io::Read;
use std::time::Duration;

const SET_CONTEXT: &str = "kiln bucket batch pack 1";

/// The zstd level packs are written at: fast, and most of the gain.
const LEVEL: i32 = 3;

/// The fewest distinct keys a lookup needs for a pack: below it the
/// per-key GETs cost as little as the pack would.
pub(crate) const LEAST_KEYS: usize = 4;

/// The digest naming a set of keys (order and repeats aside), from their
/// digests sorted and without repeats: the subject and name of the set's
/// pack.
pub(crate) fn set_digest_of(sorted: &[[u8; 32]]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new_derive_key(SET_CONTEXT);
    hasher.update(&(sorted.len() as u64).to_le_bytes());
    for digest in sorted {
        hasher.update(digest);
    }
    *hasher.finalize().as_bytes()
}

/// The payload of a pack of the set whose sorted digests are `sorted`,
/// holding `entries` (a key digest of the set, its artifact and the work
/// it saved); entries of other keys are left out. `None` when zstd fails.
pub(crate) fn encode(
    sorted: &[[u8; 32]],
    entries: &[([u8; 32], Vec<u8>, Duration)],
) -> Option<Vec<u8>> {
    let mut raw = Vec::new();
    let mut count: u32 = 0;
    raw.extend_from_slice(&count.to_le_bytes());
    for (digest, bytes, work) in entries {
        let (Ok(index), Ok(length)) = (sorted.binary_search(digest), u32::try_from(bytes.len()))
        else {
            continue;
        };
        let Ok(index) = u32::try_from(index) else {
            continue;
        };
        raw.extend_from_slice(&index.to_le_bytes());
        let work = u64::try_from(work.as_nanos()).unwrap_or(u64::MAX);
        raw.extend_from_slice(&work.to_le_bytes());
        raw.extend_from_slice(&length.to_le_bytes());
        raw.extend_from_slice(bytes);
        count += 1;
    }
    raw[..4].copy_from_slice(&count.to_le_bytes());
    zstd::bulk::compress(&raw, LEVEL).ok()
}

/// One artifact of a pack.
#[derive(Debug, Clone)]
pub(crate) struct Packed {
    pub(crate) artifact: Vec<u8>,
    pub(crate) work: Duration,
}

/// The artifacts of a verified pack's payload, by the key's place in the
/// set's sorted digests (`members` of them); `None` when the payload is
/// not a whole pack of that set (cut, with bytes after its end, an index
/// out of the set, or more than `limit` bytes once decompressed).
pub(crate) fn decode(payload: &[u8], members: usize, limit: u64) -> Option<Vec<Option<Packed>>> {
    let mut raw = Vec::new();
    let decoder = zstd::stream::read::Decoder::new(payload).ok()?;
    decoder.take(limit + 1).read_to_end(&mut raw).ok()?;
    if raw.len() as u64 > limit {
        return None;
    }
    let mut found: Vec<Option<Packed>> = vec![None; members];
    let number = |at: usize, width: usize| -> Option<u64> {
        let bytes = raw.get(at..at.checked_add(width)?)?;
        let mut word = [0u8; 8];
        word[..width].copy_from_slice(bytes);
        Some(u64::from_le_bytes(word))
    };
    let count = number(0, 4)?;
    let mut at = 4;
    for _ in 0..count {
        let index = usize::try_from(number(at, 4)?).ok()?;
        let work = Duration::from_nanos(number(at + 4, 8)?);
        let length = usize::try_from(number(at + 12, 4)?).ok()?;
        let start = at + 16;
        let artifact = raw.get(start..start.checked_add(length)?)?.to_vec();
        let slot = found.get_mut(index)?;
        if slot.is_none() {
            *slot = Some(Packed { artifact, work });
        }
        at = start + length;
    }
    (at == raw.len()).then_some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted() -> Vec<[u8; 32]> {
        vec![[1; 32], [2; 32], [3; 32]]
    }

    fn entries() -> Vec<([u8; 32], Vec<u8>, Duration)> {
        vec![
            ([3; 32], b"three".to_vec(), Duration::from_millis(3)),
            ([1; 32], Vec::new(), Duration::ZERO),
            // Not of the set: left out.
            ([9; 32], b"stray".to_vec(), Duration::ZERO),
        ]
    }

    #[test]
    fn p16_a_pack_gives_back_each_artifact_in_its_keys_place() {
        let payload = encode(&sorted(), &entries()).expect("zstd compresses");
        let found = decode(&payload, 3, 1 << 20).expect("a whole pack");
        assert_eq!(found.len(), 3);
        let three = found[2].as_ref().expect("the third key's");
        assert_eq!(three.artifact, b"three");
        assert_eq!(three.work, Duration::from_millis(3));
        assert!(found[0].as_ref().is_some_and(|one| one.artifact.is_empty()));
        assert!(found[1].is_none(), "the second key was not packed");
    }

    #[test]
    fn p16_a_pack_cut_short_of_another_size_or_too_large_is_refused() {
        let payload = encode(&sorted(), &entries()).expect("zstd compresses");
        for length in 0..payload.len() {
            assert!(
                decode(&payload[..length], 3, 1 << 20).is_none(),
                "cut at {length}"
            );
        }
        // An index past a smaller set.
        assert!(decode(&payload, 2, 1 << 20).is_none());
        assert!(
            decode(&payload, 3, 8).is_none(),
            "over the limit once decompressed"
        );
        assert!(decode(b"not zstd at all", 3, 1 << 20).is_none());
    }

    #[test]
    fn p16_a_set_digest_names_the_set() {
        let sorted = sorted();
        assert_eq!(set_digest_of(&sorted), set_digest_of(&sorted.clone()));
        assert_ne!(set_digest_of(&sorted), set_digest_of(&sorted[..2]));
    }
}
