//! The store's rules (P), each proved against an [`ArtifactStore`] made by a
//! [`StoreSubject`], through the trait alone: what its `# Contract` promises
//! every store, whatever holds the bytes.
//!
//! A store instantiates the suite with
//! [`store_conformance_suite!`](crate::store_conformance_suite):
//!
//! ```
//! # mod example {
//! use kiln_engine::MemoryStore;
//! use kiln_engine::conformance::StoreSubject;
//!
//! struct Memory;
//!
//! impl StoreSubject for Memory {
//!     type Store = MemoryStore;
//!     fn store(&self) -> MemoryStore { MemoryStore::new() }
//!     fn replace_content(&self, store: &MemoryStore) -> bool {
//!         store.clear();
//!         true
//!     }
//! }
//!
//! // In a test module: one `#[test]` per rule.
//! kiln_engine::store_conformance_suite!(Memory);
//! # }
//! ```
//!
//! A rule that a store cannot show (a store of one process has no other
//! process to coordinate with) prints why it does not apply and passes.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use super::not_applicable;
use crate::id::{ArtifactId, KernelId};
use crate::store::{
    ArtifactStore, BlobKey, Claim, ClaimWait, Explanation, KeyComponent, KeyComponents, Lookup,
    Miss, StoreKey, StoreOutcome,
};

/// How the suite makes stores of one kind.
pub trait StoreSubject {
    /// The store under test; a clone is another handle to the same store.
    type Store: ArtifactStore + Clone + 'static;

    /// A fresh store: it holds nothing, and no other store shares its
    /// content.
    fn store(&self) -> Self::Store;

    /// Makes `store` hold other content, as opening another root or an
    /// import that replaced entries does, so that its generation must move;
    /// `false` when this kind of store cannot.
    fn replace_content(&self, _store: &Self::Store) -> bool {
        false
    }

    /// The same store as another process opens it (its own handle, its own
    /// claims), or `None` when the store lives in one process.
    fn in_another_process(&self, _store: &Self::Store) -> Option<Self::Store> {
        None
    }

    /// A fresh store whose claims are leases of `lease` (P12), or `None`
    /// when this kind of store cannot be given one.
    fn with_lease(&self, _lease: Duration) -> Option<Self::Store> {
        None
    }
}

/// What every key of the suite shares, unless a rule changes one part.
fn components() -> KeyComponents {
    KeyComponents::new("conformance", "kiln conformance 1", "arch-1", "-O3")
}

/// The key of kernel `number` under variant 0.
fn kernel_key(number: u32) -> StoreKey {
    StoreKey::for_artifact(&components(), &id(number, 0), None)
}

fn id(number: u32, variant: u8) -> ArtifactId<u8> {
    ArtifactId::new(
        KernelId::named("conformance.kernel")
            .parameter(&number)
            .build(),
        variant,
    )
}

/// The key of lowered `text` under kernel 0's variant.
fn source_key(text: &str) -> StoreKey {
    StoreKey::for_source(&components(), &id(0, 0), None, text)
}

/// Distinct, non-empty artifact bytes, `len` of them.
fn artifact(label: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|index| label.wrapping_add(index as u8).wrapping_mul(31))
        .collect()
}

/// The artifact and work of a hit; panics with the miss otherwise.
fn expect_hit(lookup: Lookup<Vec<u8>>, what: &str) -> (Vec<u8>, u64, Duration) {
    match lookup {
        Lookup::Hit {
            artifact,
            bytes,
            work,
        } => (artifact, bytes, work),
        Lookup::Miss(miss) => panic!("{what}: expected a hit, got a miss ({miss})"),
    }
}

fn is_absent(lookup: &Lookup<Vec<u8>>) -> bool {
    matches!(lookup, Lookup::Miss(Miss::Absent))
}

fn expect_stored(outcome: StoreOutcome, what: &str) {
    assert!(
        matches!(outcome, StoreOutcome::Stored { .. }),
        "{what}: expected the put to store, got {outcome:?}"
    );
}

