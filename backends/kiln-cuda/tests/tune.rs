//! Tuning on a real CUDA GPU (T1–T4): sixteen tile shapes of one tiled
//! GEMM, timed by kiln with events on the test's own stream, two of them
//! deliberately slow, one that does not compile and one whose launch the
//! device refuses (a block of 2048 threads). Skipped with a printed reason
//! where there is no GPU (a failure under `KILN_REQUIRE_DEVICE=1`).

mod support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kiln_cuda::cudarc::driver::CudaStream;
use kiln_cuda::{
    CudaDevice, CudaKernel, CudaTarget, CudaTimer, CudaVariant, DeviceBuffer, LaunchConfig,
    LoadedKernel,
};
use kiln_engine::tune::{Candidate, CandidateOutcome, Measure, Origin, TuneKey, Tuned};
use kiln_engine::{KernelId, KernelLoader, LoaderConfig};
use kiln_test_support::{Random, Scratch, child, tuning};

/// The matrices are `N`×`N`.
const N: usize = 512;
/// Indices of the candidates that are slow, broken, refused on launch.
const SLOW: [usize; 2] = [3, 10];
const BROKEN: usize = 6;
const REFUSED: usize = 13;
/// The variable that makes this binary the second process of the T2 test,
/// naming the store it tunes on.
const CHILD: &str = "KILN_TEST_CUDA_TUNE_STORE";

/// A tiled GEMM whose block is `x`×`y` threads, whose shared tiles are `k`
/// deep, and which does its work `repeat` times over. The tile shape is in
/// the entry's name, where the launch reads it back.
fn gemm(x: u32, y: u32, k: u32, repeat: u32) -> CudaKernel {
    let entry = format!("gemm_{x}x{y}x{k}_r{repeat}");
    let source = format!(
        r#"#define TX {x}
#define TY {y}
#define TK {k}
#define REPEAT {repeat}
extern "C" __global__ void {entry}(const float* a, const float* b, float* c, int n) {{
    __shared__ float as[TY][TK];
    __shared__ float bs[TK][TX];
    int row = blockIdx.y * TY + threadIdx.y;
    int col = blockIdx.x * TX + threadIdx.x;
    float sum = 0.0f;
    for (int pass = 0; pass < REPEAT; ++pass) {{
        for (int k0 = 0; k0 < n; k0 += TK) {{
            for (int k = threadIdx.x; k < TK; k += TX)
                as[threadIdx.y][k] = (row < n && k0 + k < n) ? a[row * n + k0 + k] : 0.0f;
            for (int k = threadIdx.y; k < TK; k += TY)
                bs[k][threadIdx.x] = (col < n && k0 + k < n) ? b[(k0 + k) * n + col] : 0.0f;
            __syncthreads();
            for (int k = 0; k < TK; ++k) sum += as[threadIdx.y][k] * bs[k][threadIdx.x];
            __syncthreads();
        }}
    }}
    if (row < n && col < n) c[row * n + col] = sum / REPEAT;
}}
"#
    );
    CudaKernel::builder(
        KernelId::named("tests.tune.gemm")
            .parameter(&x)
            .parameter(&y)
            .parameter(&k)
            .parameter(&repeat),
        entry,
    )
    .source(source)
}

