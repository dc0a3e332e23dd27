//! Claims: one compiler of a key among threads and processes, released
//! with its guard, lost with its lease (P4, P12).

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use super::*;

/// P4: a held claim makes a second claimant that will not wait busy, holds
/// only its own key, and frees the key when its guard drops.
pub fn p4_a_held_claim_is_busy_for_a_second_once_claimant_and_free_after_its_guard_drops<
    S: StoreSubject,
>(
    subject: &S,
) {
    let store = subject.store();
    if !has_part("P4", "claims", store.parts().claims.is_some()) {
        return;
    }
    let key = kernel_key(0);
    let guard = match store.parts().claim(&key, ClaimWait::Once) {
        Claim::Held(guard) => guard,
        Claim::Uncoordinated => {
            not_applicable("P4", "this store does not coordinate compiles");
            return;
        }
        Claim::Busy => panic!("nobody holds a key of a fresh store"),
    };
    assert!(
        matches!(
            store.clone().parts().claim(&key, ClaimWait::Once),
            Claim::Busy
        ),
        "a second claimant is busy"
    );
    assert!(
        matches!(
            store.parts().claim(&kernel_key(1), ClaimWait::Once),
            Claim::Held(_)
        ),
        "another key is free"
    );
    drop(guard);
    assert!(
        matches!(store.parts().claim(&key, ClaimWait::Once), Claim::Held(_)),
        "the key is free once the guard drops"
    );
}

/// P4: a claimant that waits patiently for a held key holds it once the
/// holder's guard drops, and is counted as having waited.
pub fn p4_a_patient_claimant_holds_the_key_once_the_guard_drops<S: StoreSubject>(subject: &S) {
    let store = subject.store();
    if !has_part("P4", "claims", store.parts().claims.is_some()) {
        return;
    }
    let key = kernel_key(0);
    let Claim::Held(guard) = store.parts().claim(&key, ClaimWait::Once) else {
        not_applicable("P4", "this store does not coordinate compiles");
        return;
    };
    let waited_before = store.statistics().claims_waited;
    let (answer, answered) = mpsc::channel();
    thread::scope(|scope| {
        let (waiting, key) = (store.clone(), key.clone());
        scope.spawn(move || {
            let held = matches!(
                waiting.parts().claim(&key, ClaimWait::Patiently),
                Claim::Held(_)
            );
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
    if !has_part("P4", "claims", store.parts().claims.is_some()) {
        return;
    }
    let Some(other) = subject.in_another_process(&store) else {
        not_applicable(
            "P4 across processes",
            "this store lives in one process; its claims coordinate that process's handles",
        );
        return;
    };
    let key = kernel_key(0);
    let Claim::Held(guard) = store.parts().claim(&key, ClaimWait::Once) else {
        not_applicable(
            "P4 across processes",
            "this store does not coordinate compiles",
        );
        return;
    };
    assert!(
        matches!(other.parts().claim(&key, ClaimWait::Once), Claim::Busy),
        "another process's claimant is busy"
    );
    drop(guard);
    assert!(
        matches!(other.parts().claim(&key, ClaimWait::Once), Claim::Held(_)),
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
    if !has_part("P12", "claims", store.parts().claims.is_some()) {
        return;
    }
    let other = other_claimant(subject, &store);
    let key = kernel_key(0);
    let Claim::Held(guard) = store.parts().claim(&key, ClaimWait::Once) else {
        not_applicable("P12", "this store does not coordinate compiles");
        return;
    };
    for _ in 0..3 {
        assert!(
            matches!(other.parts().claim(&key, ClaimWait::Once), Claim::Busy),
            "a second claimant is busy, however often it asks"
        );
    }
    drop(guard);
    let Claim::Held(second) = other.parts().claim(&key, ClaimWait::Once) else {
        panic!("a key released unpublished is the next claimant's");
    };
    assert!(
        matches!(store.parts().claim(&key, ClaimWait::Once), Claim::Busy),
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
    let lease = Duration::from_secs(1); // renewed every third: in time on a loaded machine
    let Some(store) = subject.with_lease(lease) else {
        not_applicable("P12 leases", "this store's claims take no lease");
        return;
    };
    if !has_part("P12", "claims", store.parts().claims.is_some()) {
        return;
    }
    let other = other_claimant(subject, &store);
    let third = other_claimant(subject, &store);
    let key = kernel_key(0);
    let Claim::Held(hung) = store.parts().claim(&key, ClaimWait::Once) else {
        not_applicable("P12 leases", "this store does not coordinate compiles");
        return;
    };
    // A renewing holder keeps its key past the lease.
    thread::sleep(lease * 2);
    assert!(
        matches!(other.parts().claim(&key, ClaimWait::Once), Claim::Busy),
        "a renewed lease is still held"
    );
    hung.stop_renewing();
    let started = std::time::Instant::now();
    let taken_over = loop {
        match other.parts().claim(&key, ClaimWait::Once) {
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
        matches!(third.parts().claim(&key, ClaimWait::Once), Claim::Busy),
        "the new holder renews its lease: a third claimant is busy"
    );
    drop(taken_over);
    drop(hung);
    assert!(
        matches!(third.parts().claim(&key, ClaimWait::Once), Claim::Held(_)),
        "released by both, the key is free"
    );
}
