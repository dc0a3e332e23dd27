//! The store's durability budget, counted by the store itself (its own
//! count of fsync-class calls, no tracing): a batch's writes are made
//! durable together (a group commit), so a cold batch costs the same few
//! syncs whatever its size, a warm start syncs nothing, and a program's
//! start after another tool filled the store syncs a few times per batch,
//! never per kernel (P3, L11, F11). And a process killed at any instant of
//! such a batch leaves whole entries or none (P3).

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_engine::fake::{FakeKernel, FakeTarget};
use kiln_engine::{ArtifactStore, KernelLoader, KernelOutcome, LoaderConfig, Lookup};
use kiln_store::{DiskStore, Entry, StoreConfig, syncs_on_this_thread};
use kiln_test_support::Scratch;
use kiln_test_support::child::rerun;

/// The most syncs a batch may make, whatever its size: the group's sync
/// of the store's file system when it ends, and one more when it waited
/// for others meanwhile.
const BATCH_BUDGET: u64 = 2;

/// Small artifacts packed, as the store does by default.
const PACKED: u64 = 64 << 10;

/// Kernel `number` as another tool names it, or as the program does: the
/// same text either way.
fn kernel(number: u32, program: bool) -> FakeKernel {
    FakeKernel::new(if program { 5000 + number } else { number })
        .sharing_source(format!("durable text {number}"))
}

fn open(root: &Path, pack_below: u64) -> DiskStore {
    DiskStore::open(StoreConfig {
        collects_automatically: false,
        pack_below,
        ..StoreConfig::at(root)
    })
    .expect("the store opens")
}

/// Loads kernels `numbers` in one batch on a store at `root`; returns the
/// batch's record and the syncs the batch made on this thread, where the
/// loader puts.
fn start(
    root: &Path,
    pack_below: u64,
    numbers: std::ops::Range<u32>,
    program: bool,
) -> (kiln_engine::BatchRecord, u64) {
    let mut loader = KernelLoader::with_config(
        FakeTarget::on_store(Arc::new(open(root, pack_below))),
        LoaderConfig {
            profile: false,
            ..LoaderConfig::default()
        },
    );
    for number in numbers {
        loader.enqueue(Box::new(kernel(number, program)), ());
    }
    let before = syncs_on_this_thread();
    loader.compile_queued();
    let syncs = syncs_on_this_thread() - before;
    let batch = loader.records().back().expect("a batch").clone();
    (batch, syncs)
}

// P3, F11: a cold batch of 8 kernels and one of 32 make the same few
// syncs, packed or as files; the same batches warm make none.
#[test]
fn p3_f11_a_cold_batch_syncs_a_few_times_whatever_its_size_and_a_warm_one_never() {
    let scratch = Scratch::new("durability-budget");
    for (layout, pack_below) in [("packed", PACKED), ("files", 0)] {
        let mut cold = Vec::new();
        for kernels in [8u32, 32] {
            let root = scratch.join(&format!("{layout}-{kernels}"));
            let (batch, syncs) = start(&root, pack_below, 0..kernels, false);
            assert_eq!(batch.count(KernelOutcome::Compiled), kernels as usize);
            assert_eq!(batch.count(KernelOutcome::Failed), 0);
            println!(
                "{layout}: a cold batch of {kernels} kernels made {syncs} syncs ({:.2} a kernel)",
                syncs as f64 / f64::from(kernels)
            );
            assert!(syncs > 0, "a compiled kernel is made durable (P3)");
            assert!(
                syncs <= BATCH_BUDGET,
                "{layout}: {syncs} syncs for a cold batch of {kernels} kernels"
            );
            cold.push(syncs);

            let (warm, warm_syncs) = start(&root, pack_below, 0..kernels, false);
            assert_eq!(warm.count(KernelOutcome::FromStore), kernels as usize);
            assert_eq!(
                warm_syncs, 0,
                "{layout}: a warm start writes nothing durable"
            );
        }
        assert_eq!(
            cold[0], cold[1],
            "{layout}: the syncs of a cold batch do not grow with its kernels"
        );
    }
}

