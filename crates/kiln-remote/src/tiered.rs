//! [`TieredStore`]: the local store in front of the remote one (P10).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kiln_core::store::{BlobKey, Claim, ClaimGuard, ClaimWait, Explanation};
use kiln_core::{ArtifactStore, Generation, Lookup, Miss, StoreKey, StoreOutcome, StoreStatistics};
use serde::{Deserialize, Serialize};

use crate::claim::{Attempt, attempt_waiting};
use crate::queue::{ArtifactWrite, Write, WriteQueue};
use crate::remote::RemoteStore;
use crate::statistics::RemoteStatistics;

/// A two-level store: a local store (the disk store) in front of a
/// [`RemoteStore`] shared by a fleet (P10).
///
/// - **Reads** go to the local store, then, for what it misses, to the
///   remote in one round trip per batch; a verified remote hit is written
///   to the local store through the same background queue (a durable
///   local write per kernel would cost a warm start more than the round
///   trip), so the other processes of the machine read it from disk and
///   the remote is asked about once per host.
/// - **Writes** go to the local store on the caller's thread and, unless
///   it refused them, to the remote through a bounded background queue:
///   the launch never waits for the network. A write that does not fit in the queue is dropped
///   and counted; [`flush`](Self::flush) and dropping the last handle
///   write what is queued.
/// - **Claims** (P4, P12) are the local store's, then the remote's lease:
///   the processes of one machine wait on the disk, the machines of a
///   fleet on Redis. A remote that does not answer leaves the local claim
///   alone in charge.
/// - **Faults** of the remote are misses and counted failed writes; the
///   local store answers as it would alone.
///
/// ```no_run
/// use kiln_core::ArtifactStore;
/// use kiln_remote::{RemoteStore, TieredStore};
/// use kiln_store::{DiskStore, StoreConfig};
///
/// let local = DiskStore::open(StoreConfig::at("/var/cache/kiln"))?;
/// let remote = RemoteStore::from_env()?.expect("KILN_REMOTE_URL is set");
/// let store = TieredStore::new(local, remote);
/// // ... bind `store` to a target; at the end of the run:
/// store.flush(std::time::Duration::from_secs(10));
/// println!("{:?}", store.tiered_statistics());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct TieredStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    local: Arc<dyn ArtifactStore>,
    remote: RemoteStore,
    // Declared last so that it drops last: its drop writes what is queued.
    queue: WriteQueue,
    answers: Answers,
}

/// A remote lease released through the write queue, behind the remote
/// write of its key's artifact when one waits there; at once otherwise (a
/// kernel that failed, or nothing queued), and when the store is gone.
struct QueuedRelease {
    lease: Option<crate::claim::RemoteLease>,
    key: StoreKey,
    store: std::sync::Weak<Inner>,
}

impl Drop for QueuedRelease {
    fn drop(&mut self) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        match self.store.upgrade() {
            Some(inner) if inner.queue.state.holds(&self.key) => {
                inner.queue.push(Write::Release(lease));
            }
            _ => drop(lease),
        }
    }
}

/// What the two-level store answered, counted once per lookup.
#[derive(Debug, Default)]
struct Answers {
    hits: AtomicU64,
    absent: AtomicU64,
    corrupt: AtomicU64,
    foreign: AtomicU64,
    unreadable: AtomicU64,
    bytes_read: AtomicU64,
    remote_hits: AtomicU64,
    written_back: AtomicU64,
}

/// A two-level store's counts (`kiln stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TieredStatistics {
    /// The local store's own counts.
    pub local: StoreStatistics,
    /// The remote store's own counts.
    pub remote: RemoteStatistics,
    /// Lookups the local store missed and the remote answered.
    pub remote_hits: u64,
    /// Remote hits written to the local store.
    pub written_back: u64,
    /// Remote writes waiting in the queue now.
    pub queued: u64,
    /// Remote writes the queue took and the remote stored.
    pub remote_writes: u64,
    /// Remote writes the queue took and the remote did not store (failed
    /// or skipped).
    pub remote_write_failures: u64,
    /// Remote writes dropped because the queue was full.
    pub queue_dropped: u64,
}

