//! A bounded, seeded stress test of the shared handle's state machine
//! (K1–K5, D3): threads run seeded random mixes of request, resolve, build,
//! get, keyed lookups and reporter swaps over one cache, and every answer
//! and every count is checked against what the rules allow.
//!
//! Each round runs a fixed number of operations, so the test always ends;
//! the seeds fix what each thread does, not how the threads interleave, so
//! each run explores other interleavings of the same work. Nothing here
//! depends on timing.

use std::collections::{BTreeSet, HashMap};
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use kiln_engine::fake::{FakeKernel, FakeTarget};
use kiln_engine::{
    CacheError, DeviceId, KernelCache, KernelId, KernelOutcome, LoaderConfig, PendingKernel,
};

const DEVICE: DeviceId = DeviceId::new("fake", 0);
const SEEDS: [u64; 8] = [
    0x5eed_0001,
    0x5eed_0002,
    0x0bad_cafe,
    0xdead_beef,
    17,
    42,
    1_000_003,
    0x1234_5678_9abc_def0,
];
const THREADS: u64 = 6;
const OPERATIONS: usize = 250;
/// Kernel numbers 0..UNIVERSE; every eighth one fails to compile.
const UNIVERSE: u32 = 48;

fn fails(number: u32) -> bool {
    number % 8 == 7
}

fn kernel(number: u32) -> FakeKernel {
    let kernel = FakeKernel::new(number);
    if fails(number) {
        kernel.failing()
    } else {
        kernel
    }
}

fn id(number: u32) -> KernelId {
    FakeKernel::new(number).artifact_id().kernel
}

/// SplitMix64: a few lines, and no dependency for a test's dice.
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    fn number(&mut self) -> u32 {
        u32::try_from(self.below(u64::from(UNIVERSE))).expect("below the universe")
    }
}

/// What the threads of one round asked for, by kind of call.
#[derive(Default)]
struct Asked {
    /// Numbers asked for by any call.
    any: BTreeSet<u32>,
    /// Numbers asked for by a request, which keeps a failure wanted.
    requested: BTreeSet<u32>,
}

/// Checks one answer for kernel `number` against K3: a valid kernel loads
/// as itself, an invalid one fails with its own error.
fn check_answer(number: u32, answer: Result<KernelId, CacheError>) {
    match answer {
        Ok(loaded) => {
            assert!(!fails(number), "kernel {number} cannot load");
            assert_eq!(loaded, id(number), "kernel {number} loaded as itself");
        }
        Err(CacheError::Kernel(error)) => {
            assert!(fails(number), "kernel {number} failed: {error}");
            assert_eq!(error.kernel, id(number), "its own failure");
        }
        Err(other) => panic!("kernel {number}: unexpected {other}"),
    }
}

