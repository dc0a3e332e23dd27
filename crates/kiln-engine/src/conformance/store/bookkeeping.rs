//! What a store says about itself: its generation (L10) and its counts
//! (S4).

use std::time::Duration;

use super::*;

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
