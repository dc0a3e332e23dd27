//! How much a store holds, kept in one small file that every put and every
//! removal adjusts, so that checking a limit costs a read, not a walk.
//!
//! Two byte counts: what the entries hold (their lengths) and what the file
//! system allocated to them (whole blocks). The size limit compares the
//! allocated bytes, which are what the disk loses; a put adds its estimate
//! (each file rounded up to a block, a packed frame as it is) and a recount
//! reads the blocks.
//!
//! The counts are exact after `verify` or `gc`, which recount, and may
//! drift between them by what a killed process had written and not counted:
//! they decide when to evict, and eviction recounts.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::lock::{LockFile, Mode, SlotGuard, USAGE_SLOT};

const TAG: &[u8; 8] = b"kilnuse2";
const LENGTH: usize = 40;
/// The counters before they held allocated bytes: read, and rewritten as
/// the current ones by the next change.
const TAG_1: &[u8; 8] = b"kilnuse1";
const LENGTH_1: usize = 32;

/// The block a file's bytes are allocated in, for a put's estimate: 4 KiB
/// on every common Linux file system. A recount reads the real blocks.
pub(crate) const BLOCK: u64 = 4096;

/// What a file of `length` bytes is estimated to take on disk.
pub(crate) fn file_allocation(length: u64) -> u64 {
    length.div_ceil(BLOCK) * BLOCK
}

/// What a store holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Bytes of objects and records: what they hold.
    pub bytes: u64,
    /// Objects: distinct artifacts.
    pub entries: u64,
    /// Bytes the file system allocated to the objects and records (whole
    /// blocks; the packs' files): what the size limit compares.
    #[serde(default)]
    pub allocated_bytes: u64,
}

/// A change of the counts: what a put added or a removal took away.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Delta {
    pub(crate) bytes: i64,
    pub(crate) entries: i64,
    pub(crate) allocated_bytes: i64,
}

impl Delta {
    /// `bytes` held in `allocated_bytes` on disk, making `entries` new
    /// entries (negative: removed).
    pub(crate) fn of(bytes: u64, allocated_bytes: u64, entries: i64) -> Self {
        let signed = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
        Self {
            bytes: signed(bytes),
            entries,
            allocated_bytes: signed(allocated_bytes),
        }
    }

    /// The same change, taken away.
    pub(crate) fn removed(self) -> Self {
        Self {
            bytes: -self.bytes,
            entries: -self.entries,
            allocated_bytes: -self.allocated_bytes,
        }
    }
}

#[derive(Debug)]
pub(crate) struct UsageFile {
    /// `None` for a read-only store whose root holds no usage file: it
    /// holds nothing that was counted.
    file: Option<File>,
    /// Whether the file may be written: a read-only store's is only read.
    writable: bool,
}

