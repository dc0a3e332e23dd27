//! The `batches` file at a store's root: the records of the last batches of
//! every process that used the store (`kiln records`), so what a slow start
//! spent its time on can be read after the fact.
//!
//! The file is a ring of [`SLOTS`] fixed slots of [`SLOT`] bytes, each a
//! record sealed with a sequence number and a check word. A process keeps a
//! record under the file's lock (`flock`) in the slot holding the oldest
//! (or no) record, numbered one past the newest; so the file never grows
//! past `SLOTS × SLOT` bytes, and a process killed in the middle of a write
//! tears only the slot it was writing, which readers then skip. A slot
//! whose sequence no writer could have counted to is read as torn
//! ([`sealed::plausible_sequences`]). The records are opaque here: the
//! loader encodes them (`kiln_engine::StoredBatch`).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::sealed::{self, FileLock, HEADER, TRAILER};

/// The tag each slot starts with.
const TAG: &[u8; 8] = b"kilnbat1";
/// How many records the file keeps.
pub(crate) const SLOTS: usize = 64;
/// The bytes of one slot: tag, sequence, length, record, check word.
pub(crate) const SLOT: usize = 32 * 1024;
/// The longest record a slot holds.
pub(crate) const RECORD_LIMIT: usize = SLOT - HEADER - TRAILER;

/// The `batches` file at a store's root.
#[derive(Debug)]
pub(crate) struct BatchesFile {
    file: File,
}

impl BatchesFile {
    /// Opens the file at `path`, made when missing; never through a
    /// symbolic link, and only a regular file.
    pub(crate) fn open(path: &Path) -> io::Result<Self> {
        Ok(Self {
            file: sealed::open_root_file(path)?,
        })
    }

    /// Keeps `record` in place of the oldest, under the file's lock.
    ///
    /// # Errors
    ///
    /// The record is larger than [`RECORD_LIMIT`], the lock stays taken, or
    /// the file cannot be written (a full disk, a file size limit).
    pub(crate) fn keep(&self, record: &[u8]) -> io::Result<()> {
        if record.len() > RECORD_LIMIT {
            return Err(io::Error::other("the batch record outgrew its slot"));
        }
        let _lock = FileLock::take(&self.file)?;
        let sequences = sealed::plausible_sequences(&sequences(&self.file), SLOTS as u64);
        let newest = sequences.iter().copied().max().unwrap_or(0);
        let oldest = sequences
            .iter()
            .enumerate()
            .min_by_key(|(_, sequence)| **sequence)
            .map_or(0, |(slot, _)| slot);
        let sealed = sealed::seal(TAG, newest + 1, record);
        crate::file_size::within_file_size_limit(((oldest + 1) * SLOT) as u64)?;
        self.file.write_all_at(&sealed, (oldest * SLOT) as u64)
    }

    /// Every whole record of the file at `path`, oldest first, without
    /// writing anything: none when it is missing or holds no whole slot;
    /// none, said once ([`sealed::report_once`]), when it is not a regular
    /// file or cannot be read.
    pub(crate) fn read_at(path: &Path) -> Vec<Vec<u8>> {
        let file = match sealed::open_root_file_to_read(path) {
            Ok(Some(file)) => file,
            Ok(None) => return Vec::new(),
            Err(error) => {
                sealed::report_once(path, "read the batch records in", &error);
                return Vec::new();
            }
        };
        let slots: Vec<Option<(u64, Vec<u8>)>> = (0..SLOTS)
            .map(|slot| {
                let mut bytes = vec![0u8; SLOT];
                let read = read_up_to(&file, &mut bytes, (slot * SLOT) as u64);
                open(&bytes[..read])
            })
            .collect();
        let sequences: Vec<u64> = slots
            .iter()
            .map(|slot| slot.as_ref().map_or(0, |(sequence, _)| *sequence))
            .collect();
        let plausible = sealed::plausible_sequences(&sequences, SLOTS as u64);
        let mut records: Vec<(u64, Vec<u8>)> = slots
            .into_iter()
            .zip(plausible)
            .filter_map(|(slot, plausible)| slot.filter(|_| plausible > 0))
            .collect();
        records.sort_by_key(|(sequence, _)| *sequence);
        records.into_iter().map(|(_, record)| record).collect()
    }
}

/// The sequence of each slot of `file`; 0 for an empty, torn or foreign
/// one. Reads each slot's header, then only as much of it as its record
/// takes, not the whole slot.
fn sequences(file: &File) -> Vec<u64> {
    let mut bytes = vec![0u8; SLOT];
    (0..SLOTS)
        .map(|slot| {
            let offset = (slot * SLOT) as u64;
            let read = read_up_to(file, &mut bytes[..HEADER], offset);
            let Some(length) = sealed::payload_length(TAG, &bytes[..read])
                .filter(|&length| length <= RECORD_LIMIT)
            else {
                return 0;
            };
            let read = read_up_to(file, &mut bytes[..HEADER + length + TRAILER], offset);
            open(&bytes[..read]).map_or(0, |(sequence, _)| sequence)
        })
        .collect()
}

