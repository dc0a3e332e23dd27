//! Tuning on the fake target: its device's clock says how long each
//! candidate runs, so which one wins is proved, never timed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use super::*;
use crate::fake::{FakeDevice, FakeKernel, FakeModule, FakeTarget};
use crate::store::MemoryStore;

/// A loader of `target` keeping no warm-start profile: it reads and writes
/// none, so that the store's counts are the tuning's alone.
fn unprofiled(target: FakeTarget) -> KernelLoader<FakeTarget> {
    KernelLoader::with_config(
        target,
        crate::LoaderConfig {
            profile: false,
            ..crate::LoaderConfig::default()
        },
    )
}

/// The number of the fake kernel a module was loaded for.
fn number_of(module: &FakeModule) -> u32 {
    module
        .text
        .rsplit(' ')
        .next()
        .and_then(|number| number.parse().ok())
        .expect("a fake kernel's text ends with its number")
}

/// How long kernel `number` runs: 2 and 11 are deliberately slow, 9 the
/// fastest, the rest in between.
fn run_time(number: u32) -> Duration {
    match number {
        2 | 11 => Duration::from_millis(5),
        9 => Duration::from_micros(20),
        other => Duration::from_micros(100 + u64::from(other) * 10),
    }
}

/// Sixteen candidates: 2 slow, 5 fails to compile, 7 is refused by the
/// device.
fn candidates() -> Vec<Candidate<FakeTarget>> {
    (0..16)
        .map(|number| {
            let kernel = match number {
                5 => FakeKernel::new(number).failing(),
                7 => FakeKernel::new(number).refused(),
                _ => FakeKernel::new(number),
            };
            Candidate::new(Box::new(kernel), ())
        })
        .collect()
}

fn key() -> TuneKey {
    TuneKey::new("kiln.test.tune").parameter("n", 1024)
}

/// Tunes `candidates` on `target`, timing launches that run each kernel for
/// its [`run_time`] on the fake device; counts the launches in `launches`.
fn tune_on(
    target: FakeTarget,
    candidates: &[Candidate<FakeTarget>],
    launches: &AtomicUsize,
) -> (
    KernelLoader<FakeTarget>,
    Result<Tuned<Arc<FakeModule>>, TuneError>,
) {
    let device = target.device().clone();
    // A later tuner stands in for another process on the same store: it
    // keeps no warm-start profile, so that only the tuning is counted.
    let mut loader = unprofiled(target);
    let mut launch = |module: &Arc<FakeModule>| {
        launches.fetch_add(1, Ordering::SeqCst);
        device.run(run_time(number_of(module)));
        Ok(())
    };
    let measure = Measure::Timed {
        launch: &mut launch,
        warm_up: 2,
        runs: 5,
    };
    let tuned = loader.tune(&key(), candidates, measure);
    (loader, tuned)
}

#[test]
fn sixteen_candidates_return_the_fastest_that_worked_compiled_in_one_batch() {
    // T1, T3, L4
    let launches = AtomicUsize::new(0);
    let candidates = candidates();
    let (loader, tuned) = tune_on(FakeTarget::persisting(), &candidates, &launches);
    let tuned = tuned.expect("fourteen candidates work");
    assert_eq!(tuned.winner, 9);
    assert_eq!(tuned.origin, Origin::Measured);
    assert_eq!(tuned.loaded.kernel, candidates[9].kernel.id());
    assert_eq!(
        loader.records().len(),
        1,
        "one batch compiled every candidate"
    );
    assert_eq!(loader.records()[0].kernels, 16);
    assert_eq!(loader.target().fake_compiler().finalized(), 16);

    let answer = &tuned.answer;
    assert_eq!(answer.measured(), 14);
    assert_eq!(
        launches.load(Ordering::SeqCst),
        14 * 7,
        "two warm-up and five timed launches of each candidate that loaded"
    );
    for failed in [5, 7] {
        assert!(
            matches!(
                answer.candidates[failed].outcome,
                CandidateOutcome::FailedToCompile { .. }
            ),
            "{failed}: {:?}",
            answer.candidates[failed]
        );
    }
    assert_eq!(
        answer.candidates[9].time(),
        Some(run_time(9)),
        "the fake clock times exactly"
    );
    assert_eq!(
        answer.spread(),
        Some((run_time(9), run_time(2))),
        "fastest and slowest"
    );
    assert_eq!(
        answer.method,
        Method::Timed {
            warm_up: 2,
            runs: 5
        }
    );
}

