//! The sealed records of the store's small root files (`activity`,
//! `batches`), and the lock held while one is read and written.
//!
//! A sealed record is its file's tag, a sequence number, the payload's
//! length, the payload and a check word over all but the tag, so a reader
//! tells a whole record from a torn, empty or foreign one, and the newest
//! from the older by its sequence.
//!
//! A sequence is trusted only as far as the file's writers could have made
//! it: one above [`SEQUENCE_LIMIT`] no process could reach, and one far
//! ahead of its neighbours no process wrote one by one
//! ([`plausible_sequences`]); either is read as a torn slot, written over
//! first, so one forged slot can neither wrap the numbering nor freeze the
//! file as the newest for good.
//!
//! The root files are the store's history, not its entries: one that
//! cannot be read or written (no permission, a folder in its place) never
//! stops the store. It is reported once per process with what to do
//! ([`report_once`]), and the store goes on without it.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bytes before the payload: tag, sequence, length.
pub(crate) const HEADER: usize = 8 + 8 + 4;
/// Bytes after the payload: the check word.
pub(crate) const TRAILER: usize = 8;
/// How long a lock waits for another process's.
const LOCK_WAIT: Duration = Duration::from_secs(2);
/// The highest sequence a writer could have reached: at a million records
/// a second, after more than a hundred thousand years. Above it, a slot
/// was not written by counting.
pub(crate) const SEQUENCE_LIMIT: u64 = 1 << 62;

/// Which of `sequences` (0 for a torn or empty slot) a file's writers can
/// have written, each one past the newest into the oldest slot: those of
/// the largest group within `window` numbers of its own newest (`window`
/// the file's slots, so a whole ring always fits), the group with the
/// lower newest on a tie. The others read as torn. A writer that counts on
/// from this group's newest writes over the others first.
pub(crate) fn plausible_sequences(sequences: &[u64], window: u64) -> Vec<u64> {
    let whole: Vec<u64> = sequences
        .iter()
        .copied()
        .filter(|&sequence| sequence > 0 && sequence <= SEQUENCE_LIMIT)
        .collect();
    let mut best: Option<(usize, u64)> = None;
    for &newest in &whole {
        let members = whole
            .iter()
            .filter(|&&sequence| sequence <= newest && newest - sequence < window)
            .count();
        let better = match best {
            None => true,
            Some((count, best_newest)) => {
                members > count || (members == count && newest < best_newest)
            }
        };
        if better {
            best = Some((members, newest));
        }
    }
    let Some((_, newest)) = best else {
        return vec![0; sequences.len()];
    };
    sequences
        .iter()
        .map(|&sequence| {
            if sequence > 0 && sequence <= newest && newest - sequence < window {
                sequence
            } else {
                0
            }
        })
        .collect()
}

/// Says, once per process for each root file, what keeps the store from
/// reading or writing it and what to do; the store goes on without it.
pub(crate) fn report_once(path: &Path, doing: &str, error: &io::Error) {
    static SAID: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if said.iter().any(|said| said == path) {
        log::debug!("kiln store: cannot {doing} {}: {error}", path.display());
        return;
    }
    said.push(path.to_path_buf());
    log::warn!(
        "kiln store: cannot {doing} {}: {error}; {}; until then the store goes on without it",
        path.display(),
        what_to_do(path, error)
    );
}

/// What a user does about a root file the store cannot use.
fn what_to_do(path: &Path, error: &io::Error) -> String {
    let shown = path.display();
    let kind = std::fs::symlink_metadata(path).map(|found| found.file_type());
    match kind {
        Ok(kind) if kind.is_dir() => {
            "move the folder away, and the store makes its file again".to_owned()
        }
        Ok(kind) if !kind.is_file() => "remove it, and the store makes it again".to_owned(),
        _ if error.kind() == io::ErrorKind::PermissionDenied => format!(
            "give the store's users read and write access to it (chmod a+rw {shown}), or \
             remove it and the store makes it again"
        ),
        _ => "remove it, and the store makes it again".to_owned(),
    }
}

/// Opens the root file at `path` to read and write it, made when missing:
/// never through a symbolic link put in its place (nor waiting on a FIFO),
/// and only a regular file, so what is written there is the store's own.
pub(crate) fn open_root_file(path: &std::path::Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    Ok(file)
}

