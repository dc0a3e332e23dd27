//! The bytes of a pack and of its index.
//!
//! ```text
//! <shard>.idx            header (32 bytes), then one 32-byte slot per append
//!   header   "kilnidx1" | generation u64 | check u64 | 0 u64
//!   slot     key [16] | offset u32 | length u32 | kind u8 | check [3] | accessed u32
//! <shard>-<generation>.pack
//!   header   "kilnpak1" | generation u64 | 0 [16]
//!   frame    key [16] | length u32 | kind u8 | 0 [3] | "kilnfrm1" | payload
//! ```
//!
//! A slot names a frame by its offset; the frame repeats the slot's key,
//! kind and length, so a slot that points anywhere else (a flipped offset,
//! an index of another generation) reads as damaged, never as another
//! entry. The payload carries its own proof (an object's digest is its
//! key, a record or history is sealed, see `record.rs`): the framing only
//! finds it. The check of a slot covers everything but `accessed`, the
//! one field written in place, so a hit that renews it never tears a slot.

/// Bytes of an index's header, of a slot, of a pack's header and of a
/// frame's header: one size, so every slot of an index is aligned.
pub(crate) const UNIT: u64 = 32;

const INDEX_TAG: &[u8; 8] = b"kilnidx1";
const PACK_TAG: &[u8; 8] = b"kilnpak1";
const FRAME_TAG: &[u8; 8] = b"kilnfrm1";

/// What an entry of a pack is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// An artifact's bytes, keyed by the first half of their digest.
    Object,
    /// A record (an artifact's or a named blob's), keyed by the first half
    /// of its key's digest.
    Record,
    /// A kernel's history, keyed by its id's digest.
    History,
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Self::Object => 1,
            Self::Record => 2,
            Self::History => 3,
        }
    }

    fn of(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::Object),
            2 => Some(Self::Record),
            3 => Some(Self::History),
            _ => None,
        }
    }
}

/// A tombstone's kind byte: the removed kind with the high bit set.
const TOMBSTONE: u8 = 0x80;

/// One slot of an index, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    pub(crate) key: [u8; 16],
    pub(crate) kind: Kind,
    /// Whether it removes the entry rather than naming it.
    pub(crate) removed: bool,
    pub(crate) offset: u32,
    pub(crate) length: u32,
    /// When the entry was last read, in seconds since the Unix epoch.
    pub(crate) accessed: u32,
}

impl Slot {
    pub(crate) fn encode(&self) -> [u8; UNIT as usize] {
        let mut bytes = [0u8; UNIT as usize];
        bytes[..16].copy_from_slice(&self.key);
        bytes[16..20].copy_from_slice(&self.offset.to_le_bytes());
        bytes[20..24].copy_from_slice(&self.length.to_le_bytes());
        bytes[24] = self.kind.code() | if self.removed { TOMBSTONE } else { 0 };
        let check = slot_check(&bytes[..25]);
        bytes[25..28].copy_from_slice(&check);
        bytes[28..].copy_from_slice(&self.accessed.to_le_bytes());
        bytes
    }

    /// The slot `bytes` hold, or `None` when they are not a whole slot
    /// (torn, damaged, or never written: all zero).
    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let bytes: &[u8; UNIT as usize] = bytes.try_into().ok()?;
        if slot_check(&bytes[..25]) != bytes[25..28] {
            return None;
        }
        let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        Some(Self {
            key: bytes[..16].try_into().expect("16 bytes"),
            kind: Kind::of(bytes[24] & !TOMBSTONE)?,
            removed: bytes[24] & TOMBSTONE != 0,
            offset: word(16),
            length: word(20),
            accessed: word(28),
        })
    }
}

fn slot_check(bytes: &[u8]) -> [u8; 3] {
    let hash = blake3::hash(bytes);
    hash.as_bytes()[..3].try_into().expect("3 bytes")
}

/// Where `accessed` lies in a slot.
pub(crate) const ACCESSED_AT: u64 = 28;

