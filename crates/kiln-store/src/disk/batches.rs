//! The records of the last batches of every process that used the store,
//! kept in its `batches` file (`kiln records`).
//!
//! A batch's record is written off the loader's path (F11): keeping one
//! takes the file's lock and reads every slot's header to find the oldest,
//! which a warm start waited for after its last kernel was loaded. Here
//! the loader queues the record and a thread of the store's own writes the
//! queue; a read of the records in this process, and the store's drop,
//! wait for what is queued first, within a bound.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use kiln_engine::StoredBatch;

use crate::batches::BatchesFile;
use crate::files::Files;

/// How long the store's drop, or a read of the records, waits for records
/// still queued: a file system that hangs hangs neither.
const FLUSH_BOUND: Duration = Duration::from_secs(3);

/// The batch records queued to be kept, and the thread that keeps them.
#[derive(Debug, Default)]
pub(crate) struct Keeper {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<Queue>,
    /// Told when the writer has emptied the queue and stopped.
    idle: Condvar,
}

#[derive(Debug, Default)]
struct Queue {
    records: Vec<Vec<u8>>,
    /// Whether a writer thread is running (it rereads the queue before it
    /// ends, so a record never waits unwritten).
    writing: bool,
}

impl Keeper {
    /// Queues an encoded batch record to be kept among the store's last
    /// ([`Records::keep_batch`](kiln_engine::Records::keep_batch)), starting
    /// the writer if none runs. A read-only store keeps nothing; a record
    /// that cannot be written is dropped, never an error: it is history,
    /// not an artifact. A file the store cannot open or may not write is
    /// said once, with what to do.
    pub(crate) fn keep(&self, files: &Files, record: &[u8]) {
        if files.read_only {
            return;
        }
        let path = files.layout.batches_file();
        let mut queue = lock(&self.shared.state);
        queue.records.push(record.to_vec());
        if queue.writing {
            return;
        }
        queue.writing = true;
        drop(queue);
        let shared = Arc::clone(&self.shared);
        let writer_path = path.clone();
        writers::started();
        let started = std::thread::Builder::new()
            .name("kiln-records".into())
            .spawn(move || {
                shared.write_all(&writer_path);
                writers::ended();
            });
        if started.is_err() {
            writers::ended();
            // No thread to be had: written here, as before.
            self.shared.write_all(&path);
        }
    }

    /// The records of the last batches of every process that used the
    /// store, oldest first, this process's queued ones written first;
    /// records this build cannot read are left out.
    pub(crate) fn kept(&self, files: &Files) -> Vec<StoredBatch> {
        self.kept_bytes(files)
            .iter()
            .filter_map(|bytes| StoredBatch::decode(bytes))
            .collect()
    }

    /// The encoded records, as [`kept`](Self::kept) reads them.
    pub(crate) fn kept_bytes(&self, files: &Files) -> Vec<Vec<u8>> {
        self.flush();
        BatchesFile::read_at(&files.layout.batches_file())
    }

    /// Waits until every queued record is written, at most
    /// [`FLUSH_BOUND`]; what is still queued then stays to the writer.
    pub(crate) fn flush(&self) {
        let queue = lock(&self.shared.state);
        let (queue, waited) = self
            .shared
            .idle
            .wait_timeout_while(queue, FLUSH_BOUND, |queue| queue.writing)
            .unwrap_or_else(PoisonError::into_inner);
        drop(queue);
        if waited.timed_out() {
            log::debug!("kiln store: batch records still being written, not waited for");
        }
    }
}

impl Shared {
    /// Writes the queue until it stays empty, then says so.
    fn write_all(&self, path: &Path) {
        loop {
            let records = {
                let mut queue = lock(&self.state);
                if queue.records.is_empty() {
                    queue.writing = false;
                    self.idle.notify_all();
                    return;
                }
                std::mem::take(&mut queue.records)
            };
            for record in &records {
                keep_now(path, record);
            }
        }
    }
}

/// The writer threads running in this process, which its exit waits for
/// (within a bound): a store that is never dropped (the default store,
/// held for the life of the process) loses no record of its last batch
/// to a program that exits as soon as that batch answers.
mod writers {
    use std::sync::{Condvar, Mutex, Once, PoisonError};
    use std::time::Duration;

    /// How long the process's exit waits for the writers.
    const EXIT_BOUND: Duration = Duration::from_secs(1);

    static RUNNING: Mutex<usize> = Mutex::new(0);
    static ENDED: Condvar = Condvar::new();
    static AT_EXIT: Once = Once::new();

    /// A writer is about to start.
    pub(super) fn started() {
        AT_EXIT.call_once(|| {
            // SAFETY: `wait_at_exit` is a plain function that neither
            // unwinds (it catches nothing that can panic: a poisoned lock
            // is taken as it is) nor calls `exit`; registering it only
            // adds it to the C library's list.
            unsafe { libc::atexit(wait_at_exit) };
        });
        *RUNNING.lock().unwrap_or_else(PoisonError::into_inner) += 1;
    }

    /// A writer ended (or never started).
    pub(super) fn ended() {
        let mut running = RUNNING.lock().unwrap_or_else(PoisonError::into_inner);
        *running = running.saturating_sub(1);
        ENDED.notify_all();
    }

