//! The small files that point at objects: records (one per key) and kernel
//! histories (one per kernel id). Both carry every component of their keys
//! in the clear, so a record read under one key can be told from a record of
//! another (P2), and a miss can name what changed (P9).
//!
//! A record comes in two forms. A **pointer** record (leading seal,
//! `kilnrec1`) names its object, which a hit then opens and digests. An
//! **inline** record (trailing seal, `kilninl1`) carries a copy of its
//! artifact's bytes ahead of the same payload, so a hit of a small artifact
//! opens one file instead of two; its seal's digest covers the bytes, so
//! they are verified as an object's would be. The object is written either
//! way: source records point at it (P7), bundles carry it (P8), and its
//! access time is the entry's place in the eviction order (P6).
//!
//! A **blob** record (leading seal, `kilnblb1`) names the object that holds
//! a named blob's bytes, under the blob's [`BlobKey`]. It lives in the same
//! tree as the records of artifacts, filed under its key's digest (derived
//! under another context, so never an artifact key's), and is verified,
//! evicted and listed as they are.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kiln_engine::StoreKey;
use kiln_engine::store::BlobKey;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::envelope;

const RECORD_TAG: &[u8; 8] = b"kilnrec1";
const INLINE_TAG: &[u8; 8] = b"kilninl1";
const HISTORY_TAG: &[u8; 8] = b"kilnhis1";
const TARGETS_TAG: &[u8; 8] = b"kilntgt1";
const BLOB_TAG: &[u8; 8] = b"kilnblb1";

/// What the store keeps under one key: the full key and the object it
/// points at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Every component of the key it was written for.
    pub key: StoreKey,
    /// The BLAKE3 digest of the object's bytes.
    pub object: [u8; 32],
    /// The object's length in bytes.
    pub size: u64,
    /// How long compiling the artifact took, in nanoseconds: what a hit saves.
    pub work_nanos: u64,
    /// When it was stored, in seconds since the Unix epoch.
    pub stored_at: u64,
}

impl Record {
    /// A record of `key` pointing at `bytes`' object.
    pub(crate) fn new(key: StoreKey, object: [u8; 32], size: u64, work: Duration) -> Self {
        Self {
            key,
            object,
            size,
            work_nanos: u64::try_from(work.as_nanos()).unwrap_or(u64::MAX),
            stored_at: now_seconds(),
        }
    }

    /// How long compiling it took.
    pub fn work(&self) -> Duration {
        Duration::from_nanos(self.work_nanos)
    }

    pub(crate) fn seal(&self) -> Vec<u8> {
        seal(RECORD_TAG, self)
    }

    pub(crate) fn open(sealed: &[u8]) -> Result<Self, String> {
        open(RECORD_TAG, sealed)
    }

    /// What it says besides its key.
    pub(crate) fn pointer(&self) -> Pointer {
        Pointer {
            object: self.object,
            size: self.size,
            work_nanos: self.work_nanos,
            stored_at: self.stored_at,
        }
    }

    /// The inline form: `artifact`'s bytes ahead of this record, sealed
    /// together.
    pub(crate) fn seal_inline(&self, artifact: &[u8]) -> Vec<u8> {
        debug_assert_eq!(artifact.len() as u64, self.size);
        envelope::seal_trailing(INLINE_TAG, artifact, &encode(self))
    }

    /// A record file of either form: the record, and the artifact's bytes
    /// when it carries them.
    pub(crate) fn open_any(sealed: &[u8]) -> Result<(Self, Option<&[u8]>), String> {
        if !envelope::is_trailing(INLINE_TAG, sealed) {
            return Self::open(sealed).map(|record| (record, None));
        }
        // A pointer record whose bytes happen to end like an inline one is
        // still a pointer record.
        let (artifact, payload) = match envelope::open_trailing(INLINE_TAG, sealed) {
            Ok(opened) => opened,
            Err(defect) => {
                return Self::open(sealed)
                    .map(|record| (record, None))
                    .or(Err(defect));
            }
        };
        let record: Self = decode(payload)?;
        if record.size != artifact.len() as u64 {
            return Err(format!(
                "it carries {} bytes and says {}",
                artifact.len(),
                record.size
            ));
        }
        Ok((record, Some(artifact)))
    }
}

