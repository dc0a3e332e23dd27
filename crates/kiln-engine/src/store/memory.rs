//! A store in the process's memory: for programs that want no disk, and for
//! tests of what binds to a store.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::lease::{DEFAULT_LEASE, Renewal};
use super::parts::{Blobs, Claims, Records, StoreParts};
use super::{
    ArtifactStore, BlobKey, Claim, ClaimGuard, ClaimWait, Explanation, Generation, Lookup, Miss,
    Origin, Put, StoreKey, StoreOutcome, StoreStatistics,
};

/// How long a [`ClaimWait::Patiently`] claim waits by default for another
/// holder of the same key: the disk store's default lock timeout.
pub const DEFAULT_CLAIM_TIMEOUT: Duration = Duration::from_secs(60);

/// An [`ArtifactStore`] that keeps its entries in memory, shared by every
/// clone and gone with the last one.
///
/// A clone is another handle to the same entries, counts, claims and
/// [`Generation`], so one store can be given to several targets and threads.
///
/// What the contract asks, as far as memory allows:
///
/// - An entry is held under its full key and its bytes never change once
///   put, so a hit is exactly the bytes put under exactly the key asked for
///   (P1, P2): nothing can be damaged or written for another key, and a
///   lookup misses only with [`Miss::Absent`].
/// - A put is seen whole or not at all (P3): it is published under one
///   lock, under its key and its source key together.
/// - Claims are single flight among the handles of this process (P4): a
///   second claimant of a held key waits for the guard to drop (up to
///   [`claim_timeout`](Self::with_claim_timeout)) or, with
///   [`ClaimWait::Once`], is told [`Claim::Busy`]. A claim is a lease
///   (P12, [`with_lease`](Self::with_lease)) renewed while its guard lives;
///   a guard that stops renewing loses the key to the next claimant when
///   the lease runs out. Nothing is shared with other processes.
/// - An empty artifact is refused as the disk store refuses it:
///   [`StoreOutcome::Failed`], counted as a failed put (P5).
/// - It has no limits and no group commits (no [`Groups`](super::Groups)
///   part): each put is whole when it returns, and [`clear`](Self::clear)
///   empties it.
/// - [`explain`](Records::explain) remembers the last key stored for
///   each kernel, so it names what changed since (P9); it keeps no batch
///   records.
/// - Named blobs ([`put_blob`](Blobs::put_blob)) are kept beside
///   the artifacts, under their [`BlobKey`], as artifacts are.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// use kiln_engine::{
///     ArtifactId, ArtifactStore, ArtifactStoreExt, KernelId, KeyComponents, Lookup, MemoryStore,
///     StoreKey, StoreOutcome,
/// };
///
/// let store = MemoryStore::new();
/// let components = KeyComponents::new("cuda", "nvrtc 12.4", "sm_90", "-O3");
/// let id = ArtifactId::new(KernelId::named("saxpy").build(), ());
/// let key = StoreKey::for_artifact(&components, &id, None);
///
/// let outcome = store.put(&key, None, b"cubin", Duration::from_millis(40));
/// assert_eq!(outcome, StoreOutcome::Stored { bytes: 5 });
///
/// // Another handle sees the same entries.
/// let Lookup::Hit { artifact, work, .. } = store.clone().lookup(&key) else {
///     panic!("the store holds saxpy");
/// };
/// assert_eq!(artifact, b"cubin");
/// assert_eq!(work, Duration::from_millis(40));
/// assert_eq!(store.statistics().hits, 1);
/// ```
#[derive(Clone, Default)]
pub struct MemoryStore {
    shared: Arc<Shared>,
}

/// What every handle of one store shares.
struct Shared {
    state: Mutex<State>,
    /// Woken when a claim is released.
    released: Condvar,
    generation: Generation,
    claim_timeout: Duration,
    lease: Duration,
}