/// An index's header for `generation`.
pub(crate) fn index_header(generation: u64) -> [u8; UNIT as usize] {
    let mut bytes = [0u8; UNIT as usize];
    bytes[..8].copy_from_slice(INDEX_TAG);
    bytes[8..16].copy_from_slice(&generation.to_le_bytes());
    let check = blake3::hash(&bytes[..16]);
    bytes[16..24].copy_from_slice(&check.as_bytes()[..8]);
    bytes
}

/// The generation an index's header names, or `None` when it is not one.
pub(crate) fn index_generation(bytes: &[u8]) -> Option<u64> {
    let header: &[u8; UNIT as usize] = bytes.get(..UNIT as usize)?.try_into().ok()?;
    let generation = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
    (index_header(generation) == *header).then_some(generation)
}

/// A pack's header for `generation`.
pub(crate) fn pack_header(generation: u64) -> [u8; UNIT as usize] {
    let mut bytes = [0u8; UNIT as usize];
    bytes[..8].copy_from_slice(PACK_TAG);
    bytes[8..16].copy_from_slice(&generation.to_le_bytes());
    bytes
}

/// A frame's header for a payload of `length` bytes.
pub(crate) fn frame_header(key: &[u8; 16], kind: Kind, length: u32) -> [u8; UNIT as usize] {
    let mut bytes = [0u8; UNIT as usize];
    bytes[..16].copy_from_slice(key);
    bytes[16..20].copy_from_slice(&length.to_le_bytes());
    bytes[20] = kind.code();
    bytes[24..].copy_from_slice(FRAME_TAG);
    bytes
}

/// Appends the frame of `payload` (entry `kind`/`key`) to `packed`, which
/// starts at `start` in its pack, and returns its live slot, read at
/// `accessed`.
///
/// # Errors
///
/// The payload or the pack outgrows what a slot can say (4 GiB).
pub(crate) fn append_frame(
    packed: &mut Vec<u8>,
    start: u64,
    (kind, key, payload): (Kind, [u8; 16], &[u8]),
    accessed: u32,
) -> std::io::Result<Slot> {
    let length = u32::try_from(payload.len())
        .map_err(|_| std::io::Error::other("an entry too large for a pack"))?;
    let offset = u32::try_from(start + packed.len() as u64)
        .map_err(|_| std::io::Error::other("a pack past 4 GiB"))?;
    packed.extend_from_slice(&frame_header(&key, kind, length));
    packed.extend_from_slice(payload);
    Ok(Slot {
        key,
        kind,
        removed: false,
        offset,
        length,
        accessed,
    })
}

/// Whether `bytes`, read where `slot` points, start with the frame the slot
/// names.
pub(crate) fn frames(bytes: &[u8], slot: &Slot) -> bool {
    bytes.len() as u64 == UNIT + u64::from(slot.length)
        && bytes[..UNIT as usize] == frame_header(&slot.key, slot.kind, slot.length)
}

/// A generation no other writer picks: the time, the process and a
/// counter, digested.
pub(crate) fn fresh_generation() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static MADE: AtomicU64 = AtomicU64::new(0);
    let mut hasher = blake3::Hasher::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    hasher.update(&now.to_le_bytes());
    hasher.update(&std::process::id().to_le_bytes());
    hasher.update(&MADE.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    u64::from_le_bytes(
        hasher.finalize().as_bytes()[..8]
            .try_into()
            .expect("8 bytes"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_round_trips_and_a_flipped_bit_is_seen() {
        let slot = Slot {
            key: [7; 16],
            kind: Kind::Record,
            removed: false,
            offset: 96,
            length: 300,
            accessed: 1_700_000_000,
        };
        let mut bytes = slot.encode();
        assert_eq!(Slot::decode(&bytes), Some(slot));
        // The access time is written in place and is not checked.
        bytes[ACCESSED_AT as usize] ^= 1;
        assert!(Slot::decode(&bytes).is_some());
        bytes[17] ^= 1;
        assert_eq!(Slot::decode(&bytes), None);
        assert_eq!(Slot::decode(&[0; 32]), None, "never written");
    }

    #[test]
    fn a_header_names_its_generation_only_when_whole() {
        assert_eq!(index_generation(&index_header(42)), Some(42));
        let mut header = index_header(42);
        header[9] ^= 1;
        assert_eq!(index_generation(&header), None);
        assert_eq!(index_generation(&[0; 8]), None);
    }
}
