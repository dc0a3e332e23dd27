//! [`TieredStore`]: the local store in front of the remote one (P10).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kiln_engine::store::{
    BlobKey, Blobs, Claim, ClaimGuard, ClaimWait, Claims, Explanation, Groups, Records, StoreParts,
};
use kiln_engine::{
    ArtifactStore, Generation, Lookup, Miss, Origin, Put, StoreCounters, StoreKey, StoreOutcome,
    StoreStatistics,
};
use serde::{Deserialize, Serialize};

use crate::fleet::FleetCounts;
use crate::queue::{ArtifactWrite, Write, WriteQueue};
use crate::remote::RemoteStore;
use crate::remote::claim::{Attempt, attempt_waiting};
use crate::statistics::RemoteStatistics;
use crate::step::{Ready, Rechecked, Step, Waited};

mod fetch;
mod held;
mod wait;

/// How long the holders read for a waiting batch are named without
/// reading them again.
const NAMES_FRESH: Duration = Duration::from_secs(1);
use held::{HeldHere, QueuedRelease};

/// A two-level store: a local store (the disk store) in front of a
/// [`RemoteStore`] shared by a fleet (P10).
///
/// - **Reads** go to the local store, then, for what it misses, to the
///   remote in one round trip per batch; a verified remote hit is written
///   to the local store through the same background queue (a durable
///   local write per kernel would cost a warm start more than the round
///   trip), so the other processes of the machine read it from disk. A
///   local hit never asks the remote.
/// - **One fetch per machine** (P10): a batch's lookup
///   ([`lookup_many`](ArtifactStore::lookup_many)) takes the local
///   store's claim of each key it missed, never waiting, before asking the
///   remote, and keeps it until the remote's copy is written locally. A
///   key whose claim another process of the machine holds is waited for
///   on the local store, briefly (the remote's timeout, within 0.1–1 s,
///   while copies keep landing): it lands there, or its claim is let go
///   and this process fetches it, or past the wait it is fetched anyway.
///   The wait only saves fetches; nothing depends on it. A single
///   [`lookup`](ArtifactStore::lookup) (a waiter polling for another's
///   publish) takes no claim and never waits.
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
/// - **A size split** ([`with_split`](Self::with_split)), when a bucket is
///   behind this store: artifacts larger than the split are not offered
///   to Redis (the bucket behind takes them); lookups still ask Redis,
///   which cannot know an entry's size before it is read.
///
/// ```no_run
/// use kiln_engine::ArtifactStore;
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
    /// What this store last added to the fleet's counts.
    reported: Mutex<FleetCounts>,
    /// The keys (by digest) whose local claim this process holds through
    /// this store, each with how many times: a lookup of one of them
    /// never claims it again or waits for itself.
    held_here: Arc<Mutex<HashMap<[u8; 32], usize>>>,
    /// What the batch running asked the remote for once per step.
    step: Step,
    /// The largest artifact offered to the remote: `None` offers every
    /// one (no bucket behind).
    split: Option<u64>,
}

/// What the two-level store answered, counted once per lookup (its
/// lookups' share of [`StoreCounters`]).
#[derive(Debug, Default)]
struct Answers {
    store: StoreCounters,
    remote_hits: AtomicU64,
    remote_misses: AtomicU64,
    written_back: AtomicU64,
    copies_read: AtomicU64,
    split_off: AtomicU64,
}

/// A two-level store's counts (`kiln stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TieredStatistics {
    /// The local store's own counts.
    pub local: StoreStatistics,
    /// The remote store's own counts.
    pub remote: RemoteStatistics,
    /// Artifacts (of kernels, by id or by source) the local store missed
    /// and the remote answered.
    pub remote_hits: u64,
    /// Artifacts the local store missed and the remote, asked, does not
    /// hold: with `remote_hits`, what was asked of the remote tier (the
    /// named blobs read beside them, failure memories and tuning answers,
    /// are not counted, so a node that found every kernel there shows a
    /// hit rate of 100 %).
    #[serde(default)]
    pub remote_misses: u64,
    /// Remote hits written to the local store.
    pub written_back: u64,
    /// Lookups the local store missed at first and answered once another
    /// process of this machine had fetched the entry from the remote and
    /// written it there: fetches the remote was spared (P10).
    pub copies_read: u64,
    /// Remote writes waiting in the queue now.
    pub queued: u64,
    /// Remote writes the queue took and the remote stored.
    pub remote_writes: u64,
    /// Remote writes the queue took and the remote did not store (failed
    /// or skipped).
    pub remote_write_failures: u64,
    /// Remote writes dropped because the queue was full.
    pub queue_dropped: u64,
    /// Artifacts larger than the size split, not offered to the remote
    /// (the bucket behind takes them).
    #[serde(default)]
    pub split_off: u64,
}