/// P2: what was put under a key is found under it: the same bytes, their
/// length, and the work the put recorded, small and large alike.
pub fn p2_a_put_then_a_lookup_hits_with_the_same_bytes_and_work<S: StoreSubject>(subject: &S) {
    let store = subject.store();
    for (number, len) in [(0, 1), (1, 300), (2, 3 << 20)] {
        let key = kernel_key(number);
        let bytes = artifact(number as u8, len);
        let work = Duration::from_millis(1234 + u64::from(number));
        expect_stored(store.put(&key, None, &bytes, work), "a put");
        let (found, read, found_work) = expect_hit(store.lookup(&key), "the key just put");
        assert!(found == bytes, "the bytes put come back ({len} bytes)");
        assert_eq!(read, len as u64, "a hit says how many bytes it read");
        assert_eq!(found_work, work, "a hit returns the work of the put");
    }
}

/// P10: a lookup of many keys at once answers what one lookup of each
/// would, in the keys' order, repeated keys included.
pub fn p10_a_lookup_of_many_keys_answers_each_in_order<S: StoreSubject>(subject: &S) {
    let store = subject.store();
    assert!(store.lookup_many(&[]).is_empty(), "no keys, no answers");
    for number in [1, 3] {
        expect_stored(
            store.put(
                &kernel_key(number),
                None,
                &artifact(number as u8, 100),
                Duration::ZERO,
            ),
            "a put",
        );
    }
    let numbers = [0, 1, 2, 3, 1];
    let keys: Vec<StoreKey> = numbers.into_iter().map(kernel_key).collect();
    let found = store.lookup_many(&keys);
    assert_eq!(found.len(), keys.len(), "one answer per key");
    for ((number, key), lookup) in numbers.into_iter().zip(&keys).zip(found) {
        let was_put = number % 2 == 1;
        match (store.lookup(key), lookup) {
            (Lookup::Hit { artifact: one, .. }, Lookup::Hit { artifact: many, .. }) => {
                assert!(was_put, "key {number} was never put, and hits");
                // The bytes put under this key, not another key's: in the
                // keys' order, repeats included.
                assert!(
                    many == artifact(number as u8, 100),
                    "key {number}: the bytes put under it come back"
                );
                assert!(one == many, "key {number}: the same bytes as one lookup");
            }
            (Lookup::Miss(_), Lookup::Miss(miss)) => {
                assert!(!was_put, "key {number} was put, and misses: {miss:?}");
                assert!(matches!(miss, Miss::Absent), "{miss:?}");
            }
            (one, many) => panic!("key {number}: one lookup says {one:?}, many say {many:?}"),
        }
    }
}

/// P2: a key nothing was put under misses as absent, before and after
/// other keys are put.
pub fn p2_a_key_never_put_misses_as_absent<S: StoreSubject>(subject: &S) {
    let store = subject.store();
    assert!(is_absent(&store.lookup(&kernel_key(0))), "an empty store");
    store.put(&kernel_key(1), None, &artifact(1, 64), Duration::ZERO);
    assert!(
        is_absent(&store.lookup(&kernel_key(0))),
        "a store holding another key"
    );
    assert!(
        is_absent(&store.lookup(&source_key("never put"))),
        "a source key never put"
    );
}

