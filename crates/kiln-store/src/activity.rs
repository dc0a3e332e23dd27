//! What every process that used a store did with it, summed across
//! processes and kept in one small file at its root (`activity`), like
//! `ccache -s`: hits, misses, compiles, failures, compile time spent and
//! saved, per backend.
//!
//! Each process adds up its own counts in memory and merges them into the
//! file at the end of every batch and when its store is dropped, under the
//! file's own lock (`flock`, which the kernel drops with a dead process).
//! The file holds two copies of the totals in two fixed slots, each sealed
//! with a sequence number and a check word; a merge writes the slot that
//! does not hold the newest totals, so a process killed in the middle of a
//! write tears only that slot and the other still reads; a slot whose
//! sequence no writer could have counted to reads as torn
//! ([`sealed::plausible_sequences`]). The file never
//! grows: two slots of [`SLOT`] bytes, and at most [`MAX_BACKENDS`]
//! backends. A count that cannot be merged (the lock stays taken, the disk
//! is full) stays in memory for the next merge, and never fails a launch.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::sealed::{self, FileLock};

/// The tag each slot starts with.
const TAG: &[u8; 8] = b"kilnact1";
/// The bytes of one slot: tag, sequence, length, totals, check word.
pub(crate) const SLOT: usize = 4096;
/// The most backends the file keeps apart; counts of others are added to
/// the last one kept, `other`.
pub(crate) const MAX_BACKENDS: usize = 16;
/// The longest backend name kept.
const MAX_NAME: usize = 32;

/// What the processes that used a store did with it, per backend, since
/// [`since`](Self::since).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Activity {
    /// When the counts started (the store's first count, or the last
    /// `kiln stats --zero`), in seconds since the Unix epoch; 0 when nothing
    /// was counted yet.
    pub since: u64,
    /// One entry per backend, in the order they were first counted.
    pub backends: Vec<BackendActivity>,
}

/// One backend's counts in an [`Activity`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendActivity {
    /// The backend, as its keys name it: `cuda`, `hip`, `wgpu`.
    pub backend: String,
    /// Kernels found in the store by their id: no compile.
    pub hits: u64,
    /// Kernels found by their lowered source (another kernel's artifact,
    /// P7), or given the artifact of a kernel of the same batch with the
    /// same text: no compile.
    pub rekeyed: u64,
    /// Kernels looked up by id and not found, counted once per batch: each
    /// was compiled, rekeyed or failed.
    pub misses: u64,
    /// Artifacts compiled and given to the store.
    pub compiles: u64,
    /// Compiles that failed and were remembered (P11).
    pub failures: u64,
    /// Failures reported from the store's memory without compiling (P11).
    pub failures_remembered: u64,
    /// Nanoseconds of compile work of [`compiles`](Self::compiles).
    pub compile_nanos: u64,
    /// Nanoseconds of compile work that hits and rekeyed kernels did not
    /// spend: what compiling them took when they were stored.
    pub saved_nanos: u64,
}

impl BackendActivity {
    /// Counts of `backend`, all zero.
    pub(crate) fn named(backend: &str) -> Self {
        Self {
            backend: backend.chars().take(MAX_NAME).collect(),
            ..Self::default()
        }
    }

    /// Adds `other`'s counts to these.
    pub(crate) fn add(&mut self, other: &Self) {
        self.hits += other.hits;
        self.rekeyed += other.rekeyed;
        self.misses += other.misses;
        self.compiles += other.compiles;
        self.failures += other.failures;
        self.failures_remembered += other.failures_remembered;
        self.compile_nanos = self.compile_nanos.saturating_add(other.compile_nanos);
        self.saved_nanos = self.saved_nanos.saturating_add(other.saved_nanos);
    }

    /// Whether nothing is counted.
    pub(crate) fn is_zero(&self) -> bool {
        *self == Self::named(&self.backend)
    }
}

impl Activity {
    /// The counts of `backend`, made when it has none yet; past
    /// [`MAX_BACKENDS`], those of `other`.
    pub(crate) fn backend_mut(&mut self, backend: &str) -> &mut BackendActivity {
        let name: String = backend.chars().take(MAX_NAME).collect();
        let name = if self.backends.iter().any(|entry| entry.backend == name)
            || self.backends.len() < MAX_BACKENDS - 1
        {
            name
        } else {
            "other".to_owned()
        };
        let index = match self.backends.iter().position(|entry| entry.backend == name) {
            Some(index) => index,
            None => {
                self.backends.push(BackendActivity::named(&name));
                self.backends.len() - 1
            }
        };
        &mut self.backends[index]
    }

    /// Adds every count of `other`.
    pub(crate) fn add(&mut self, other: &Self) {
        for counts in &other.backends {
            self.backend_mut(&counts.backend).add(counts);
        }
    }

