//! The store's activity totals (`kiln stats`) across real processes: each
//! process that uses the store through a loader adds its hits, misses,
//! compiles and failures, and the totals are the sum.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kiln_engine::fake::{FakeKernel, FakeTarget};
use kiln_engine::{KernelLoader, LoaderConfig};
use kiln_store::{BackendActivity, DiskStore, StoreConfig};
use kiln_test_support::{Scratch, child};

const CHILD: &str = "KILN_ACTIVITY_CHILD_STORE";

/// The kernels both processes load: one that takes a while, two with the
/// same text, and one that fails to compile.
fn kernels() -> Vec<FakeKernel> {
    vec![
        FakeKernel::new(0).sleeping(Duration::from_millis(20)),
        FakeKernel::new(1).sharing_source("shared text"),
        FakeKernel::new(2).sharing_source("shared text"),
        FakeKernel::new(3).failing(),
    ]
}

/// Loads [`kernels`] in one batch from the store at `root`, as any
/// program using the library would; returns how many loaded.
fn load_all(root: &Path) -> usize {
    let store = DiskStore::open(StoreConfig {
        durable: false,
        ..StoreConfig::at(root)
    })
    .expect("the store opens");
    let target = FakeTarget::on_store(Arc::new(store));
    let mut loader = KernelLoader::with_config(
        target,
        LoaderConfig {
            profile: false,
            ..LoaderConfig::default()
        },
    );
    for kernel in kernels() {
        loader.enqueue(Box::new(kernel), ());
    }
    loader.compile_queued();
    kernels()
        .iter()
        .filter(|kernel| loader.load(*kernel, &kernel.artifact_id()).is_ok())
        .count()
}

fn fake(store: &DiskStore) -> BackendActivity {
    store
        .activity()
        .backends
        .into_iter()
        .find(|counts| counts.backend == "fake")
        .unwrap_or_else(|| panic!("the fake backend is counted: {:?}", store.activity()))
}

// S4, P11, P7
#[test]
fn every_process_adds_its_hits_misses_compiles_and_failures_to_the_totals() {
    if let Ok(root) = std::env::var(CHILD) {
        assert_eq!(load_all(Path::new(&root)), 3, "all but the failing one");
        return;
    }
    let scratch = Scratch::new("activity");
    let root = scratch.join("store");
    let test = "every_process_adds_its_hits_misses_compiles_and_failures_to_the_totals";
    let output = child::rerun(test, CHILD, &root)
        .output()
        .expect("the child runs");
    assert!(output.status.success(), "{}", child::describe(&output));

    let store = DiskStore::open(StoreConfig::at(&root)).expect("opens");
    let first = fake(&store);
    assert_eq!(
        (
            first.hits,
            first.rekeyed,
            first.misses,
            first.compiles,
            first.failures
        ),
        (0, 1, 3, 2, 1),
        "the first process compiled two, rekeyed one onto its twin, and one failed: {first:?}"
    );
    assert!(
        first.compile_nanos >= 20_000_000,
        "the slow kernel's work is counted: {first:?}"
    );
    assert!(store.activity().since > 0);

    // A second process: everything from the store, the failure from its
    // memory.
    let output = child::rerun(test, CHILD, &root)
        .output()
        .expect("the child runs");
    assert!(output.status.success(), "{}", child::describe(&output));
    let both = fake(&store);
    assert_eq!(
        (both.hits, both.misses, both.compiles, both.failures),
        (3, 3, 2, 1),
        "three hits more, nothing compiled: {both:?}"
    );
    assert_eq!(both.failures_remembered, 1, "{both:?}");
    assert!(
        both.saved_nanos >= 20_000_000,
        "the hits saved what compiling took: {both:?}"
    );

    // This process counts too, and zeroing starts again.
    assert_eq!(load_all(&root), 3);
    assert_eq!(fake(&store).hits, 6);
    store.zero_activity().expect("zeroed");
    let zeroed = store.activity();
    assert!(zeroed.backends.is_empty(), "{zeroed:?}");
}

// P5
#[test]
fn a_read_only_store_counts_nothing_and_cannot_be_zeroed() {
    let scratch = Scratch::new("activity-read-only");
    let root = scratch.join("store");
    assert_eq!(load_all(&root), 3);
    let store = DiskStore::open(StoreConfig {
        read_only: true,
        ..StoreConfig::at(&root)
    })
    .expect("opens");
    let before = store.activity();
    let target = FakeTarget::on_store(Arc::new(store.clone()));
    let mut loader = KernelLoader::with_config(target, LoaderConfig::default());
    let kernel = FakeKernel::new(0).sleeping(Duration::from_millis(20));
    loader
        .load(&kernel, &kernel.artifact_id())
        .expect("served by the read-only store");
    assert_eq!(store.activity(), before, "nothing written");
    let refused = store.zero_activity().expect_err("read-only");
    assert!(refused.to_string().contains("read-only"), "{refused}");
}