/// P1: two keys that differ in any one component are two entries: neither
/// sees what was put under the other.
pub fn p1_keys_differing_in_one_component_do_not_see_each_other<S: StoreSubject>(subject: &S) {
    let store = subject.store();
    let base = kernel_key(0);
    let changed = |edit: fn(&mut KeyComponents)| {
        let mut components = components();
        edit(&mut components);
        StoreKey::for_artifact(&components, &id(0, 0), None)
    };
    let mut other_format = base.clone();
    other_format.format += 1;
    let others = [
        (KeyComponent::Format, other_format),
        (
            KeyComponent::Backend,
            changed(|c| c.backend = "other".into()),
        ),
        (
            KeyComponent::Compiler,
            changed(|c| c.compiler = "kiln conformance 2".into()),
        ),
        (
            KeyComponent::Architecture,
            changed(|c| c.architecture = "arch-2".into()),
        ),
        (KeyComponent::Options, changed(|c| c.options = "-O2".into())),
        (
            KeyComponent::Variant,
            StoreKey::for_artifact(&components(), &id(0, 1), None),
        ),
        (
            KeyComponent::EntryPoint,
            StoreKey::for_artifact(&components(), &id(0, 0), Some("main".into())),
        ),
        (KeyComponent::Kernel, kernel_key(1)),
        (KeyComponent::Source, source_key("kernel 0")),
    ];
    expect_stored(
        store.put(&base, None, &artifact(100, 40), Duration::ZERO),
        "the base key",
    );
    for (component, key) in &others {
        assert!(
            is_absent(&store.lookup(key)),
            "a key with another {component} does not see the base entry"
        );
    }
    for (index, (component, key)) in others.iter().enumerate() {
        let bytes = artifact(index as u8, 40);
        expect_stored(
            store.put(key, None, &bytes, Duration::ZERO),
            "a changed key",
        );
        let (found, _, _) = expect_hit(store.lookup(key), "a changed key");
        assert!(
            found == bytes,
            "the key with another {component} has its own entry"
        );
    }
    let (found, _, _) = expect_hit(store.lookup(&base), "the base key");
    assert!(
        found == artifact(100, 40),
        "the base entry is untouched by its neighbours"
    );
}

/// P7: a put under a kernel's key and a source key is found under either,
/// with the same bytes and work.
pub fn p7_a_source_key_finds_what_was_put_with_it<S: StoreSubject>(subject: &S) {
    let store = subject.store();
    let (key, source) = (kernel_key(0), source_key("shared text"));
    let bytes = artifact(7, 500);
    let work = Duration::from_millis(77);
    expect_stored(store.put(&key, Some(&source), &bytes, work), "a put");
    for (what, key) in [("the kernel's key", &key), ("the source key", &source)] {
        let (found, _, found_work) = expect_hit(store.lookup(key), what);
        assert!(found == bytes, "{what} finds the bytes put");
        assert_eq!(found_work, work, "{what} finds the work of the put");
    }
    assert!(
        is_absent(&store.lookup(&source_key("other text"))),
        "another text is another source key"
    );
}

/// P2: a removed key misses as absent, and removing a key the store does
/// not hold is harmless.
pub fn p2_a_removed_key_misses_and_removing_it_again_is_harmless<S: StoreSubject>(subject: &S) {
    let store = subject.store();
    let (removed, kept) = (kernel_key(0), kernel_key(1));
    store.put(&removed, None, &artifact(0, 64), Duration::ZERO);
    store.put(&kept, None, &artifact(1, 64), Duration::ZERO);
    store.remove(&removed);
    assert!(is_absent(&store.lookup(&removed)), "the removed key misses");
    store.remove(&removed);
    store.remove(&kernel_key(2));
    assert!(is_absent(&store.lookup(&removed)), "and still misses");
    let (found, _, _) = expect_hit(store.lookup(&kept), "another key");
    assert!(found == artifact(1, 64), "another key is untouched");
}

/// P2: a put under a key that holds another artifact replaces it, of
/// whatever size, and the new work comes with it.
pub fn p2_a_put_of_another_artifact_replaces_the_first<S: StoreSubject>(subject: &S) {
    let store = subject.store();
    let key = kernel_key(0);
    let mut rounds = vec![
        (artifact(1, 40), Duration::from_millis(1)),
        (artifact(2, 1 << 20), Duration::from_millis(2)),
        (artifact(3, 40), Duration::from_millis(3)),
    ];
    for (bytes, work) in rounds.drain(..) {
        expect_stored(store.put(&key, None, &bytes, work), "a replacing put");
        let (found, read, found_work) = expect_hit(store.lookup(&key), "a replaced key");
        assert!(found == bytes, "the last put wins ({} bytes)", bytes.len());
        assert_eq!(read, bytes.len() as u64);
        assert_eq!(found_work, work);
    }
}

