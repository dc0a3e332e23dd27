//! Maintenance passes against each other and against SIGKILL (P2, P3, P6):
//! a `gc` that moves file entries into the packs, killed at random points,
//! leaves nothing a `verify` removes; a `verify` started while a `gc`
//! runs waits for it and removes nothing good either.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use kiln_engine::{ArtifactStore, ArtifactStoreExt, Lookup, StoreOutcome};
use kiln_store::{DiskStore, Limits, StoreConfig};
use kiln_test_support::child::rerun;
use kiln_test_support::{Random, Scratch, say};
use kiln_tests::{fake_key, open_store_packing};

/// Where the child's store is, when this process is the child.
const CHILD: &str = "KILN_TEST_GC_CHILD";
/// Keys, two to an object, so that a record often points at an object
/// packed for another key.
const KEYS: u32 = 48;

fn nothing_evicted() -> Limits {
    Limits {
        max_bytes: u64::MAX,
        max_entries: u64::MAX,
    }
}

/// A store of `KEYS` entries as files, as a store written before packing
/// was on holds them.
fn fill(root: &Path) {
    let store = DiskStore::open(StoreConfig {
        collects_automatically: false,
        pack_below: 0,
        durable: false,
        ..StoreConfig::at(root)
    })
    .expect("the store opens");
    for number in 0..KEYS {
        let bytes = vec![(number / 2) as u8 + 1; 600 + (number / 2) as usize];
        assert!(matches!(
            store.put(&fake_key(number), None, &bytes, Duration::ZERO),
            StoreOutcome::Stored { .. }
        ));
    }
}

/// The child: a gc of the store at `CHILD`, which packs its small files.
fn child_collects() -> bool {
    let Ok(root) = std::env::var(CHILD) else {
        return false;
    };
    // Not durable: a gc of many small syncs would take seconds, and a kill
    // lands between any two of its steps all the same.
    let store = DiskStore::open(StoreConfig {
        collects_automatically: false,
        pack_below: 64 << 10,
        durable: false,
        ..StoreConfig::at(Path::new(&root))
    })
    .expect("the store opens");
    store
        .collect(nothing_evicted(), &mut |_| {})
        .expect("the gc runs");
    true
}

fn start_gc(test: &str, root: &Path) -> Child {
    rerun(test, CHILD, root)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the test binary runs again")
}

/// Verifies the store at `root` and checks that every key still loads and
/// that nothing good was removed.
fn verify_keeps_everything(root: &Path, round: usize) {
    let store = open_store_packing(root, 64 << 10);
    let report = store.verify(&mut |_| {}).expect("verifies");
    assert_eq!(
        (
            report.dangling_records,
            report.bad_records,
            report.bad_objects
        ),
        (0, 0, 0),
        "round {round}: verify removed good entries: {report:?}"
    );
    for number in 0..KEYS {
        assert!(
            matches!(store.lookup(&fake_key(number)), Lookup::Hit { .. }),
            "round {round}: kernel {number} is no longer found"
        );
    }
}

#[test]
fn p3_a_gc_killed_at_any_point_leaves_nothing_verify_removes() {
    if child_collects() {
        return;
    }
    let test = "p3_a_gc_killed_at_any_point_leaves_nothing_verify_removes";
    let scratch = Scratch::new("gc-killed");
    let mut random = Random::fresh(test);

    // How long a whole gc takes here: the kills fall inside it.
    let root = scratch.folder("calibrate");
    fill(&root);
    let began = Instant::now();
    let status = start_gc(test, &root).wait().expect("the gc ends");
    assert!(status.success(), "the gc child failed: {status}");
    let whole = began.elapsed();
    verify_keeps_everything(&root, 0);

    let budget = Instant::now() + Duration::from_secs(20);
    let mut rounds = 0;
    while rounds < 100 && Instant::now() < budget {
        rounds += 1;
        let root = scratch.folder(&format!("round-{rounds}"));
        fill(&root);
        let mut child = start_gc(test, &root);
        let delay = whole.mul_f32(random.unit());
        std::thread::sleep(delay);
        // SIGKILL: no destructor, no unlock but the kernel's.
        drop(child.kill());
        drop(child.wait());
        verify_keeps_everything(&root, rounds);
        drop(std::fs::remove_dir_all(&root));
    }
    say(&format!(
        "{rounds} rounds of a gc killed within its {:.0} ms",
        whole.as_secs_f64() * 1e3
    ));
    assert!(rounds >= 10, "only {rounds} rounds ran");
}

#[test]
fn p3_a_verify_started_during_a_gc_removes_nothing_good() {
    if child_collects() {
        return;
    }
    let test = "p3_a_verify_started_during_a_gc_removes_nothing_good";
    let scratch = Scratch::new("gc-beside-verify");
    for round in 1..=3 {
        let root = scratch.folder(&format!("round-{round}"));
        fill(&root);
        let mut child = start_gc(test, &root);
        std::thread::sleep(Duration::from_millis(20 * round as u64));
        verify_keeps_everything(&root, round);
        let status = child.wait().expect("the gc ends");
        assert!(
            status.success(),
            "round {round}: the gc child failed: {status}"
        );
        verify_keeps_everything(&root, round);
    }
}
