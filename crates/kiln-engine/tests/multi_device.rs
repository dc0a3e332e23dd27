//! Several devices of one machine behind one store, on fake devices 0 and
//! 1 of one model (one identity, a clock, a launch count and modules of
//! their own): what a machine with two identical GPUs must do, proved
//! without one and counted, never timed.
//!
//! - a tune on device 0 is answered from the store on device 1 with no
//!   launch and no compile (T2); tuners of one key on both devices at once
//!   measure once (T4); devices of another model measure their own;
//! - each device's loader, with its background batches, serves `load_or`
//!   on its own device while one store compiles each kernel once (R1, R2,
//!   P4);
//! - each device keeps its own warm-start profile, and devices writing one
//!   profile keep each other's kernels (L12).

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use kiln_engine::fake::{FakeDevice, FakeKernel, FakeModule, FakeTarget};
use kiln_engine::profile::{Program, StoredProfile, profile_blob_key};
use kiln_engine::store::Lookup;
use kiln_engine::tune::{Candidate, Measure, Origin, TuneKey, Tuned};
use kiln_engine::{
    ArtifactStore, CacheError, CompilationTarget, KernelCache, KernelLoader, KernelOutcome,
    KeyedCompiler, LoaderConfig, MemoryStore, WorkerMode,
};

/// The longest any wait of these tests lasts: far past what the work
/// takes, so that only a hang reaches it.
const PATIENCE: Duration = Duration::from_secs(30);

fn memory_store() -> Arc<dyn ArtifactStore> {
    Arc::new(MemoryStore::new())
}

/// Device `number` of a machine whose devices are all of one model.
fn device(number: u32) -> FakeDevice {
    FakeDevice::default().with_number(number)
}

/// A target on `device`, keeping its artifacts in `store`.
fn target(store: &Arc<dyn ArtifactStore>, device: FakeDevice) -> FakeTarget {
    FakeTarget::on_store(Arc::clone(store)).with_device(device)
}

/// A loader on `target` with two workers in this process and no profile.
fn loader(target: FakeTarget) -> KernelLoader<FakeTarget> {
    KernelLoader::with_config(target, config(false)).with_worker_mode(WorkerMode::Threads)
}

fn config(profile: bool) -> LoaderConfig {
    LoaderConfig {
        parallelism: NonZeroUsize::new(2).expect("two"),
        record_limit: 64,
        profile,
        ..LoaderConfig::default()
    }
}

fn candidates() -> Vec<Candidate<FakeTarget>> {
    (1..=4)
        .map(|number| Candidate::new(Box::new(FakeKernel::new(number)), ()))
        .collect()
}

/// How long candidate `module` runs: the third candidate is fastest.
fn run_time(module: &FakeModule) -> Duration {
    Duration::from_micros(if module.text.ends_with('3') { 5 } else { 50 })
}

/// Tunes `key` on `loader`'s device with kiln's timed measure, launching
/// on that device; a module of another device fails its launch.
fn tune(loader: &mut KernelLoader<FakeTarget>, key: &str) -> Tuned<Arc<FakeModule>> {
    let device = loader.target().device().clone();
    let mut launch = |module: &Arc<FakeModule>| {
        if module.device != device.number() {
            return Err(format!(
                "a module of device {} launched on device {}",
                module.device,
                device.number()
            ));
        }
        device.run(run_time(module));
        Ok(())
    };
    let measure = Measure::Timed {
        launch: &mut launch,
        warm_up: 1,
        runs: 5,
    };
    loader
        .tune(&TuneKey::new(key), &candidates(), measure)
        .expect("every candidate works")
}

#[test]
fn t2_a_tune_on_device_0_is_answered_from_the_store_on_device_1_with_no_launch_or_compile() {
    let store = memory_store();
    let mut zero = loader(target(&store, device(0)));
    let measured = tune(&mut zero, "multi_device.t2");
    assert_eq!((measured.winner, measured.origin), (2, Origin::Measured));
    assert_eq!(zero.target().device().launches(), 4 * 6, "four candidates");
    assert_eq!(measured.loaded.device, 0);

    let mut one = loader(target(&store, device(1)));
    assert_eq!(
        one.target().device().id().to_string(),
        "fake:1",
        "the fake stands for device 1"
    );
    let answered = tune(&mut one, "multi_device.t2");
    assert_eq!((answered.winner, answered.origin), (2, Origin::Stored));
    assert_eq!(answered.answer, measured.answer, "the same answer");
    assert_eq!(one.target().device().launches(), 0, "no launch on device 1");
    let compiler = one.target().fake_compiler();
    assert_eq!(
        (compiler.lowered(), compiler.finalized()),
        (0, 0),
        "no compile"
    );
    assert_eq!(one.target().loaded(), 1, "the winner alone, on device 1");
    assert_eq!(answered.loaded.device, 1, "device 1's module");
    assert_eq!(
        zero.target().device().launches(),
        4 * 6,
        "device 0 untouched"
    );
}

