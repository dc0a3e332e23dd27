//! A program's first start on a store another tool filled under its own
//! kernel names (L11, P7, P14), across real processes on a real store: the
//! program finds each kernel by its text and stores them all under its own
//! ids in one put; a process killed right after its kernels loaded leaves
//! a store that verifies, and its next start finds every kernel by id.

use std::path::Path;
use std::sync::Arc;

use kiln_engine::fake::{FakeKernel, FakeTarget};
use kiln_engine::{KernelLoader, KernelOutcome, LoaderConfig};
use kiln_store::{DiskStore, StoreConfig};
use kiln_test_support::{Scratch, child};

const CHILD: &str = "KILN_REKEYED_CHILD_STORE";
const KERNELS: u32 = 12;

/// Kernel `number` as another tool names it, or as the program does: the
/// same text either way.
fn kernel(number: u32, program: bool) -> FakeKernel {
    FakeKernel::new(if program { 100 + number } else { number })
        .sharing_source(format!("text {number}"))
}

/// Loads every kernel, as the program or the other tool names them, from
/// the store at `root`, in one batch; returns the batch's record.
fn start(root: &Path, program: bool) -> (kiln_engine::BatchRecord, usize) {
    let store = DiskStore::open(StoreConfig::at(root)).expect("the store opens");
    let mut loader = KernelLoader::with_config(
        FakeTarget::on_store(Arc::new(store)),
        LoaderConfig {
            profile: false,
            ..LoaderConfig::default()
        },
    );
    for number in 0..KERNELS {
        loader.enqueue(Box::new(kernel(number, program)), ());
    }
    loader.compile_queued();
    let loaded = (0..KERNELS)
        .filter(|number| {
            let kernel = kernel(*number, program);
            loader.load(&kernel, &kernel.artifact_id()).is_ok()
        })
        .count();
    let batch = loader.records().back().expect("a batch").clone();
    let lowered = loader.target().fake_compiler().lowered();
    assert_eq!(loaded, KERNELS as usize, "every kernel loads");
    if std::env::var_os(CHILD).is_some() {
        // Killed right after its kernels loaded: no drop, no end of the
        // process's writes.
        std::process::abort();
    }
    (batch, lowered)
}

// L11, P3, P7
#[test]
fn l11_a_start_killed_after_its_rekeyed_kernels_loaded_leaves_them_by_id() {
    if let Ok(root) = std::env::var(CHILD) {
        start(Path::new(&root), true);
        unreachable!("the child aborts");
    }
    let scratch = Scratch::new("rekeyed-puts");
    let root = scratch.join("store");
    // The other tool (`kiln warm`) fills the store under its names.
    let (warm, _) = start(&root, false);
    assert_eq!(warm.count(KernelOutcome::Compiled), KERNELS as usize);

    let test = "l11_a_start_killed_after_its_rekeyed_kernels_loaded_leaves_them_by_id";
    let output = child::rerun(test, CHILD, &root)
        .output()
        .expect("the child runs");
    assert!(
        !output.status.success(),
        "the child was killed: {}",
        child::describe(&output)
    );

    let store = DiskStore::open(StoreConfig::at(&root)).expect("opens");
    let report = store.verify(&mut |_| {}).expect("verifies");
    assert!(report.is_clean(), "the store is whole: {report:?}");
    drop(store);
    let (next, lowered) = start(&root, true);
    assert_eq!(
        next.count(KernelOutcome::FromStore),
        KERNELS as usize,
        "every kernel found by its id: {next:?}"
    );
    assert_eq!(next.count(KernelOutcome::Rekeyed), 0);
    assert_eq!(lowered, 0, "nothing lowered to be found by its text");
    // And by their texts still, under the other tool's names.
    let (again, _) = start(&root, false);
    assert_eq!(again.count(KernelOutcome::FromStore), KERNELS as usize);
}
