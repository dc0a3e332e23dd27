//! The tiered store's fetch path: what a batch's lookup misses locally is
//! asked of the remote, waiting briefly for the copies another process of
//! the machine is fetching, and written back (P10).

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use kiln_engine::store::{BlobKey, Claim, ClaimGuard, ClaimWait, KeySubject, RememberedFailure};
use kiln_engine::{Lookup, Miss, StoreKey};

use super::TieredStore;
use super::held::HeldHere;
use crate::queue::{ArtifactWrite, Write};

/// The first pause of a process waiting for another process's local copy
/// of a remote entry; it doubles up to [`LONGEST_COPY_POLL`].
const FIRST_COPY_POLL: Duration = Duration::from_millis(2);
const LONGEST_COPY_POLL: Duration = Duration::from_millis(50);

/// The shortest and longest a batch waits for another process of this
/// machine to write a remote entry to the disk store before fetching it
/// itself; between them, the remote's timeout (one fetch's bound).
const SHORTEST_COPY_WAIT: Duration = Duration::from_millis(100);
const LONGEST_COPY_WAIT: Duration = Duration::from_secs(1);

impl TieredStore {
    /// Asks the remote for `fetches` (places in `keys`, each with the local
    /// claim taken for its fetch, if any), settling `answers`: a key
    /// another process wrote locally since it was looked up is read there;
    /// a remote hit is written back, its claim released once the copy is
    /// written; a claim of a key the remote misses is released at once.
    pub(super) fn fetch(
        &self,
        keys: &[StoreKey],
        answers: &mut [Lookup<Vec<u8>>],
        fetches: Vec<(usize, Option<ClaimGuard>)>,
        batch: bool,
    ) {
        if fetches.is_empty() {
            return;
        }
        // Claimed after another process of this machine may have written
        // its copy and let the key go: read that, never fetch again.
        let claimed: Vec<usize> = fetches
            .iter()
            .filter(|(_, claim)| claim.is_some())
            .map(|(index, _)| *index)
            .collect();
        let mut landed = vec![false; keys.len()];
        if !claimed.is_empty() {
            let claimed_keys: Vec<StoreKey> =
                claimed.iter().map(|index| keys[*index].clone()).collect();
            let found = self.inner.local.lookup_many(&claimed_keys);
            for (index, found) in claimed.into_iter().zip(found) {
                if let Some(hit) = self.landed_copy(found) {
                    answers[index] = hit;
                    landed[index] = true;
                }
            }
        }
        let fetches: Vec<(usize, Option<ClaimGuard>)> = fetches
            .into_iter()
            .filter(|(index, _)| !landed[*index])
            .collect();
        if fetches.is_empty() {
            return;
        }
        let fetched_keys: Vec<StoreKey> = fetches
            .iter()
            .map(|(index, _)| keys[*index].clone())
            .collect();
        // A batch's lookup reads, in the same round trip, the failure
        // memories of the kernels it may compile (P11): their workers find
        // them here instead of asking the remote one by one.
        // A batch's lowered sources (asked together too) are no kernel's:
        // no failure memory, no claim.
        let kernel = |key: &&StoreKey| matches!(key.subject, KeySubject::Kernel { .. });
        let blobs: Vec<BlobKey> = if batch {
            fetched_keys
                .iter()
                .filter(kernel)
                .map(RememberedFailure::blob_key)
                .collect()
        } else {
            Vec::new()
        };
        let asked = Instant::now();
        let (remote, blob_answers) = self.inner.remote.lookup_with_blobs(&fetched_keys, &blobs);
        let round_trip = asked.elapsed();
        if batch {
            let missed = fetched_keys
                .iter()
                .zip(&remote)
                .filter(|(key, found)| kernel(key) && matches!(found, Lookup::Miss(_)))
                .map(|(key, _)| key.clone())
                .collect::<Vec<_>>();
            if !missed.is_empty() && self.inner.remote.writes() {
                // A batch that will claim starts hearing the fleet's
                // claims now, so that by its first claim (after its
                // sources' lookup, its lowering) the channel is heard, or
                // nearly (P12). Not before the lookup: a warm start, which
                // claims nothing, is not made to share its cores with a
                // listener.
                self.inner.remote.inner.announcements.start();
            }
            self.inner.step.looked_up(
                blobs.into_iter().zip(blob_answers).collect(),
                missed,
                round_trip,
            );
        }
        for ((index, claim), remote) in fetches.into_iter().zip(remote) {
            let local = std::mem::replace(&mut answers[index], Lookup::Miss(Miss::Absent));
            let key = &keys[index];
            let mut claim = claim;
            self.asked_remote(&remote);
            // Written back off the launch path: a batch found remotely
            // costs the round trip, not a durable local write per kernel;
            // `flush` and the drop wait for it.
            answers[index] = self.settle(local, remote, |bytes, work| {
                self.queue_local_copy(key, bytes, work, claim.take());
            });
            // A miss, or a copy the queue did not take: let the key go.
            drop(claim);
        }
    }