/// Sixteen candidates: twelve tile shapes, two doing their work 32 times
/// over, one that is not CUDA C++, one with a block no GPU launches.
fn candidates(variant: CudaVariant) -> Vec<Candidate<CudaTarget>> {
    let mut fast = [(8, 8), (16, 8), (8, 16), (16, 16), (32, 8), (32, 16)]
        .into_iter()
        .flat_map(|(x, y)| [8, 16].map(|k| gemm(x, y, k, 1)));
    (0..16)
        .map(|index| {
            let kernel = match index {
                3 => gemm(16, 16, 16, 32),
                10 => gemm(8, 8, 8, 32),
                BROKEN => CudaKernel::builder(KernelId::named("tests.tune.broken"), "gemm_broken")
                    .source(r#"extern "C" __global__ void gemm_broken() { int x = ; }"#),
                REFUSED => gemm(32, 64, 8, 1),
                _ => fast.next().expect("twelve fast candidates"),
            };
            Candidate::new(Box::new(kernel), variant)
        })
        .collect()
}

fn key() -> TuneKey {
    TuneKey::new("tests.tune.gemm").parameter("n", N as u64)
}

/// The block shape in a GEMM candidate's entry name.
fn block_of(kernel: &LoadedKernel) -> Option<(u32, u32)> {
    let shape = kernel.lowered_name().strip_prefix("gemm_")?;
    let mut sizes = shape.split(['x', '_']);
    let x = sizes.next()?.parse().ok()?;
    let y = sizes.next()?.parse().ok()?;
    Some((x, y))
}

/// The operands on the device, and the host's copies to check against.
struct Operands {
    a: DeviceBuffer<f32>,
    b: DeviceBuffer<f32>,
    c: DeviceBuffer<f32>,
    host_a: Vec<f32>,
    host_b: Vec<f32>,
}

impl Operands {
    fn new(device: &CudaDevice) -> Self {
        let mut random = Random::seeded(23);
        let host_a = random.signed(N * N);
        let host_b = random.signed(N * N);
        Self {
            a: device.upload(&host_a).expect("upload"),
            b: device.upload(&host_b).expect("upload"),
            c: device.alloc(N * N).expect("alloc"),
            host_a,
            host_b,
        }
    }

    /// One launch of `kernel` on `stream`.
    fn launch(&self, stream: &CudaStream, kernel: &LoadedKernel) -> Result<(), String> {
        let (x, y) = block_of(kernel).ok_or("not a GEMM candidate")?;
        let n = N as u32;
        let config = LaunchConfig {
            grid: (n.div_ceil(x), n.div_ceil(y), 1),
            block: (x, y, 1),
            shared_memory_bytes: 0,
        };
        // SAFETY: every candidate is gemm(const float*, const float*,
        // float*, int), and each buffer holds N×N floats.
        unsafe {
            kernel.launch(
                stream,
                config,
                &[
                    (&self.a).into(),
                    (&self.b).into(),
                    (&self.c).into(),
                    (N as i32).into(),
                ],
            )
        }
        // A launch the device refuses says so at once. No wait here: the
        // timer's end event waits, so that the time between the events is
        // the kernel's alone.
        .map_err(|error| error.to_string())
    }

    /// Checks a few elements of the last product against the host's.
    fn check(&self) {
        let c = self.c.to_vec().expect("read back");
        for (row, col) in [(0, 0), (1, 511), (255, 256), (511, 0), (511, 511)] {
            let want: f64 = (0..N)
                .map(|k| f64::from(self.host_a[row * N + k]) * f64::from(self.host_b[k * N + col]))
                .sum();
            let got = f64::from(c[row * N + col]);
            assert!(
                (got - want).abs() <= 1e-3 * (1.0 + want.abs()),
                "c[{row}][{col}] = {got}, expected {want}"
            );
        }
    }
}

/// A loader keeping no warm-start profile: the tests count the tuning's
/// own store traffic and launches.
fn loader(target: CudaTarget) -> KernelLoader<CudaTarget> {
    KernelLoader::with_config(
        target,
        LoaderConfig {
            profile: false,
            ..LoaderConfig::default()
        },
    )
}

/// Tunes the candidates on `loader`'s GPU, timed with events on a stream of
/// the test's own; counts launches in `launches`.
fn tune(
    loader: &mut KernelLoader<CudaTarget>,
    operands: &Operands,
    launches: &AtomicUsize,
) -> Tuned<LoadedKernel> {
    let device = loader.target().device().expect("a GPU target").clone();
    let variant = loader.target().variant();
    let stream = device.context().new_stream().expect("a stream");
    let mut timer = CudaTimer::on(&stream).expect("two events");
    let mut launch = |kernel: &LoadedKernel| {
        launches.fetch_add(1, Ordering::SeqCst);
        operands.launch(&stream, kernel)
    };
    let measure = Measure::TimedWith {
        timer: &mut timer,
        launch: &mut launch,
        warm_up: 1,
        runs: 5,
    };
    loader
        .tune(&key(), &candidates(variant), measure)
        .expect("fourteen candidates work")
}

#[test]
fn t1_t3_sixteen_tile_shapes_give_the_fastest_that_worked() {
    let Some(target) = support::on_device("tuning sixteen GEMM tile shapes") else {
        return;
    };
    let device = target.device().expect("a GPU").clone();
    let operands = Operands::new(&device);
    let mut loader = loader(target);
    let launches = AtomicUsize::new(0);
    let tuned = tune(&mut loader, &operands, &launches);
    let answer = &tuned.answer;
    assert_eq!(tuned.origin, Origin::Measured);
    assert_eq!(loader.records().len(), 1, "one batch compiled them all");
    assert_eq!(answer.measured(), 14, "{answer:#?}");
    assert!(matches!(
        answer.candidates[BROKEN].outcome,
        CandidateOutcome::FailedToCompile { .. }
    ));
    assert!(
        matches!(
            answer.candidates[REFUSED].outcome,
            CandidateOutcome::FailedToRun { .. }
        ),
        "a block of 2048 threads does not launch: {:?}",
        answer.candidates[REFUSED]
    );
    // The refused one failed at its warm-up launch; the rest ran 1 + 5.
    assert_eq!(launches.load(Ordering::SeqCst), 14 * 6 + 1);
    let (winner, fastest_slow) = tuning::assert_the_fastest_won(&tuned, &SLOW, &[BROKEN, REFUSED]);
    assert!(
        fastest_slow > winner * 4,
        "32 passes take longer than one: {fastest_slow:?} against {winner:?}"
    );
    assert!(winner > Duration::ZERO, "events timed the work");
    // The winner computes the product.
    let stream = device.context().new_stream().expect("a stream");
    operands
        .launch(&stream, &tuned.loaded)
        .expect("the winner launches");
    stream.synchronize().expect("the winner runs");
    operands.check();
}

/// The second process of the T2 test: tunes on the store at `root` and
/// prints what it did.
fn second_process(root: &Path) {
    let target = support::on_device("the second tuning process")
        .expect("the first process had the GPU")
        .with_store(support::disk_store(root));
    let device = target.device().expect("a GPU").clone();
    let operands = Operands::new(&device);
    let mut loader = loader(target);
    let launches = AtomicUsize::new(0);
    let tuned = tune(&mut loader, &operands, &launches);
    let statistics = loader.statistics();
    println!(
        "second process: winner {} {:?}, {} launches, {} compiled, {} from the store",
        tuned.winner,
        tuned.origin,
        launches.load(Ordering::SeqCst),
        statistics.compiled,
        statistics.hits,
    );
}

#[test]
fn t2_a_second_process_gets_the_winner_with_no_compile_and_no_measurement() {
    if let Ok(root) = std::env::var(CHILD) {
        second_process(Path::new(&root));
        return;
    }
    let Some(target) = support::on_device("tuning once for two processes") else {
        return;
    };
    let scratch = Scratch::new("cuda-tune-stored");
    let root = scratch.folder("store");
    let device = target.device().expect("a GPU").clone();
    let operands = Operands::new(&device);
    let launches = AtomicUsize::new(0);
    let first = tune(
        &mut loader(target.with_store(support::disk_store(&root))),
        &operands,
        &launches,
    );
    assert_eq!(first.origin, Origin::Measured);

    let mut second = child::rerun(
        "t2_a_second_process_gets_the_winner_with_no_compile_and_no_measurement",
        CHILD,
        &root,
    );
    let output = second.output().expect("the second process runs");
    let described = child::describe(&output);
    assert!(output.status.success(), "{described}");
    let expected = format!(
        "second process: winner {} Stored, 0 launches, 0 compiled, 1 from the store",
        first.winner
    );
    assert!(
        String::from_utf8_lossy(&output.stdout).contains(&expected),
        "expected {expected:?}: {described}"
    );
}

#[test]
fn t4_two_tuners_of_one_key_on_one_gpu_measure_once() {
    if support::on_device("tuning twice at once").is_none() {
        return;
    }
    let scratch = Scratch::new("cuda-tune-together");
    let root = Arc::new(scratch.folder("store"));
    let launches = Arc::new(AtomicUsize::new(0));
    let tuners: Vec<_> = (0..2)
        .map(|_| {
            let (root, launches) = (Arc::clone(&root), Arc::clone(&launches));
            std::thread::spawn(move || {
                let target = support::on_device("a tuner")
                    .expect("the GPU opened a moment ago")
                    .with_store(support::disk_store(&root));
                let device = target.device().expect("a GPU").clone();
                let operands = Operands::new(&device);
                tune(&mut loader(target), &operands, &launches).origin
            })
        })
        .collect();
    let origins: Vec<Origin> = tuners
        .into_iter()
        .map(|tuner| tuner.join().expect("a tuner"))
        .collect();
    assert_eq!(
        origins
            .iter()
            .filter(|origin| **origin == Origin::Measured)
            .count(),
        1,
        "one measured: {origins:?}"
    );
    assert_eq!(
        launches.load(Ordering::SeqCst),
        14 * 6 + 1,
        "the candidates were launched once"
    );
}