    /// Whether nothing is counted.
    pub(crate) fn is_zero(&self) -> bool {
        self.backends.iter().all(BackendActivity::is_zero)
    }
}

/// The `activity` file at a store's root.
#[derive(Debug)]
pub(crate) struct ActivityFile {
    file: File,
}

impl ActivityFile {
    /// Opens the file at `path`, made when missing.
    pub(crate) fn open(path: &Path) -> io::Result<Self> {
        Ok(Self {
            file: sealed::open_root_file(path)?,
        })
    }

    /// The totals in the file at `path` without writing anything: nothing
    /// when it is missing or holds no whole slot; nothing, said once
    /// ([`sealed::report_once`]), when it is not a regular file or cannot
    /// be read.
    pub(crate) fn read_at(path: &Path) -> Activity {
        match sealed::open_root_file_to_read(path) {
            Ok(file) => file
                .and_then(|file| newest(&file))
                .map(|(_, activity)| activity)
                .unwrap_or_default(),
            Err(error) => {
                sealed::report_once(path, "read the activity totals in", &error);
                Activity::default()
            }
        }
    }

    /// Adds `counts` to the totals, under the file's lock.
    pub(crate) fn merge(&self, counts: &Activity, now: u64) -> io::Result<()> {
        self.replace(|mut totals| {
            if totals.since == 0 {
                totals.since = now;
            }
            totals.add(counts);
            totals
        })
    }

    /// Sets every total to zero, counting again from `now`.
    pub(crate) fn zero(&self, now: u64) -> io::Result<()> {
        self.replace(|_| Activity {
            since: now,
            backends: Vec::new(),
        })
    }

    /// Writes `change(totals)` over the totals, under the file's lock.
    fn replace(&self, change: impl FnOnce(Activity) -> Activity) -> io::Result<()> {
        let _lock = FileLock::take(&self.file)?;
        let (slot, sequence, totals) = match newest(&self.file) {
            Some(((slot, sequence), totals)) => (1 - slot, sequence + 1, totals),
            None => (0, 1, Activity::default()),
        };
        let sealed = seal(sequence, &change(totals))?;
        crate::file_size::within_file_size_limit((SLOT * 2) as u64)?;
        self.file.write_all_at(&sealed, (slot * SLOT) as u64)
    }
}

/// The newest whole slot of `file` a writer could have written:
/// `((slot, sequence), totals)`.
fn newest(file: &File) -> Option<((usize, u64), Activity)> {
    let slots: Vec<Option<(u64, Activity)>> = (0..2)
        .map(|slot| {
            let mut bytes = vec![0u8; SLOT];
            file.read_exact_at(&mut bytes, (slot * SLOT) as u64).ok()?;
            open(&bytes)
        })
        .collect();
    let sequences: Vec<u64> = slots
        .iter()
        .map(|slot| slot.as_ref().map_or(0, |(sequence, _)| *sequence))
        .collect();
    let plausible = sealed::plausible_sequences(&sequences, 2);
    slots
        .into_iter()
        .enumerate()
        .zip(plausible)
        .filter_map(|((slot, found), plausible)| {
            let (sequence, totals) = found.filter(|_| plausible > 0)?;
            Some(((slot, sequence), totals))
        })
        .max_by_key(|((_, sequence), _)| *sequence)
}

/// A slot holding `totals` as the `sequence`th write, padded to [`SLOT`].
fn seal(sequence: u64, totals: &Activity) -> io::Result<Vec<u8>> {
    let encoded = bincode::serde::encode_to_vec(totals, bincode::config::standard())
        .map_err(io::Error::other)?;
    let mut bytes = sealed::seal(TAG, sequence, &encoded);
    if bytes.len() > SLOT {
        return Err(io::Error::other("the activity totals outgrew their slot"));
    }
    bytes.resize(SLOT, 0);
    Ok(bytes)
}