impl TieredStore {
    /// `local` in front of `remote`. Starts connecting to the remote in
    /// the background ([`RemoteStore::connect_in_background`]), so the
    /// first batch's lookups find a connection ready.
    pub fn new(local: impl ArtifactStore + 'static, remote: RemoteStore) -> Self {
        Self::split(local, remote, None)
    }

    /// [`new`](Self::new), offering the remote only artifacts of at most
    /// `largest` bytes: the size split of a fleet with Redis and a bucket
    /// behind it, the small entries in Redis's memory and the large ones
    /// in the bucket. Blobs, failure memories and claims stay with Redis.
    pub fn with_split(
        local: impl ArtifactStore + 'static,
        remote: RemoteStore,
        largest: u64,
    ) -> Self {
        Self::split(local, remote, Some(largest))
    }

    fn split(local: impl ArtifactStore + 'static, remote: RemoteStore, split: Option<u64>) -> Self {
        let local: Arc<dyn ArtifactStore> = Arc::new(local);
        remote.connect_in_background();
        Self {
            inner: Arc::new(Inner {
                queue: WriteQueue::new(remote.clone(), Arc::clone(&local)),
                local,
                remote,
                answers: Answers::default(),
                reported: Mutex::new(FleetCounts::default()),
                held_here: Arc::default(),
                step: Step::default(),
                split,
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
    /// Then adds what this store counted since its last flush to the
    /// fleet's counts in the remote ([`RemoteStore::fleet_counts`]), when
    /// this node writes the remote.
    pub fn flush(&self, timeout: Duration) -> bool {
        let flushed = self.inner.queue.flush(timeout);
        self.report_counts();
        flushed
    }

    /// What this process counted, as the fleet's counts add it up.
    pub fn fleet_counts(&self) -> FleetCounts {
        let statistics = self.tiered_statistics();
        let remote = &statistics.remote;
        FleetCounts {
            processes: 1,
            remote_hits: statistics.remote_hits,
            remote_misses: statistics.remote_misses,
            unverified: remote.unverified,
            timeouts: remote.timeouts,
            errors: remote.errors,
            breaker_opened: remote.breaker_opened,
            skipped_while_open: remote.skipped_while_open,
            written: statistics.remote_writes,
            write_failures: statistics.remote_write_failures,
            queue_dropped: statistics.queue_dropped,
            nondeterministic: remote.nondeterministic,
        }
    }

    fn report_counts(&self) {
        let mut reported = self
            .inner
            .reported
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = self.fleet_counts();
        let mut news = now.since(&reported);
        // The process counts itself once, with its first report.
        news.processes = u64::from(reported.processes == 0);
        if news
            .fields()
            .iter()
            .all(|(name, value)| *name == "processes" || *value == 0)
        {
            return;
        }
        if self.inner.remote.add_fleet_counts(&news) {
            *reported = now;
        }
    }

    /// The counts of both tiers and of the queue between them.
    pub fn tiered_statistics(&self) -> TieredStatistics {
        let state = &self.inner.queue.state;
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        TieredStatistics {
            local: self.inner.local.statistics(),
            remote: self.inner.remote.remote_statistics(),
            remote_hits: read(&self.inner.answers.remote_hits),
            remote_misses: read(&self.inner.answers.remote_misses),
            written_back: read(&self.inner.answers.written_back)
                + read(&self.inner.queue.state.written_back),
            copies_read: read(&self.inner.answers.copies_read),
            queued: self.inner.queue.queued(),
            remote_writes: read(&state.written),
            remote_write_failures: read(&state.failed),
            queue_dropped: read(&state.dropped),
            split_off: read(&self.inner.answers.split_off),
        }
    }

    fn count(&self, lookup: &Lookup<Vec<u8>>) {
        self.inner.answers.store.count_lookup(lookup);
    }

    /// Counts the remote's answer to an artifact's key the local store
    /// missed: a hit, or an absence (a call that failed or was skipped
    /// asked nothing, and an entry that did not verify is counted apart).
    fn asked_remote(&self, remote: &Lookup<Vec<u8>>) {
        let answers = &self.inner.answers;
        match remote {
            Lookup::Hit { .. } => answers.remote_hits.fetch_add(1, Ordering::Relaxed),
            Lookup::Miss(Miss::Absent) => answers.remote_misses.fetch_add(1, Ordering::Relaxed),
            Lookup::Miss(_) => 0,
        };
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

    /// Queues for the fleet what the local store kept. What it refused (an
    /// empty artifact, say) is not offered to the fleet either: the tiers
    /// keep the same entries. An artifact over the size split is the
    /// bucket's, counted.
    fn offer(
        &self,
        outcome: &StoreOutcome,
        key: &StoreKey,
        source_key: Option<&StoreKey>,
        bytes: &[u8],
        work: Duration,
    ) {
        if self.inner.remote.writes() && !matches!(outcome, StoreOutcome::Failed { .. }) {
            if self
                .inner
                .split
                .is_some_and(|largest| bytes.len() as u64 > largest)
            {
                self.inner.answers.split_off.fetch_add(1, Ordering::Relaxed);
                return;
            }
            self.inner
                .queue
                .push(Write::Artifact(Box::new(ArtifactWrite {
                    key: key.clone(),
                    source_key: source_key.cloned(),
                    bytes: bytes.to_vec(),
                    work,
                })));
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
        self.lookup_one(key)
    }
    fn lookup_many(&self, keys: &[StoreKey]) -> Vec<Lookup<Vec<u8>>> {
        let mut answers = self.inner.local.lookup_many(keys);
        let missed: Vec<usize> = answers
            .iter()
            .enumerate()
            .filter(|(_, answer)| matches!(answer, Lookup::Miss(_)))
            .map(|(index, _)| index)
            .collect();
        // P10: one process of the machine fetches each key, the others
        // read its copy. Not while the remote is known to be down: no
        // copy is coming, and nobody should wait for one.
        let coordinates = !self.inner.remote.inner.remote.breaker.is_open();
        let mut fetches = Vec::new();
        let mut waiting = Vec::new();
        let mut rechecks = Vec::new();
        for index in missed {
            let key = &keys[index];
            // P12: keys the batch waits for are read again together, and
            // only those something was heard of or whose time has come.
            if self.inner.step.is_ready(key) {
                // Its worker has what it needs: nothing to ask.
                continue;
            }
            match self.inner.step.waited(key) {
                Some(Waited::Local) => continue,
                Some(Waited::Remote { .. }) => {
                    if self.recheck_due(key) {
                        rechecks.push(index);
                    }
                    continue;
                }
                None => {}
            }
            if !coordinates || self.is_held_here(key) {
                fetches.push((index, None));
                continue;
            }
            match self.claim_to_fetch(key) {
                Some(claim) => fetches.push((index, claim)),
                None => waiting.push(index),
            }
        }
        self.fetch(keys, &mut answers, fetches, true);
        if !waiting.is_empty() {
            self.wait_for_copies(keys, &mut answers, waiting);
        }
        self.recheck(keys, &mut answers, &rechecks);
        for answer in &answers {
            self.count(answer);
        }
        answers
    }

    fn put_many(&self, puts: &[Put<'_>]) -> Vec<StoreOutcome> {
        // Durable together on the local store, as it alone would write
        // them; each it kept is offered to the remote, a compile with its
        // text's key, a rekeyed kernel or a copy under its own.
        let outcomes = self.inner.local.put_many(puts);
        for (put, outcome) in puts.iter().zip(&outcomes) {
            let source_key = match put.origin {
                Origin::Compiled { source_key } => source_key,
                Origin::Rekeyed { .. } | Origin::Copied => None,
            };
            self.offer(outcome, put.key, source_key, put.bytes, put.work);
        }
        outcomes
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
        let answers = self.inner.answers.store.snapshot();
        StoreStatistics {
            hits: answers.hits,
            absent: answers.absent,
            corrupt: answers.corrupt,
            foreign: answers.foreign,
            unreadable: answers.unreadable,
            bytes_read: answers.bytes_read,
            ..local
        }
    }

    fn parts(&self) -> StoreParts<'_> {
        // Each part composed of the local store's and the remote's.
        StoreParts::all(self)
    }
}

/// Claims: this machine's (the local store's) and the fleet's (the
/// remote's leases), taken in that order (P4, P12).
impl Claims for TieredStore {
    fn claim(&self, key: &StoreKey, wait: ClaimWait) -> Claim {
        self.claim_here(key, wait)
    }

    fn holder(&self, key: &StoreKey) -> Option<String> {
        // A process of this machine first: it is what this one waits on
        // before the remote's lease is even asked for.
        self.inner.local.parts().holder(key).or_else(|| {
            if !matches!(self.inner.step.waited(key), Some(Waited::Remote { .. })) {
                return self.inner.remote.holder(key);
            }
            // A waiting batch names the holders of several keys: those of
            // every key it waits for are read together, once.
            if let Some(named) = self.inner.step.named(key, NAMES_FRESH) {
                return named;
            }
            let waited: Vec<StoreKey> = self
                .inner
                .step
                .waited_remotely()
                .into_iter()
                .map(|(key, _)| key)
                .collect();
            let names: HashMap<[u8; 32], Option<String>> = waited
                .iter()
                .map(StoreKey::digest)
                .zip(self.inner.remote.lease_holders(&waited))
                .collect();
            let named = names.get(&key.digest()).cloned().flatten();
            self.inner.step.keep_names(names);
            named
        })
    }

    fn claim_timeout(&self) -> Duration {
        self.inner.local.parts().claim_timeout()
    }
}

/// Blobs: the local store's first, the remote's for what it misses,
/// written back; a put written to both, the remote's behind.
impl Blobs for TieredStore {
    fn lookup_blob(&self, key: &BlobKey) -> Lookup<Vec<u8>> {
        let local = self.inner.local.parts().lookup_blob(key);
        let answer = if let Lookup::Miss(_) = local {
            let remote = match self.inner.step.take_blob(key) {
                Some(read) => read,
                None => self.inner.remote.lookup_blob(key),
            };
            self.settle(local, remote, |bytes, _| {
                let outcome = self.inner.local.parts().put_blob(key, bytes);
                self.written_back(&outcome);
            })
        } else {
            local
        };
        self.count(&answer);
        answer
    }

    fn put_blob(&self, key: &BlobKey, bytes: &[u8]) -> StoreOutcome {
        let outcome = self.inner.local.parts().put_blob(key, bytes);
        if self.inner.remote.writes() && !matches!(outcome, StoreOutcome::Failed { .. }) {
            self.inner.queue.push(Write::Blob {
                key: key.clone(),
                bytes: bytes.to_vec(),
            });
        }
        outcome
    }
}

/// Records: batches kept locally; a kernel explained by the local store,
/// else by the remote.
impl Records for TieredStore {
    fn keep_batch(&self, record: &[u8]) {
        self.inner.local.parts().keep_batch(record);
    }

    fn kept_batches(&self) -> Vec<Vec<u8>> {
        self.inner.local.parts().kept_batches()
    }

    fn explain(&self, key: &StoreKey) -> Explanation {
        match self.inner.local.parts().explain(key) {
            Explanation::NeverSeen => self.inner.remote.explain(key),
            known => known,
        }
    }
}

/// Groups: the local store's, and the end of the batch's step.
impl Groups for TieredStore {
    fn begin_group(&self) {
        self.inner.local.parts().begin_group();
    }

    fn commit_group(&self) {
        self.inner.local.parts().commit_group();
    }

    fn batch_finished(&self) {
        self.inner.step.finish();
        self.inner.local.parts().batch_finished();
    }
}

impl TieredStore {
    fn lookup_one(&self, key: &StoreKey) -> Lookup<Vec<u8>> {
        // One key asked again (a waiter polling for another's publish, a
        // claimant checking what landed): local, then remote, no claim.
        let local = self.inner.local.lookup(key);
        let answer = if let Lookup::Miss(_) = local {
            match self.inner.step.take_entry(key) {
                // Read right after this process took its claim: a
                // claimant checking that nobody published it meanwhile.
                Some(remote) => {
                    // Its miss was counted with the batch's lookup: a
                    // second reading of the same key asks nothing new,
                    // unless another published it meanwhile.
                    if let Lookup::Hit { .. } = remote {
                        self.asked_remote(&remote);
                    }
                    self.settle(local, remote, |bytes, work| {
                        self.queue_local_copy(key, bytes, work, None);
                    })
                }
                // Another's, nothing heard of it since it was last read
                // (P12), or another process of this machine's (it lands
                // on the disk): the local answer stands.
                None if !self.recheck_due(key) => local,
                None if matches!(self.inner.step.waited(key), Some(Waited::Local)) => local,
                None if self.inner.step.waited(key).is_some() => {
                    let mut answers = vec![local];
                    self.recheck(std::slice::from_ref(key), &mut answers, &[0]);
                    answers.pop().expect("one answer")
                }
                None => {
                    let mut answers = vec![local];
                    self.fetch(
                        std::slice::from_ref(key),
                        &mut answers,
                        vec![(0, None)],
                        false,
                    );
                    answers.pop().expect("one answer")
                }
            }
        } else {
            local
        };
        self.count(&answer);
        answer
    }
    fn claim_here(&self, key: &StoreKey, wait: ClaimWait) -> Claim {
        match self.inner.local.parts().claim(key, wait) {
            Claim::Busy => {
                // Another process of this machine compiles it: a lease
                // taken with another key's group is its to take.
                self.inner.step.let_go(key, self.group_patience());
                if wait == ClaimWait::Once {
                    self.inner.step.wait_on(key, Waited::Local);
                }
                Claim::Busy
            }
            Claim::Held(local) => {
                let held = HeldHere::new(&self.inner.held_here, key);
                let (ready, ahead) = self
                    .inner
                    .step
                    .take_held_and_ahead(key, self.group_patience());
                if ahead {
                    self.claim_ahead();
                }
                let mut asked = false;
                let attempt = match (ready, wait) {
                    (Some(Ready::Lease(lease, renewal)), _) => Ok((lease, renewal)),
                    (Some(Ready::Without), _) => Err(Attempt::Contested),
                    // P12: a key another machine holds, nothing heard of
                    // it since it was last read: still its, no round trip.
                    (None, ClaimWait::Once) if !self.recheck_due(key) => Err(Attempt::Busy),
                    // P12: a worker's claim takes the next keys' too, in
                    // one round trip.
                    (None, ClaimWait::Once) => {
                        asked = true;
                        Err(self.inner.step.claim(&self.inner.remote, key))
                    }
                    (None, ClaimWait::Patiently) => {
                        Err(attempt_waiting(&self.inner.remote, key, wait))
                    }
                };
                let attempt = match attempt {
                    Ok(held_before) => Ok(held_before),
                    Err(Attempt::Held(lease)) => {
                        let renewal = lease.renewal();
                        Ok((lease, renewal))
                    }
                    Err(other) => Err(other),
                };
                match attempt {
                    Ok((lease, renewal)) => {
                        // The tuple drops the local claim first; the
                        // remote lease is released behind the remote
                        // writes queued before it, so its artifact is in
                        // the remote first.
                        let lease = QueuedRelease {
                            lease: Some(lease),
                            key: key.clone(),
                            store: Arc::downgrade(&self.inner),
                        };
                        Claim::Held(ClaimGuard::leased((local, lease, held), renewal))
                    }
                    Err(Attempt::Busy) => {
                        if asked {
                            self.inner.step.rechecked(key, Rechecked::Still);
                        }
                        Claim::Busy
                    }
                    Err(
                        Attempt::Unreachable
                        | Attempt::Contested
                        | Attempt::Published
                        | Attempt::Held(_),
                    ) => Claim::Held(ClaimGuard::new((local, held))),
                }
            }
            Claim::Uncoordinated => self.inner.remote.claim(key, wait),
        }
    }
}