#[test]
fn t2_a_device_of_another_model_measures_its_own_answer() {
    let store = memory_store();
    let mut first = loader(target(&store, device(0)));
    assert_eq!(
        tune(&mut first, "multi_device.models").origin,
        Origin::Measured
    );

    let other_model = FakeDevice::new("fake device B (driver kiln-fake 1)").with_number(1);
    let mut second = loader(target(&store, other_model));
    let tuned = tune(&mut second, "multi_device.models");
    assert_eq!(
        tuned.origin,
        Origin::Measured,
        "another identity, another answer"
    );
    assert_eq!(second.target().device().launches(), 4 * 6);
    assert_eq!(tuned.loaded.device, 1);
}

#[test]
fn t4_tuners_of_one_key_on_two_devices_at_once_measure_once() {
    let store = memory_store();
    let probes = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(2));
    let tuners: Vec<_> = (0..2)
        .map(|number| {
            let (store, probes, start) =
                (Arc::clone(&store), Arc::clone(&probes), Arc::clone(&start));
            std::thread::spawn(move || {
                let mut loader = loader(target(&store, device(number)));
                let device = loader.target().device().clone();
                let mut probe = |module: &Arc<FakeModule>| {
                    probes.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(module.device, number, "measured on its own device");
                    device.run(run_time(module));
                    // Long enough that the other tuner finds the key held.
                    std::thread::sleep(Duration::from_millis(40));
                    Ok(run_time(module))
                };
                start.wait();
                let tuned = loader
                    .tune(
                        &TuneKey::new("multi_device.t4"),
                        &candidates(),
                        Measure::Probe(&mut probe),
                    )
                    .expect("every candidate works");
                (tuned.winner, tuned.origin, tuned.loaded.device)
            })
        })
        .collect();
    let outcomes: Vec<_> = tuners
        .into_iter()
        .map(|tuner| tuner.join().expect("a tuner"))
        .collect();
    let measured = outcomes
        .iter()
        .filter(|(_, origin, _)| *origin == Origin::Measured)
        .count();
    assert_eq!(measured, 1, "{outcomes:?}");
    assert_eq!(probes.load(Ordering::SeqCst), 4, "each candidate once");
    assert_eq!(outcomes[0].0, outcomes[1].0, "one winner: {outcomes:?}");
    assert_eq!(
        (outcomes[0].2, outcomes[1].2),
        (0, 1),
        "each device its own module"
    );
}

/// The most probes of two tuners (of two keys, on devices `first` and
/// `second`) that ran at the same moment; until two have, each probe waits
/// up to `meet` for the other tuner's to run beside it.
fn most_probes_at_once(first: FakeDevice, second: FakeDevice, meet: Duration) -> usize {
    let store = memory_store();
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tuners: Vec<_> = [first, second]
        .into_iter()
        .enumerate()
        .map(|(index, device)| {
            let (store, running, most) =
                (Arc::clone(&store), Arc::clone(&running), Arc::clone(&most));
            std::thread::spawn(move || {
                let mut loader = loader(target(&store, device));
                let mut probe = |module: &Arc<FakeModule>| {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    let deadline = Instant::now() + meet;
                    while most.load(Ordering::SeqCst) < 2 && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(1));
                        most.fetch_max(running.load(Ordering::SeqCst), Ordering::SeqCst);
                    }
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok(run_time(module))
                };
                let key = TuneKey::new(format!("multi_device.turns.{index}"));
                loader
                    .tune(&key, &candidates(), Measure::Probe(&mut probe))
                    .expect("every candidate works");
            })
        })
        .collect();
    for tuner in tuners {
        tuner.join().expect("a tuner");
    }
    most.load(Ordering::SeqCst)
}

#[test]
fn t4_devices_of_one_model_take_turns_measuring_and_of_two_models_measure_at_once() {
    // kiln tells devices apart for measuring by their identity: two
    // targets of one model may be on one GPU, so their measurements take
    // turns (never two candidates on one device at once).
    assert_eq!(
        most_probes_at_once(device(0), device(1), Duration::from_millis(50)),
        1
    );
    let other_model = FakeDevice::new("fake device B (driver kiln-fake 1)").with_number(1);
    assert_eq!(most_probes_at_once(device(0), other_model, PATIENCE), 2);
}

