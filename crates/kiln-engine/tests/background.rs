//! `load_or` and `try_load` with background batches (R1, R2, R3), through
//! real worker processes: this binary is its own compile worker (its
//! `main` starts with the hook), and the fake compiler takes the time each
//! kernel asks for in it.
//!
//! Each test is a sentence naming its rule; the binary prints libtest's
//! `test result:` line, so `cargo test` counts it.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_engine::fake::{FakeCompiler, FakeKernel, FakeTarget};
use kiln_engine::{
    ArtifactId, ArtifactStore, DeviceId, KernelCache, KernelLoader, KernelOutcome, LoaderConfig,
    Loading, MemoryStore, WorkerMode,
};
use kiln_test_support::Scratch;

fn main() {
    kiln_engine::worker::run_if_worker(&[]);
    let tests: &[(&str, fn())] = &[
        (
            "r1_r2_a_thousand_requests_with_twenty_new_shapes_never_wait_on_a_compile",
            r1_r2_a_thousand_requests_with_twenty_new_shapes_never_wait_on_a_compile,
        ),
        (
            "r2_a_kernel_failing_in_the_background_keeps_its_fallback_and_reports_once",
            r2_a_kernel_failing_in_the_background_keeps_its_fallback_and_reports_once,
        ),
        (
            "r2_dropping_the_loader_mid_batch_leaves_no_worker_and_a_whole_store",
            r2_dropping_the_loader_mid_batch_leaves_no_worker_and_a_whole_store,
        ),
        (
            "r1_a_missing_fallback_is_an_error_at_once",
            r1_a_missing_fallback_is_an_error_at_once,
        ),
        (
            "r1_r2_the_shared_handle_serves_fallbacks_from_many_threads_while_it_builds",
            r1_r2_the_shared_handle_serves_fallbacks_from_many_threads_while_it_builds,
        ),
        (
            "r2_the_shared_handle_keeps_the_fallback_of_a_kernel_failing_in_the_background",
            r2_the_shared_handle_keeps_the_fallback_of_a_kernel_failing_in_the_background,
        ),
        (
            "r3_is_warm_says_nothing_is_pending",
            r3_is_warm_says_nothing_is_pending,
        ),
    ];
    kiln_test_support::harness::run(tests);
}

/// A compile of a specialization, as the serving story has it.
const COMPILE_TIME: Duration = Duration::from_secs(2);

fn loader(target: FakeTarget, parallelism: usize, mode: WorkerMode) -> KernelLoader<FakeTarget> {
    KernelLoader::with_config(
        target,
        LoaderConfig {
            parallelism: NonZeroUsize::new(parallelism).expect("at least 1"),
            record_limit: 64,
            profile: false,
            ..LoaderConfig::default()
        },
    )
    .with_worker_mode(mode)
}

fn target_on(store: Arc<dyn ArtifactStore>, log: &Path) -> FakeTarget {
    FakeTarget::on_store(store).with_compiler(
        FakeCompiler::default()
            .in_worker_processes()
            .logging_compiles_to(log),
    )
}

/// How many times each kernel number was compiled, and by which processes.
fn compiles(log: &Path) -> (BTreeMap<u32, usize>, Vec<u32>) {
    let mut counts = BTreeMap::new();
    let mut pids = Vec::new();
    for (pid, number) in FakeCompiler::read_compile_log(log).unwrap_or_default() {
        *counts.entry(number).or_insert(0) += 1;
        if !pids.contains(&pid) {
            pids.push(pid);
        }
    }
    (counts, pids)
}

fn is_running(pid: u32) -> bool {
    // A zombie is not running: its parent reaps it when it gets to it.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat
                .rsplit(')')
                .next()?
                .split_whitespace()
                .next()?
                .to_owned();
            Some(state != "Z")
        })
        .unwrap_or(false)
}