impl TieredStore {
    /// `local` in front of `remote`.
    pub fn new(local: impl ArtifactStore + 'static, remote: RemoteStore) -> Self {
        let local: Arc<dyn ArtifactStore> = Arc::new(local);
        Self {
            inner: Arc::new(Inner {
                queue: WriteQueue::new(remote.clone(), Arc::clone(&local)),
                local,
                remote,
                answers: Answers::default(),
            }),
        }
    }

    /// The remote tier.
    pub fn remote(&self) -> &RemoteStore {
        &self.inner.remote
    }

    /// Waits until every queued remote write is done, at most `timeout`;
    /// `true` when nothing is left queued. Each write is bounded by the
    /// remote's timeout and skipped at once while its breaker is open.
    pub fn flush(&self, timeout: Duration) -> bool {
        self.inner.queue.flush(timeout)
    }

    /// The counts of both tiers and of the queue between them.
    pub fn tiered_statistics(&self) -> TieredStatistics {
        let state = &self.inner.queue.state;
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        TieredStatistics {
            local: self.inner.local.statistics(),
            remote: self.inner.remote.remote_statistics(),
            remote_hits: read(&self.inner.answers.remote_hits),
            written_back: read(&self.inner.answers.written_back)
                + read(&self.inner.queue.state.written_back),
            queued: self.inner.queue.queued(),
            remote_writes: read(&state.written),
            remote_write_failures: read(&state.failed),
            queue_dropped: read(&state.dropped),
        }
    }