#[test]
fn a_later_process_gets_the_winner_with_no_compile_of_losers_and_no_measurement() {
    // T2: the answer and the winner's artifact, two lookups, nothing else.
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    let candidates = candidates();
    let first = AtomicUsize::new(0);
    let (_, tuned) = tune_on(
        FakeTarget::on_store(Arc::clone(&store)),
        &candidates,
        &first,
    );
    assert_eq!(tuned.expect("tuned").winner, 9);

    let before = store.statistics();
    let launches = AtomicUsize::new(0);
    let (loader, tuned) = tune_on(
        FakeTarget::on_store(Arc::clone(&store)),
        &candidates,
        &launches,
    );
    let tuned = tuned.expect("answered");
    assert_eq!((tuned.winner, tuned.origin), (9, Origin::Stored));
    assert_eq!(tuned.loaded.kernel, candidates[9].kernel.id());
    assert_eq!(launches.load(Ordering::SeqCst), 0, "nothing measured");
    assert_eq!(
        loader.target().fake_compiler().finalized(),
        0,
        "nothing compiled"
    );
    assert_eq!(loader.target().fake_compiler().lowered(), 0);
    assert_eq!(loader.loaded_len(), 1, "only the winner is loaded");
    let after = store.statistics();
    assert_eq!(after.hits - before.hits, 2, "the answer and the winner");
    assert_eq!(after.absent, before.absent, "no lookup missed");
}

#[test]
fn a_new_driver_or_changed_candidates_tune_again() {
    // T3
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    let candidates = candidates();
    let launches = AtomicUsize::new(0);
    let _ = tune_on(
        FakeTarget::on_store(Arc::clone(&store)),
        &candidates,
        &launches,
    );

    let newer = FakeTarget::on_store(Arc::clone(&store))
        .with_device(FakeDevice::new("fake device (driver kiln-fake 2)"));
    let (_, tuned) = tune_on(newer, &candidates, &launches);
    assert_eq!(
        tuned.expect("tuned").origin,
        Origin::Measured,
        "a new driver"
    );

    let fewer = &candidates[..12];
    let (_, tuned) = tune_on(FakeTarget::on_store(Arc::clone(&store)), fewer, &launches);
    let tuned = tuned.expect("tuned");
    assert_eq!(
        (tuned.winner, tuned.origin),
        (9, Origin::Measured),
        "new set"
    );

    let other_compiler = crate::fake::FakeCompiler::default().with_key_components(
        crate::store::KeyComponents::new("fake", "kiln-fake 2", "fake_1", ""),
    );
    let target = FakeTarget::on_store(Arc::clone(&store)).with_compiler(other_compiler);
    let (_, tuned) = tune_on(target, &candidates, &launches);
    assert_eq!(
        tuned.expect("tuned").origin,
        Origin::Measured,
        "a new compiler"
    );
}

#[test]
fn a_failed_measurement_is_reported_and_not_kept() {
    // T3
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    let candidates = candidates();
    let launches = AtomicUsize::new(0);
    let broken = FakeTarget::on_store(Arc::clone(&store))
        .with_device(FakeDevice::default().with_failing_timer());
    let (_, tuned) = tune_on(broken, &candidates, &launches);
    assert!(
        matches!(&tuned, Err(TuneError::Measurement(error)) if error.message.contains("broken")),
        "{tuned:?}"
    );
    let (_, tuned) = tune_on(
        FakeTarget::on_store(Arc::clone(&store)),
        &candidates,
        &launches,
    );
    assert_eq!(
        tuned.expect("tuned").origin,
        Origin::Measured,
        "nothing was kept"
    );
}