fn round(seed: u64) {
    let cache = KernelCache::with_config(
        DEVICE,
        FakeTarget::storeless(),
        LoaderConfig {
            parallelism: NonZeroUsize::new(2).expect("2 is not zero"),
            record_limit: 4,
            ..LoaderConfig::default()
        },
    );
    let keyed = cache.keyed::<u32>();
    let reports: Arc<Mutex<HashMap<KernelId, usize>>> = Arc::default();
    let swaps = Arc::new(AtomicUsize::new(0));
    install_reporter(&cache, &reports, &swaps);
    let asked = Mutex::new(Asked::default());

    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (cache, keyed, asked) = (&cache, &keyed, &asked);
            let (reports, swaps) = (&reports, &swaps);
            scope.spawn(move || {
                let mut dice = Dice(seed ^ (thread + 1).wrapping_mul(0x9e37_79b9));
                let mut held: Vec<(u32, PendingKernel<FakeTarget>)> = Vec::new();
                let mut mine = Asked::default();
                for _ in 0..OPERATIONS {
                    match dice.below(8) {
                        0 | 1 => {
                            let number = dice.number();
                            mine.requested.insert(number);
                            held.push((number, cache.request(kernel(number), ())));
                        }
                        2 | 3 if !held.is_empty() => {
                            let index =
                                usize::try_from(dice.below(held.len() as u64)).expect("an index");
                            let (number, pending) = &held[index];
                            check_answer(
                                *number,
                                pending.resolve(DEVICE).map(|loaded| loaded.kernel.clone()),
                            );
                        }
                        4 => match cache.build() {
                            Ok(()) => {}
                            Err(CacheError::Build(failure)) => {
                                assert!(!failure.failures.is_empty());
                                for error in failure.failures {
                                    assert!(
                                        (0..UNIVERSE).any(|n| fails(n) && id(n) == error.kernel),
                                        "only invalid kernels fail: {error}"
                                    );
                                }
                            }
                            Err(other) => panic!("a build failed with {other}"),
                        },
                        5 => {
                            let number = dice.number();
                            mine.any.insert(number);
                            let answer = cache.get(DEVICE, kernel(number), ());
                            check_answer(number, answer.map(|loaded| loaded.kernel.clone()));
                        }
                        6 => {
                            let number = dice.number();
                            mine.any.insert(number);
                            let answer =
                                keyed.get_or_insert_with(DEVICE, number, |&n| (kernel(n), ()));
                            check_answer(number, answer.map(|loaded| loaded.kernel.clone()));
                        }
                        _ => {
                            if dice.below(4) == 0 {
                                install_reporter(cache, reports, swaps);
                            } else {
                                let number = dice.number();
                                mine.requested.insert(number);
                                let pending =
                                    keyed.request_or_insert_with(number, |&n| (kernel(n), ()));
                                held.push((number, pending));
                            }
                        }
                    }
                }
                let mut asked = asked.lock().expect("no thread panicked holding it");
                asked.any.extend(mine.any);
                asked.any.extend(mine.requested.iter().copied());
                asked.requested.extend(mine.requested);
            });
        }
    });

    // Every request still held resolves to its own answer once the threads
    // are done, and a last build leaves only wanted failures waiting.
    let _ = cache.build();
    let asked = asked.into_inner().expect("no thread panicked holding it");
    let valid: Vec<u32> = asked.any.iter().copied().filter(|&n| !fails(n)).collect();
    let wanted_failures = asked.requested.iter().filter(|&&n| fails(n)).count();

    cache.with_target(|target| {
        let compiler = target.fake_compiler();
        for number in 0..UNIVERSE {
            if fails(number) {
                continue;
            }
            let compiles = compiler.finalized_source(&format!("fake kernel {number}"));
            let expected = usize::from(valid.contains(&number));
            assert_eq!(
                compiles, expected,
                "seed {seed:#x}: kernel {number} compiled {compiles} times"
            );
        }
    });
    assert_eq!(cache.loaded_len(), valid.len(), "seed {seed:#x}");
    assert_eq!(
        cache.waiting_len(),
        wanted_failures,
        "seed {seed:#x}: only failed requests wait"
    );
    let statistics = cache.statistics();
    assert_eq!(statistics.compiled, valid.len() as u64, "seed {seed:#x}");

    // D3: each compiled artifact was reported once, whichever reporter was
    // in place, and no failure or hit was.
    let reports = reports.lock().expect("no reporter panicked");
    assert_eq!(reports.len(), valid.len(), "seed {seed:#x}");
    for number in &valid {
        assert_eq!(
            reports.get(&id(*number)),
            Some(&1),
            "seed {seed:#x}: kernel {number}"
        );
    }
    assert!(
        cache
            .records()
            .iter()
            .all(|batch| batch.count(KernelOutcome::Refused) == 0)
    );
}

/// Sets a reporter that counts reports by kernel and now and then replaces
/// itself, from inside its own call, with a fresh one that counts the same.
fn install_reporter(
    cache: &KernelCache<FakeTarget>,
    reports: &Arc<Mutex<HashMap<KernelId, usize>>>,
    swaps: &Arc<AtomicUsize>,
) {
    let (reports, swaps) = (reports.clone(), swaps.clone());
    cache.set_reporter(move |cache, record| {
        *reports
            .lock()
            .expect("no reporter panicked")
            .entry(record.kernel.clone())
            .or_default() += 1;
        if swaps.fetch_add(1, Ordering::SeqCst) % 3 == 0 {
            install_reporter(cache, &reports, &swaps);
        }
    });
}

// K1, K2, K3, K4, K5, D3
#[test]
fn seeded_threads_keep_every_rule_of_the_shared_handle() {
    for seed in SEEDS {
        round(seed);
    }
}