/// Opens the root file at `path` to read it, as [`open_root_file`] would,
/// without making it; `None` when it is missing.
///
/// # Errors
///
/// It is a link, a FIFO, a folder or anything but a regular file, or it
/// cannot be opened (no permission).
pub(crate) fn open_root_file_to_read(path: &std::path::Path) -> io::Result<Option<File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) if error.raw_os_error() == Some(libc::ELOOP) => {
            return Err(io::Error::other("it is a symbolic link"));
        }
        Err(error) => return Err(error),
    };
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("it is not a regular file"));
    }
    Ok(Some(file))
}

/// `payload` sealed under `tag` as the `sequence`th record.
pub(crate) fn seal(tag: &[u8; 8], sequence: u64, payload: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER + payload.len() + TRAILER);
    bytes.extend_from_slice(tag);
    bytes.extend_from_slice(&sequence.to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    bytes.extend_from_slice(payload);
    let check = check_word(&bytes[8..]);
    bytes.extend_from_slice(&check);
    bytes
}

/// The payload's length a record's header at the start of `bytes` gives;
/// `None` when they do not start with `tag`.
pub(crate) fn payload_length(tag: &[u8; 8], bytes: &[u8]) -> Option<usize> {
    if bytes.len() < HEADER || bytes[..8] != *tag {
        return None;
    }
    Some(u32::from_le_bytes(bytes[16..20].try_into().ok()?) as usize)
}

/// The sequence and payload of the record sealed under `tag` at the start
/// of `bytes` (anything after it ignored); `None` for a torn, empty or
/// foreign one.
pub(crate) fn open<'a>(tag: &[u8; 8], bytes: &'a [u8]) -> Option<(u64, &'a [u8])> {
    let length = payload_length(tag, bytes)?;
    let sequence = u64::from_le_bytes(bytes[8..16].try_into().ok()?);
    let end = HEADER.checked_add(length)?;
    let check = bytes.get(end..end.checked_add(TRAILER)?)?;
    (check == check_word(&bytes[8..end])).then(|| (sequence, &bytes[HEADER..end]))
}

fn check_word(bytes: &[u8]) -> [u8; 8] {
    let mut word = [0u8; 8];
    word.copy_from_slice(&blake3::hash(bytes).as_bytes()[..8]);
    word
}

/// A root file's `flock`, held while it is read and written.
pub(crate) struct FileLock<'a> {
    file: &'a File,
}

impl<'a> FileLock<'a> {
    /// Takes the lock, waiting up to [`LOCK_WAIT`] for another process.
    pub(crate) fn take(file: &'a File) -> io::Result<Self> {
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            // SAFETY: the descriptor is open for the life of `file`, and
            // `flock` only changes the lock on it.
            let taken = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if taken == 0 {
                return Ok(Self { file });
            }
            let error = io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(error);
            }
            if Instant::now() >= deadline {
                return Err(io::Error::other(
                    "the file stayed locked by another process",
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for FileLock<'_> {
    fn drop(&mut self) {
        // SAFETY: as in `take`; unlocking a lock this value holds.
        unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_opens_whole_and_nothing_else_does() {
        let sealed = seal(b"kilntest", 7, b"payload");
        assert_eq!(open(b"kilntest", &sealed), Some((7, &b"payload"[..])));
        let mut padded = sealed.clone();
        padded.extend_from_slice(&[0; 32]);
        assert_eq!(open(b"kilntest", &padded), Some((7, &b"payload"[..])));
        assert_eq!(open(b"kilnelse", &sealed), None, "another file's tag");
        assert_eq!(open(b"kilntest", &sealed[..sealed.len() - 1]), None);
        let mut torn = sealed.clone();
        torn[HEADER + 2] ^= 1;
        assert_eq!(open(b"kilntest", &torn), None);
        assert_eq!(open(b"kilntest", &[]), None);
        assert_eq!(open(b"kilntest", &[0xff; 64]), None);
    }

    #[test]
    fn a_sequence_no_writer_could_have_counted_to_reads_as_torn() {
        // A ring counted one by one keeps its sequences.
        assert_eq!(plausible_sequences(&[5, 6, 0, 4], 4), vec![5, 6, 0, 4]);
        // One forged slot, far ahead or past the limit, is left out.
        assert_eq!(plausible_sequences(&[5, u64::MAX, 6], 4), vec![5, 0, 6]);
        assert_eq!(plausible_sequences(&[5, 1 << 40, 6], 4), vec![5, 0, 6]);
        // Alone against one real slot, the lower newest wins.
        assert_eq!(plausible_sequences(&[1 << 40, 3], 2), vec![0, 3]);
        assert_eq!(plausible_sequences(&[0, 0], 2), vec![0, 0]);
    }
}