/// What the store keeps under a named blob's key: the full key and the
/// object that holds the blob's bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobRecord {
    /// Every component of the blob's key.
    pub key: BlobKey,
    /// The BLAKE3 digest of the object's bytes.
    pub object: [u8; 32],
    /// The object's length in bytes.
    pub size: u64,
    /// When it was stored, in seconds since the Unix epoch.
    pub stored_at: u64,
}

impl BlobRecord {
    /// A record of `key` pointing at the object `object` of `size` bytes.
    pub(crate) fn new(key: BlobKey, object: [u8; 32], size: u64) -> Self {
        Self {
            key,
            object,
            size,
            stored_at: now_seconds(),
        }
    }

    pub(crate) fn seal(&self) -> Vec<u8> {
        seal(BLOB_TAG, self)
    }

    pub(crate) fn open(sealed: &[u8]) -> Result<Self, String> {
        open(BLOB_TAG, sealed)
    }

    /// What it says besides its key; a blob has no work.
    pub(crate) fn pointer(&self) -> Pointer {
        Pointer {
            object: self.object,
            size: self.size,
            work_nanos: 0,
            stored_at: self.stored_at,
        }
    }
}

/// A file of the `records` tree, of any kind.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(
    clippy::large_enum_variant,
    reason = "one lives at a time, on the stack of a walk; boxing would allocate per file"
)]
pub(crate) enum AnyRecord<'a> {
    /// An artifact's record, and the artifact's bytes when it carries them.
    Artifact(Record, Option<&'a [u8]>),
    /// A named blob's record.
    Blob(BlobRecord),
}

impl AnyRecord<'_> {
    /// A file of the `records` tree: a blob's record when it opens as one,
    /// else an artifact's of either form. An inline record starts with its
    /// artifact's bytes, which may start with any tag, so a file that
    /// starts like a blob record and does not open as one is still tried
    /// as an artifact's.
    pub(crate) fn open(sealed: &[u8]) -> Result<AnyRecord<'_>, String> {
        let blob = sealed
            .starts_with(BLOB_TAG)
            .then(|| BlobRecord::open(sealed));
        match blob {
            Some(Ok(record)) => Ok(AnyRecord::Blob(record)),
            Some(Err(defect)) => Record::open_any(sealed)
                .map(|(record, inline)| AnyRecord::Artifact(record, inline))
                .or(Err(defect)),
            None => {
                Record::open_any(sealed).map(|(record, inline)| AnyRecord::Artifact(record, inline))
            }
        }
    }

    /// The digest of its key: the name it is filed under.
    pub(crate) fn key_digest(&self) -> [u8; 32] {
        match self {
            Self::Artifact(record, _) => record.key.digest(),
            Self::Blob(record) => record.key.digest(),
        }
    }

    /// The object it points at, and its length.
    pub(crate) fn object(&self) -> ([u8; 32], u64) {
        match self {
            Self::Artifact(record, _) => (record.object, record.size),
            Self::Blob(record) => (record.object, record.size),
        }
    }
}

/// What a record says besides its key: the fields of [`Record`] after
/// `key`, in order, so that they decode from what follows the key's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub(crate) struct Pointer {
    /// [`Record::object`].
    pub(crate) object: [u8; 32],
    /// [`Record::size`].
    pub(crate) size: u64,
    /// [`Record::work_nanos`].
    pub(crate) work_nanos: u64,
    /// [`Record::stored_at`].
    pub(crate) stored_at: u64,
}

/// A record file read by a lookup, checked against the key asked for
/// without decoding the key it holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Checked {
    /// A whole pointer record of the key asked for.
    Pointer(Pointer),
    /// A whole inline record of the key asked for, whose artifact is the
    /// first `size` bytes of the file.
    Inline(Pointer),
    /// Anything else: damaged, or of another key. [`Record::open_any`] says
    /// which.
    Other,
}

