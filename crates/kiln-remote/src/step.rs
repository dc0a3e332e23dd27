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

use crate::remote::RemoteStore;
use crate::remote::claim::{Attempt, RemoteLease, attempt_many, release_all};

/// How many keys' remote claims one round trip takes at least: few
/// enough that the machines of a fleet near their remote still split a
/// batch between them.
pub(crate) const CLAIM_GROUP: usize = 8;

/// How many keys' remote claims one round trip takes at most.
pub(crate) const LARGEST_CLAIM_GROUP: usize = 256;

/// How fast a batch is taken to come to its keys (all its workers
/// together) before it was measured: about the shortest compiles kiln
/// sees on two workers. A batch that is slower claims more than it needed
/// in its first group, which costs the fleet a coarser split, never a
/// round trip.
const ASSUMED_PACE: Duration = Duration::from_millis(10);

/// How many keys one claim round trip takes: enough for the batch's
/// workers to come to during two of the remote's round trips at the pace
/// they come to keys (the group in flight and the next), and never fewer
/// than [`CLAIM_GROUP`]. A remote 0.1 ms away keeps groups of 8, so the
/// machines of a fleet split a batch finely; one 400 ms away takes a
/// batch of 64 fast kernels in one group, where groups of 8 would cost it
/// a round trip every 8 kernels.
pub(crate) fn group_size(round_trip: Option<Duration>, pace: Option<Duration>) -> usize {
    let Some(round_trip) = round_trip else {
        return CLAIM_GROUP;
    };
    let pace = pace
        .unwrap_or(ASSUMED_PACE)
        .max(Duration::from_micros(50))
        .as_secs_f64();
    let covered = (2.0 * round_trip.as_secs_f64() / pace).ceil();
    if covered >= LARGEST_CLAIM_GROUP as f64 {
        return LARGEST_CLAIM_GROUP;
    }
    (covered as usize).clamp(CLAIM_GROUP, LARGEST_CLAIM_GROUP)
}

/// How many claimed keys the batch keeps ahead of its workers: those it
/// comes to during one round trip, and one more. Below it the next group
/// is asked for in the background.
fn lead(round_trip: Duration, pace: Duration) -> usize {
    let pace = pace.max(Duration::from_micros(50)).as_secs_f64();
    let keys = (round_trip.as_secs_f64() / pace).ceil();
    if keys >= LARGEST_CLAIM_GROUP as f64 {
        LARGEST_CLAIM_GROUP
    } else {
        keys as usize + 1
    }
}

/// A key the batch waits for, and who holds it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Waited {
    /// Another process of this machine (its local claim): it lands on the
    /// disk, read there.
    Local,
    /// Another machine's lease, last read at `checked`.
    Remote { checked: Instant },
}

/// What a worker finds ready for its key.
pub(crate) enum Ready {
    /// A remote lease taken with another key's group, or when its holder
    /// was found gone.
    Lease(RemoteLease, Renewal),
    /// No lease to take: compiled without one, or published (the
    /// worker's re-check reads the entry).
    Without,
}

/// Who holds each key waited for, by digest.
pub(crate) type Names = HashMap<[u8; 32], Option<String>>;

/// What reading a waited key again found ([`Step::rechecked`]).
pub(crate) enum Rechecked {
    Held(RemoteLease, Lookup<Vec<u8>>),
    Without(Lookup<Vec<u8>>),
    Still,
    Settled,
}

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
    /// Keys whose worker goes on without a lease: a claim lost to a value
    /// that does not verify (compiled at once), or an entry found
    /// published with the claim (the worker's re-check reads it).
    without: HashSet<[u8; 32]>,
    /// Keys another holds, which the batch waits for: asked again only
    /// when something is heard of them or their time is up (P12).
    waited: HashMap<[u8; 32], (StoreKey, Waited)>,
    /// The holders of the keys waited for, read together, and when.
    names: Option<(Instant, Names)>,
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
    /// How long the batch's last remote call took (its lookup, then each
    /// claim group): what sizes the next group.
    round_trip: Option<Duration>,
    /// When each worker (thread) last came to a key of the batch, and how
    /// long apart one worker comes to its keys (averaged): a worker's own
    /// rhythm, which the workers' arriving together after a group landed
    /// does not disturb.
    last_asked: HashMap<std::thread::ThreadId, Instant>,
    period: Option<Duration>,
    /// Whether a group is being asked for in the background.
    ahead: bool,
    /// Counts the batches finished: a group asked for in the background
    /// that comes back after its batch finished lets its leases go.
    finished: u64,
}