/// The sequence and totals of a whole slot; `None` for a torn, empty or
/// foreign one.
fn open(bytes: &[u8]) -> Option<(u64, Activity)> {
    if bytes.len() != SLOT {
        return None;
    }
    let (sequence, payload) = sealed::open(TAG, bytes)?;
    let (totals, read): (Activity, usize) =
        bincode::serde::decode_from_slice(payload, bincode::config::standard()).ok()?;
    (read == payload.len()).then_some((sequence, totals))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(backend: &str, hits: u64) -> Activity {
        let mut activity = Activity::default();
        activity.backend_mut(backend).hits = hits;
        activity
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let folder =
            std::env::temp_dir().join(format!("kiln-activity-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&folder);
        std::fs::create_dir_all(&folder).expect("a scratch folder");
        folder.join("activity")
    }

    #[test]
    fn merges_add_up_and_zero_starts_again() {
        // S4: the totals of every process, kept across them.
        let path = scratch("merge");
        let first = ActivityFile::open(&path).expect("opens");
        let second = ActivityFile::open(&path).expect("opens");
        first.merge(&counts("cuda", 2), 100).expect("merged");
        second.merge(&counts("cuda", 3), 200).expect("merged");
        second.merge(&counts("hip", 1), 300).expect("merged");
        let totals = ActivityFile::read_at(&path);
        assert_eq!(totals.since, 100, "counted from the first merge");
        assert_eq!(totals.backends.len(), 2);
        assert_eq!(totals.backends[0].hits, 5);
        assert_eq!(totals.backends[1].backend, "hip");
        first.zero(400).expect("zeroed");
        assert_eq!(
            ActivityFile::read_at(&path),
            Activity {
                since: 400,
                backends: Vec::new()
            }
        );
        assert_eq!(
            std::fs::metadata(&path).expect("a file").len(),
            (SLOT * 2) as u64,
            "two slots, never more"
        );
        let _ = std::fs::remove_dir_all(path.parent().expect("a folder"));
    }

    #[test]
    fn a_torn_write_leaves_the_totals_before_it() {
        // P3: a process killed while writing loses its own merge only.
        let path = scratch("torn");
        let file = ActivityFile::open(&path).expect("opens");
        file.merge(&counts("cuda", 2), 1).expect("merged");
        file.merge(&counts("cuda", 3), 1).expect("merged");
        // The newest is in slot 1; tear it.
        let torn = File::options().write(true).open(&path).expect("opens");
        torn.write_all_at(&[0xff; 64], (SLOT + 20) as u64)
            .expect("torn");
        assert_eq!(ActivityFile::read_at(&path).backends[0].hits, 2);
        file.merge(&counts("cuda", 1), 1)
            .expect("merged over the torn slot");
        assert_eq!(ActivityFile::read_at(&path).backends[0].hits, 3);
        std::fs::write(&path, b"garbage").expect("overwritten");
        assert_eq!(ActivityFile::read_at(&path), Activity::default());
        let _ = std::fs::remove_dir_all(path.parent().expect("a folder"));
    }

    #[test]
    fn one_forged_slot_with_the_highest_sequence_freezes_nothing() {
        // A slot sealed whole with a sequence no writer counted to: the
        // totals go on counting, and it is written over.
        let path = scratch("forged");
        let file = ActivityFile::open(&path).expect("opens");
        file.merge(&counts("cuda", 2), 1).expect("merged");
        let forged = File::options().write(true).open(&path).expect("opens");
        forged
            .write_all_at(
                &seal(u64::MAX, &counts("cuda", 1000)).expect("sealed"),
                SLOT as u64,
            )
            .expect("forged");
        file.merge(&counts("cuda", 3), 1).expect("merged");
        assert_eq!(ActivityFile::read_at(&path).backends[0].hits, 5);
        file.merge(&counts("cuda", 1), 1).expect("merged");
        assert_eq!(ActivityFile::read_at(&path).backends[0].hits, 6);
        let _ = std::fs::remove_dir_all(path.parent().expect("a folder"));
    }

    #[test]
    fn a_link_or_a_fifo_in_its_place_is_neither_followed_nor_read() {
        // Nothing is written that is not the store's, and nothing hangs.
        let path = scratch("link");
        let target = path.with_file_name("elsewhere");
        std::fs::write(&target, b"not the store's").expect("a file");
        std::os::unix::fs::symlink(&target, &path).expect("a link");
        assert!(ActivityFile::open(&path).is_err());
        assert_eq!(ActivityFile::read_at(&path), Activity::default());
        assert_eq!(std::fs::read(&target).expect("read"), b"not the store's");
        std::fs::remove_file(&path).expect("removed");
        let fifo = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("a path");
        // SAFETY: `fifo` is a valid C string for the call.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert!(ActivityFile::open(&path).is_err(), "a FIFO is refused");
        assert_eq!(
            ActivityFile::read_at(&path),
            Activity::default(),
            "without hanging"
        );
        let _ = std::fs::remove_dir_all(path.parent().expect("a folder"));
    }

    #[test]
    fn backends_past_the_limit_are_counted_as_other() {
        // The file never grows without bound.
        let mut activity = Activity::default();
        for number in 0..40 {
            activity.backend_mut(&format!("backend-{number}")).hits += 1;
        }
        assert_eq!(activity.backends.len(), MAX_BACKENDS);
        let other = activity.backends.last().expect("other");
        assert_eq!(other.backend, "other");
        assert_eq!(other.hits, 40 - (MAX_BACKENDS as u64 - 1));
        seal(1, &activity).expect("fits in a slot");
        let long = "x".repeat(500);
        assert_eq!(activity.backend_mut(&long).backend, "other");
    }
}