#[test]
fn p4_two_devices_of_one_process_compile_each_kernel_once_on_one_store() {
    let store = memory_store();
    let start = Arc::new(Barrier::new(2));
    let devices: Vec<_> = (0..2)
        .map(|number| {
            let (store, start) = (Arc::clone(&store), Arc::clone(&start));
            std::thread::spawn(move || {
                let mut loader = loader(target(&store, device(number)));
                for kernel in 0..16 {
                    let kernel = FakeKernel::new(kernel).sleeping(Duration::from_millis(10));
                    loader.enqueue(Box::new(kernel), ());
                }
                start.wait();
                loader.compile_queued();
                let records = loader.records();
                let compiled: usize = records
                    .iter()
                    .map(|record| record.count(KernelOutcome::Compiled))
                    .sum();
                for kernel in 0..16 {
                    let kernel = FakeKernel::new(kernel);
                    let module = loader.load(&kernel, &kernel.artifact_id()).expect("loaded");
                    assert_eq!(module.device, number, "{}", module.kernel);
                }
                let target = loader.target();
                (
                    compiled,
                    target.fake_compiler().finalized(),
                    target.loaded(),
                )
            })
        })
        .collect();
    let counts: Vec<_> = devices
        .into_iter()
        .map(|device| device.join().expect("a device's thread"))
        .collect();
    assert_eq!(
        counts[0].1 + counts[1].1,
        16,
        "each kernel compiled once: {counts:?}"
    );
    assert_eq!(counts[0].0 + counts[1].0, 16, "{counts:?}");
    assert_eq!((counts[0].2, counts[1].2), (16, 16), "on both devices");
}

#[test]
fn r1_r2_load_or_serves_on_both_devices_and_one_store_compiles_each_kernel_once() {
    const KERNELS: u32 = 6;
    let store = memory_store();
    let start = Arc::new(Barrier::new(2));
    let devices: Vec<_> = (0..2)
        .map(|number| {
            let (store, start) = (Arc::clone(&store), Arc::clone(&start));
            std::thread::spawn(move || {
                let mut loader = loader(target(&store, device(number)));
                let fallback = FakeKernel::new(0);
                let fallback_id = fallback.artifact_id();
                loader.load(&fallback, &fallback_id).expect("the fallback");
                start.wait();
                let kernels: Vec<FakeKernel> = (1..=KERNELS)
                    .map(|kernel| FakeKernel::new(kernel).sleeping(Duration::from_millis(30)))
                    .collect();
                let deadline = Instant::now() + PATIENCE;
                let mut round = 0;
                loop {
                    let mut specialized = 0;
                    for kernel in &kernels {
                        let id = kernel.artifact_id();
                        let served = loader
                            .load_or(kernel, &id, &fallback_id)
                            .expect("the kernel or its fallback");
                        assert_eq!(served.device, number, "served on its own device");
                        if served.kernel == id.kernel {
                            specialized += 1;
                        } else {
                            assert_eq!(served.kernel, fallback_id.kernel);
                        }
                    }
                    if round == 0 {
                        assert_eq!(specialized, 0, "the first round is all fallbacks");
                    }
                    if specialized == kernels.len() {
                        break;
                    }
                    assert!(
                        Instant::now() < deadline,
                        "device {number}: {specialized} of {} served after {PATIENCE:?}",
                        kernels.len()
                    );
                    round += 1;
                    std::thread::sleep(Duration::from_millis(5));
                }
                let health = loader.statistics().health;
                (
                    loader.target().fake_compiler().finalized(),
                    health.request_path_compiles,
                    health.fallback_loads,
                    loader.target().loaded(),
                )
            })
        })
        .collect();
    let counts: Vec<_> = devices
        .into_iter()
        .map(|device| device.join().expect("a device's thread"))
        .collect();
    assert_eq!(
        counts[0].0 + counts[1].0,
        KERNELS as usize + 1,
        "each kernel and the fallback compiled once: {counts:?}"
    );
    for (number, (_, request_path, fallbacks, loaded)) in counts.iter().enumerate() {
        assert!(
            *request_path <= 1,
            "device {number}: only the fallback's load may compile: {counts:?}"
        );
        assert!(
            *fallbacks >= u64::from(KERNELS),
            "device {number}: {counts:?}"
        );
        assert_eq!(
            *loaded,
            KERNELS as usize + 1,
            "device {number}: all loaded on it"
        );
    }
}