    extern "C" fn wait_at_exit() {
        let running = RUNNING.lock().unwrap_or_else(PoisonError::into_inner);
        drop(ENDED.wait_timeout_while(running, EXIT_BOUND, |running| *running > 0));
    }
}

/// Keeps `record` in the `batches` file at `path`, in place of the oldest.
fn keep_now(path: &Path, record: &[u8]) {
    let file = match BatchesFile::open(path) {
        Ok(file) => file,
        Err(error) => {
            crate::sealed::report_once(path, "keep the batch records in", &error);
            return;
        }
    };
    match file.keep(record) {
        Ok(()) => {}
        // A full disk or a limit is said with the other writes it fails.
        Err(error) if error.kind() != std::io::ErrorKind::PermissionDenied => {
            log::debug!("kiln store: cannot keep a batch record ({error})");
        }
        Err(error) => crate::sealed::report_once(path, "keep the batch records in", &error),
    }
}

fn lock(state: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use kiln_engine::Records;

    use crate::fixtures::scratch;

    // F11: keeping a batch record does not wait for the `batches` file:
    // while another holds its lock, the call returns at once, and the
    // record is there once the lock is free, read in this process (which
    // waits for what it queued) and by the next store opened on the root.
    #[test]
    fn f11_a_batch_record_is_kept_off_the_callers_path_and_never_lost() {
        let store = scratch("records-later");
        let path = store.root().join("batches");
        // The file as the store makes it, locked by another holder.
        Records::keep_batch(&store, b"first record");
        assert_eq!(
            Records::kept_batches(&store),
            vec![b"first record".to_vec()]
        );
        let holder = std::fs::File::open(&path).expect("the batches file");
        let descriptor = std::os::fd::AsRawFd::as_raw_fd(&holder);
        // SAFETY: a lock on a descriptor this test owns, open while locked.
        let locked = unsafe { libc::flock(descriptor, libc::LOCK_EX | libc::LOCK_NB) };
        assert_eq!(locked, 0, "the test holds the file's lock");
        let asked = Instant::now();
        Records::keep_batch(&store, b"second record");
        let took = asked.elapsed();
        assert!(
            took < Duration::from_millis(500),
            "the keep waited {took:?} for the lock another holds"
        );
        std::thread::sleep(Duration::from_millis(50));
        drop(holder);
        assert_eq!(
            Records::kept_batches(&store),
            vec![b"first record".to_vec(), b"second record".to_vec()],
            "the queued record written once the lock was free"
        );
        Records::keep_batch(&store, b"third record");
        let root = store.root().to_path_buf();
        drop(store);
        let again = crate::DiskStore::open(crate::StoreConfig::at(root.clone())).expect("again");
        assert_eq!(
            Records::kept_batches(&again),
            vec![
                b"first record".to_vec(),
                b"second record".to_vec(),
                b"third record".to_vec()
            ],
            "the store's drop wrote what it had queued"
        );
        drop(again);
        drop(std::fs::remove_dir_all(root));
    }

    // F11: a record kept just before the process exits is written, though
    // its store is never dropped (as the default store is held for the
    // life of the process): the exit waits for the store's writer. The
    // file's lock is held here while the other process exits, so that its
    // writer cannot have finished before the exit.
    #[test]
    fn f11_a_record_kept_as_the_process_exits_is_written() {
        const CHILD: &str = "KILN_TEST_RECORD_AT_EXIT";
        if let Some(root) = std::env::var_os(CHILD) {
            let config = crate::StoreConfig::at(std::path::PathBuf::from(root));
            let store = crate::DiskStore::open(config).expect("the store");
            Records::keep_batch(&store, b"last words");
            std::mem::forget(store);
            std::process::exit(0);
        }
        let store = scratch("records-at-exit");
        Records::keep_batch(&store, b"first words");
        let root = store.root().to_path_buf();
        drop(store);
        let holder = std::fs::File::open(root.join("batches")).expect("the batches file");
        let descriptor = std::os::fd::AsRawFd::as_raw_fd(&holder);
        // SAFETY: a lock on a descriptor this test owns, open while locked.
        let locked = unsafe { libc::flock(descriptor, libc::LOCK_EX | libc::LOCK_NB) };
        assert_eq!(locked, 0, "the test holds the file's lock");
        let mut child = std::process::Command::new(std::env::current_exe().expect("this test"))
            .args([
                "--exact",
                "disk::batches::tests::f11_a_record_kept_as_the_process_exits_is_written",
                "--test-threads=1",
            ])
            .env(CHILD, &root)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("the other process starts");
        std::thread::sleep(Duration::from_millis(300));
        drop(holder);
        let status = child.wait().expect("the other process ends");
        assert!(status.success(), "{status}");
        let again = crate::DiskStore::open(crate::StoreConfig::at(root.clone())).expect("again");
        assert_eq!(
            Records::kept_batches(&again),
            vec![b"first words".to_vec(), b"last words".to_vec()],
            "the record kept as the process exited"
        );
        drop(again);
        drop(std::fs::remove_dir_all(root));
    }
}