impl Default for Shared {
    fn default() -> Self {
        Self {
            state: Mutex::default(),
            released: Condvar::new(),
            generation: Generation::fresh(),
            claim_timeout: DEFAULT_CLAIM_TIMEOUT,
            lease: DEFAULT_LEASE,
        }
    }
}

#[derive(Default)]
struct State {
    entries: HashMap<StoreKey, StoredEntry>,
    /// The named blobs.
    blobs: HashMap<BlobKey, Arc<[u8]>>,
    /// The last key stored for each kernel, by its digest, for
    /// [`Records::explain`]; kept when the entry goes.
    last_stored: HashMap<u128, (StoreKey, u64)>,
    /// Keys whose claim is held, with their lease.
    claimed: HashMap<StoreKey, Lease>,
    statistics: StoreStatistics,
}

/// Who holds a key's claim, and until when unless renewed.
#[derive(Clone, Copy)]
struct Lease {
    holder: u64,
    expires: Instant,
}

struct StoredEntry {
    /// Shared between an artifact key and its source key.
    bytes: Arc<[u8]>,
    work: Duration,
    stored_at: u64,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store whose [`ClaimWait::Patiently`] claims wait at most
    /// `timeout` for another holder (by default [`DEFAULT_CLAIM_TIMEOUT`]).
    pub fn with_claim_timeout(timeout: Duration) -> Self {
        Self {
            shared: Arc::new(Shared {
                claim_timeout: timeout,
                ..Shared::default()
            }),
        }
    }

    /// An empty store whose claims are leases of `lease` (by default
    /// [`DEFAULT_LEASE`]): a holder that stops renewing loses its key that
    /// long after its last renewal (P12).
    pub fn with_lease(lease: Duration) -> Self {
        Self {
            shared: Arc::new(Shared {
                lease,
                ..Shared::default()
            }),
        }
    }