/// One run of a program on the caches of devices 0 and 1, each asking for
/// its own kernels (`base + 0..4`); the caches are dropped at the end, and
/// their profiles written.
fn run_on_two_caches(store: &Arc<dyn ArtifactStore>) {
    let caches: Vec<_> = (0..2)
        .map(|number| {
            let device = device(number);
            KernelCache::with_config(device.id(), target(store, device), config(true))
        })
        .collect();
    for (number, cache) in (0u32..).zip(&caches) {
        for kernel in number * 10..number * 10 + 4 {
            let module = cache
                .get(cache.device(), FakeKernel::new(kernel), ())
                .expect("loaded");
            assert_eq!(module.device, number);
        }
    }
}

#[test]
fn l12_each_devices_cache_keeps_its_own_warm_start_profile() {
    let store = memory_store();
    run_on_two_caches(&store);

    // The next process: each device's first ask finds its own four
    // kernels on it, and no other device's.
    for number in 0..2u32 {
        let device = device(number);
        let cache = KernelCache::with_config(device.id(), target(&store, device), config(true));
        cache
            .get(cache.device(), FakeKernel::new(number * 10), ())
            .expect("loaded");
        let (loaded, compiled) =
            cache.with_target(|target| (target.loaded(), target.fake_compiler().finalized()));
        assert_eq!(
            (loaded, compiled),
            (4, 0),
            "device {number}: its own profile, loaded from the store"
        );
    }
}

#[test]
fn l12_loaders_named_for_their_device_keep_one_profile_each() {
    let store = memory_store();
    let program = |number: u32| Program::named("server").on_device(device(number).id());
    {
        let mut loaders: Vec<_> = (0..2)
            .map(|number| {
                KernelLoader::with_config(target(&store, device(number)), config(false))
                    .with_profile(program(number))
            })
            .collect();
        for (number, loader) in (0u32..).zip(&mut loaders) {
            for kernel in number * 10..number * 10 + 3 {
                let kernel = FakeKernel::new(kernel);
                loader.load(&kernel, &kernel.artifact_id()).expect("loads");
            }
        }
    }
    for number in 0..2u32 {
        let mut next = KernelLoader::with_config(target(&store, device(number)), config(false))
            .with_profile(program(number));
        let first = FakeKernel::new(number * 10);
        let module = next.load(&first, &first.artifact_id()).expect("loads");
        assert_eq!(module.device, number);
        assert_eq!(next.target().loaded(), 3, "device {number}: its own three");
        assert!(next.records().is_empty(), "no batch ran");
    }
}

/// The kernels (by number) of the profile `program` holds in `store` for
/// the fake compiler, or `None` when it holds none.
fn profiled_kernels(store: &Arc<dyn ArtifactStore>, program: &Program) -> Option<Vec<String>> {
    let components = FakeTarget::storeless().compiler().key_components();
    let Lookup::Hit { artifact, .. } = store
        .parts()
        .lookup_blob(&profile_blob_key(program.name(), &components))
    else {
        return None;
    };
    let profile = StoredProfile::from_bytes(&artifact).expect("a whole profile");
    let mut kernels: Vec<String> = profile
        .kernels
        .into_iter()
        .map(|kernel| kernel.kernel)
        .collect();
    kernels.sort();
    Some(kernels)
}

