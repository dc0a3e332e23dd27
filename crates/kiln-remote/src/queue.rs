//! The remote writes of a two-level store, off the launch path (P10): a
//! bounded queue drained by one thread. A write that does not fit (too
//! many queued, or too many bytes) is dropped and counted, never waited
//! for; the queue drains when the store is flushed or dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kiln_engine::store::{BlobKey, ClaimGuard};
use kiln_engine::{ArtifactStore, Origin, Put, StoreKey, StoreOutcome};

use crate::remote::RemoteStore;
use crate::remote::publish::Outgoing;

/// The most writes queued at once.
pub(crate) const QUEUED_WRITES: usize = 1024;

/// The most bytes queued at once.
pub(crate) const QUEUED_BYTES: u64 = 256 << 20;

/// One write off the launch path: to the remote, or a remote hit written
/// back to the local store.
pub(crate) enum Write {
    Artifact(Box<ArtifactWrite>),
    Blob {
        key: BlobKey,
        bytes: Vec<u8>,
    },
    /// A verified remote hit, written to the local store so that the other
    /// processes of the machine read it there (P10), with the local claim
    /// its fetch took: released once the copy is written, so the
    /// machine's processes that wait for the copy read it as it lands.
    LocalCopy(Box<ArtifactWrite>, Option<ClaimGuard>),
    /// A remote lease to release after the writes queued before it: a key
    /// is released only once its artifact is in the remote, so no other
    /// machine takes it over in between and compiles it again (P4, P12).
    Release(crate::remote::claim::RemoteLease),
}

/// An artifact's remote write.
pub(crate) struct ArtifactWrite {
    pub key: StoreKey,
    pub source_key: Option<StoreKey>,
    pub bytes: Vec<u8>,
    pub work: Duration,
}

