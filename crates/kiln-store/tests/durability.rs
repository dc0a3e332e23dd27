//! The store's durability budget, counted by the store itself (its own
//! count of fsync-class calls, no tracing): a warm start syncs nothing, a
//! program's start after another tool filled the store syncs nothing per
//! kernel (L11, F11), and a cold batch's count is printed per kernel.

use std::path::Path;
use std::sync::Arc;

use kiln_engine::fake::{FakeKernel, FakeTarget};
use kiln_engine::{KernelLoader, KernelOutcome, LoaderConfig};
use kiln_store::{DiskStore, StoreConfig, syncs_on_this_thread};
use kiln_test_support::Scratch;

const KERNELS: u32 = 24;

/// Kernel `number` as another tool names it, or as the program does: the
/// same text either way.
fn kernel(number: u32, program: bool) -> FakeKernel {
    FakeKernel::new(if program { 500 + number } else { number })
        .sharing_source(format!("durable text {number}"))
}

/// Loads every kernel in one batch on a store at `root`; returns the
/// batch's record and the syncs the batch made on this thread, where the
/// loader puts.
fn start(root: &Path, program: bool) -> (kiln_engine::BatchRecord, u64) {
    let store = DiskStore::open(StoreConfig {
        collects_automatically: false,
        ..StoreConfig::at(root)
    })
    .expect("the store opens");
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
    let before = syncs_on_this_thread();
    loader.compile_queued();
    let syncs = syncs_on_this_thread() - before;
    let batch = loader.records().back().expect("a batch").clone();
    (batch, syncs)
}

// F11, L11, P3: a cold batch's syncs, then none on a warm start, and none
// per kernel when a program finds another tool's kernels by their text.
#[test]
fn f11_a_warm_start_syncs_nothing_and_a_program_after_another_tool_syncs_per_batch_not_per_kernel()
{
    let scratch = Scratch::new("durability");
    let root = scratch.join("store");

    let (cold, cold_syncs) = start(&root, false);
    assert_eq!(cold.count(KernelOutcome::Compiled), KERNELS as usize);
    println!(
        "a cold batch of {KERNELS} kernels: {cold_syncs} syncs ({:.1} a kernel)",
        cold_syncs as f64 / f64::from(KERNELS)
    );
    assert!(cold_syncs > 0, "a compiled kernel is made durable (P3)");

    let (warm, warm_syncs) = start(&root, false);
    assert_eq!(warm.count(KernelOutcome::FromStore), KERNELS as usize);
    println!("the same batch warm: {warm_syncs} syncs");
    assert_eq!(warm_syncs, 0, "a warm start writes nothing durable");

    let (program, program_syncs) = start(&root, true);
    assert_eq!(program.count(KernelOutcome::Rekeyed), KERNELS as usize);
    println!("a program after the other tool: {program_syncs} syncs");
    // The records name objects that are durable already: they are written
    // and not waited for. A shard the batch is the first to write to is
    // made durable once for the whole batch (one sync of the file system),
    // and the store's list of targets is published once (two): a few per
    // batch, never one per kernel, and fewer than a synced put of the
    // records (four).
    assert!(
        program_syncs <= 3,
        "{program_syncs} syncs for {KERNELS} kernels found by their text"
    );

    // And what it wrote is there for its next start, by its own ids.
    let (again, again_syncs) = start(&root, true);
    assert_eq!(again.count(KernelOutcome::FromStore), KERNELS as usize);
    assert_eq!(again_syncs, 0);
}