#[test]
fn a_candidate_whose_launch_fails_drops_out_alone() {
    // T3, with the caller's probe (T1).
    let candidates = candidates();
    let mut loader = KernelLoader::new(FakeTarget::persisting());
    let mut probes = 0;
    let mut probe = |module: &Arc<FakeModule>| {
        probes += 1;
        match number_of(module) {
            9 => Err("out of shared memory".to_owned()),
            number => Ok(run_time(number)),
        }
    };
    let tuned = loader
        .tune(&key(), &candidates, Measure::Probe(&mut probe))
        .expect("tuned");
    assert_eq!(probes, 14);
    assert_eq!(tuned.answer.method, Method::Probe);
    assert!(matches!(
        &tuned.answer.candidates[9].outcome,
        CandidateOutcome::FailedToRun { message } if message == "out of shared memory"
    ));
    assert_eq!(tuned.winner, 0, "the next fastest");
}

#[test]
fn nothing_that_works_is_an_error_and_nothing_is_kept() {
    // T3
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    let broken: Vec<Candidate<FakeTarget>> = (0..3)
        .map(|number| Candidate::new(Box::new(FakeKernel::new(number).failing()), ()))
        .collect();
    let launches = AtomicUsize::new(0);
    let (loader, tuned) = tune_on(FakeTarget::on_store(Arc::clone(&store)), &broken, &launches);
    let Err(TuneError::NothingWorked(answer)) = tuned else {
        panic!("every candidate failed: {tuned:?}");
    };
    assert_eq!(answer.candidates.len(), 3);
    let ids: Vec<_> = broken.iter().map(Candidate::id).collect();
    let name = answer::answer_blob_key(&key(), &answer.device, &loader.artifact_keys(&ids));
    assert!(
        matches!(store.parts().lookup_blob(&name), Lookup::Miss(_)),
        "no answer kept"
    );
    let (_, tuned) = tune_on(FakeTarget::on_store(store), &[], &launches);
    assert!(matches!(tuned, Err(TuneError::NoCandidates)));
}

#[test]
fn a_storeless_loader_measures_each_time() {
    // T1: without a store there is nowhere to keep an answer.
    let candidates = candidates();
    let launches = AtomicUsize::new(0);
    let (mut loader, tuned) = tune_on(FakeTarget::storeless(), &candidates, &launches);
    assert_eq!(tuned.expect("tuned").winner, 9);
    let device = loader.target().device().clone();
    let mut launch = |module: &Arc<FakeModule>| {
        device.run(run_time(number_of(module)));
        Ok(())
    };
    let measure = Measure::Timed {
        launch: &mut launch,
        warm_up: 0,
        runs: 1,
    };
    let again = loader.tune(&key(), &candidates, measure).expect("tuned");
    assert_eq!((again.winner, again.origin), (9, Origin::Measured));
    assert_eq!(
        loader.target().fake_compiler().finalized(),
        16 + 2,
        "only the two that failed were compiled again"
    );
}

#[test]
fn two_tuners_of_one_key_measure_once_and_never_two_candidates_at_once() {
    // T4: two loaders on one store, as two processes of a machine.
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    let launches = Arc::new(AtomicUsize::new(0));
    let running = Arc::new(AtomicUsize::new(0));
    let most_running = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(2));
    let tuners: Vec<_> = (0..2)
        .map(|_| {
            let store = Arc::clone(&store);
            let (launches, running, most_running, start) = (
                Arc::clone(&launches),
                Arc::clone(&running),
                Arc::clone(&most_running),
                Arc::clone(&start),
            );
            std::thread::spawn(move || {
                let target = FakeTarget::on_store(store);
                let device = target.device().clone();
                let mut loader = unprofiled(target);
                let candidates = candidates();
                let mut launch = |module: &Arc<FakeModule>| {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most_running.fetch_max(now, Ordering::SeqCst);
                    launches.fetch_add(1, Ordering::SeqCst);
                    // Long enough on the host that the other tuner arrives
                    // while this one measures.
                    std::thread::sleep(Duration::from_millis(1));
                    device.run(run_time(number_of(module)));
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                };
                start.wait();
                let measure = Measure::Timed {
                    launch: &mut launch,
                    warm_up: 1,
                    runs: 3,
                };
                let tuned = loader.tune(&key(), &candidates, measure).expect("tuned");
                (tuned.winner, tuned.origin)
            })
        })
        .collect();
    let outcomes: Vec<_> = tuners
        .into_iter()
        .map(|tuner| tuner.join().expect("a tuner"))
        .collect();
    assert!(
        outcomes.iter().all(|(winner, _)| *winner == 9),
        "{outcomes:?}"
    );
    let measured = outcomes
        .iter()
        .filter(|(_, origin)| *origin == Origin::Measured)
        .count();
    assert_eq!(measured, 1, "{outcomes:?}");
    assert_eq!(
        launches.load(Ordering::SeqCst),
        14 * 4,
        "one tuner's launches"
    );
    assert_eq!(most_running.load(Ordering::SeqCst), 1);
}

