//! The sealed records of the store's small root files (`activity`,
//! `batches`), and the lock held while one is read and written.
//!
//! A sealed record is its file's tag, a sequence number, the payload's
//! length, the payload and a check word over all but the tag, so a reader
//! tells a whole record from a torn, empty or foreign one, and the newest
//! from the older by its sequence.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Bytes before the payload: tag, sequence, length.
pub(crate) const HEADER: usize = 8 + 8 + 4;
/// Bytes after the payload: the check word.
pub(crate) const TRAILER: usize = 8;
/// How long a lock waits for another process's.
const LOCK_WAIT: Duration = Duration::from_secs(2);

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
/// without making it; `None` when it is missing, a link, a FIFO or
/// anything but a regular file.
pub(crate) fn open_root_file_to_read(path: &std::path::Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    file.metadata().ok()?.is_file().then_some(file)
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
}