// F11, L11, P3: none on a warm start, and a few per batch, not per kernel,
// when a program finds another tool's kernels by their text.
#[test]
fn f11_a_warm_start_syncs_nothing_and_a_program_after_another_tool_syncs_per_batch_not_per_kernel()
{
    const KERNELS: u32 = 24;
    let scratch = Scratch::new("durability");
    let root = scratch.join("store");
    let pack_below = PACKED;

    let (cold, cold_syncs) = start(&root, pack_below, 0..KERNELS, false);
    assert_eq!(cold.count(KernelOutcome::Compiled), KERNELS as usize);
    println!("a cold batch of {KERNELS} kernels: {cold_syncs} syncs");
    assert!((1..=BATCH_BUDGET).contains(&cold_syncs), "{cold_syncs}");

    let (warm, warm_syncs) = start(&root, pack_below, 0..KERNELS, false);
    assert_eq!(warm.count(KernelOutcome::FromStore), KERNELS as usize);
    println!("the same batch warm: {warm_syncs} syncs");
    assert_eq!(warm_syncs, 0, "a warm start writes nothing durable");

    let (program, program_syncs) = start(&root, pack_below, 0..KERNELS, true);
    assert_eq!(program.count(KernelOutcome::Rekeyed), KERNELS as usize);
    println!("a program after the other tool: {program_syncs} syncs");
    // The records name objects that are durable already: they are written
    // and not waited for. Shards the batch is the first to write to, and
    // the store's list of targets, are made durable once for the whole
    // batch (one sync of the file system).
    assert!(
        program_syncs <= 1,
        "{program_syncs} syncs for {KERNELS} kernels found by their text"
    );

    // And what it wrote is there for its next start, by its own ids.
    let (again, again_syncs) = start(&root, pack_below, 0..KERNELS, true);
    assert_eq!(again.count(KernelOutcome::FromStore), KERNELS as usize);
    assert_eq!(again_syncs, 0);
}

/// Set in a child of the kill test: the store it fills.
const KILLED: &str = "KILN_TEST_KILLED_BATCHES";

/// The child's loop: batch after batch of new kernels, each batch's puts
/// one group commit, until it is killed.
fn batches_until_killed(root: &Path, pack_below: u64, seed: u32) -> ! {
    let mut first = seed.wrapping_mul(100_000);
    loop {
        start(root, pack_below, first..first + 16, false);
        first = first.wrapping_add(16);
    }
}

// P3: writers killed (SIGKILL) at random instants of their batches' group
// commits, packed and as files, leave a store that verifies clean, and
// every entry it shows loads whole.
#[test]
fn p3_a_batch_killed_at_any_instant_of_its_group_commit_leaves_whole_entries_or_none() {
    if let Ok(value) = std::env::var(KILLED) {
        let mut words = value.split('|');
        let (Some(root), Some(pack_below), Some(seed)) = (words.next(), words.next(), words.next())
        else {
            panic!("{KILLED} is ROOT|PACK_BELOW|SEED");
        };
        batches_until_killed(
            Path::new(root),
            pack_below.parse().expect("a number"),
            seed.parse().expect("a number"),
        );
    }
    let scratch = Scratch::new("durability-killed");
    let mut random = 0x2545_f491_4f6c_dd1d_u64;
    for (layout, pack_below) in [("packed", PACKED), ("files", 0)] {
        let root = scratch.join(layout);
        let started = Instant::now();
        let mut kills = 0u32;
        let stored = |root: &Path| {
            let mut records = Vec::new();
            if root.exists() {
                open(root, pack_below)
                    .entries(&mut |entry| {
                        if let Entry::Record(record) = entry.entry {
                            records.push(record.key);
                        }
                    })
                    .expect("the store lists");
            }
            records
        };
        while kills < 16 || stored(&root).is_empty() {
            assert!(
                started.elapsed() < Duration::from_secs(240),
                "{kills} writers killed, none stored anything"
            );
            let value = format!("{}|{pack_below}|{kills}", root.display());
            let mut child = rerun(
                "p3_a_batch_killed_at_any_instant_of_its_group_commit_leaves_whole_entries_or_none",
                KILLED,
                value,
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the writer starts");
            random ^= random << 13;
            random ^= random >> 7;
            random ^= random << 17;
            std::thread::sleep(Duration::from_micros(20_000 + random % 100_000));
            child.kill().expect("killed"); // SIGKILL
            child.wait().expect("reaped");
            kills += 1;
        }
        let store = open(&root, pack_below);
        let report = store.verify(&mut |_| {}).expect("verifies");
        assert!(
            report.is_clean(),
            "{layout}: nothing partial or corrupt: {report:?}"
        );
        let records = stored(&root);
        for key in &records {
            match store.lookup(key) {
                Lookup::Hit { .. } => {}
                Lookup::Miss(miss) => panic!("{layout}: a visible entry does not load: {miss}"),
            }
        }
        println!(
            "{layout}: {kills} writers killed, {} records whole",
            records.len()
        );
    }
}
