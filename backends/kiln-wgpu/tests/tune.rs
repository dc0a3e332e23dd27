//! Tuning on a real Vulkan device (T1–T4): sixteen candidates of one WGSL
//! kernel timed by kiln on the device's queue, two of them deliberately
//! slow, one that does not compile and one the device refuses. Skipped with
//! a printed reason where there is no adapter (a failure under
//! `KILN_REQUIRE_DEVICE=1`).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kiln_engine::tune::{Candidate, CandidateOutcome, Measure, Origin, TuneKey, Tuned};
use kiln_engine::{KernelId, KernelLoader};
use kiln_test_support::tuning;
use kiln_wgpu::{WgpuDevice, WgpuPipeline, WgpuTarget, WgpuVariant, WgslKernel};

/// Each invocation steps its element `STEPS` times.
const SHADER: &str = "
override WORKGROUP: u32 = 64;
override STEPS: u32 = 1;

@group(0) @binding(0) var<storage, read_write> data: array<f32>;

@compute @workgroup_size(WORKGROUP)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i < arrayLength(&data) {
        var value = data[i];
        for (var step = 0u; step < STEPS; step++) {
            value = value * 0.999 + 0.001;
        }
        data[i] = value;
    }
}
";

const ELEMENTS: u32 = 1 << 16;
/// Indices of the candidates that are slow, broken, refused.
const SLOW: [usize; 2] = [3, 10];
const BROKEN: usize = 6;
const REFUSED: usize = 13;

fn kernel(workgroup: u32, steps: u32) -> WgslKernel {
    WgslKernel::builder(
        KernelId::named("tests.tune")
            .parameter(&workgroup)
            .parameter(&steps),
        "main",
    )
    .label(format!("step wg={workgroup} steps={steps}"))
    .constant("WORKGROUP", f64::from(workgroup))
    .constant("STEPS", f64::from(steps))
    .source(SHADER)
}

/// Sixteen candidates: six workgroup sizes with one and two steps, two
/// with thousands of steps, one that is not WGSL, one with a workgroup no
/// device takes.
fn candidates() -> Vec<Candidate<WgpuTarget>> {
    let mut fast = [8, 16, 32, 64, 128, 256]
        .into_iter()
        .flat_map(|workgroup| [1, 2].map(|steps| kernel(workgroup, steps)));
    (0..16)
        .map(|index| {
            let kernel = match index {
                3 => kernel(64, 4000),
                10 => kernel(128, 4000),
                BROKEN => WgslKernel::builder(KernelId::named("tests.tune.broken"), "main")
                    .source("@compute @workgroup_size(64) fn main() { let x: u32 = ; }"),
                REFUSED => WgslKernel::builder(KernelId::named("tests.tune.too_big"), "main")
                    .source("@compute @workgroup_size(1024, 1024, 1) fn main() {}"),
                _ => fast.next().expect("twelve fast candidates"),
            };
            Candidate::new(Box::new(kernel), WgpuVariant)
        })
        .collect()
}

fn key() -> TuneKey {
    TuneKey::new("tests.tune.step").parameter("elements", ELEMENTS)
}

/// Tunes the candidates on `loader`'s device, dispatching over one buffer;
/// counts launches in `launches`.
fn tune(
    loader: &mut KernelLoader<WgpuTarget>,
    device: &WgpuDevice,
    launches: &AtomicUsize,
) -> Tuned<WgpuPipeline> {
    let data = device
        .storage_buffer("tune", &vec![0u8; ELEMENTS as usize * 4])
        .expect("a storage buffer");
    let mut launch = |pipeline: &WgpuPipeline| {
        launches.fetch_add(1, Ordering::SeqCst);
        let groups = ELEMENTS.div_ceil(pipeline.workgroup_size()[0]);
        device
            .dispatch(pipeline, &[(0, 0, &data)], [groups, 1, 1])
            .map_err(|error| error.to_string())
    };
    let measure = Measure::Timed {
        launch: &mut launch,
        warm_up: 1,
        runs: 3,
    };
    loader
        .tune(&key(), &candidates(), measure)
        .expect("fourteen candidates work")
}