impl Write {
    fn len(&self) -> u64 {
        match self {
            Self::Artifact(write) | Self::LocalCopy(write, _) => write.bytes.len() as u64,
            Self::Blob { bytes, .. } => bytes.len() as u64,
            Self::Release(_) => 0,
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct QueueState {
    /// Writes queued and not yet finished.
    pending: Mutex<usize>,
    settled: Condvar,
    bytes: AtomicU64,
    pub(crate) dropped: AtomicU64,
    pub(crate) written: AtomicU64,
    pub(crate) failed: AtomicU64,
    /// Remote hits written to the local store.
    pub(crate) written_back: AtomicU64,
    /// The keys (by digest) whose artifact waits in the queue for the
    /// remote, each with how many writes of it wait.
    keys: Mutex<std::collections::HashMap<[u8; 32], usize>>,
}

impl QueueState {
    /// Whether an artifact of `key` waits in the queue for the remote.
    pub(crate) fn holds(&self, key: &StoreKey) -> bool {
        self.keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&key.digest())
    }

    /// Counts a remote write of `key` in (`queued`) or out of the queue.
    fn track(&self, key: &StoreKey, queued: bool) {
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        let digest = key.digest();
        if queued {
            *keys.entry(digest).or_default() += 1;
        } else if let Some(count) = keys.get_mut(&digest) {
            *count -= 1;
            if *count == 0 {
                keys.remove(&digest);
            }
        }
    }
}

/// The queue and the thread that drains it into the remote.
#[derive(Debug)]
pub(crate) struct WriteQueue {
    sender: Mutex<Option<SyncSender<Write>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
    pub(crate) state: Arc<QueueState>,
}

impl WriteQueue {
    pub(crate) fn new(remote: RemoteStore, local: Arc<dyn ArtifactStore>) -> Self {
        let (sender, receiver) = sync_channel(QUEUED_WRITES);
        let state = Arc::new(QueueState::default());
        let drained = Arc::clone(&state);
        let worker = std::thread::Builder::new()
            .name("kiln-remote-writes".into())
            .spawn(move || drain(&remote, local.as_ref(), &receiver, &drained));
        let worker = match worker {
            Ok(worker) => Some(worker),
            Err(error) => {
                log::warn!(
                    "kiln: cannot start the remote store's writer ({error}); artifacts stay in \
                     the local store only"
                );
                None
            }
        };
        Self {
            sender: Mutex::new(worker.is_some().then_some(sender)),
            worker: Mutex::new(worker),
            state,
        }
    }

    /// Queues `write`, or drops and counts it when the queue is full.
    pub(crate) fn push(&self, write: Write) {
        let length = write.len();
        let state = &self.state;
        let sender = self.sender.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(sender) = sender.as_ref() else {
            state.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if state.bytes.load(Ordering::Relaxed) + length > QUEUED_BYTES {
            state.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        *state.pending.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        state.bytes.fetch_add(length, Ordering::Relaxed);
        if let Write::Artifact(artifact) = &write {
            state.track(&artifact.key, true);
        }
        if let Err(TrySendError::Full(write) | TrySendError::Disconnected(write)) =
            sender.try_send(write)
        {
            if let Write::Artifact(artifact) = &write {
                state.track(&artifact.key, false);
            }
            state.bytes.fetch_sub(length, Ordering::Relaxed);
            state.dropped.fetch_add(1, Ordering::Relaxed);
            state.finish_one();
        }
    }

    /// Waits until every queued write finished, at most `timeout`;
    /// `true` when the queue is empty.
    pub(crate) fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut pending = self
            .state
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while *pending > 0 {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            pending = self
                .state
                .settled
                .wait_timeout(pending, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }

    pub(crate) fn queued(&self) -> u64 {
        *self
            .state
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner) as u64
    }
}

impl QueueState {
    fn finish_one(&self) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        *pending = pending.saturating_sub(1);
        if *pending == 0 {
            self.settled.notify_all();
        }
    }
}

/// The most writes the writer takes from the queue at once: their remote
/// writes go in one round trip (one per shard of a cluster).
const GROUP_WRITES: usize = 256;

/// The most bytes the writer takes from the queue at once.
const GROUP_BYTES: u64 = 64 << 20;

/// The writer thread: what is queued, taken in groups, each group's
/// remote writes bounded by the remote's timeout together and skipped at
/// once while its breaker is open.
fn drain(
    remote: &RemoteStore,
    local: &dyn ArtifactStore,
    receiver: &Receiver<Write>,
    state: &QueueState,
) {
    while let Ok(first) = receiver.recv() {
        let mut bytes = first.len();
        let mut group = vec![first];
        while group.len() < GROUP_WRITES && bytes < GROUP_BYTES {
            match receiver.try_recv() {
                Ok(write) => {
                    bytes += write.len();
                    group.push(write);
                }
                Err(_) => break,
            }
        }
        write_group(remote, local, group, state);
    }
}

/// Writes one group: the local copies first (other processes of the
/// machine wait for them), the named blobs, then every artifact and,
/// behind them in the same round trip, the releases of their leases, so
/// that a key is let go only once its artifact is in the remote (P4,
/// P12).
fn write_group(
    remote: &RemoteStore,
    local: &dyn ArtifactStore,
    group: Vec<Write>,
    state: &QueueState,
) {
    let count = |outcome: &StoreOutcome| {
        let counter = match outcome {
            StoreOutcome::Stored { .. } => &state.written,
            StoreOutcome::Skipped | StoreOutcome::Failed { .. } => &state.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    };
    let mut artifacts = Vec::new();
    let mut releases = Vec::new();
    let mut copies = Vec::new();
    for write in group {
        let length = write.len();
        match write {
            Write::LocalCopy(write, claim) => copies.push((write, claim, length)),
            Write::Blob { key, bytes } => {
                count(&remote.parts().put_blob(&key, &bytes));
                state.bytes.fetch_sub(length, Ordering::Relaxed);
                state.finish_one();
            }
            Write::Artifact(write) => artifacts.push(write),
            Write::Release(lease) => releases.push(lease),
        }
    }
    write_back(local, copies, state);
    let released = releases.len();
    let releases: Vec<redis::Cmd> = releases
        .into_iter()
        .filter_map(|mut lease| lease.release_command())
        .collect();
    if artifacts.is_empty() {
        remote.publish_all(&[], releases);
    } else {
        let puts: Vec<Outgoing<'_>> = artifacts
            .iter()
            .map(|write| Outgoing {
                key: &write.key,
                source_key: write.source_key.as_ref(),
                bytes: &write.bytes,
                work: write.work,
            })
            .collect();
        let outcomes = remote.publish_all(&puts, releases);
        for (write, outcome) in artifacts.iter().zip(outcomes) {
            state.track(&write.key, false);
            count(&outcome);
            state
                .bytes
                .fetch_sub(write.bytes.len() as u64, Ordering::Relaxed);
            state.finish_one();
        }
    }
    for _ in 0..released {
        state.finish_one();
    }
}

/// Writes a group's remote hits to the local store together, before the
/// group's remote writes (other processes of the machine wait for them):
/// one batched put makes them durable with a few syncs, not a few per
/// copy. Each copy's claim is let go once the batch is written (or could
/// not be): the processes waiting for it read it now, or fetch it
/// themselves.
fn write_back(
    local: &dyn ArtifactStore,
    copies: Vec<(Box<ArtifactWrite>, Option<ClaimGuard>, u64)>,
    state: &QueueState,
) {
    if copies.is_empty() {
        return;
    }
    let batch: Vec<Put<'_>> = copies
        .iter()
        .map(|(write, _, _)| Put {
            key: &write.key,
            bytes: &write.bytes,
            work: write.work,
            origin: Origin::Copied,
        })
        .collect();
    let outcomes = local.put_many(&batch);
    drop(batch);
    for ((_, claim, length), outcome) in copies.into_iter().zip(outcomes) {
        if matches!(outcome, StoreOutcome::Stored { .. }) {
            state.written_back.fetch_add(1, Ordering::Relaxed);
        }
        drop(claim);
        state.bytes.fetch_sub(length, Ordering::Relaxed);
        state.finish_one();
    }
}

/// Dropping the queue writes what it holds: the sender closes, the writer
/// drains the rest (each write bounded, and instant once the breaker is
/// open) and ends.
impl Drop for WriteQueue {
    fn drop(&mut self) {
        drop(
            self.sender
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        if let Some(worker) = self
            .worker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            // A writer that panicked has nothing left to write.
            let _ = worker.join();
        }
    }
}