impl UsageFile {
    pub(crate) fn open(path: &Path) -> io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        Ok(Self {
            file: Some(file),
            writable: true,
        })
    }

    /// The counts of a read-only store, read and never written.
    pub(crate) fn open_read_only(path: &Path) -> io::Result<Self> {
        let file = match File::open(path) {
            Ok(file) => Some(file),
            Err(error) if error.kind() == io::ErrorKind::NotFound => None,
            Err(error) => return Err(error),
        };
        Ok(Self {
            file,
            writable: false,
        })
    }

    /// The counts, zero when the file is new or damaged. Counters of the
    /// first format count no allocation: their bytes stand for it until
    /// the next recount.
    pub(crate) fn read(&self) -> Usage {
        let mut bytes = [0u8; LENGTH];
        let Some(file) = &self.file else {
            return Usage::default();
        };
        let word = |bytes: &[u8], at: usize| {
            u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
        };
        if file.read_exact_at(&mut bytes[..LENGTH_1], 0).is_err() {
            return Usage::default();
        }
        if &bytes[..8] == TAG_1 {
            let (held, entries) = (word(&bytes, 8), word(&bytes, 16));
            if word(&bytes, 24) != check(&[held, entries]) {
                return Usage::default();
            }
            return Usage {
                bytes: held,
                entries,
                allocated_bytes: held,
            };
        }
        if &bytes[..8] != TAG || file.read_exact_at(&mut bytes, 0).is_err() {
            return Usage::default();
        }
        let usage = Usage {
            bytes: word(&bytes, 8),
            entries: word(&bytes, 16),
            allocated_bytes: word(&bytes, 24),
        };
        if word(&bytes, 32) != check(&[usage.bytes, usage.entries, usage.allocated_bytes]) {
            return Usage::default();
        }
        usage
    }

    /// Adds the deltas, under the usage lock.
    pub(crate) fn adjust(&self, locks: &Arc<LockFile>, delta: Delta) -> io::Result<Usage> {
        let _guard = lock(locks)?;
        let current = self.read();
        let next = Usage {
            bytes: current.bytes.saturating_add_signed(delta.bytes),
            entries: current.entries.saturating_add_signed(delta.entries),
            allocated_bytes: current
                .allocated_bytes
                .saturating_add_signed(delta.allocated_bytes),
        };
        self.write(next)?;
        Ok(next)
    }

    /// Replaces the counts with a recount.
    pub(crate) fn set(&self, locks: &Arc<LockFile>, usage: Usage) -> io::Result<()> {
        let _guard = lock(locks)?;
        self.write(usage)
    }

    fn write(&self, usage: Usage) -> io::Result<()> {
        let file = match &self.file {
            Some(file) if self.writable => file,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::ReadOnlyFilesystem,
                    "the store is read-only",
                ));
            }
        };
        crate::file_size::within_file_size_limit(LENGTH as u64)?;
        let mut bytes = [0u8; LENGTH];
        bytes[..8].copy_from_slice(TAG);
        bytes[8..16].copy_from_slice(&usage.bytes.to_le_bytes());
        bytes[16..24].copy_from_slice(&usage.entries.to_le_bytes());
        bytes[24..32].copy_from_slice(&usage.allocated_bytes.to_le_bytes());
        let words = [usage.bytes, usage.entries, usage.allocated_bytes];
        bytes[32..].copy_from_slice(&check(&words).to_le_bytes());
        file.write_all_at(&bytes, 0)
    }
}

/// The usage lock, held while the counters are read and written; given up
/// after two seconds, as a count is only an estimate between recounts.
fn lock(locks: &Arc<LockFile>) -> io::Result<SlotGuard> {
    locks
        .acquire(
            USAGE_SLOT,
            Mode::Exclusive,
            Some(Instant::now() + Duration::from_secs(2)),
        )?
        .ok_or_else(|| io::Error::other("the usage counters stayed locked"))
}

/// A check word, so a torn write of the counters reads as zero rather than
/// as a wild number that would evict everything.
fn check(words: &[u64]) -> u64 {
    let input: Vec<u8> = words.iter().flat_map(|word| word.to_le_bytes()).collect();
    u64::from_le_bytes(
        blake3::hash(&input).as_bytes()[..8]
            .try_into()
            .expect("8 bytes"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    // A store's counters from before allocated bytes were counted read as
    // their lengths until the next recount, never as zero (which would
    // stop eviction) nor as a wild number.
    #[test]
    fn counters_of_the_first_format_read_with_their_bytes_as_allocated() {
        let path = std::env::temp_dir().join(format!("kiln-usage-v1-{}", std::process::id()));
        let mut bytes = [0u8; LENGTH_1];
        bytes[..8].copy_from_slice(TAG_1);
        bytes[8..16].copy_from_slice(&5000u64.to_le_bytes());
        bytes[16..24].copy_from_slice(&7u64.to_le_bytes());
        bytes[24..].copy_from_slice(&check(&[5000, 7]).to_le_bytes());
        std::fs::write(&path, bytes).expect("written");
        let usage = UsageFile::open(&path).expect("opens").read();
        assert_eq!(
            usage,
            Usage {
                bytes: 5000,
                entries: 7,
                allocated_bytes: 5000
            }
        );
        let file = UsageFile::open(&path).expect("opens");
        let next = Usage {
            allocated_bytes: 8192,
            ..usage
        };
        file.write(next).expect("writes");
        assert_eq!(file.read(), next, "rewritten in the current format");
        std::fs::write(&path, [0xffu8; LENGTH]).expect("damaged");
        assert_eq!(
            file.read(),
            Usage::default(),
            "a damaged file reads as zero"
        );
        let _ = std::fs::remove_file(&path);
    }
}