/// P5: an empty artifact either round-trips or is refused, and a refusal
/// is counted and stores nothing: never a panic, never a hit of other
/// bytes.
pub fn p5_an_empty_artifact_round_trips_or_is_refused_and_counted<S: StoreSubject>(subject: &S) {
    let store = subject.store();
    let key = kernel_key(0);
    let before = store.statistics();
    match store.put(&key, None, &[], Duration::ZERO) {
        StoreOutcome::Stored { .. } => {
            let (found, read, _) = expect_hit(store.lookup(&key), "an empty artifact stored");
            assert!(found.is_empty(), "an empty artifact comes back empty");
            assert_eq!(read, 0);
        }
        refused => {
            let after = store.statistics();
            let counted = (after.put_failures - before.put_failures)
                + (after.writes_skipped - before.writes_skipped);
            assert_eq!(counted, 1, "the refusal ({refused:?}) is counted once");
            assert_eq!(after.puts, before.puts, "and is not counted as a put");
            assert!(
                is_absent(&store.lookup(&key)),
                "a refused empty artifact leaves nothing"
            );
        }
    }
}

/// P3: threads that put different artifacts under one key while others
/// read it: every hit is one whole artifact that was put.
pub fn p3_threads_putting_under_one_key_are_read_whole<S: StoreSubject>(subject: &S) {
    const WRITERS: u8 = 3;
    const PUTS: usize = 6;
    let store = subject.store();
    let key = kernel_key(0);
    // Each writer's artifact has its own length and its own filling, so a
    // mix of two is always seen.
    let artifact_of = |writer: u8| vec![writer + 1; 1000 + 4096 * usize::from(writer)];
    thread::scope(|scope| {
        for writer in 0..WRITERS {
            let (store, key) = (store.clone(), key.clone());
            scope.spawn(move || {
                for _ in 0..PUTS {
                    store.put(&key, None, &artifact_of(writer), Duration::ZERO);
                }
            });
        }
        for _ in 0..2 {
            let (store, key) = (store.clone(), key.clone());
            scope.spawn(move || {
                for _ in 0..PUTS * usize::from(WRITERS) {
                    if let Lookup::Hit { artifact, .. } = store.lookup(&key) {
                        let writer = artifact[0].wrapping_sub(1);
                        assert!(
                            writer < WRITERS && artifact == artifact_of(writer),
                            "a hit is one whole artifact ({} bytes)",
                            artifact.len()
                        );
                    }
                }
            });
        }
    });
    let (found, _, _) = expect_hit(store.lookup(&key), "the key after every put");
    let writer = found[0].wrapping_sub(1);
    assert!(writer < WRITERS && found == artifact_of(writer));
}

/// L10: every handle of a store reads one generation; puts, lookups and
/// removals leave it, a fresh store has another, and replacing the store's
/// content moves it for every handle.
pub fn l10_the_generation_is_shared_by_clones_and_moves_only_when_content_is_replaced<
    S: StoreSubject,
>(
    subject: &S,
) {
    let store = subject.store();
    let clone = store.clone();
    let held = store.generation();
    let start = held.current();
    assert_eq!(
        clone.generation().current(),
        start,
        "a clone reads the same"
    );
    assert_ne!(
        subject.store().generation().current(),
        start,
        "another store has another generation"
    );
    let key = kernel_key(0);
    store.put(&key, None, &artifact(0, 64), Duration::ZERO);
    store.lookup(&key);
    store.put(&key, None, &artifact(1, 64), Duration::ZERO);
    store.remove(&key);
    assert_eq!(
        clone.generation().current(),
        start,
        "puts, lookups and removals keep the generation"
    );
    if !subject.replace_content(&clone) {
        not_applicable(
            "L10 (a generation that moves)",
            "this store cannot be made to hold other content",
        );
        return;
    }
    // Some stores notice content replaced elsewhere on their next read.
    store.lookup(&key);
    let moved = held.current();
    assert_ne!(moved, start, "replaced content moves the generation");
    assert_eq!(store.generation().current(), moved);
    assert_eq!(clone.generation().current(), moved, "for every handle");
}