/// Checks a record file against `encoded_key`, the key's bytes as
/// [`encode`] writes them: the seal, then that the record's key is exactly
/// those bytes. A record's payload starts with its key, so this compares
/// bytes where decoding would build every string of the key again.
pub(crate) fn check(sealed: &[u8], encoded_key: &[u8]) -> Checked {
    let inline = envelope::is_trailing(INLINE_TAG, sealed);
    let opened = if inline {
        envelope::open_trailing(INLINE_TAG, sealed).map(|(_, payload)| payload)
    } else {
        envelope::open(RECORD_TAG, sealed)
    };
    let Some(rest) = opened
        .ok()
        .and_then(|payload| payload.strip_prefix(encoded_key))
    else {
        return Checked::Other;
    };
    match decode::<Pointer>(rest) {
        Ok(pointer) if !inline => Checked::Pointer(pointer),
        Ok(pointer)
            if sealed.len() as u64
                == pointer.size + (rest.len() + encoded_key.len() + envelope::TRAILER) as u64 =>
        {
            Checked::Inline(pointer)
        }
        _ => Checked::Other,
    }
}

/// A key and when it was seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// The key.
    pub key: StoreKey,
    /// When, in seconds since the Unix epoch.
    pub at: u64,
}

/// What the store knows of one kernel id across keys: the key it last
/// stored the kernel under, and the key it was last asked for and missed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelHistory {
    /// The kernel's name.
    pub name: String,
    /// The kernel id's digest.
    pub digest: u128,
    /// The latest key the kernel was stored under.
    pub stored: Option<Seen>,
    /// The latest key a lookup of the kernel missed under.
    pub asked: Option<Seen>,
    /// What [`stored`](Self::stored) was when that lookup missed: comparing
    /// the two names what changed (P9).
    pub held_at_miss: Option<Seen>,
}

impl KernelHistory {
    pub(crate) fn seal(&self) -> Vec<u8> {
        seal(HISTORY_TAG, self)
    }

    pub(crate) fn open(sealed: &[u8]) -> Result<Self, String> {
        open(HISTORY_TAG, sealed)
    }
}

/// The targets file: the key components of every compiler that stored here.
pub(crate) fn seal_targets(targets: &[kiln_engine::KeyComponents]) -> Vec<u8> {
    seal(TARGETS_TAG, targets)
}

pub(crate) fn open_targets(sealed: &[u8]) -> Result<Vec<kiln_engine::KeyComponents>, String> {
    open(TARGETS_TAG, sealed)
}

pub(crate) fn encode<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, bincode::config::standard())
        .expect("the store's own types always serialize")
}

/// `value` as [`encode`] writes it, in `buffer` when it fits: a lookup
/// encodes its key on every call.
pub(crate) fn encode_into<'a, T: Serialize + ?Sized>(
    value: &T,
    buffer: &'a mut [u8],
) -> std::borrow::Cow<'a, [u8]> {
    match bincode::serde::encode_into_slice(value, &mut *buffer, bincode::config::standard()) {
        Ok(written) => std::borrow::Cow::Borrowed(&buffer[..written]),
        Err(_) => std::borrow::Cow::Owned(encode(value)),
    }
}

pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    match bincode::serde::decode_from_slice(bytes, bincode::config::standard()) {
        Ok((value, read)) if read == bytes.len() => Ok(value),
        Ok(_) => Err("bytes left over after the payload".into()),
        Err(error) => Err(format!("does not decode: {error}")),
    }
}

fn seal<T: Serialize + ?Sized>(tag: &[u8; 8], value: &T) -> Vec<u8> {
    envelope::seal(tag, &encode(value))
}

fn open<T: DeserializeOwned>(tag: &[u8; 8], sealed: &[u8]) -> Result<T, String> {
    decode(envelope::open(tag, sealed)?)
}

/// Seconds since the Unix epoch.
pub(crate) fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// Artifacts at least this large are digested on several threads.
const PARALLEL_DIGEST: usize = 4 << 20;