/// R1, R2: a compiler taking 2 s a kernel, 1,000 requests over 5 s whose
/// 20 shapes arrive unannounced: no request compiles (counted, not timed),
/// fallbacks serve meanwhile, and every shape is served specialized once
/// its background batch lands, each compiled once, in worker processes.
fn r1_r2_a_thousand_requests_with_twenty_new_shapes_never_wait_on_a_compile() {
    let scratch = Scratch::new("r1-serving");
    let log = scratch.join("compiles.log");
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    let mut loader = loader(target_on(store, &log), 8, WorkerMode::Processes);
    let fallback = FakeKernel::new(0);
    let fallback_id = fallback.artifact_id();
    loader
        .load(&fallback, &fallback_id)
        .expect("the fallback compiles");
    let before = loader.statistics().health;
    assert_eq!(before.request_path_compiles, 1, "the fallback's own load");

    let shapes: Vec<FakeKernel> = (1..=20)
        .map(|number| FakeKernel::new(number).sleeping(COMPILE_TIME))
        .collect();
    let ids: Vec<ArtifactId<()>> = shapes.iter().map(FakeKernel::artifact_id).collect();
    let (mut specialized, mut fell_back) = (0, 0);
    let started = Instant::now();
    for request in 0..1000u64 {
        if let Some(wait) =
            (started + Duration::from_millis(5 * request)).checked_duration_since(Instant::now())
        {
            std::thread::sleep(wait);
        }
        // Shape `s` first comes at request 50 s; every other request asks
        // for one seen before.
        let newest = usize::try_from(request / 50).expect("small");
        let shape = if request % 2 == 0 {
            newest
        } else {
            usize::try_from(request / 2).expect("small") % (newest + 1)
        };
        let served = loader
            .load_or(&shapes[shape], &ids[shape], &fallback_id)
            .expect("the fallback is loaded");
        if served.kernel == ids[shape].kernel {
            specialized += 1;
        } else {
            assert_eq!(
                served.kernel, fallback_id.kernel,
                "the fallback or the kernel"
            );
            fell_back += 1;
        }
    }
    let serving = started.elapsed();
    let during = loader.statistics().health;
    assert_eq!(
        during.request_path_compiles, before.request_path_compiles,
        "no request compiled: {during:?}"
    );
    assert!(during.fallback_loads > 0, "{during:?}");
    assert_eq!(during.fallback_loads, fell_back);
    assert!(
        serving < Duration::from_secs(7),
        "the requests kept their pace: {serving:?}"
    );

    assert!(loader.wait_for_background(Duration::from_secs(60)));
    for (shape, id) in shapes.iter().zip(&ids) {
        let served = loader.load_or(shape, id, &fallback_id).expect("loaded");
        assert_eq!(
            served.kernel, id.kernel,
            "served specialized after its batch"
        );
    }
    let after = loader.statistics().health;
    assert_eq!(after.request_path_compiles, before.request_path_compiles);
    assert_eq!(
        (after.compiling_now, after.oldest_compiling_seconds),
        (0, 0.0)
    );
    assert!(after.background_batches >= 1, "{after:?}");
    assert!(loader.is_warm());

    let background: Vec<_> = loader
        .records()
        .iter()
        .filter(|record| record.background)
        .collect();
    let compiled: usize = background
        .iter()
        .map(|record| record.count(KernelOutcome::Compiled))
        .sum();
    assert_eq!(compiled, 20, "every shape compiled in a background batch");
    assert!(
        background
            .iter()
            .all(|record| record.mode == WorkerMode::Processes),
        "in worker processes"
    );
    let (counts, pids) = compiles(&log);
    assert!(
        counts.values().all(|&count| count == 1),
        "each compiled once: {counts:?}"
    );
    assert!(!pids.contains(&std::process::id()), "none in this process");
    println!(
        "served {specialized} specialized and {fell_back} by the fallback in {serving:?}, \
         {} background batches",
        after.background_batches
    );
}

/// R2 (L7): a kernel that fails in the background keeps its fallback for
/// good, its failure reported once, and is not compiled again there.
fn r2_a_kernel_failing_in_the_background_keeps_its_fallback_and_reports_once() {
    let mut loader = loader(FakeTarget::storeless(), 2, WorkerMode::Threads);
    let fallback = FakeKernel::new(0);
    let fallback_id = fallback.artifact_id();
    loader.load(&fallback, &fallback_id).expect("compiles");
    let failing = FakeKernel::new(9).failing();
    let id = failing.artifact_id();

    let served = loader
        .load_or(&failing, &id, &fallback_id)
        .expect("fallback");
    assert_eq!(served.kernel, fallback_id.kernel);
    assert!(loader.wait_for_background(Duration::from_secs(60)));
    let served = loader
        .load_or(&failing, &id, &fallback_id)
        .expect("fallback");
    assert_eq!(served.kernel, fallback_id.kernel, "the fallback stays");
    let failures = loader.take_background_failures();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].kernel, id.kernel);
    let batches = loader.statistics().health.background_batches;

    for _ in 0..3 {
        assert_eq!(
            loader
                .load_or(&failing, &id, &fallback_id)
                .expect("fallback")
                .kernel,
            fallback_id.kernel
        );
    }
    assert_eq!(loader.try_load(&failing, &id), Loading::Failed);
    assert!(loader.wait_for_background(Duration::from_secs(60)));
    assert!(
        loader.take_background_failures().is_empty(),
        "reported once"
    );
    let health = loader.statistics().health;
    assert_eq!(health.background_batches, batches, "not compiled again");
    assert_eq!(health.background_failures, 1);
}