/// S4: the store counts its hits, misses, puts and the bytes they moved.
pub fn s4_statistics_count_hits_misses_and_puts<S: StoreSubject>(subject: &S) {
    let store = subject.store();
    let before = store.statistics();
    let key = kernel_key(0);
    let bytes = artifact(0, 2000);
    store.lookup(&key);
    expect_stored(store.put(&key, None, &bytes, Duration::ZERO), "a put");
    store.lookup(&key);
    store.clone().lookup(&key);
    let after = store.statistics();
    assert_eq!(after.hits - before.hits, 2, "two hits");
    assert_eq!(after.absent - before.absent, 1, "one absent key");
    assert_eq!(after.puts - before.puts, 1, "one put");
    assert_eq!(
        after.bytes_read - before.bytes_read,
        2 * bytes.len() as u64,
        "each hit read the artifact"
    );
    assert!(
        after.bytes_written - before.bytes_written >= bytes.len() as u64,
        "the put wrote at least the artifact"
    );
    assert_eq!(
        (
            after.corrupt,
            after.foreign,
            after.unreadable,
            after.put_failures
        ),
        (
            before.corrupt,
            before.foreign,
            before.unreadable,
            before.put_failures
        ),
        "nothing went wrong"
    );
}

/// P9: the store says it never saw a kernel, that it holds it, which
/// component of the key changed since it held it, or that the entry is
/// gone.
pub fn p9_explain_names_the_changed_component_or_says_never_seen<S: StoreSubject>(subject: &S) {
    let store = subject.store();
    let key = kernel_key(0);
    assert_eq!(
        store.explain(&key),
        Explanation::NeverSeen,
        "an empty store"
    );
    store.lookup(&key);
    assert_eq!(
        store.explain(&key),
        Explanation::NeverSeen,
        "a miss is no entry"
    );
    expect_stored(
        store.put(&key, None, &artifact(0, 64), Duration::ZERO),
        "a put",
    );
    assert!(
        matches!(store.explain(&key), Explanation::Held { .. }),
        "a key put is held"
    );
    let other_variant = StoreKey::for_artifact(&components(), &id(0, 1), None);
    store.lookup(&other_variant);
    match store.explain(&other_variant) {
        Explanation::Changed { difference, .. } => {
            assert_eq!(difference.component, KeyComponent::Variant);
            assert_eq!(difference.stored, "0");
            assert_eq!(difference.asked, "1");
        }
        other => panic!("another variant of a stored kernel is a change, not {other:?}"),
    }
    let mut other_options = components();
    other_options.options = "-O0".into();
    match store.explain(&StoreKey::for_artifact(&other_options, &id(0, 0), None)) {
        Explanation::Changed { difference, .. } => {
            assert_eq!(difference.component, KeyComponent::Options);
        }
        other => panic!("other options for a stored kernel are a change, not {other:?}"),
    }
    assert_eq!(
        store.explain(&kernel_key(1)),
        Explanation::NeverSeen,
        "another kernel was never seen"
    );
    store.remove(&key);
    assert!(
        matches!(store.explain(&key), Explanation::Gone { .. }),
        "a removed key is gone"
    );
}

/// P4: a held claim makes a second claimant that will not wait busy, holds
/// only its own key, and frees the key when its guard drops.
pub fn p4_a_held_claim_is_busy_for_a_second_once_claimant_and_free_after_its_guard_drops<
    S: StoreSubject,
>(
    subject: &S,
) {
    let store = subject.store();
    let key = kernel_key(0);
    let guard = match store.claim(&key, ClaimWait::Once) {
        Claim::Held(guard) => guard,
        Claim::Uncoordinated => {
            not_applicable("P4", "this store does not coordinate compiles");
            return;
        }
        Claim::Busy => panic!("nobody holds a key of a fresh store"),
    };
    assert!(
        matches!(store.clone().claim(&key, ClaimWait::Once), Claim::Busy),
        "a second claimant is busy"
    );
    assert!(
        matches!(store.claim(&kernel_key(1), ClaimWait::Once), Claim::Held(_)),
        "another key is free"
    );
    drop(guard);
    assert!(
        matches!(store.claim(&key, ClaimWait::Once), Claim::Held(_)),
        "the key is free once the guard drops"
    );
}

