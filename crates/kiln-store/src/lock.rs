//! Locks across processes and threads, one byte each in the store's `locks`
//! file.
//!
//! A lock is a byte-range lock on one byte of one shared file, at an offset
//! taken from what it guards (a key's digest, an object's digest, a fixed
//! slot for a counter). The kernel keeps these locks, so:
//!
//! - a process that dies, however it dies, releases all its locks: a lock
//!   left by a dead process never blocks anyone (P4);
//! - taking one is one `fcntl`, with no file created or removed per key, so
//!   locks leave nothing behind and cost no inodes;
//! - readers take shared locks and writers exclusive ones on the same byte,
//!   which is how eviction sees that an object is being read (P6).
//!
//! On Linux the locks are open-file-description locks (`F_OFD_SETLK`),
//! owned by the store's one open `locks` file rather than by the process.
//! Threads of one process share that file, and a byte-range lock does not
//! exclude its own owner, so a table in the process counts readers and
//! marks writers per byte; the kernel's lock is taken when the first
//! holder in the process arrives and released when the last leaves.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::config::MAX_LOCK_TIMEOUT;

/// How long a publisher waits for an object that is being removed.
pub(crate) const PIN_WAIT: Duration = Duration::from_secs(2);

/// Slot of the usage counters.
pub(crate) const USAGE_SLOT: u64 = 1;
/// Slot of the targets list.
pub(crate) const TARGETS_SLOT: u64 = 2;
/// The maintenance lock: held by whoever runs a pass that moves or removes
/// entries (collect, which packs and evicts; verify, which removes what is
/// bad), so two never run at once and neither sees the other's half-done
/// moves.
pub(crate) const COLLECT_SLOT: u64 = 3;

/// What a lock lets its holder do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Read: any number at once.
    Shared,
    /// Write or remove: alone.
    Exclusive,
}

/// The slot of a key's lock: held by the process compiling it.
pub(crate) fn key_slot(key_digest: &[u8; 32]) -> u64 {
    region_slot(1, key_digest)
}

/// The slot of an object's lock: shared by readers and publishers, taken
/// alone by whoever removes it.
pub(crate) fn object_slot(object: &[u8; 32]) -> u64 {
    region_slot(2, object)
}

/// The slot guarding a key's lease record: held only while the record is
/// read and written, never while compiling.
pub(crate) fn lease_slot(key_digest: &[u8; 32]) -> u64 {
    region_slot(3, key_digest)
}

/// The slot of a pack shard's lock: held alone by whoever appends to the
/// shard or rewrites it; readers take none.
pub(crate) fn pack_slot(shard: usize) -> u64 {
    (4 << 60) | shard as u64
}

/// A key's lease (P12), kept as 32 bytes of the `locks` file's content (the
/// locks themselves take no bytes), in one of 65,536 buckets: the key's
/// tag, its holder's mark and when the lease runs out unless renewed, in
/// milliseconds since the Unix epoch (0: released). Two keys sharing a
/// bucket overwrite each other's record; a record of another key is read
/// as "no lease known", so the waiter waits for the lock as before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct LeaseRecord {
    pub(crate) tag: u64,
    pub(crate) holder: u64,
    pub(crate) expires_ms: u64,
}

const LEASE_BUCKETS: u64 = 1 << 16;
const LEASE_RECORD: u64 = 32;

fn lease_offset(key_digest: &[u8; 32]) -> u64 {
    let bucket = u64::from(u16::from_le_bytes([key_digest[8], key_digest[9]]));
    (bucket % LEASE_BUCKETS) * LEASE_RECORD
}

/// The tag a key's lease record carries: never 0, which no key has.
pub(crate) fn lease_tag(key_digest: &[u8; 32]) -> u64 {
    u64::from_le_bytes(key_digest[16..24].try_into().expect("8 bytes")) | 1
}

/// Regions keep keys and objects apart in the file; 60 bits of digest make
/// two different keys sharing a byte vanishingly rare, and if they did, the
/// cost would be one waiting for the other, never a wrong artifact.
fn region_slot(region: u64, digest: &[u8; 32]) -> u64 {
    let bits = u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"));
    (region << 60) | (bits & ((1 << 60) - 1))
}

