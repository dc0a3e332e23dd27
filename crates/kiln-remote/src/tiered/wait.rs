//! Keys a batch waits for (P12): another machine's lease, read again only
//! when something is heard of it (a release, its lease run out, its key
//! gone) or its time to be read again has come, and then every such key
//! of the batch in one round trip that reads its entry and tries its claim
//! together. A holder that dies costs its waiters one lease, whatever the
//! round trip and the number of keys; a waiting batch costs its Redis
//! nothing while nothing changes.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use kiln_engine::{Lookup, Miss, StoreKey};

use super::TieredStore;
use crate::remote::RemoteStore;
use crate::remote::claim::{Attempt, attempt_many, release_all};
use crate::step::{Rechecked, Waited};

/// The least time between two reads of a key another holds, whatever is
/// heard of it.
const RECHECK_FLOOR: Duration = Duration::from_millis(100);

impl TieredStore {
    /// Whether `key`, waited for on another machine and last read at
    /// `checked`, is to be read again now: its holder is gone by what
    /// this node heard, or its time to be read again has come.
    fn due(&self, key: &StoreKey, checked: Instant) -> bool {
        let remote = &self.inner.remote;
        let since = checked.elapsed();
        since >= remote.recheck_period()
            || (since >= RECHECK_FLOOR && !remote.still_held(&key.digest()))
    }

    /// Whether `key` is to be asked of the remote now: not a key the
    /// batch waits for on another machine, or one that is due
    /// ([`due`](Self::due)).
    pub(super) fn recheck_due(&self, key: &StoreKey) -> bool {
        match self.inner.step.waited(key) {
            Some(Waited::Remote { checked }) => self.due(key, checked),
            Some(Waited::Local) | None => true,
        }
    }

    /// Reads again, in one round trip, the keys at `places` in `keys`,
    /// which the batch waits for, and every other key it waits for that is
    /// due: each entry, and a claim of each (the claims first, so an entry
    /// published before its holder let go is read). A hit is answered
    /// (written back locally), a claim taken or lost to a stranger is kept
    /// for the key's worker, what another still holds stays waited for;
    /// what was read for keys not asked for now is kept for their next
    /// lookup. The keys of a batch are read together, never one by one as
    /// its waiters come to them.
    pub(super) fn recheck(
        &self,
        keys: &[StoreKey],
        answers: &mut [Lookup<Vec<u8>>],
        places: &[usize],
    ) {
        if places.is_empty() {
            return;
        }
        let remote: &RemoteStore = &self.inner.remote;
        let mut asked: Vec<StoreKey> = places.iter().map(|place| keys[*place].clone()).collect();
        let asked_now = asked.len();
        let mut digests: HashSet<[u8; 32]> = asked.iter().map(StoreKey::digest).collect();
        for (key, checked) in self.inner.step.waited_remotely() {
            if !digests.contains(&key.digest()) && self.due(&key, checked) {
                digests.insert(key.digest());
                asked.push(key);
            }
        }
        let limit = remote.config().max_entry_bytes;
        let reads: Vec<redis::Cmd> = asked
            .iter()
            .map(|key| RemoteStore::read_command(&remote.entry_key(key), limit))
            .collect();
        let subjects: Vec<[u8; 32]> = asked.iter().map(StoreKey::digest).collect();
        let verifies = |index: usize, value: &redis::Value| {
            subjects
                .get(index)
                .is_some_and(|subject| remote.read_verifies(subject, value))
        };
        let (attempts, read) = attempt_many(remote, &asked, &reads, Some(&verifies));
        let Some(read) = read else {
            // Not answered: still waited for, read again at its time.
            for key in &asked {
                self.inner.step.rechecked(key, Rechecked::Still);
            }
            return;
        };
        let mut late = Vec::new();
        for (index, ((key, attempt), reply)) in asked.iter().zip(attempts).zip(read).enumerate() {
            let found = remote.answer_read(&key.digest(), reply);
            if let Lookup::Hit { .. } = found {
                // Published: nothing to compile, a lease taken meanwhile
                // is let go.
                if let Attempt::Held(lease) = attempt {
                    late.push(lease);
                }
                self.inner.step.rechecked(key, Rechecked::Settled);
                match places.get(index).filter(|_| index < asked_now) {
                    Some(place) => {
                        self.asked_remote(&found);
                        let local =
                            std::mem::replace(&mut answers[*place], Lookup::Miss(Miss::Absent));
                        answers[*place] = self.settle(local, found, |bytes, work| {
                            self.queue_local_copy(key, bytes, work, None);
                        });
                    }
                    None => self.inner.step.keep_entry(key, found),
                }
                continue;
            }
            let outcome = match attempt {
                Attempt::Held(lease) => Rechecked::Held(lease, found),
                Attempt::Published | Attempt::Contested => Rechecked::Without(found),
                Attempt::Busy | Attempt::Unreachable => Rechecked::Still,
            };
            self.inner.step.rechecked(key, outcome);
        }
        release_all(late);
    }
}
