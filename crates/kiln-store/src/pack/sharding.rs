//! Which shard holds an entry: the first bytes of its key pick one of
//! [`SHARDS`], and a pack keys an entry by the first half of its digest.

/// How many shards packs are spread over: each shard is two files, so a
/// store of packs alone is about a thousand files, and at a million entries
/// (four slots each at most) an index is about 250 KiB, read once per
/// process.
pub(crate) const SHARDS: usize = 512;

/// The shard of an entry keyed by `key`.
pub(crate) fn shard_of(key: &[u8; 16]) -> usize {
    usize::from(u16::from_be_bytes([key[0], key[1]])) % SHARDS
}

/// The first half of a digest: what a pack keys an entry by. The frame's
/// payload is verified against the whole digest wherever it is known.
pub(crate) fn short_key(digest: &[u8; 32]) -> [u8; 16] {
    digest[..16].try_into().expect("16 bytes")
}