#[test]
fn l12_plain_loaders_on_two_devices_keep_one_profile_each() {
    // Loaders the program names no profile for: each takes its device's
    // from its target (device 0 the program's own, device 1 its own).
    let store = memory_store();
    let plain = |number: u32| {
        KernelLoader::with_config(target(&store, device(number)), config(true))
            .with_worker_mode(WorkerMode::Threads)
    };
    {
        let mut loaders: Vec<_> = (0..2).map(plain).collect();
        for (number, loader) in (0u32..).zip(&mut loaders) {
            assert!(loader.keeps_profile(), "device {number}");
            for kernel in number * 10..number * 10 + 3 {
                let kernel = FakeKernel::new(kernel);
                loader.load(&kernel, &kernel.artifact_id()).expect("loads");
            }
        }
    }
    let names = |numbers: std::ops::Range<u32>| -> Vec<String> {
        let mut names: Vec<String> = numbers
            .map(|number| format!("{:?}", FakeKernel::new(number).artifact_id()))
            .collect();
        names.sort();
        names
    };
    let program = Program::executable();
    assert_eq!(
        profiled_kernels(&store, &program),
        Some(names(0..3)),
        "device 0 keeps the program's own profile, with its kernels alone"
    );
    assert_eq!(
        profiled_kernels(&store, &program.clone().on_device(device(1).id())),
        Some(names(10..13)),
        "device 1 keeps its own"
    );

    // A restart of each: its first ask finds its own three kernels loaded
    // ahead on its own device, and no other device's.
    for number in 0..2u32 {
        let mut next = plain(number);
        let first = FakeKernel::new(number * 10);
        let module = next.load(&first, &first.artifact_id()).expect("loads");
        assert_eq!(module.device, number);
        assert_eq!(next.target().loaded(), 3, "device {number}: its own three");
        assert_eq!(next.target().fake_compiler().finalized(), 0);
        assert!(next.records().is_empty(), "device {number}: no batch ran");
        for kernel in number * 10..number * 10 + 3 {
            let kernel = FakeKernel::new(kernel);
            let module = next.get(&kernel.artifact_id()).expect("loaded ahead");
            assert_eq!(module.device, number, "on device {number}");
        }
    }
}

#[test]
fn l12_devices_writing_one_profile_keep_each_others_kernels() {
    // Loaders of two devices under one program name (the default when a
    // program names no device): both read the last profile at their
    // start, and the second to write keeps the first's kernels.
    let store = memory_store();
    {
        let mut loaders: Vec<_> = (0..2)
            .map(|number| {
                KernelLoader::with_config(target(&store, device(number)), config(false))
                    .with_profile(Program::named("one profile"))
            })
            .collect();
        for (number, loader) in (0u32..).zip(&mut loaders) {
            for kernel in number * 10..number * 10 + 3 {
                let kernel = FakeKernel::new(kernel);
                loader.load(&kernel, &kernel.artifact_id()).expect("loads");
            }
        }
    }
    let mut next = KernelLoader::with_config(target(&store, device(0)), config(false))
        .with_profile(Program::named("one profile"));
    let first = FakeKernel::new(0);
    next.load(&first, &first.artifact_id()).expect("loads");
    assert_eq!(next.target().loaded(), 6, "both devices' kernels");
    assert_eq!(next.target().fake_compiler().finalized(), 0);
}

#[test]
fn r1_the_shared_handles_of_two_devices_serve_their_own_fallbacks_then_their_kernels() {
    let store = memory_store();
    let caches: Vec<_> = (0..2)
        .map(|number| {
            let device = device(number);
            KernelCache::with_config(device.id(), target(&store, device), config(false))
        })
        .collect();
    for (number, cache) in (0u32..).zip(&caches) {
        let device = cache.device();
        let generic = cache.request(FakeKernel::new(0), ());
        generic
            .resolve(device)
            .expect("the fallback, built before serving");
        let special = cache.request(FakeKernel::new(1).sleeping(Duration::from_millis(20)), ());
        let served = special.resolve_or(device, &generic).expect("at once");
        assert_eq!(served.device, number, "its own device's fallback or kernel");
        assert!(cache.wait_for_background(PATIENCE), "device {number}");
        let served = special.resolve_or(device, &generic).expect("built");
        assert_eq!(
            (served.kernel.clone(), served.device),
            (special.id().kernel.clone(), number)
        );
    }
    let compiled: usize = caches
        .iter()
        .map(|cache| cache.with_target(|target| target.fake_compiler().finalized()))
        .sum();
    assert_eq!(
        compiled, 2,
        "the fallback and the kernel, once for both devices"
    );
}

#[test]
fn k6_a_fallback_of_another_devices_cache_is_refused() {
    let store = memory_store();
    let [zero, one] = [0, 1].map(|number| {
        let device = device(number);
        KernelCache::with_config(device.id(), target(&store, device), config(false))
    });
    let generic = zero.request(FakeKernel::new(0), ());
    generic.resolve(zero.device()).expect("built on device 0");
    let special = one.request(FakeKernel::new(1), ());
    match special.resolve_or(one.device(), &generic) {
        Err(CacheError::WrongDevice { owner, used }) => {
            assert_eq!((owner, used), (zero.device(), one.device()));
        }
        Err(other) => panic!("expected a refusal of device 0's fallback, got {other}"),
        Ok(served) => panic!(
            "device 1 was served device {}'s {}",
            served.device, served.kernel
        ),
    }
}