/// P4: a claimant that waits patiently for a held key holds it once the
/// holder's guard drops, and is counted as having waited.
pub fn p4_a_patient_claimant_holds_the_key_once_the_guard_drops<S: StoreSubject>(subject: &S) {
    let store = subject.store();
    let key = kernel_key(0);
    let Claim::Held(guard) = store.claim(&key, ClaimWait::Once) else {
        not_applicable("P4", "this store does not coordinate compiles");
        return;
    };
    let waited_before = store.statistics().claims_waited;
    let (answer, answered) = mpsc::channel();
    thread::scope(|scope| {
        let (waiting, key) = (store.clone(), key.clone());
        scope.spawn(move || {
            let held = matches!(waiting.claim(&key, ClaimWait::Patiently), Claim::Held(_));
            answer.send(held).expect("the test listens");
        });
        // Counted before it waits: from then on it is waiting.
        while store.statistics().claims_waited == waited_before {
            thread::yield_now();
        }
        assert!(
            answered.try_recv().is_err(),
            "the patient claimant waits while the guard is held"
        );
        drop(guard);
        assert!(
            answered.recv().expect("the claimant answers"),
            "and holds the key once the guard drops"
        );
    });
    let after = store.statistics();
    assert_eq!(after.claims_waited - waited_before, 1);
    assert_eq!(after.claims_timed_out, 0, "nobody waited past the timeout");
}

/// P4: a claim held in one process makes another process's claimant busy,
/// until its guard drops.
pub fn p4_a_claim_held_in_one_process_is_busy_in_another<S: StoreSubject>(subject: &S) {
    let store = subject.store();
    let Some(other) = subject.in_another_process(&store) else {
        not_applicable(
            "P4 across processes",
            "this store lives in one process; its claims coordinate that process's handles",
        );
        return;
    };
    let key = kernel_key(0);
    let Claim::Held(guard) = store.claim(&key, ClaimWait::Once) else {
        not_applicable(
            "P4 across processes",
            "this store does not coordinate compiles",
        );
        return;
    };
    assert!(
        matches!(other.claim(&key, ClaimWait::Once), Claim::Busy),
        "another process's claimant is busy"
    );
    drop(guard);
    assert!(
        matches!(other.claim(&key, ClaimWait::Once), Claim::Held(_)),
        "and holds the key once the guard drops"
    );
}

/// The other claimant of the P12 rules: another process's handle where the
/// store is shared among processes, else another handle of this one.
fn other_claimant<S: StoreSubject>(subject: &S, store: &S::Store) -> S::Store {
    subject
        .in_another_process(store)
        .unwrap_or_else(|| store.clone())
}

/// P4, P12: while a key's claim is held, every other claimant is busy, in
/// this process and in another; a key released without being published is
/// claimable again, and published, it is a hit for all.
pub fn p12_a_released_unpublished_key_is_claimable_by_the_next_claimant<S: StoreSubject>(
    subject: &S,
) {
    let store = subject.store();
    let other = other_claimant(subject, &store);
    let key = kernel_key(0);
    let Claim::Held(guard) = store.claim(&key, ClaimWait::Once) else {
        not_applicable("P12", "this store does not coordinate compiles");
        return;
    };
    for _ in 0..3 {
        assert!(
            matches!(other.claim(&key, ClaimWait::Once), Claim::Busy),
            "a second claimant is busy, however often it asks"
        );
    }
    drop(guard);
    let Claim::Held(second) = other.claim(&key, ClaimWait::Once) else {
        panic!("a key released unpublished is the next claimant's");
    };
    assert!(
        matches!(store.claim(&key, ClaimWait::Once), Claim::Busy),
        "and the first is busy now"
    );
    expect_stored(store.put(&key, None, b"published", Duration::ZERO), "a put");
    drop(second);
    expect_hit(other.lookup(&key), "what was published");
}

