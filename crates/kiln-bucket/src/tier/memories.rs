//! The failure memories of a batch's kernels the bucket lacks, read in the
//! background while the batch goes on (its sources' lookup, its lowering),
//! and taken by the loader's question before each compile.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kiln_engine::Lookup;
use kiln_engine::store::BlobKey;
use kiln_engine::{Miss, StoreKey};

use crate::store::BucketStore;

/// The most memories kept at once; past it they are forgotten.
const LIMIT: usize = 1 << 16;

/// What the bucket answered for failure memories this batch, and which
/// are still being read.
#[derive(Debug, Default)]
pub(super) struct Memories {
    state: Mutex<State>,
    landed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// The answers read, by blob digest, each taken once.
    read: HashMap<[u8; 32], Lookup<Vec<u8>>>,
    /// The digests being read.
    pending: HashSet<[u8; 32]>,
    /// Bumped at each batch's end: a read of an earlier batch keeps
    /// nothing.
    batch: u64,
}

impl Memories {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts reading `keys` from `bucket` in one call on a thread of its
    /// own (on this one when none starts), but for those read or being
    /// read already.
    pub(super) fn read(self: &Arc<Self>, bucket: &BucketStore, keys: Vec<BlobKey>) {
        self.read_after(bucket, keys, Duration::ZERO);
    }

    /// [`read`](Self::read), its requests sent `after` from now.
    pub(super) fn read_after(
        self: &Arc<Self>,
        bucket: &BucketStore,
        mut keys: Vec<BlobKey>,
        after: Duration,
    ) {
        let batch = {
            let mut state = self.state();
            keys.retain(|key| {
                let digest = key.digest();
                !state.pending.contains(&digest) && !state.read.contains_key(&digest)
            });
            if keys.is_empty() {
                return;
            }
            state.pending.extend(keys.iter().map(BlobKey::digest));
            state.batch
        };
        let task = {
            let (memories, reader, keys) = (Arc::clone(self), bucket.clone(), keys.clone());
            move || {
                if !after.is_zero() {
                    std::thread::sleep(after);
                }
                let (_, found) = reader.lookup_with_blobs(&[], &keys);
                memories.landed(batch, &keys, found);
            }
        };
        let spawned = std::thread::Builder::new()
            .name("kiln-bucket-memories".to_owned())
            .spawn(task);
        if spawned.is_err() {
            let (_, found) = bucket.lookup_with_blobs(&[], &keys);
            self.landed(batch, &keys, found);
        }
    }

    fn landed(&self, batch: u64, keys: &[BlobKey], found: Vec<Lookup<Vec<u8>>>) {
        let mut state = self.state();
        for key in keys {
            state.pending.remove(&key.digest());
        }
        if state.batch == batch {
            if state.read.len() >= LIMIT {
                state.read.clear();
            }
            for (key, lookup) in keys.iter().zip(found) {
                // What the bucket could not answer is asked again when
                // wanted.
                if matches!(lookup, Lookup::Hit { .. } | Lookup::Miss(Miss::Absent)) {
                    state.read.insert(key.digest(), lookup);
                }
            }
        }
        self.landed.notify_all();
    }

    /// The answer read for `key`, waiting for its read until `deadline`
    /// when it is under way; `None` when it was not read.
    pub(super) fn take(&self, key: &BlobKey, deadline: Instant) -> Option<Lookup<Vec<u8>>> {
        let digest = key.digest();
        let mut state = self.state();
        loop {
            if let Some(read) = state.read.remove(&digest) {
                return Some(read);
            }
            if !state.pending.contains(&digest) {
                return None;
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            state = self
                .landed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Forgets what was read for `key` (a new memory was written).
    pub(super) fn forget(&self, key: &BlobKey) {
        self.state().read.remove(&key.digest());
    }

    /// The batch ended: what it read is forgotten.
    pub(super) fn batch_finished(&self) {
        let mut state = self.state();
        state.read.clear();
        state.batch += 1;
    }
}

/// The failure memories of the kernels of `asked`.
pub(super) fn of_kernels(asked: &[StoreKey]) -> Vec<BlobKey> {
    use kiln_engine::store::{KeySubject, RememberedFailure};
    asked
        .iter()
        .filter(|key| matches!(key.subject, KeySubject::Kernel { .. }))
        .map(RememberedFailure::blob_key)
        .collect()
}

/// The failure memories of the kernels of `asked` the bucket answered
/// absent in `found`: those this node may compile.
pub(super) fn of_absent(asked: &[StoreKey], found: &[Lookup<Vec<u8>>]) -> Vec<BlobKey> {
    use kiln_engine::store::{KeySubject, RememberedFailure};
    asked
        .iter()
        .zip(found)
        .filter(|(key, lookup)| {
            matches!(key.subject, KeySubject::Kernel { .. })
                && matches!(lookup, Lookup::Miss(Miss::Absent))
        })
        .map(|(key, _)| RememberedFailure::blob_key(key))
        .collect()
}
