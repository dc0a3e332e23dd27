//! The queues of a [`BucketTier`](super::BucketTier): its writes to the
//! bucket (artifacts and batch packs) and its copies of the bucket's hits
//! to the front, each drained by a thread of its own; and claims of the
//! front let go behind the bucket writes queued before them.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kiln_engine::StoreKey;
use kiln_engine::store::ClaimGuard;

use crate::store::PackWrite;

/// Writes drained by one thread, in order.
#[derive(Debug)]
pub(super) struct Queue<T = Write> {
    state: Mutex<QueueState<T>>,
    changed: Condvar,
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Self {
            state: Mutex::new(QueueState {
                waiting: VecDeque::new(),
                releases: Vec::new(),
                in_flight: 0,
                dropped: 0,
                closed: false,
            }),
            changed: Condvar::new(),
        }
    }
}

#[derive(Debug)]
struct QueueState<T> {
    waiting: VecDeque<T>,
    /// Claims to let go once the writes queued before them are done.
    releases: Vec<ClaimGuard>,
    in_flight: usize,
    dropped: u64,
    closed: bool,
}

/// One artifact to write.
#[derive(Debug)]
pub(super) struct Write {
    pub(super) key: StoreKey,
    pub(super) source_key: Option<StoreKey>,
    pub(super) bytes: Vec<u8>,
    pub(super) work: Duration,
    pub(super) with_history: bool,
}

/// What the bucket's writer sends.
#[derive(Debug)]
pub(super) enum Job {
    /// An artifact.
    Write(Box<Write>),
    /// A batch's pack.
    Pack(PackWrite),
}

impl<T> Queue<T> {
    /// Waits until nothing is queued or in flight, at most until
    /// `deadline`; `true` when nothing is.
    pub(super) fn wait_empty(&self, deadline: Instant) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if state.waiting.is_empty() && state.releases.is_empty() && state.in_flight == 0 {
                return true;
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return false;
            };
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Everything queued, once there is something, and the claims to let
    /// go after it; `None` once closed.
    pub(super) fn take(&self) -> Option<(Vec<T>, Vec<ClaimGuard>)> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        while state.waiting.is_empty() && state.releases.is_empty() && !state.closed {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if state.closed {
            return None;
        }
        let taken: Vec<T> = state.waiting.drain(..).collect();
        let releases = std::mem::take(&mut state.releases);
        state.in_flight = taken.len() + releases.len();
        Some((taken, releases))
    }

    /// What [`take`](Self::take) gave is done.
    pub(super) fn done(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.in_flight = 0;
        self.changed.notify_all();
    }

    /// Writes dropped because the queue was full.
    pub(super) fn dropped(&self) -> u64 {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .dropped
    }

    /// Lets `guard` go once the writes queued now are done; at once when
    /// the queue is closed.
    fn release_after(&self, guard: ClaimGuard) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.closed {
            drop(state);
            drop(guard);
            return;
        }
        state.releases.push(guard);
        self.changed.notify_all();
    }

    pub(super) fn close(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.closed = true;
        self.changed.notify_all();
    }

    /// Queues `write`; `false` when `limit` writes wait already (it is
    /// dropped).
    pub(super) fn push(&self, write: T, limit: usize) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.waiting.len() >= limit {
            state.dropped += 1;
            return false;
        }
        state.waiting.push_back(write);
        self.changed.notify_all();
        true
    }
}

impl Queue<Job> {
    /// Drops the queued writes of `key`, and its entry from the queued
    /// packs (a removal must not be undone).
    pub(super) fn forget(&self, key: &StoreKey) {
        let digest = key.digest();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.waiting.retain_mut(|job| match job {
            Job::Write(write) => write.key != *key,
            Job::Pack(pack) => {
                pack.entries.retain(|(entry, _, _)| *entry != digest);
                true
            }
        });
    }
}

/// A claim of the front that, when dropped, is let go behind the bucket
/// writes queued before it.
pub(super) struct ReleasedBehindWrites {
    guard: Option<ClaimGuard>,
    queue: Arc<Queue<Job>>,
}

impl ReleasedBehindWrites {
    pub(super) fn new(guard: ClaimGuard, queue: Arc<Queue<Job>>) -> Self {
        Self {
            guard: Some(guard),
            queue,
        }
    }
}

impl Drop for ReleasedBehindWrites {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            self.queue.release_after(guard);
        }
    }
}