/// P12: a holder that stops renewing its lease (hung, stopped) loses its
/// key once the lease runs out: exactly one other claimant takes it over,
/// and the rest stay busy while the new holder renews.
pub fn p12_an_expired_lease_is_claimable_by_one_other_claimant<S: StoreSubject>(subject: &S) {
    let lease = Duration::from_millis(300);
    let Some(store) = subject.with_lease(lease) else {
        not_applicable("P12 leases", "this store's claims take no lease");
        return;
    };
    let other = other_claimant(subject, &store);
    let third = other_claimant(subject, &store);
    let key = kernel_key(0);
    let Claim::Held(hung) = store.claim(&key, ClaimWait::Once) else {
        not_applicable("P12 leases", "this store does not coordinate compiles");
        return;
    };
    // A renewing holder keeps its key past the lease.
    thread::sleep(lease * 2);
    assert!(
        matches!(other.claim(&key, ClaimWait::Once), Claim::Busy),
        "a renewed lease is still held"
    );
    hung.stop_renewing();
    let started = std::time::Instant::now();
    let taken_over = loop {
        match other.claim(&key, ClaimWait::Once) {
            Claim::Held(guard) => break guard,
            Claim::Busy => {
                assert!(
                    started.elapsed() < lease * 10,
                    "the lease ran out within {:?}",
                    lease * 10
                );
                thread::sleep(Duration::from_millis(10));
            }
            Claim::Uncoordinated => panic!("a coordinating store stays so"),
        }
    };
    assert!(
        started.elapsed() >= lease / 2,
        "not before the lease could run out"
    );
    thread::sleep(lease * 2);
    assert!(
        matches!(third.claim(&key, ClaimWait::Once), Claim::Busy),
        "the new holder renews its lease: a third claimant is busy"
    );
    drop(taken_over);
    drop(hung);
    assert!(
        matches!(third.claim(&key, ClaimWait::Once), Claim::Held(_)),
        "released by both, the key is free"
    );
}

/// P3, L5a: what one process put, another reads whole, with its work, by
/// its key and its source key.
pub fn p3_another_process_reads_what_one_put<S: StoreSubject>(subject: &S) {
    let store = subject.store();
    let Some(other) = subject.in_another_process(&store) else {
        not_applicable(
            "P3 across processes",
            "this store lives in one process and dies with it",
        );
        return;
    };
    let (key, source) = (kernel_key(0), source_key("shared across processes"));
    let bytes = artifact(9, 5000);
    let work = Duration::from_millis(99);
    expect_stored(store.put(&key, Some(&source), &bytes, work), "a put");
    for (what, key) in [("its key", &key), ("its source key", &source)] {
        let (found, _, found_work) = expect_hit(other.lookup(key), what);
        assert!(found == bytes, "another process reads the bytes by {what}");
        assert_eq!(found_work, work);
    }
}

/// P6: the end of a batch that left the store within its limits keeps
/// every entry.
pub fn p6_a_batch_end_within_the_limits_keeps_every_entry<S: StoreSubject>(subject: &S) {
    let store = subject.store();
    for number in 0..4 {
        store.put(
            &kernel_key(number),
            None,
            &artifact(number as u8, 256),
            Duration::ZERO,
        );
    }
    store.batch_finished();
    for number in 0..4 {
        let (found, _, _) = expect_hit(store.lookup(&kernel_key(number)), "an entry kept");
        assert!(found == artifact(number as u8, 256));
    }
    assert_eq!(store.statistics().evicted, 0, "nothing was evicted");
}

/// The blob of the suite, for the driver `driver`.
fn blob_key(driver: &str) -> BlobKey {
    BlobKey::new("conformance cache")
        .component("adapter", "adapter-1")
        .component("driver", driver)
}