/// R2: dropping the loader while its background batch compiles in worker
/// processes waits for the batch in flight, then shuts every worker down;
/// the store holds each kernel whole or not at all, and a later loader
/// loads them all.
fn r2_dropping_the_loader_mid_batch_leaves_no_worker_and_a_whole_store() {
    let scratch = Scratch::new("r2-drop");
    let log = scratch.join("compiles.log");
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    let mut loader = loader(
        target_on(Arc::clone(&store), &log),
        2,
        WorkerMode::Processes,
    );
    let fallback = FakeKernel::new(0);
    let fallback_id = fallback.artifact_id();
    loader.load(&fallback, &fallback_id).expect("compiles");
    let shapes: Vec<FakeKernel> = (1..=4)
        .map(|number| FakeKernel::new(number).sleeping(Duration::from_millis(800)))
        .collect();
    for shape in &shapes {
        assert!(matches!(
            loader.try_load(shape, &shape.artifact_id()),
            Loading::Pending
        ));
    }
    // Wait until the background batch compiles in a worker.
    let deadline = Instant::now() + Duration::from_secs(30);
    while compiles(&log).0.keys().all(|&number| number == 0) {
        assert!(Instant::now() < deadline, "the background batch started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let dropping = Instant::now();
    drop(loader);
    let dropped = dropping.elapsed();
    assert!(dropped < Duration::from_secs(20), "{dropped:?}");
    let (_, pids) = compiles(&log);
    for pid in &pids {
        assert!(!is_running(*pid), "worker {pid} ended with its loader");
    }

    let mut next = self::loader(
        FakeTarget::on_store(Arc::clone(&store)),
        2,
        WorkerMode::Threads,
    );
    for shape in &shapes {
        let loaded = next
            .load(shape, &shape.artifact_id())
            .expect("whole or absent, never torn");
        assert_eq!(loaded.kernel, shape.artifact_id().kernel);
    }
    println!("the drop waited {dropped:?} for the batch in flight");
}

/// R1: a fallback that is not loaded is an error the caller gets at once,
/// and nothing compiles on its thread.
fn r1_a_missing_fallback_is_an_error_at_once() {
    let mut loader = loader(FakeTarget::storeless(), 2, WorkerMode::Threads);
    let kernel = FakeKernel::new(1).sleeping(Duration::from_millis(300));
    let fallback = FakeKernel::new(0).artifact_id();
    let asked = Instant::now();
    let error = loader
        .load_or(&kernel, &kernel.artifact_id(), &fallback)
        .expect_err("no fallback loaded");
    assert!(asked.elapsed() < Duration::from_millis(250), "at once");
    assert_eq!(error.fallback, fallback.kernel);
    assert!(error.to_string().contains("load it once"), "{error}");
    assert_eq!(loader.statistics().health.request_path_compiles, 0);
    assert!(loader.wait_for_background(Duration::from_secs(60)));
    assert!(matches!(
        loader.try_load(&kernel, &kernel.artifact_id()),
        Loading::Ready(_)
    ));
}

/// R3: `is_warm` is false while a kernel waits for its background batch,
/// and true once it landed; the health says how many compile and since
/// when.
fn r3_is_warm_says_nothing_is_pending() {
    let mut loader = loader(FakeTarget::storeless(), 2, WorkerMode::Threads);
    assert!(loader.is_warm(), "nothing asked yet");
    let kernel = FakeKernel::new(1).sleeping(Duration::from_millis(300));
    assert_eq!(
        loader.try_load(&kernel, &kernel.artifact_id()),
        Loading::Pending
    );
    assert!(!loader.is_warm());
    std::thread::sleep(Duration::from_millis(50));
    let health = loader.statistics().health;
    assert_eq!(health.compiling_now, 1);
    assert!(health.oldest_compiling_seconds >= 0.04, "{health:?}");
    assert!(loader.wait_for_background(Duration::from_secs(60)));
    assert!(loader.is_warm());
    let record = loader.records().back().expect("the background batch");
    assert!(record.background);
    assert_eq!(record.health.request_path_compiles, 0);
}

/// R1, R2 with the shared handle: request threads resolve with a fallback
/// while the cache builds their shapes in background batches in worker
/// processes; no request thread compiles, and every shape is served once
/// built.
fn r1_r2_the_shared_handle_serves_fallbacks_from_many_threads_while_it_builds() {
    let scratch = Scratch::new("r1-shared");
    let log = scratch.join("compiles.log");
    let device = DeviceId::new("fake", 0);
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    let cache = KernelCache::with_config(
        device,
        target_on(store, &log),
        LoaderConfig {
            parallelism: NonZeroUsize::new(4).expect("4"),
            record_limit: 64,
            profile: false,
            worker_mode: WorkerMode::Processes,
            ..LoaderConfig::default()
        },
    );
    let fallback = cache.request(FakeKernel::new(0), ());
    fallback.resolve(device).expect("the fallback builds");
    let before = cache.health();
    let shapes: Vec<_> = (1..=8)
        .map(|number| {
            cache.request(
                FakeKernel::new(number).sleeping(Duration::from_millis(500)),
                (),
            )
        })
        .collect();
    let started = Instant::now();
    let fell_back: u64 = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..4)
            .map(|thread| {
                let (shapes, fallback) = (&shapes, &fallback);
                scope.spawn(move || {
                    let mut fell_back = 0;
                    for request in 0..100usize {
                        let shape = &shapes[(request + thread) % shapes.len()];
                        let served = shape.resolve_or(device, fallback).expect("fallback built");
                        if served.kernel != shape.id().kernel {
                            assert_eq!(served.kernel, fallback.id().kernel);
                            fell_back += 1;
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    fell_back
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|thread| thread.join().expect("no panic"))
            .sum()
    });
    let serving = started.elapsed();
    let during = cache.health();
    assert_eq!(
        during.request_path_compiles, before.request_path_compiles,
        "{during:?}"
    );
    assert!(
        fell_back > 0 && during.fallback_loads >= fell_back,
        "{during:?}"
    );
    assert!(cache.wait_for_background(Duration::from_secs(60)));
    for shape in &shapes {
        assert_eq!(
            shape.resolve_or(device, &fallback).expect("built").kernel,
            shape.id().kernel
        );
    }
    let records = cache.records();
    let compiled: usize = records
        .iter()
        .filter(|record| record.background)
        .map(|record| record.count(KernelOutcome::Compiled))
        .sum();
    assert_eq!(compiled, 8, "every shape in a background batch");
    assert_eq!(
        cache.health().request_path_compiles,
        before.request_path_compiles
    );
    let (counts, pids) = compiles(&log);
    assert!(counts.values().all(|&count| count == 1), "{counts:?}");
    assert!(!pids.contains(&std::process::id()), "in worker processes");
    println!("{fell_back} of 400 requests served by the fallback in {serving:?}");
}

/// R2 with the shared handle: a kernel that fails in a background build
/// keeps its fallback, is counted once, and a missing fallback is an error
/// at once.
fn r2_the_shared_handle_keeps_the_fallback_of_a_kernel_failing_in_the_background() {
    let device = DeviceId::new("fake", 0);
    let cache = KernelCache::new(device, FakeTarget::storeless());
    let fallback = cache.request(FakeKernel::new(0), ());
    let failing = cache.request(FakeKernel::new(9).failing(), ());
    assert!(matches!(
        failing.resolve_or(device, &fallback),
        Err(kiln_engine::CacheError::FallbackMissing(_))
    ));
    assert!(cache.wait_for_background(Duration::from_secs(30)));
    for _ in 0..3 {
        let served = failing.resolve_or(device, &fallback).expect("the fallback");
        assert_eq!(served.kernel, fallback.id().kernel);
    }
    assert!(cache.wait_for_background(Duration::from_secs(30)));
    let health = cache.health();
    assert_eq!(health.background_failures, 1, "{health:?}");
    assert_eq!(health.request_path_compiles, 0, "{health:?}");
    assert!(health.fallback_loads >= 3, "{health:?}");
}