/// Reads what there is of `bytes.len()` bytes at `offset`: fewer at the
/// end of the file, none past it or on an error.
fn read_up_to(file: &File, bytes: &mut [u8], offset: u64) -> usize {
    let mut filled = 0;
    while filled < bytes.len() {
        match file.read_at(&mut bytes[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    filled
}

/// The sequence and record of a whole slot; `None` for a torn, empty or
/// foreign one, or one never written (sequence 0).
fn open(bytes: &[u8]) -> Option<(u64, Vec<u8>)> {
    let (sequence, record) = sealed::open(TAG, bytes)?;
    (sequence > 0 && record.len() <= RECORD_LIMIT).then(|| (sequence, record.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let folder =
            std::env::temp_dir().join(format!("kiln-batches-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&folder);
        std::fs::create_dir_all(&folder).expect("a scratch folder");
        folder.join("batches")
    }

    #[test]
    fn the_ring_keeps_the_newest_records_in_order_and_never_grows() {
        let path = scratch("ring");
        let first = BatchesFile::open(&path).expect("opens");
        let second = BatchesFile::open(&path).expect("opens");
        for number in 0..(SLOTS + 10) {
            let file = if number % 2 == 0 { &first } else { &second };
            file.keep(format!("record {number}").as_bytes())
                .expect("kept");
        }
        let records = BatchesFile::read_at(&path);
        assert_eq!(records.len(), SLOTS);
        assert_eq!(records[0], b"record 10");
        assert_eq!(
            records.last().map(Vec::as_slice),
            Some(format!("record {}", SLOTS + 9).as_bytes())
        );
        assert!(std::fs::metadata(&path).expect("a file").len() <= (SLOTS * SLOT) as u64);
        let largest = vec![7u8; RECORD_LIMIT];
        first.keep(&largest).expect("the largest record fits");
        assert!(first.keep(&[7u8; RECORD_LIMIT + 1]).is_err());
        assert_eq!(BatchesFile::read_at(&path).last(), Some(&largest));
        let _ = std::fs::remove_dir_all(path.parent().expect("a folder"));
    }

    #[test]
    fn a_torn_or_foreign_slot_is_skipped_and_written_over() {
        // P3: a process killed while writing loses its own record only.
        let path = scratch("torn");
        let file = BatchesFile::open(&path).expect("opens");
        file.keep(b"first").expect("kept");
        file.keep(b"second").expect("kept");
        let torn = File::options().write(true).open(&path).expect("opens");
        torn.write_all_at(b"XX", (SLOT + HEADER) as u64)
            .expect("torn");
        assert_eq!(BatchesFile::read_at(&path), vec![b"first".to_vec()]);
        file.keep(b"third").expect("kept");
        assert_eq!(
            BatchesFile::read_at(&path),
            vec![b"first".to_vec(), b"third".to_vec()]
        );
        std::fs::write(&path, vec![0xAB; 3 * SLOT]).expect("overwritten");
        assert!(BatchesFile::read_at(&path).is_empty());
        file.keep(b"again").expect("kept over garbage");
        assert_eq!(BatchesFile::read_at(&path), vec![b"again".to_vec()]);
        let _ = std::fs::remove_dir_all(path.parent().expect("a folder"));
    }

    #[test]
    fn one_forged_slot_with_the_highest_sequence_freezes_nothing() {
        // A slot sealed whole with a sequence no writer counted to: the
        // records after it are kept and read, and it is written over.
        let path = scratch("forged");
        let file = BatchesFile::open(&path).expect("opens");
        file.keep(b"first").expect("kept");
        let forged = File::options().write(true).open(&path).expect("opens");
        forged
            .write_all_at(&sealed::seal(TAG, u64::MAX, b"forged"), (5 * SLOT) as u64)
            .expect("forged");
        for number in 0..3 {
            file.keep(format!("after {number}").as_bytes())
                .expect("kept");
        }
        let records = BatchesFile::read_at(&path);
        assert_eq!(
            records.last().map(Vec::as_slice),
            Some(&b"after 2"[..]),
            "{records:?}"
        );
        assert!(!records.contains(&b"forged".to_vec()), "{records:?}");
        forged
            .write_all_at(&sealed::seal(TAG, 1 << 40, b"ahead"), (9 * SLOT) as u64)
            .expect("forged");
        file.keep(b"later").expect("kept");
        let records = BatchesFile::read_at(&path);
        assert_eq!(records.last().map(Vec::as_slice), Some(&b"later"[..]));
        assert_eq!(records.len(), 5, "{records:?}");
        let _ = std::fs::remove_dir_all(path.parent().expect("a folder"));
    }

    #[test]
    fn a_link_or_a_fifo_in_its_place_is_neither_followed_nor_read() {
        let path = scratch("link");
        let target = path.with_file_name("elsewhere");
        std::fs::write(&target, b"not the store's").expect("a file");
        std::os::unix::fs::symlink(&target, &path).expect("a link");
        assert!(BatchesFile::open(&path).is_err());
        assert!(BatchesFile::read_at(&path).is_empty());
        assert_eq!(std::fs::read(&target).expect("read"), b"not the store's");
        std::fs::remove_file(&path).expect("removed");
        let fifo = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("a path");
        // SAFETY: `fifo` is a valid C string for the call.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert!(BatchesFile::open(&path).is_err(), "a FIFO is refused");
        assert!(BatchesFile::read_at(&path).is_empty(), "without hanging");
        let _ = std::fs::remove_dir_all(path.parent().expect("a folder"));
    }
}
