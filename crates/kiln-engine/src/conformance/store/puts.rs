//! The rules of puts and lookups: what was put is found whole, by its key
//! only, from any thread or process (P1, P2, P3, P5, P6, P7, P10).

use std::thread;
use std::time::Duration;

use super::*;

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

/// P3, P10: copies put together are each stored and found whole, with
/// their work, as one copy each would be: small and large alike,
/// two keys of the same bytes, one key replacing what it held, and another
/// process reads them; each is counted as a put.
pub fn p3_copies_put_together_are_each_found_whole<S: StoreSubject>(subject: &S) {
    let store = subject.store();
    assert!(store.put_many(&[]).is_empty(), "no copies, no answers");
    expect_stored(
        store.put(&kernel_key(40), None, &artifact(9, 64), Duration::ZERO),
        "a put that a copy replaces",
    );
    let puts_before = store.statistics().puts;
    let shared = artifact(7, 500);
    let entries: Vec<(StoreKey, Vec<u8>, Duration)> = [
        (40, artifact(40, 300)),
        (41, artifact(41, 1)),
        (42, shared.clone()),
        (43, shared),
        (44, artifact(44, 200 << 10)),
    ]
    .into_iter()
    .map(|(number, bytes)| {
        (
            kernel_key(number),
            bytes,
            Duration::from_millis(u64::from(number)),
        )
    })
    .collect();
    let copies: Vec<Put<'_>> = entries
        .iter()
        .map(|(key, bytes, work)| Put {
            key,
            bytes,
            work: *work,
            origin: Origin::Copied,
        })
        .collect();
    let outcomes = store.put_many(&copies);
    assert_eq!(outcomes.len(), copies.len(), "one answer per copy");
    for outcome in outcomes {
        expect_stored(outcome, "a copy put together with others");
    }
    assert_eq!(
        store.statistics().puts,
        puts_before + entries.len() as u64,
        "each copy is a put"
    );
    let readers = std::iter::once(store.clone()).chain(subject.in_another_process(&store));
    for reader in readers {
        for (key, bytes, work) in &entries {
            let (found, _, found_work) = expect_hit(reader.lookup(key), "a copy put together");
            assert!(found == *bytes, "the copy's bytes come back");
            assert_eq!(found_work, *work, "with the copy's work");
        }
    }
}

/// P3, P7, L11: kernels found by their text and put under their own keys
/// together are each found whole by their key, with their work, from
/// another process too; the text's entry is left as its compile put it.
pub fn p7_kernels_put_rekeyed_together_are_each_found_by_their_key<S: StoreSubject>(subject: &S) {
    let store = subject.store();
    let text = source_key("rekeyed together");
    let compiled = artifact(60, 900);
    expect_stored(
        store.put(
            &kernel_key(60),
            Some(&text),
            &compiled,
            Duration::from_millis(7),
        ),
        "the compile of the text",
    );
    let keys: Vec<StoreKey> = (61..66).map(kernel_key).collect();
    let puts: Vec<Put<'_>> = keys
        .iter()
        .map(|key| Put {
            key,
            bytes: &compiled,
            work: Duration::from_millis(7),
            origin: Origin::Rekeyed { source_key: &text },
        })
        .collect();
    let outcomes = store.put_many(&puts);
    assert_eq!(outcomes.len(), puts.len(), "one answer per put");
    for outcome in outcomes {
        expect_stored(outcome, "a rekeyed put with others");
    }
    let readers = std::iter::once(store.clone()).chain(subject.in_another_process(&store));
    for reader in readers {
        for key in keys.iter().chain([&kernel_key(60), &text]) {
            let (found, _, work) = expect_hit(reader.lookup(key), "a key put with its text");
            assert!(found == compiled, "the text's artifact comes back");
            assert_eq!(work, Duration::from_millis(7));
        }
    }
}

/// P3, P7: one put of every origin together (a compile with its text, a
/// kernel rekeyed to that text, a copy) answers each in its order, and
/// each is found as its origin says: the compile by its key and its
/// text's, the rekeyed kernel and the copy by their own keys.
pub fn p3_puts_of_every_origin_together_are_each_answered_in_order<S: StoreSubject>(subject: &S) {
    let store = subject.store();
    let text = source_key("every origin");
    let (compiled, copied) = (artifact(70, 700), artifact(71, 300));
    let (first, rekeyed, copy) = (kernel_key(70), kernel_key(71), kernel_key(72));
    let work = Duration::from_millis(11);
    let puts = [
        Put {
            key: &first,
            bytes: &compiled,
            work,
            origin: Origin::Compiled {
                source_key: Some(&text),
            },
        },
        Put {
            key: &rekeyed,
            bytes: &compiled,
            work,
            origin: Origin::Rekeyed { source_key: &text },
        },
        Put {
            key: &copy,
            bytes: &copied,
            work,
            origin: Origin::Copied,
        },
    ];
    let outcomes = store.put_many(&puts);
    assert_eq!(outcomes.len(), puts.len(), "one answer per put");
    for outcome in outcomes {
        expect_stored(outcome, "a put among puts of every origin");
    }
    let readers = std::iter::once(store.clone()).chain(subject.in_another_process(&store));
    for reader in readers {
        for (key, bytes) in [
            (&first, &compiled),
            (&text, &compiled),
            (&rekeyed, &compiled),
            (&copy, &copied),
        ] {
            let (found, _, found_work) = expect_hit(reader.lookup(key), "a put of its origin");
            assert!(found == *bytes, "its bytes come back");
            assert_eq!(found_work, work, "with its work");
        }
    }
}