    /// How many entries it holds, counting a source key and a named blob
    /// each as an entry of its own.
    pub fn len(&self) -> usize {
        let state = self.state();
        state.entries.len() + state.blobs.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every entry and moves the [`Generation`]: the store now holds
    /// other content, so loaders bound to it load again. What `explain`
    /// remembers stays, so a kernel asked again is [`Explanation::Gone`].
    pub fn clear(&self) {
        let mut state = self.state();
        state.entries.clear();
        state.blobs.clear();
        drop(state);
        self.shared.generation.advance();
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing is left half-changed across a panic inside the lock (each
        // change is one map operation or one counter), so a poisoned lock
        // still holds a consistent store.
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl State {
    /// A hit of `found`'s bytes and work, or an absent miss, counted.
    fn count_lookup(&mut self, found: Option<(Vec<u8>, Duration)>) -> Lookup<Vec<u8>> {
        match found {
            Some((artifact, work)) => {
                let bytes = artifact.len() as u64;
                self.statistics.hits += 1;
                self.statistics.bytes_read += bytes;
                Lookup::Hit {
                    artifact,
                    bytes,
                    work,
                }
            }
            None => {
                self.statistics.absent += 1;
                Lookup::Miss(Miss::Absent)
            }
        }
    }

    /// The refusal of empty `bytes`, counted as a failed put (P5), as the
    /// disk store refuses them; `None` for bytes it keeps.
    fn refuse_empty(&mut self, bytes: &[u8]) -> Option<StoreOutcome> {
        if !bytes.is_empty() {
            return None;
        }
        self.statistics.put_failures += 1;
        Some(StoreOutcome::Failed {
            detail: "an empty artifact is never stored".into(),
        })
    }

    /// A put of `bytes`, counted.
    fn count_put(&mut self, bytes: &[u8]) -> StoreOutcome {
        let written = bytes.len() as u64;
        self.statistics.puts += 1;
        self.statistics.bytes_written += written;
        StoreOutcome::Stored { bytes: written }
    }
}

/// Releases the claim of `key` on drop, unless its lease was taken over.
struct Release {
    shared: Arc<Shared>,
    key: StoreKey,
    holder: u64,
}

impl Drop for Release {
    fn drop(&mut self) {
        let mut state = self
            .shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if state
            .claimed
            .get(&self.key)
            .is_some_and(|lease| lease.holder == self.holder)
        {
            state.claimed.remove(&self.key);
        }
        drop(state);
        self.shared.released.notify_all();
    }
}

/// A holder's mark, unique in the process.
fn next_holder() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

impl ArtifactStore for MemoryStore {
    fn lookup(&self, key: &StoreKey) -> Lookup<Vec<u8>> {
        let mut state = self.state();
        let found = state
            .entries
            .get(key)
            .map(|entry| (entry.bytes.to_vec(), entry.work));
        state.count_lookup(found)
    }

    fn lookup_many(&self, keys: &[StoreKey]) -> Vec<Lookup<Vec<u8>>> {
        keys.iter().map(|key| self.lookup(key)).collect()
    }

    fn put_many(&self, puts: &[Put<'_>]) -> Vec<StoreOutcome> {
        puts.iter().map(|put| self.put_one(put)).collect()
    }

    fn remove(&self, key: &StoreKey) {
        self.state().entries.remove(key);
    }

    fn generation(&self) -> Generation {
        self.shared.generation.clone()
    }

    fn statistics(&self) -> StoreStatistics {
        self.state().statistics
    }

    fn parts(&self) -> StoreParts<'_> {
        StoreParts {
            claims: Some(self),
            blobs: Some(self),
            records: Some(self),
            groups: None,
        }
    }
}

impl MemoryStore {
    /// One put: under its key and, for a compile with its text, under the
    /// text's key too, in one lock (P3).
    fn put_one(&self, put: &Put<'_>) -> StoreOutcome {
        let source_key = match put.origin {
            Origin::Compiled { source_key } => source_key,
            Origin::Rekeyed { .. } | Origin::Copied => None,
        };
        let (key, bytes, work) = (put.key, put.bytes, put.work);
        let mut state = self.state();
        if let Some(refused) = state.refuse_empty(bytes) {
            return refused;
        }
        let stored_at = now_seconds();
        let shared_bytes: Arc<[u8]> = Arc::from(bytes);
        for key in std::iter::once(key).chain(source_key) {
            let entry = StoredEntry {
                bytes: Arc::clone(&shared_bytes),
                work,
                stored_at,
            };
            // A put of other bytes under a held key replaces them.
            state.entries.insert(key.clone(), entry);
            if let Some((_, kernel)) = key.kernel() {
                state.last_stored.insert(kernel, (key.clone(), stored_at));
            }
        }
        state.count_put(bytes)
    }
}

impl Claims for MemoryStore {
    fn claim(&self, key: &StoreKey, wait: ClaimWait) -> Claim {
        let shared = &self.shared;
        let mut state = self.state();
        // Held while its lease lives; an expired lease is the next
        // claimant's to take over (P12).
        let held_until = |state: &State| {
            state
                .claimed
                .get(key)
                .map(|lease| lease.expires)
                .filter(|expires| *expires > Instant::now())
        };
        if held_until(&state).is_some() {
            if wait == ClaimWait::Once {
                return Claim::Busy;
            }
            state.statistics.claims_waited += 1;
            let deadline = Instant::now().checked_add(shared.claim_timeout);
            while let Some(expires) = held_until(&state) {
                let left = match deadline {
                    Some(deadline) => deadline.saturating_duration_since(Instant::now()),
                    // A timeout past the end of time: wait as long as it takes.
                    None => Duration::MAX,
                };
                if left.is_zero() {
                    state.statistics.claims_timed_out += 1;
                    log::warn!(
                        "kiln memory store: {} was held for over {:?}; compiling it here too",
                        key.subject_text(),
                        shared.claim_timeout
                    );
                    return Claim::Busy;
                }
                let until_expiry = expires.saturating_duration_since(Instant::now());
                state = shared
                    .released
                    .wait_timeout(state, left.min(until_expiry.max(Duration::from_millis(1))))
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        }
        let holder = next_holder();
        state.claimed.insert(
            key.clone(),
            Lease {
                holder,
                expires: Instant::now() + shared.lease,
            },
        );
        let renewed = Arc::downgrade(shared);
        let renewed_key = key.clone();
        let renewal = Renewal::every(shared.lease / 3, move || {
            let Some(shared) = renewed.upgrade() else {
                return false;
            };
            let mut state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
            match state.claimed.get_mut(&renewed_key) {
                Some(lease) if lease.holder == holder => {
                    lease.expires = Instant::now() + shared.lease;
                    true
                }
                _ => false,
            }
        });
        Claim::Held(ClaimGuard::leased(
            Release {
                shared: Arc::clone(shared),
                key: key.clone(),
                holder,
            },
            renewal,
        ))
    }

    fn claim_timeout(&self) -> Duration {
        self.shared.claim_timeout
    }
}

impl Blobs for MemoryStore {
    fn lookup_blob(&self, key: &BlobKey) -> Lookup<Vec<u8>> {
        let mut state = self.state();
        let found = state
            .blobs
            .get(key)
            .map(|bytes| (bytes.to_vec(), Duration::ZERO));
        state.count_lookup(found)
    }

    fn put_blob(&self, key: &BlobKey, bytes: &[u8]) -> StoreOutcome {
        let mut state = self.state();
        if let Some(refused) = state.refuse_empty(bytes) {
            return refused;
        }
        state.blobs.insert(key.clone(), Arc::from(bytes));
        state.count_put(bytes)
    }
}

impl Records for MemoryStore {
    fn explain(&self, key: &StoreKey) -> Explanation {
        let state = self.state();
        if let Some(entry) = state.entries.get(key) {
            return Explanation::Held {
                stored_at: entry.stored_at,
            };
        }
        let Some((_, kernel)) = key.kernel() else {
            return Explanation::NeverSeen;
        };
        match state.last_stored.get(&kernel) {
            None => Explanation::NeverSeen,
            Some((stored, stored_at)) => match stored.first_difference(key) {
                Some(difference) => Explanation::Changed {
                    difference,
                    stored_at: *stored_at,
                },
                None => Explanation::Gone {
                    stored_at: *stored_at,
                },
            },
        }
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("entries", &self.len())
            .field("generation", &self.shared.generation.current())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::thread;

    use super::*;
    use crate::id::{ArtifactId, KernelId};
    use crate::store::{ArtifactStoreExt, KeyComponent, KeyComponents};

    fn components() -> KeyComponents {
        KeyComponents::new("cuda", "nvrtc 12.4", "sm_90", "-O3")
    }

    fn key_of(number: u32, variant: u8) -> StoreKey {
        let id = ArtifactId::new(KernelId::named("saxpy").parameter(&number).build(), variant);
        StoreKey::for_artifact(&components(), &id, None)
    }

    fn hit(lookup: Lookup<Vec<u8>>) -> (Vec<u8>, Duration) {
        match lookup {
            Lookup::Hit { artifact, work, .. } => (artifact, work),
            Lookup::Miss(miss) => panic!("expected a hit, got {miss}"),
        }
    }

    #[test]
    fn a_put_is_found_by_every_clone_with_its_work() {
        // P2
        let store = MemoryStore::new();
        let key = key_of(1, 0);
        assert!(matches!(store.lookup(&key), Lookup::Miss(Miss::Absent)));
        assert_eq!(
            store.put(&key, None, b"bytes", Duration::from_millis(7)),
            StoreOutcome::Stored { bytes: 5 }
        );
        let (artifact, work) = hit(store.clone().lookup(&key));
        assert_eq!(artifact, b"bytes");
        assert_eq!(work, Duration::from_millis(7));
        let statistics = store.statistics();
        assert_eq!(
            (statistics.hits, statistics.absent, statistics.puts),
            (1, 1, 1)
        );
        assert_eq!((statistics.bytes_read, statistics.bytes_written), (5, 5));
    }

    #[test]
    fn a_source_key_finds_the_artifact_and_outlives_its_removal() {
        // P7
        let store = MemoryStore::new();
        let (key, source) = (key_of(1, 0), key_of(2, 0));
        store.put(&key, Some(&source), b"shared", Duration::ZERO);
        assert_eq!(store.len(), 2);
        store.remove(&key);
        assert!(matches!(store.lookup(&key), Lookup::Miss(Miss::Absent)));
        assert_eq!(hit(store.lookup(&source)).0, b"shared");
    }

    #[test]
    fn an_empty_artifact_is_refused_and_counted() {
        // P5
        let store = MemoryStore::new();
        let key = key_of(1, 0);
        assert!(matches!(
            store.put(&key, None, b"", Duration::ZERO),
            StoreOutcome::Failed { .. }
        ));
        assert_eq!(store.statistics().put_failures, 1);
        assert!(store.is_empty());
    }

    #[test]
    fn explain_names_the_changed_component_then_says_gone_after_a_clear() {
        // P9
        let store = MemoryStore::new();
        let (key, other_variant) = (key_of(1, 0), key_of(1, 1));
        assert_eq!(store.explain(&key), Explanation::NeverSeen);
        store.put(&key, None, b"bytes", Duration::ZERO);
        assert!(matches!(store.explain(&key), Explanation::Held { .. }));
        let Explanation::Changed { difference, .. } = store.explain(&other_variant) else {
            panic!("another variant of a stored kernel is a change");
        };
        assert_eq!(difference.component, KeyComponent::Variant);
        let before = store.generation().current();
        store.clear();
        assert_ne!(store.generation().current(), before);
        assert!(matches!(store.explain(&key), Explanation::Gone { .. }));
    }

    #[test]
    fn a_held_claim_makes_a_second_claimant_wait_until_its_guard_drops() {
        // P4
        let store = MemoryStore::new();
        let key = key_of(1, 0);
        let Claim::Held(guard) = store.claim(&key, ClaimWait::Once) else {
            panic!("the first claim holds");
        };
        assert!(matches!(store.claim(&key, ClaimWait::Once), Claim::Busy));
        assert!(
            matches!(store.claim(&key_of(2, 0), ClaimWait::Once), Claim::Held(_)),
            "another key is free"
        );
        let (claimed, waited) = mpsc::channel();
        let waiter = {
            let store = store.clone();
            let key = key.clone();
            thread::spawn(move || {
                let claim = store.claim(&key, ClaimWait::Patiently);
                claimed.send(matches!(claim, Claim::Held(_))).expect("sent");
            })
        };
        while store.statistics().claims_waited == 0 {
            thread::yield_now();
        }
        assert!(
            waited.try_recv().is_err(),
            "the waiter is waiting while the guard is held"
        );
        drop(guard);
        assert!(waited.recv().expect("the waiter answers"), "it then holds");
        waiter.join().expect("the waiter does not panic");
        assert!(matches!(store.claim(&key, ClaimWait::Once), Claim::Held(_)));
    }

    #[test]
    fn a_patient_claim_gives_up_after_the_timeout_and_counts_it() {
        // P4
        let store = MemoryStore::with_claim_timeout(Duration::from_millis(1));
        let key = key_of(1, 0);
        let _guard = store.claim(&key, ClaimWait::Once);
        assert!(matches!(
            store.claim(&key, ClaimWait::Patiently),
            Claim::Busy
        ));
        let statistics = store.statistics();
        assert_eq!(
            (statistics.claims_waited, statistics.claims_timed_out),
            (1, 1)
        );
    }
}