#[test]
fn t1_t3_sixteen_candidates_give_the_fastest_that_worked() {
    let Some(device) = support::device("tuning sixteen candidates") else {
        return;
    };
    let mut loader = support::loader(WgpuTarget::on_device(device.clone()));
    let launches = AtomicUsize::new(0);
    let tuned = tune(&mut loader, &device, &launches);
    let answer = &tuned.answer;
    assert_eq!(tuned.origin, Origin::Measured);
    assert_eq!(loader.records().len(), 1, "one batch compiled them all");
    assert_eq!(answer.measured(), 14);
    assert_eq!(launches.load(Ordering::SeqCst), 14 * 4);
    for failed in [BROKEN, REFUSED] {
        assert!(
            matches!(
                answer.candidates[failed].outcome,
                CandidateOutcome::FailedToCompile { .. }
            ),
            "{:?}",
            answer.candidates[failed]
        );
    }
    let (winner, fastest_slow) = tuning::assert_the_fastest_won(&tuned, &SLOW, &[BROKEN, REFUSED]);
    assert!(
        fastest_slow > winner,
        "thousands of steps take longer: {fastest_slow:?} against {winner:?}"
    );
}

#[test]
fn t2_a_later_loader_on_the_store_gets_the_winner_with_no_compile_and_no_launch() {
    let Some(device) = support::device("tuning from the store") else {
        return;
    };
    let folder = support::fresh_folder("tune-stored");
    let launches = AtomicUsize::new(0);
    let first = {
        let target = WgpuTarget::on_device(device.clone()).with_store(support::store_at(&folder));
        tune(&mut support::loader(target), &device, &launches)
    };
    let measured = launches.load(Ordering::SeqCst);

    // A new store handle and target: the next process on this device.
    let target = WgpuTarget::on_device(device.clone()).with_store(support::store_at(&folder));
    let mut loader = support::loader(target);
    let again = tune(&mut loader, &device, &launches);
    assert_eq!((again.winner, again.origin), (first.winner, Origin::Stored));
    assert_eq!(
        launches.load(Ordering::SeqCst),
        measured,
        "nothing measured"
    );
    let statistics = loader.statistics();
    assert_eq!(
        (statistics.compiled, statistics.hits),
        (0, 1),
        "only the winner, from the store"
    );
    assert_eq!(loader.target().pipelines_made().0, 1, "one pipeline");
    let _ = std::fs::remove_dir_all(folder);
}

#[test]
fn t4_two_tuners_of_one_key_on_one_device_measure_once() {
    let Some(device) = support::device("tuning twice at once") else {
        return;
    };
    let folder = Arc::new(support::fresh_folder("tune-together"));
    let launches = Arc::new(AtomicUsize::new(0));
    let tuners: Vec<_> = (0..2)
        .map(|_| {
            let (device, folder, launches) =
                (device.clone(), Arc::clone(&folder), Arc::clone(&launches));
            std::thread::spawn(move || {
                // Each its own handle on the store, as two processes'.
                let target =
                    WgpuTarget::on_device(device.clone()).with_store(support::store_at(&folder));
                let tuned = tune(&mut support::loader(target), &device, &launches);
                (tuned.winner, tuned.origin)
            })
        })
        .collect();
    let outcomes: Vec<_> = tuners
        .into_iter()
        .map(|tuner| tuner.join().expect("a tuner"))
        .collect();
    assert_eq!(outcomes[0].0, outcomes[1].0, "one answer: {outcomes:?}");
    let measured = outcomes
        .iter()
        .filter(|(_, origin)| *origin == Origin::Measured)
        .count();
    assert_eq!(measured, 1, "{outcomes:?}");
    assert_eq!(launches.load(Ordering::SeqCst), 14 * 4, "measured once");
    let _ = std::fs::remove_dir_all(folder.as_path());
}