/// P1, P2: a named blob is found by its key alone: the bytes put,
/// replaced by the next put, seen under no key that differs in one
/// component and by no artifact's lookup. A store that keeps no blobs
/// skips every put and misses every lookup as absent.
pub fn p2_a_named_blob_is_found_by_its_own_key_only<S: StoreSubject>(subject: &S) {
    let store = subject.store();
    let key = blob_key("1");
    assert!(is_absent(&store.lookup_blob(&key)), "an empty store");
    let first = artifact(40, 3000);
    match store.put_blob(&key, &first) {
        StoreOutcome::Stored { .. } => {}
        StoreOutcome::Skipped => {
            assert!(
                is_absent(&store.lookup_blob(&key)),
                "a store that skips blobs holds none"
            );
            not_applicable("named blobs", "this store keeps no blobs");
            return;
        }
        StoreOutcome::Failed { detail } => panic!("a blob put failed: {detail}"),
    }
    let (found, read, work) = expect_hit(store.lookup_blob(&key), "the blob just put");
    assert!(found == first, "the blob's bytes come back");
    assert_eq!(
        read,
        first.len() as u64,
        "a hit says how many bytes it read"
    );
    assert_eq!(work, Duration::ZERO, "a blob's hit reports no work");
    assert!(
        is_absent(&store.clone().lookup_blob(&blob_key("2"))),
        "a key with another driver does not see the blob"
    );
    assert!(
        is_absent(&store.lookup(&kernel_key(0))),
        "no artifact's lookup sees the blob"
    );
    expect_stored(
        store.put(&kernel_key(0), None, &artifact(41, 100), Duration::ZERO),
        "an artifact beside the blob",
    );
    let second = artifact(42, 2000);
    expect_stored(store.put_blob(&key, &second), "a second blob put");
    let (found, _, _) = expect_hit(store.lookup_blob(&key), "the blob put again");
    assert!(found == second, "the later put replaced the blob");
    let (found, _, _) = expect_hit(store.lookup(&kernel_key(0)), "the artifact");
    assert!(
        found == artifact(41, 100),
        "the blob left the artifact alone"
    );
}

/// Instantiates the store conformance suite: one `#[test]` per rule, each
/// making its subject with `$subject`, an expression whose value implements
/// [`StoreSubject`](crate::conformance::StoreSubject).
#[macro_export]
macro_rules! store_conformance_suite {
    ($subject:expr) => {
        $crate::store_conformance_suite!(@tests $subject;
            p1_keys_differing_in_one_component_do_not_see_each_other,
            p2_a_put_then_a_lookup_hits_with_the_same_bytes_and_work,
            p2_a_key_never_put_misses_as_absent,
            p2_a_removed_key_misses_and_removing_it_again_is_harmless,
            p2_a_put_of_another_artifact_replaces_the_first,
            p3_threads_putting_under_one_key_are_read_whole,
            p3_another_process_reads_what_one_put,
            p4_a_held_claim_is_busy_for_a_second_once_claimant_and_free_after_its_guard_drops,
            p4_a_patient_claimant_holds_the_key_once_the_guard_drops,
            p4_a_claim_held_in_one_process_is_busy_in_another,
            p12_a_released_unpublished_key_is_claimable_by_the_next_claimant,
            p12_an_expired_lease_is_claimable_by_one_other_claimant,
            p5_an_empty_artifact_round_trips_or_is_refused_and_counted,
            p6_a_batch_end_within_the_limits_keeps_every_entry,
            p7_a_source_key_finds_what_was_put_with_it,
            p2_a_named_blob_is_found_by_its_own_key_only,
            p10_a_lookup_of_many_keys_answers_each_in_order,
            p9_explain_names_the_changed_component_or_says_never_seen,
            l10_the_generation_is_shared_by_clones_and_moves_only_when_content_is_replaced,
            s4_statistics_count_hits_misses_and_puts,
        );
    };
    (@tests $subject:expr; $($rule:ident),* $(,)?) => {
        $(
            #[test]
            fn $rule() {
                $crate::conformance::$rule(&$subject);
            }
        )*
    };
}
