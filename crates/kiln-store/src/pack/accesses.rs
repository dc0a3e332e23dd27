//! Access times written off the lookup's path (P6, F11).
//!
//! A read renews its entry's access time at most once a minute, so that
//! eviction keeps what is read. Written where the read happens, the first
//! warm start after a minute opened every shard's index to write and wrote
//! to it on the loader's critical path. Here a read queues its access time
//! and a thread of the store's own writes the queue, one index at a time
//! (one descriptor open at a time); the store's drop waits for it, within
//! a bound.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a store's drop waits for access times still queued: a file
/// system that hangs does not hang the program's exit.
const FLUSH_BOUND: Duration = Duration::from_secs(1);

/// One access time to write: at `position` of the index whose name is
/// `name`, if that name is still the file of `identity`.
#[derive(Debug, Clone)]
pub(super) struct Access {
    pub(super) name: String,
    pub(super) identity: (u64, u64),
    pub(super) position: u64,
    pub(super) seconds: [u8; 4],
}

/// The queue of access times and the thread that writes it.
#[derive(Debug)]
pub(super) struct Accesses {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Debug)]
struct Shared {
    folder: PathBuf,
    pending: Mutex<Vec<Access>>,
    /// Whether a writer thread is running (it rereads the queue before it
    /// ends, so a push never waits unwritten).
    running: AtomicBool,
}

impl Accesses {
    pub(super) fn new(folder: PathBuf) -> Self {
        Self {
            shared: Arc::new(Shared {
                folder,
                pending: Mutex::new(Vec::new()),
                running: AtomicBool::new(false),
            }),
            thread: Mutex::new(None),
        }
    }

    /// Queues `access`, starting the writer if none runs.
    pub(super) fn queue(&self, access: Access) {
        lock(&self.shared.pending).push(access);
        if self.shared.running.swap(true, Ordering::AcqRel) {
            return;
        }
        let shared = Arc::clone(&self.shared);
        let started = std::thread::Builder::new()
            .name("kiln-accesses".into())
            .spawn(move || shared.write_all());
        match started {
            Ok(handle) => {
                // The finished writer before it is joined: nothing to wait for.
                if let Some(finished) = lock(&self.thread).replace(handle) {
                    let _ = finished.join();
                }
            }
            // No thread to be had: written here, as before.
            Err(_) => self.shared.write_all(),
        }
    }

    /// Waits for the queued access times to be written, for at most
    /// [`FLUSH_BOUND`].
    pub(super) fn flush(&self) {
        let Some(handle) = lock(&self.thread).take() else {
            return;
        };
        let deadline = Instant::now() + FLUSH_BOUND;
        while !handle.is_finished() {
            if Instant::now() >= deadline {
                log::debug!("access times still being written at the store's end: left behind");
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = handle.join();
    }
}

impl Drop for Accesses {
    fn drop(&mut self) {
        self.flush();
    }
}

impl Shared {
    /// Writes the queue until it stays empty: each index opened once a
    /// round and closed before the next.
    fn write_all(&self) {
        loop {
            let mut batch = std::mem::take(&mut *lock(&self.pending));
            if batch.is_empty() {
                self.running.store(false, Ordering::Release);
                // A push between the take and the store found the writer
                // still running: it is written now.
                if lock(&self.pending).is_empty() || self.running.swap(true, Ordering::AcqRel) {
                    return;
                }
                continue;
            }
            batch.sort_by(|one, other| one.name.cmp(&other.name));
            for group in batch.chunk_by(|one, other| one.name == other.name) {
                let Ok(writer) = self.open(&group[0]) else {
                    continue;
                };
                for access in group {
                    // Outside the slot's check: a torn write of it is only
                    // an older access time.
                    if let Err(error) = writer.write_all_at(&access.seconds, access.position) {
                        log::trace!("cannot record an access: {error}");
                    }
                }
            }
        }
    }

    /// The index `access` names, opened to write, if it is still the file
    /// that was read (a rewrite since is left alone).
    fn open(&self, access: &Access) -> io::Result<File> {
        let writer = fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(self.folder.join(&access.name))?;
        let found = writer.metadata()?;
        if found.is_file() && (found.dev(), found.ino()) == access.identity {
            Ok(writer)
        } else {
            Err(io::Error::other("the index was replaced since it was read"))
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