impl State {
    /// The calling worker came to a key of the batch now.
    fn asked(&mut self) {
        let now = Instant::now();
        let worker = std::thread::current().id();
        if let Some(last) = self.last_asked.insert(worker, now) {
            let since = now - last;
            self.period = Some(match self.period {
                Some(period) => (period * 3 + since) / 4,
                None => since,
            });
        }
    }

    /// How long apart the batch comes to its keys, all its workers
    /// together, once one worker came to two.
    fn pace(&self) -> Option<Duration> {
        let workers = u32::try_from(self.last_asked.len())
            .unwrap_or(u32::MAX)
            .max(1);
        self.period.map(|period| period / workers)
    }

    /// Whether the next group should be asked for now, in the background:
    /// fewer leases wait for the workers than they come to in a round
    /// trip, keys are left to claim, and no group is in flight.
    fn wants_ahead(&self) -> bool {
        let (Some(round_trip), Some(pace)) = (self.round_trip, self.pace()) else {
            return false;
        };
        !self.ahead
            && self.asking.is_empty()
            && !self.unclaimed.is_empty()
            && self.held.len() + self.without.len() < lead(round_trip, pace)
    }
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
    /// `round_trip` is how long the lookup took.
    pub(crate) fn looked_up(
        &self,
        blobs: Vec<(BlobKey, Lookup<Vec<u8>>)>,
        missed: impl IntoIterator<Item = StoreKey>,
        round_trip: Duration,
    ) {
        let mut state = self.state();
        state.round_trip = Some(round_trip);
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
    ///
    /// A miss read for a key whose lease waits for its worker stays until
    /// the lease is taken: a waiter asks for the key (its lookup), then
    /// claims it, then checks it once more, and none of it is a round
    /// trip.
    pub(crate) fn take_entry(&self, key: &StoreKey) -> Option<Lookup<Vec<u8>>> {
        let mut state = self.state();
        let digest = key.digest();
        if (state.held.contains_key(&digest) || state.without.contains(&digest))
            && let Some(Lookup::Miss(miss)) = state.entries.get(&digest)
        {
            return Some(Lookup::Miss(miss.clone()));
        }
        state.entries.remove(&digest)
    }

    /// Whether a lease (or a go-ahead without one) waits for `key`'s
    /// worker: nothing to ask the remote.
    pub(crate) fn is_ready(&self, key: &StoreKey) -> bool {
        let state = self.state();
        let digest = key.digest();
        state.held.contains_key(&digest) || state.without.contains(&digest)
    }

    /// A remote lease of `key` taken with another key's group, if any,
    /// once the group asking for it (if one is in flight) has its answer,
    /// waited for at most `patience` (the group's round trips are bounded
    /// by the remote's timeout each).
    pub(crate) fn take_held(&self, key: &StoreKey, patience: Duration) -> Option<Ready> {
        self.take_held_and_ahead(key, patience).0
    }

    /// [`take_held`](Self::take_held), and whether the caller should ask
    /// for the next group in the background ([`claim_ahead`](Self::claim_ahead)):
    /// a worker came to a key, and the leases waiting ahead of the
    /// workers run low.
    pub(crate) fn take_held_and_ahead(
        &self,
        key: &StoreKey,
        patience: Duration,
    ) -> (Option<Ready>, bool) {
        let mut state = self.state();
        state.asked();
        let digest = key.digest();
        let deadline = Instant::now() + patience;
        while state.asking.contains(&digest) {
            let now = Instant::now();
            if now >= deadline {
                return (None, false);
            }
            state = self
                .settled
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        state.unclaimed.retain(|other| other.digest() != digest);
        let held = state.held.remove(&digest);
        let without = held.is_none() && state.without.remove(&digest);
        let ahead = (held.is_some() || without) && state.wants_ahead();
        if ahead {
            state.ahead = true;
        }
        let ready = match held {
            Some((lease, renewal)) => Some(Ready::Lease(lease, renewal)),
            None if without => Some(Ready::Without),
            None => None,
        };
        (ready, ahead)
    }

    /// The batch waits for `key`, which another holds.
    pub(crate) fn wait_on(&self, key: &StoreKey, waited: Waited) {
        self.state()
            .waited
            .insert(key.digest(), (key.clone(), waited));
    }

    /// Who holds `key` as far as the batch knows, if it waits for it.
    pub(crate) fn waited(&self, key: &StoreKey) -> Option<Waited> {
        self.state()
            .waited
            .get(&key.digest())
            .map(|(_, waited)| *waited)
    }

    /// Every key the batch waits for on another machine.
    pub(crate) fn waited_remotely(&self) -> Vec<(StoreKey, Instant)> {
        self.state()
            .waited
            .values()
            .filter_map(|(key, waited)| match waited {
                Waited::Remote { checked } => Some((key.clone(), *checked)),
                Waited::Local => None,
            })
            .collect()
    }

    /// The holder of `key` as read with every key the batch waits for on
    /// another machine, within `fresh`: `None` when not read so lately,
    /// `Some(None)` when nobody verified holds it.
    pub(crate) fn named(&self, key: &StoreKey, fresh: Duration) -> Option<Option<String>> {
        let state = self.state();
        let (read, names) = state.names.as_ref()?;
        if read.elapsed() > fresh {
            return None;
        }
        names.get(&key.digest()).cloned()
    }

    /// Keeps the holders of the keys the batch waits for, read now.
    pub(crate) fn keep_names(&self, names: Names) {
        self.state().names = Some((Instant::now(), names));
    }

    /// Keeps `entry`, read for `key` without being asked for, for the
    /// key's next lookup.
    pub(crate) fn keep_entry(&self, key: &StoreKey, entry: Lookup<Vec<u8>>) {
        self.state().entries.insert(key.digest(), entry);
    }

    /// What one read of keys the batch waits for found: a lease taken
    /// (kept for the key's worker, with its entry's miss), a key to
    /// compile without one, a key still held (read again later), or a key
    /// settled (its entry was there).
    pub(crate) fn rechecked(&self, key: &StoreKey, outcome: Rechecked) {
        let digest = key.digest();
        let late = {
            let mut state = self.state();
            match outcome {
                Rechecked::Held(lease, entry) => {
                    state.waited.remove(&digest);
                    state.entries.insert(digest, entry);
                    if let std::collections::hash_map::Entry::Vacant(vacant) =
                        state.held.entry(digest)
                    {
                        let renewal = lease.renewal();
                        vacant.insert((lease, renewal));
                        None
                    } else {
                        Some(lease)
                    }
                }
                Rechecked::Without(entry) => {
                    state.waited.remove(&digest);
                    state.entries.insert(digest, entry);
                    state.without.insert(digest);
                    None
                }
                Rechecked::Still => {
                    state.waited.insert(
                        digest,
                        (
                            key.clone(),
                            Waited::Remote {
                                checked: Instant::now(),
                            },
                        ),
                    );
                    None
                }
                Rechecked::Settled => {
                    state.waited.remove(&digest);
                    None
                }
            }
        };
        if let Some(lease) = late {
            release_all(vec![lease]);
        }
    }

    /// Lets go of a lease of `key` taken with another key's group (its
    /// machine's claim is another process's).
    pub(crate) fn let_go(&self, key: &StoreKey, patience: Duration) {
        if let Some(Ready::Lease(lease, renewal)) = self.take_held(key, patience) {
            drop(renewal);
            drop(lease);
        }
    }

    /// The remote claim of `key`, asked for in one round trip with the
    /// next keys of the batch not asked for yet (each group's entries read
    /// after its claims, the group as large as [`group_size`] says); the
    /// leases of the others wait here for their worker.
    pub(crate) fn claim(&self, remote: &RemoteStore, key: &StoreKey) -> Attempt {
        self.claim_group(remote, Some(key))
            .unwrap_or(Attempt::Unreachable)
    }

    /// The next group of the batch's keys, asked for while the workers
    /// compile the leases held ahead of them
    /// ([`take_held_and_ahead`](Self::take_held_and_ahead) said so): its
    /// leases wait here for their workers.
    pub(crate) fn claim_ahead(&self, remote: &RemoteStore) {
        drop(self.claim_group(remote, None));
        self.state().ahead = false;
        self.settled.notify_all();
    }

    /// No group is asked for in the background after all.
    pub(crate) fn no_claim_ahead(&self) {
        self.state().ahead = false;
    }

    fn claim_group(&self, remote: &RemoteStore, first: Option<&StoreKey>) -> Option<Attempt> {
        let mut group = Vec::new();
        let batch;
        {
            let mut state = self.state();
            batch = state.finished;
            if let Some(key) = first {
                let digest = key.digest();
                state.unclaimed.retain(|other| other.digest() != digest);
                group.push(key.clone());
            }
            let size = group_size(state.round_trip, state.pace());
            let others = state.unclaimed.len().min(size - group.len());
            group.extend(state.unclaimed.drain(..others));
            let waited_for = usize::from(first.is_some());
            for other in &group[waited_for..] {
                state.asking.insert(other.digest());
            }
            for key in &group {
                state.tried.insert(key.digest());
            }
        }
        if group.is_empty() {
            return None;
        }
        let waited_for = usize::from(first.is_some());
        let limit = remote.config().max_entry_bytes;
        let reads: Vec<redis::Cmd> = group
            .iter()
            .map(|key| RemoteStore::read_command(&remote.entry_key(key), limit))
            .collect();
        let asked = Instant::now();
        let subjects: Vec<[u8; 32]> = group.iter().map(StoreKey::digest).collect();
        let verifies = |index: usize, value: &redis::Value| {
            subjects
                .get(index)
                .is_some_and(|subject| remote.read_verifies(subject, value))
        };
        let (attempts, read) = attempt_many(remote, &group, &reads, Some(&verifies));
        let took = asked.elapsed();
        crate::statistics::bump(&remote.inner.counters.claim_round_trips);
        let mut state = self.state();
        if read.is_some() {
            state.round_trip = Some(took);
        }
        let finished = state.finished != batch;
        if let Some(read) = read
            && !finished
        {
            // Only a key compiled or read here makes a fresh read worth
            // keeping (its worker's re-check): a key another holds is
            // read again once something is heard of it.
            for ((key, reply), attempt) in group.iter().zip(read).zip(&attempts) {
                if matches!(
                    attempt,
                    Attempt::Held(_) | Attempt::Published | Attempt::Contested
                ) {
                    let digest = key.digest();
                    state
                        .entries
                        .insert(digest, remote.answer_read(&digest, reply));
                }
            }
        }
        let mut attempts = attempts.into_iter();
        let first = if waited_for == 1 {
            Some(attempts.next().unwrap_or(Attempt::Unreachable))
        } else {
            None
        };
        let mut late = Vec::new();
        for (key, attempt) in group.iter().skip(waited_for).zip(attempts) {
            match attempt {
                // Its batch is over: nobody comes for it.
                Attempt::Held(lease) if finished => late.push(lease),
                Attempt::Held(lease) => {
                    let renewal = lease.renewal();
                    state.held.insert(key.digest(), (lease, renewal));
                }
                // No lease to wait for: its worker compiles it (or reads
                // its entry) without asking again.
                Attempt::Contested | Attempt::Published if !finished => {
                    state.without.insert(key.digest());
                }
                // Another's: its worker finds it waited for, asked again
                // only once something is heard of it.
                Attempt::Busy if !finished => {
                    state.waited.insert(
                        key.digest(),
                        (
                            key.clone(),
                            Waited::Remote {
                                checked: Instant::now(),
                            },
                        ),
                    );
                }
                // Asked again, alone, when its worker comes to it.
                _ => {}
            }
        }
        for other in &group[waited_for..] {
            state.asking.remove(&other.digest());
        }
        drop(state);
        self.settled.notify_all();
        release_all(late);
        first
    }

    /// The batch finished: what it did not use is let go, the leases in
    /// one round trip.
    pub(crate) fn finish(&self) {
        let held: Vec<(RemoteLease, Renewal)> = {
            let mut state = self.state();
            state.finished += 1;
            state.round_trip = None;
            state.last_asked.clear();
            state.period = None;
            state.unclaimed.clear();
            state.tried.clear();
            state.entries.clear();
            state.blobs.clear();
            state.without.clear();
            state.waited.clear();
            state.names = None;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p12_claim_groups_cover_two_round_trips_of_the_batchs_pace() {
        let ms = Duration::from_millis;
        // Before any round trip is measured: the smallest group.
        assert_eq!(group_size(None, None), CLAIM_GROUP);
        // A remote next door keeps groups of 8, however fast the batch.
        assert_eq!(group_size(Some(Duration::from_micros(200)), None), 8);
        assert_eq!(
            group_size(
                Some(Duration::from_micros(200)),
                Some(Duration::from_micros(60))
            ),
            8
        );
        // 100 ms away at the assumed 10 ms a key: 20 keys; at a measured
        // 5 ms a key, 40; at 100 ms a key (slow compiles), 8.
        assert_eq!(group_size(Some(ms(100)), None), 20);
        assert_eq!(group_size(Some(ms(100)), Some(ms(5))), 40);
        assert_eq!(group_size(Some(ms(100)), Some(ms(100))), 8);
        // 400 ms away: a batch of 64 in one group; never past the largest.
        assert!(group_size(Some(ms(400)), None) >= 64);
        assert_eq!(
            group_size(Some(Duration::from_secs(10)), None),
            LARGEST_CLAIM_GROUP
        );
        // What is kept ahead of the workers: a round trip's keys and one.
        assert_eq!(lead(ms(100), ms(10)), 11);
        assert_eq!(lead(Duration::from_micros(200), ms(10)), 2);
    }
}