/// Artifacts at most this large are also kept inline in their kernel's
/// record, so that a hit opens one file instead of two. Beyond it, the
/// second open is a small part of reading and digesting the bytes, and the
/// copy would cost more disk than it saves time (see
/// `docs/design/store.md`).
pub(crate) const INLINE_MAX: usize = 16 << 10;

/// The BLAKE3 digest of `bytes`, on several threads when they are large.
pub(crate) fn digest(bytes: &[u8]) -> [u8; 32] {
    if bytes.len() >= PARALLEL_DIGEST {
        *blake3::Hasher::new()
            .update_rayon(bytes)
            .finalize()
            .as_bytes()
    } else {
        *blake3::hash(bytes).as_bytes()
    }
}

/// Whether the record of `key` carries a copy of its artifact of `size`
/// bytes (inline). Only a kernel's own record does: the warm path looks
/// kernels up by id, and a source record is read only after a miss by id,
/// in a batch that lowers the kernel anyway.
pub(crate) fn is_inlined(key: &StoreKey, size: u64) -> bool {
    key.kernel().is_some() && size <= INLINE_MAX as u64
}

/// The file `record` of `bytes` is published as, and whether it carries
/// them.
pub(crate) fn record_file(record: &Record, bytes: &[u8]) -> (Vec<u8>, bool) {
    if is_inlined(&record.key, record.size) {
        (record.seal_inline(bytes), true)
    } else {
        (record.seal(), false)
    }
}

#[cfg(test)]
mod tests {
    use kiln_engine::fake::{FakeCompiler, FakeKernel};

    use super::*;

    fn key(number: u32) -> StoreKey {
        StoreKey::for_artifact(
            &FakeCompiler::default_key_components(),
            &FakeKernel::new(number).artifact_id(),
            None,
        )
    }

    fn record(number: u32, bytes: &[u8]) -> Record {
        Record::new(
            key(number),
            *blake3::hash(bytes).as_bytes(),
            bytes.len() as u64,
            Duration::from_millis(5),
        )
    }

    #[test]
    fn a_record_of_the_key_asked_for_is_recognized_without_decoding_its_key() {
        // P2: `check` compares the key's bytes where `open_any` decodes.
        let bytes = b"artifact bytes";
        let record = record(1, bytes);
        let expected = record.pointer();
        let encoded = encode(&record.key);
        assert_eq!(check(&record.seal(), &encoded), Checked::Pointer(expected));
        let inline = record.seal_inline(bytes);
        assert!(inline.starts_with(bytes), "the bytes come first");
        assert_eq!(check(&inline, &encoded), Checked::Inline(expected));
        assert_eq!(
            Record::open_any(&inline),
            Ok((record.clone(), Some(&bytes[..])))
        );
        assert_eq!(Record::open_any(&record.seal()), Ok((record, None)));
    }

    #[test]
    fn a_key_encodes_the_same_in_a_buffer_of_any_size() {
        let key = key(1);
        for size in [0, 8, 4096] {
            let mut buffer = vec![0u8; size];
            assert_eq!(&*encode_into(&key, &mut buffer), &encode(&key)[..]);
        }
    }

    #[test]
    fn a_record_of_another_key_or_damaged_is_not_taken() {
        // P2
        let bytes = b"artifact bytes";
        let record = record(1, bytes);
        let other = encode(&key(2));
        assert_eq!(check(&record.seal(), &other), Checked::Other);
        assert_eq!(check(&record.seal_inline(bytes), &other), Checked::Other);
        let encoded = encode(&record.key);
        let mut flipped = record.seal_inline(bytes);
        flipped[3] ^= 1;
        assert_eq!(check(&flipped, &encoded), Checked::Other);
        assert!(Record::open_any(&flipped).is_err());
        let mut longer = record.clone();
        longer.size += 1;
        let lying = envelope::seal_trailing(INLINE_TAG, bytes, &encode(&longer));
        assert_eq!(check(&lying, &encode(&longer.key)), Checked::Other);
        assert!(Record::open_any(&lying).unwrap_err().contains("carries"));
        assert!(Record::open_any(&[]).is_err());
    }
}
