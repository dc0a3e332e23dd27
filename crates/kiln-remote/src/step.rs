//! What a two-level store asks the remote once per batch step instead of
//! once per kernel (P10, P12): the failure memories of the kernels a batch
//! may compile, read in the round trip of the batch's lookup, and the
//! remote claims of the keys it compiles, taken in groups, each group
//! with a fresh read of its entries (the check a claimant makes that
//! nobody published the key meanwhile). A worker that comes to a key
//! finds its answers here instead of asking the remote again.
//!
//! Everything here is for the batch running: what it did not use is let
//! go when the batch finishes.

use std::collections::{HashMap, HashSet};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kiln_engine::store::{BlobKey, Renewal};
use kiln_engine::{Lookup, StoreKey};

use crate::claim::{Attempt, RemoteLease, attempt_many, release_all};
use crate::remote::RemoteStore;

/// How many keys' remote claims one round trip takes: few enough that
/// the machines of a fleet still split a batch between them.
pub(crate) const CLAIM_GROUP: usize = 8;

/// The batch step's answers, each taken once.
#[derive(Default)]
pub(crate) struct Step {
    state: Mutex<State>,
    /// Signalled when a group's claims are settled.
    settled: Condvar,
}

#[derive(Default)]
struct State {
    /// Keys of the batch the remote missed, in the batch's order, whose
    /// remote claim was not asked for yet (a key asked for once is not
    /// asked for again with another's group).
    unclaimed: Vec<StoreKey>,
    /// Remote leases taken with another key's group, for their worker.
    held: HashMap<[u8; 32], (RemoteLease, Renewal)>,
    /// Entries read right after their claims were taken.
    entries: HashMap<[u8; 32], Lookup<Vec<u8>>>,
    /// Failure memories read with the batch's lookup.
    blobs: HashMap<[u8; 32], Lookup<Vec<u8>>>,
    /// Keys whose claim a group in flight asks for: a worker that comes
    /// to one waits for that group's answer instead of asking again (and
    /// finding its own lease).
    asking: HashSet<[u8; 32]>,
    /// Keys whose claim this batch asked for.
    tried: HashSet<[u8; 32]>,
}

impl std::fmt::Debug for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        f.debug_struct("Step")
            .field("unclaimed", &state.unclaimed.len())
            .field("held", &state.held.len())
            .finish_non_exhaustive()
    }
}

impl Step {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps what the batch's lookup found of the failure memories, and
    /// the keys it missed (`missed`), to claim in groups.
    pub(crate) fn looked_up(
        &self,
        blobs: Vec<(BlobKey, Lookup<Vec<u8>>)>,
        missed: impl IntoIterator<Item = StoreKey>,
    ) {
        let mut state = self.state();
        for (blob, found) in blobs {
            state.blobs.insert(blob.digest(), found);
        }
        for key in missed {
            let digest = key.digest();
            if !state.tried.contains(&digest)
                && !state.unclaimed.iter().any(|other| other.digest() == digest)
            {
                state.unclaimed.push(key);
            }
        }
    }

    /// The failure memory `blob` read with the batch's lookup, once.
    pub(crate) fn take_blob(&self, blob: &BlobKey) -> Option<Lookup<Vec<u8>>> {
        self.state().blobs.remove(&blob.digest())
    }

    /// The entry of `key` read right after its claim was taken, once.
    pub(crate) fn take_entry(&self, key: &StoreKey) -> Option<Lookup<Vec<u8>>> {
        self.state().entries.remove(&key.digest())
    }

    /// A remote lease of `key` taken with another key's group, if any,
    /// once the group asking for it (if one is in flight) has its answer,
    /// waited for at most `patience` (the group's round trips are bounded
    /// by the remote's timeout each).
    pub(crate) fn take_held(
        &self,
        key: &StoreKey,
        patience: Duration,
    ) -> Option<(RemoteLease, Renewal)> {
        let mut state = self.state();
        let digest = key.digest();
        let deadline = Instant::now() + patience;
        while state.asking.contains(&digest) {
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            state = self
                .settled
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        state.unclaimed.retain(|other| other.digest() != digest);
        state.held.remove(&digest)
    }

    /// Lets go of a lease of `key` taken with another key's group (its
    /// machine's claim is another process's).
    pub(crate) fn let_go(&self, key: &StoreKey, patience: Duration) {
        if let Some((lease, renewal)) = self.take_held(key, patience) {
            drop(renewal);
            drop(lease);
        }
    }

    /// The remote claim of `key`, asked for in one round trip with the
    /// next keys of the batch not asked for yet (each group's entries read
    /// after its claims); the leases of the others wait here for their
    /// worker.
    pub(crate) fn claim(&self, remote: &RemoteStore, key: &StoreKey) -> Attempt {
        let mut group = vec![key.clone()];
        {
            let mut state = self.state();
            let digest = key.digest();
            state.unclaimed.retain(|other| other.digest() != digest);
            let others = state.unclaimed.len().min(CLAIM_GROUP - 1);
            group.extend(state.unclaimed.drain(..others));
            for other in &group[1..] {
                state.asking.insert(other.digest());
            }
            for key in &group {
                state.tried.insert(key.digest());
            }
        }
        let limit = remote.config().max_entry_bytes;
        let reads: Vec<redis::Cmd> = group
            .iter()
            .map(|key| RemoteStore::read_command(&remote.entry_key(key), limit))
            .collect();
        let (attempts, read) = attempt_many(remote, &group, &reads);
        let mut state = self.state();
        if let Some(read) = read {
            // Only a claim taken makes a fresh read worth keeping: a key
            // another holds is polled until it is published.
            for ((key, reply), attempt) in group.iter().zip(read).zip(&attempts) {
                if matches!(attempt, Attempt::Held(_)) {
                    let digest = key.digest();
                    state
                        .entries
                        .insert(digest, remote.answer_read(&digest, reply));
                }
            }
        }
        let mut attempts = attempts.into_iter();
        let first = attempts.next().unwrap_or(Attempt::Unreachable);
        for (key, attempt) in group.iter().skip(1).zip(attempts) {
            match attempt {
                Attempt::Held(lease) => {
                    let renewal = lease.renewal();
                    state.held.insert(key.digest(), (lease, renewal));
                }
                // Asked again, alone, when its worker comes to it: a key
                // another holds is not asked for with every group.
                Attempt::Busy | Attempt::Unreachable => {}
            }
        }
        for other in &group[1..] {
            state.asking.remove(&other.digest());
        }
        drop(state);
        self.settled.notify_all();
        first
    }

    /// The batch finished: what it did not use is let go, the leases in
    /// one round trip.
    pub(crate) fn finish(&self) {
        let held: Vec<(RemoteLease, Renewal)> = {
            let mut state = self.state();
            state.unclaimed.clear();
            state.tried.clear();
            state.entries.clear();
            state.blobs.clear();
            state.held.drain().map(|(_, held)| held).collect()
        };
        let leases = held
            .into_iter()
            .map(|(lease, renewal)| {
                drop(renewal);
                lease
            })
            .collect();
        release_all(leases);
    }
}