    fn count(&self, lookup: &Lookup<Vec<u8>>) {
        let answers = &self.inner.answers;
        let counter = match lookup {
            Lookup::Hit { bytes, .. } => {
                answers.bytes_read.fetch_add(*bytes, Ordering::Relaxed);
                &answers.hits
            }
            Lookup::Miss(Miss::Absent) => &answers.absent,
            Lookup::Miss(Miss::Corrupt { .. }) => &answers.corrupt,
            Lookup::Miss(Miss::ForeignKey { .. }) => &answers.foreign,
            Lookup::Miss(Miss::Unreadable { .. }) => &answers.unreadable,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The answer for a key the local store missed with `local`, given the
    /// remote's `remote`: a remote hit is written back.
    fn settle(
        &self,
        local: Lookup<Vec<u8>>,
        remote: Lookup<Vec<u8>>,
        write_back: impl FnOnce(&[u8], Duration),
    ) -> Lookup<Vec<u8>> {
        match remote {
            Lookup::Hit {
                artifact,
                bytes,
                work,
            } => {
                let answers = &self.inner.answers;
                answers.remote_hits.fetch_add(1, Ordering::Relaxed);
                write_back(&artifact, work);
                Lookup::Hit {
                    artifact,
                    bytes,
                    work,
                }
            }
            // What the remote refused says more than the local absence.
            Lookup::Miss(miss @ (Miss::Corrupt { .. } | Miss::ForeignKey { .. })) => {
                Lookup::Miss(miss)
            }
            Lookup::Miss(_) => local,
        }
    }

    fn written_back(&self, outcome: &StoreOutcome) {
        if matches!(outcome, StoreOutcome::Stored { .. }) {
            self.inner
                .answers
                .written_back
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl ArtifactStore for TieredStore {
    fn lookup(&self, key: &StoreKey) -> Lookup<Vec<u8>> {
        self.lookup_many(std::slice::from_ref(key))
            .pop()
            .expect("one answer per key")
    }

    fn lookup_many(&self, keys: &[StoreKey]) -> Vec<Lookup<Vec<u8>>> {
        let mut answers = self.inner.local.lookup_many(keys);
        let missed: Vec<usize> = answers
            .iter()
            .enumerate()
            .filter(|(_, answer)| matches!(answer, Lookup::Miss(_)))
            .map(|(index, _)| index)
            .collect();
        if !missed.is_empty() {
            let missed_keys: Vec<StoreKey> =
                missed.iter().map(|index| keys[*index].clone()).collect();
            let remote = self.inner.remote.lookup_many(&missed_keys);
            for (index, remote) in missed.into_iter().zip(remote) {
                let local = std::mem::replace(&mut answers[index], Lookup::Miss(Miss::Absent));
                let key = &keys[index];
                // Written back off the launch path: a batch found remotely
                // costs the round trip, not a durable local write per
                // kernel; `flush` and the drop wait for it.
                answers[index] = self.settle(local, remote, |bytes, work| {
                    self.inner
                        .queue
                        .push(Write::LocalCopy(Box::new(ArtifactWrite {
                            key: key.clone(),
                            source_key: None,
                            bytes: bytes.to_vec(),
                            work,
                        })));
                });
            }
        }
        for answer in &answers {
            self.count(answer);
        }
        answers
    }

    fn claim(&self, key: &StoreKey, wait: ClaimWait) -> Claim {
        match self.inner.local.claim(key, wait) {
            Claim::Busy => Claim::Busy,
            Claim::Held(local) => match attempt_waiting(&self.inner.remote, key, wait) {
                Attempt::Held(lease) => {
                    let renewal = lease.renewal();
                    // The tuple drops the local claim first; the remote
                    // lease is released behind the remote writes queued
                    // before it, so its artifact is in the remote first.
                    let lease = QueuedRelease {
                        lease: Some(lease),
                        key: key.clone(),
                        store: Arc::downgrade(&self.inner),
                    };
                    Claim::Held(ClaimGuard::leased((local, lease), renewal))
                }
                Attempt::Busy => Claim::Busy,
                Attempt::Unreachable => Claim::Held(local),
            },
            Claim::Uncoordinated => self.inner.remote.claim(key, wait),
        }
    }

    fn claim_timeout(&self) -> Duration {
        self.inner.local.claim_timeout()
    }

    fn put(
        &self,
        key: &StoreKey,
        source_key: Option<&StoreKey>,
        bytes: &[u8],
        work: Duration,
    ) -> StoreOutcome {
        let outcome = self.inner.local.put(key, source_key, bytes, work);
        // What the local store refused (an empty artifact, say) is not
        // offered to the fleet either: the tiers keep the same entries.
        if self.inner.remote.writes() && !matches!(outcome, StoreOutcome::Failed { .. }) {
            self.inner
                .queue
                .push(Write::Artifact(Box::new(ArtifactWrite {
                    key: key.clone(),
                    source_key: source_key.cloned(),
                    bytes: bytes.to_vec(),
                    work,
                })));
        }
        outcome
    }

    fn remove(&self, key: &StoreKey) {
        self.inner.local.remove(key);
        // A queued put of this key must not land after the removal.
        self.inner
            .queue
            .flush(self.inner.remote.config().timeout * 4);
        self.inner.remote.remove(key);
    }

    fn generation(&self) -> Generation {
        self.inner.local.generation()
    }

    fn statistics(&self) -> StoreStatistics {
        let local = self.inner.local.statistics();
        let answers = &self.inner.answers;
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        StoreStatistics {
            hits: read(&answers.hits),
            absent: read(&answers.absent),
            corrupt: read(&answers.corrupt),
            foreign: read(&answers.foreign),
            unreadable: read(&answers.unreadable),
            bytes_read: read(&answers.bytes_read),
            ..local
        }
    }

    fn batch_finished(&self) {
        self.inner.local.batch_finished();
    }

    fn explain(&self, key: &StoreKey) -> Explanation {
        match self.inner.local.explain(key) {
            Explanation::NeverSeen => self.inner.remote.explain(key),
            known => known,
        }
    }

    fn lookup_blob(&self, key: &BlobKey) -> Lookup<Vec<u8>> {
        let local = self.inner.local.lookup_blob(key);
        let answer = if let Lookup::Miss(_) = local {
            let remote = self.inner.remote.lookup_blob(key);
            self.settle(local, remote, |bytes, _| {
                let outcome = self.inner.local.put_blob(key, bytes);
                self.written_back(&outcome);
            })
        } else {
            local
        };
        self.count(&answer);
        answer
    }

    fn put_blob(&self, key: &BlobKey, bytes: &[u8]) -> StoreOutcome {
        let outcome = self.inner.local.put_blob(key, bytes);
        if self.inner.remote.writes() && !matches!(outcome, StoreOutcome::Failed { .. }) {
            self.inner.queue.push(Write::Blob {
                key: key.clone(),
                bytes: bytes.to_vec(),
            });
        }
        outcome
    }
}