#[test]
fn a_measured_tunes_losers_stay_out_of_the_warm_start_profile() {
    // T1 with L12: the next process of the program loads the winner ahead,
    // never the losers it measured.
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    let candidates = candidates();
    let launches = AtomicUsize::new(0);
    {
        let target = FakeTarget::on_store(Arc::clone(&store));
        let device = target.device().clone();
        let mut loader =
            KernelLoader::new(target).with_profile(crate::profile::Program::named("tuner"));
        let mut launch = |module: &Arc<FakeModule>| {
            launches.fetch_add(1, Ordering::SeqCst);
            device.run(run_time(number_of(module)));
            Ok(())
        };
        let measure = Measure::Timed {
            launch: &mut launch,
            warm_up: 1,
            runs: 3,
        };
        let tuned = loader
            .tune(&TuneKey::new("profiled"), &candidates, measure)
            .expect("tuned");
        assert_eq!((tuned.winner, tuned.origin), (9, Origin::Measured));
    }
    let mut next = KernelLoader::new(FakeTarget::on_store(Arc::clone(&store)))
        .with_profile(crate::profile::Program::named("tuner"));
    next.compile_queued();
    assert_eq!(next.profiled_waiting(), 1, "the winner alone, ahead");
    assert!(next.is_loaded(&candidates[9].id()));
    assert_eq!(next.target().loaded(), 1);
}

#[test]
fn a_clock_the_caller_gives_times_the_candidates() {
    // T1: a timer on the caller's stream (as CUDA's events are) in place
    // of the target's; the target's own clock is never asked for.
    let target = FakeTarget::persisting().with_device(FakeDevice::default().with_failing_timer());
    let clock = FakeDevice::default();
    let mut timer = FakeTarget::storeless()
        .with_device(clock.clone())
        .timer()
        .expect("the fake device's clock");
    let mut loader = unprofiled(target);
    let candidates = candidates();
    let mut launch = |module: &Arc<FakeModule>| {
        clock.run(run_time(number_of(module)));
        Ok(())
    };
    let measure = Measure::TimedWith {
        timer: &mut timer,
        launch: &mut launch,
        warm_up: 1,
        runs: 3,
    };
    let tuned = loader
        .tune(&TuneKey::new("own clock"), &candidates, measure)
        .expect("tuned on the given clock");
    assert_eq!(tuned.winner, 9);
}

#[test]
fn t2_a_stored_answer_whose_winner_is_out_of_range_is_refused_and_tuned_again() {
    // T2: a forged or damaged answer naming a candidate that is not there
    // panics nothing: it is refused and the candidates are measured again.
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    let candidates = candidates();
    let launches = AtomicUsize::new(0);
    let (loader, tuned) = tune_on(
        FakeTarget::on_store(Arc::clone(&store)),
        &candidates,
        &launches,
    );
    let tuned = tuned.expect("tuned");
    let ids: Vec<_> = candidates.iter().map(Candidate::id).collect();
    let name = answer::answer_blob_key(&key(), &tuned.answer.device, &loader.artifact_keys(&ids));
    let mut forged = tuned.answer.clone();
    forged.winner = Some(candidates.len() + 40);
    assert!(matches!(
        store.parts().put_blob(&name, &forged.to_bytes()),
        crate::StoreOutcome::Stored { .. }
    ));

    let (_, tuned) = tune_on(FakeTarget::on_store(store), &candidates, &launches);
    let tuned = tuned.expect("tuned again");
    assert_eq!((tuned.winner, tuned.origin), (9, Origin::Measured));
}