#[derive(Debug, Default)]
struct Holders {
    readers: usize,
    writer: bool,
}

/// The store's `locks` file and the table of what this process holds in it.
#[derive(Debug)]
pub(crate) struct LockFile {
    /// `None` for a read-only store, which has no file it may write locks
    /// into (a write lock needs a descriptor open for writing): it writes
    /// nothing, so only its own threads need keeping apart, and the table
    /// does that.
    file: Option<File>,
    held: Mutex<HashMap<u64, Holders>>,
    released: Condvar,
}

/// A held lock, released on drop.
#[derive(Debug)]
pub(crate) struct SlotGuard {
    locks: Arc<LockFile>,
    slot: u64,
    mode: Mode,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.locks.release(self.slot, self.mode);
    }
}

impl LockFile {
    pub(crate) fn open(path: &Path) -> io::Result<Arc<Self>> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        Ok(Self::of(file))
    }

    /// Locks in `file`, the store's `locks` file, already open for writing.
    pub(crate) fn of(file: File) -> Arc<Self> {
        Self::with_file(Some(file))
    }

    /// Locks that keep this process's threads apart only: for a read-only
    /// store, which never publishes nor removes anything another process
    /// could be reading.
    pub(crate) fn in_process() -> Arc<Self> {
        Self::with_file(None)
    }

    fn with_file(file: Option<File>) -> Arc<Self> {
        Arc::new(Self {
            file,
            held: Mutex::new(HashMap::new()),
            released: Condvar::new(),
        })
    }

    /// Takes `slot` in `mode`, trying until `deadline`, or once when there is
    /// none. `Ok(None)` when someone else held it throughout.
    pub(crate) fn acquire(
        self: &Arc<Self>,
        slot: u64,
        mode: Mode,
        deadline: Option<Instant>,
    ) -> io::Result<Option<SlotGuard>> {
        let mut pause = Duration::from_millis(1);
        loop {
            let mut held = self.table();
            let holders = held.entry(slot).or_default();
            let free_here = match mode {
                Mode::Shared => !holders.writer,
                Mode::Exclusive => !holders.writer && holders.readers == 0,
            };
            if free_here {
                let taken = if mode == Mode::Shared && holders.readers > 0 {
                    // Another thread of this process already holds the
                    // kernel's shared lock for all of them.
                    true
                } else {
                    self.try_lock(slot, mode)?
                };
                if taken {
                    match mode {
                        Mode::Shared => holders.readers += 1,
                        Mode::Exclusive => holders.writer = true,
                    }
                    return Ok(Some(SlotGuard {
                        locks: Arc::clone(self),
                        slot,
                        mode,
                    }));
                }
            }
            let remaining =
                deadline.and_then(|deadline| deadline.checked_duration_since(Instant::now()));
            let Some(remaining) = remaining.filter(|remaining| !remaining.is_zero()) else {
                if held.get(&slot).is_some_and(|h| h.readers == 0 && !h.writer) {
                    held.remove(&slot);
                }
                return Ok(None);
            };
            let wait = pause.min(remaining);
            if free_here {
                // Another process holds it: the kernel will not tell us when
                // it lets go, so look again shortly.
                drop(held);
                std::thread::sleep(wait);
            } else {
                let _unused = self
                    .released
                    .wait_timeout(held, wait)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
            }
            pause = (pause * 2).min(Duration::from_millis(16));
        }
    }

    fn release(&self, slot: u64, mode: Mode) {
        let mut held = self.table();
        let Some(holders) = held.get_mut(&slot) else {
            return;
        };
        let last = match mode {
            Mode::Shared => {
                holders.readers -= 1;
                holders.readers == 0
            }
            Mode::Exclusive => {
                holders.writer = false;
                true
            }
        };
        if last {
            if let Err(error) = self.unlock(slot) {
                log::warn!("cannot release a store lock: {error}");
            }
            held.remove(&slot);
        }
        drop(held);
        self.released.notify_all();
    }

    /// The lease record in `key_digest`'s bucket; all zero when none was
    /// written (the file is shorter).
    pub(crate) fn read_lease(&self, key_digest: &[u8; 32]) -> io::Result<LeaseRecord> {
        use std::os::unix::fs::FileExt;
        let Some(file) = &self.file else {
            return Ok(LeaseRecord::default());
        };
        let mut bytes = [0u8; 24];
        let mut read = 0;
        let offset = lease_offset(key_digest);
        while read < bytes.len() {
            match file.read_at(&mut bytes[read..], offset + read as u64) {
                Ok(0) => break,
                Ok(n) => read += n,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        Ok(LeaseRecord {
            tag: word(0),
            holder: word(8),
            expires_ms: word(16),
        })
    }

    /// Writes `record` into `key_digest`'s bucket; the caller holds the
    /// key's [`lease_slot`].
    pub(crate) fn write_lease(&self, key_digest: &[u8; 32], record: LeaseRecord) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let Some(file) = &self.file else {
            return Ok(());
        };
        let mut bytes = [0u8; 24];
        bytes[..8].copy_from_slice(&record.tag.to_le_bytes());
        bytes[8..16].copy_from_slice(&record.holder.to_le_bytes());
        bytes[16..].copy_from_slice(&record.expires_ms.to_le_bytes());
        file.write_all_at(&bytes, lease_offset(key_digest))
    }

    fn table(&self) -> MutexGuard<'_, HashMap<u64, Holders>> {
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn try_lock(&self, slot: u64, mode: Mode) -> io::Result<bool> {
        let kind = match mode {
            Mode::Shared => libc::F_RDLCK,
            Mode::Exclusive => libc::F_WRLCK,
        };
        match self.fcntl(slot, kind) {
            Ok(()) => Ok(true),
            Err(error) if matches!(error.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => {
                Ok(false)
            }
            Err(error) => Err(error),
        }
    }

    fn unlock(&self, slot: u64) -> io::Result<()> {
        self.fcntl(slot, libc::F_UNLCK)
    }

    fn fcntl(&self, slot: u64, kind: libc::c_int) -> io::Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        // SAFETY: `flock` is plain data; all-zero is a valid value, and the
        // fields that matter are set below.
        let mut lock: libc::flock = unsafe { std::mem::zeroed() };
        lock.l_type = kind as libc::c_short;
        lock.l_whence = libc::SEEK_SET as libc::c_short;
        lock.l_start = libc::off_t::try_from(slot).expect("slots are below 2^62");
        lock.l_len = 1;
        loop {
            // SAFETY: the descriptor is open for the life of `self`, and
            // `lock` is a valid `flock` that outlives the call.
            let status = unsafe { libc::fcntl(file.as_raw_fd(), SET_LOCK, &lock) };
            if status == 0 {
                return Ok(());
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }
}

/// Open-file-description locks where the system has them: owned by the
/// open file, not the process, so they behave the same whichever thread
/// takes them.
#[cfg(any(target_os = "linux", target_os = "android"))]
const SET_LOCK: libc::c_int = libc::F_OFD_SETLK;

/// Elsewhere, process-owned POSIX locks: the table above keeps threads of
/// one process apart, and the store keeps its lock file open for its whole
/// life, since closing any descriptor of it would drop them.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const SET_LOCK: libc::c_int = libc::F_SETLK;

/// The instant `wait` from now; a wait longer than a clock can add is cut
/// to the longest lock timeout the environment may set.
pub(crate) fn deadline_after(wait: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(wait)
        .or_else(|| now.checked_add(MAX_LOCK_TIMEOUT))
        .unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_share_and_a_writer_waits_for_them() {
        let dir = std::env::temp_dir().join(format!("kiln-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        let locks = LockFile::open(&dir.join("locks")).expect("a lock file");
        let first = locks
            .acquire(7, Mode::Shared, None)
            .expect("lock")
            .expect("free");
        let second = locks
            .acquire(7, Mode::Shared, None)
            .expect("lock")
            .expect("shared");
        assert!(
            locks
                .acquire(7, Mode::Exclusive, None)
                .expect("lock")
                .is_none()
        );
        drop(first);
        assert!(
            locks
                .acquire(7, Mode::Exclusive, None)
                .expect("lock")
                .is_none()
        );
        drop(second);
        let writer = locks.acquire(7, Mode::Exclusive, None).expect("lock");
        assert!(writer.is_some());
        assert!(
            locks
                .acquire(7, Mode::Shared, None)
                .expect("lock")
                .is_none()
        );
        drop(writer);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