    /// `found`, the local answer for a key another process of this machine
    /// was copying, when its copy landed: a hit, counted as a copy read.
    fn landed_copy(&self, found: Lookup<Vec<u8>>) -> Option<Lookup<Vec<u8>>> {
        if !matches!(found, Lookup::Hit { .. }) {
            return None;
        }
        self.inner
            .answers
            .copies_read
            .fetch_add(1, Ordering::Relaxed);
        Some(found)
    }

    /// Queues the local copy of `key`'s remote hit, written off the launch
    /// path (with `claim`, this machine's claim on it, let go once it is
    /// written); found here after all, the local store keeps no miss.
    pub(super) fn queue_local_copy(
        &self,
        key: &StoreKey,
        bytes: &[u8],
        work: Duration,
        claim: Option<ClaimGuard>,
    ) {
        self.inner.local.parts().found_elsewhere(key);
        let write = ArtifactWrite {
            key: key.clone(),
            source_key: None,
            bytes: bytes.to_vec(),
            work,
        };
        self.inner
            .queue
            .push(Write::LocalCopy(Box::new(write), claim));
    }

    /// How long a batch waits at most for another process of this machine
    /// to write a remote entry locally while copies keep landing, and
    /// without any landing.
    pub(super) fn copy_wait(&self) -> (Duration, Duration) {
        let quiet = self
            .inner
            .remote
            .config()
            .timeout
            .clamp(SHORTEST_COPY_WAIT, LONGEST_COPY_WAIT);
        (quiet * 4, quiet)
    }

    /// Waits for the local copies of `waiting` (places in `keys` whose
    /// local claim another process holds), polling the local store: each
    /// copy that lands is a hit; a key whose claim was let go without a
    /// copy is claimed and fetched here; what is still held past the wait
    /// is fetched here without a claim.
    pub(super) fn wait_for_copies(
        &self,
        keys: &[StoreKey],
        answers: &mut [Lookup<Vec<u8>>],
        mut waiting: Vec<usize>,
    ) {
        let (longest, quiet) = self.copy_wait();
        let started = Instant::now();
        let mut quiet_until = started + quiet;
        let mut pause = FIRST_COPY_POLL;
        while !waiting.is_empty() {
            let now = Instant::now();
            if now >= quiet_until || now >= started + longest {
                break;
            }
            std::thread::sleep(pause.min(quiet_until - now));
            pause = (pause * 2).min(LONGEST_COPY_POLL);
            let waiting_keys: Vec<StoreKey> =
                waiting.iter().map(|index| keys[*index].clone()).collect();
            let found = self.inner.local.lookup_many(&waiting_keys);
            let mut still = Vec::new();
            let mut fetches = Vec::new();
            for (index, found) in waiting.into_iter().zip(found) {
                if let Some(hit) = self.landed_copy(found) {
                    answers[index] = hit;
                    // Copies are landing: their fetch is alive.
                    quiet_until = Instant::now() + quiet;
                    pause = FIRST_COPY_POLL;
                    continue;
                }
                match self.claim_to_fetch(&keys[index]) {
                    Some(claim) => fetches.push((index, claim)),
                    None => still.push(index),
                }
            }
            self.fetch(keys, answers, fetches, true);
            waiting = still;
        }
        if !waiting.is_empty() {
            log::debug!(
                "kiln: {} remote entries another process of this machine holds did not land \
                 locally in time; fetching them here too",
                waiting.len()
            );
        }
        self.fetch(
            keys,
            answers,
            waiting.into_iter().map(|index| (index, None)).collect(),
            true,
        );
    }

    /// One try at the local claim of `key` to fetch it: `Some` with the
    /// claim (or `None` inside when the local store does not coordinate)
    /// when this process fetches it, `None` when another holds it.
    pub(super) fn claim_to_fetch(&self, key: &StoreKey) -> Option<Option<ClaimGuard>> {
        match self.inner.local.parts().claim(key, ClaimWait::Once) {
            Claim::Held(claim) => {
                let held = HeldHere::new(&self.inner.held_here, key);
                Some(Some(ClaimGuard::new((claim, held))))
            }
            Claim::Uncoordinated => Some(None),
            Claim::Busy => None,
        }
    }

    /// How long a claim waits for the group in flight that asks for its
    /// key: the group's two round trips at most.
    pub(super) fn group_patience(&self) -> Duration {
        self.inner.remote.config().timeout * 2
    }

    /// Asks for the batch's next claim group on a thread of its own, while
    /// the workers compile what they hold (P12): a remote far away costs
    /// the batch its first group's round trip, not one per group.
    pub(super) fn claim_ahead(&self) {
        let inner = Arc::clone(&self.inner);
        let spawned = std::thread::Builder::new()
            .name("kiln-remote-claims".into())
            .spawn(move || inner.step.claim_ahead(&inner.remote));
        if spawned.is_err() {
            // The workers ask for it themselves when they come to it.
            self.inner.step.no_claim_ahead();
        }
    }

    pub(super) fn is_held_here(&self, key: &StoreKey) -> bool {
        self.inner
            .held_here
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&key.digest())
    }
}
