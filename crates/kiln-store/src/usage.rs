//! How much a store holds, kept in one small file that every put and every
//! removal adjusts, so that checking a limit costs a read, not a walk.
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

const TAG: &[u8; 8] = b"kilnuse1";
const LENGTH: usize = 32;

/// What a store holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Bytes of objects and records.
    pub bytes: u64,
    /// Objects: distinct artifacts.
    pub entries: u64,
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

    /// The counts, zero when the file is new or damaged.
    pub(crate) fn read(&self) -> Usage {
        let mut bytes = [0u8; LENGTH];
        let Some(file) = &self.file else {
            return Usage::default();
        };
        if file.read_exact_at(&mut bytes, 0).is_err() || &bytes[..8] != TAG {
            return Usage::default();
        }
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        if word(24) != check(word(8), word(16)) {
            return Usage::default();
        }
        Usage {
            bytes: word(8),
            entries: word(16),
        }
    }

    /// Adds the deltas, under the usage lock.
    pub(crate) fn adjust(
        &self,
        locks: &Arc<LockFile>,
        bytes: i64,
        entries: i64,
    ) -> io::Result<Usage> {
        let _guard = lock(locks)?;
        let current = self.read();
        let next = Usage {
            bytes: current.bytes.saturating_add_signed(bytes),
            entries: current.entries.saturating_add_signed(entries),
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
        crate::disk::within_file_size_limit(LENGTH as u64)?;
        let mut bytes = [0u8; LENGTH];
        bytes[..8].copy_from_slice(TAG);
        bytes[8..16].copy_from_slice(&usage.bytes.to_le_bytes());
        bytes[16..24].copy_from_slice(&usage.entries.to_le_bytes());
        bytes[24..].copy_from_slice(&check(usage.bytes, usage.entries).to_le_bytes());
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
fn check(bytes: u64, entries: u64) -> u64 {
    let mut input = [0u8; 16];
    input[..8].copy_from_slice(&bytes.to_le_bytes());
    input[8..].copy_from_slice(&entries.to_le_bytes());
    u64::from_le_bytes(
        blake3::hash(&input).as_bytes()[..8]
            .try_into()
            .expect("8 bytes"),
    )
}
