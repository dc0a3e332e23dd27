//! A CUDA program that tunes a tiled GEMM's tile shape with kiln: sixteen
//! shapes compiled in one batch, each timed on the GPU with events on the
//! program's own stream (warm-up launches, then the median of timed
//! launches), the fastest kept in the store. Run it twice: the second run
//! takes the answer from the store and measures nothing.
//!
//! ```text
//! cargo run --release -p kiln --features cuda --example cuda_tune
//! kiln tunes
//! ```
//!
//! Without a GPU it says why and exits 0; `KILN_REQUIRE_DEVICE=1` makes a
//! missing GPU a failure instead.

use std::process::ExitCode;
use std::sync::Arc;

use kiln::cuda::cudarc::driver::{CudaContext, CudaStream, LaunchConfig, PushKernelArg};
use kiln::cuda::{CudaKernel, CudaTarget, CudaTimer, CudaVariant, LoadedKernel};
use kiln::tune::{Candidate, Measure, Origin, TuneKey};
use kiln::{KernelId, KernelLoader, Store};

/// The matrices are `N`×`N`.
const N: usize = 2048;

/// A tiled GEMM: blocks of `TX`×`TY` threads, one element each, over
/// shared tiles `TK` deep; `ENTRY` is the candidate's own entry, whose name
/// says its shape.
const GEMM: &str = r#"extern "C" __global__ void ENTRY(const float* a, const float* b, float* c, int n) {
    __shared__ float as[TY][TK];
    __shared__ float bs[TK][TX];
    int row = blockIdx.y * TY + threadIdx.y;
    int col = blockIdx.x * TX + threadIdx.x;
    float sum = 0.0f;
    for (int k0 = 0; k0 < n; k0 += TK) {
        for (int k = threadIdx.x; k < TK; k += TX)
            as[threadIdx.y][k] = (row < n && k0 + k < n) ? a[row * n + k0 + k] : 0.0f;
        for (int k = threadIdx.y; k < TK; k += TY)
            bs[k][threadIdx.x] = (col < n && k0 + k < n) ? b[(k0 + k) * n + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TK; ++k) sum += as[threadIdx.y][k] * bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < n && col < n) c[row * n + col] = sum;
}
"#;

/// The tile shapes tried: block width, block height, tile depth.
const SHAPES: [(u32, u32, u32); 16] = [
    (8, 8, 8),
    (8, 8, 16),
    (16, 8, 8),
    (16, 8, 16),
    (8, 16, 8),
    (8, 16, 16),
    (16, 16, 8),
    (16, 16, 16),
    (16, 16, 32),
    (32, 8, 8),
    (32, 8, 16),
    (32, 8, 32),
    (32, 16, 8),
    (32, 16, 16),
    (32, 32, 8),
    (32, 32, 16),
];

fn candidate((x, y, k): (u32, u32, u32), variant: CudaVariant) -> Candidate<CudaTarget> {
    let entry = format!("gemm_{x}x{y}x{k}");
    let source = format!("#define TX {x}\n#define TY {y}\n#define TK {k}\n")
        + &GEMM.replacen("ENTRY", &entry, 1);
    let kernel = CudaKernel::builder(
        KernelId::named("cuda_tune.gemm")
            .parameter(&x)
            .parameter(&y)
            .parameter(&k),
        entry,
    )
    .source(source);
    Candidate::new(Box::new(kernel), variant)
}

/// The block a candidate launches with, from its entry's name.
fn block_of(kernel: &LoadedKernel) -> Result<(u32, u32), String> {
    let name = kernel.lowered_name();
    let mut sizes = name
        .strip_prefix("gemm_")
        .unwrap_or_default()
        .split('x')
        .map(str::parse::<u32>);
    match (sizes.next(), sizes.next()) {
        (Some(Ok(x)), Some(Ok(y))) => Ok((x, y)),
        _ => Err(format!("{name} is not a GEMM candidate")),
    }
}

fn main() -> ExitCode {
    // NVRTC compiles in worker processes: this program is its own worker.
    kiln::worker::run_if_worker(&[kiln::cuda::worker_entry()]);
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("cuda_tune: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    // kiln's own check comes first: it names a missing driver, where
    // cudarc would panic.
    if let Err(no_gpu) = kiln::cuda::CudaDevice::open(0) {
        if std::env::var("KILN_REQUIRE_DEVICE").is_ok_and(|value| value == "1") {
            return Err(format!("KILN_REQUIRE_DEVICE=1 and {no_gpu}").into());
        }
        println!("cuda_tune: no GPU to tune on: {no_gpu}");
        return Ok(());
    }
    let context: Arc<CudaContext> = CudaContext::new(0)?;
    let stream: Arc<CudaStream> = context.new_stream()?;
    let a = stream.clone_htod(&vec![1.0f32; N * N])?;
    let b = stream.clone_htod(&vec![0.5f32; N * N])?;
    let mut c = stream.alloc_zeros::<f32>(N * N)?;

    let target = CudaTarget::from_context(context.clone())?.with_optional_store(Store::from_env()?);
    let variant = target.variant();
    let mut loader = KernelLoader::new(target);
    let candidates: Vec<_> = SHAPES
        .into_iter()
        .map(|shape| candidate(shape, variant))
        .collect();
    let mut launched = 0u32;
    let count = i32::try_from(N)?;
    let mut launch = |kernel: &LoadedKernel| -> Result<(), String> {
        launched += 1;
        launch_gemm(&stream, kernel, block_of(kernel)?, &a, &b, &mut c, count)
    };
    let mut timer = CudaTimer::on(&stream)?;
    let key = TuneKey::new("cuda_tune.gemm").parameter("n", N);
    let measure = Measure::TimedWith {
        timer: &mut timer,
        launch: &mut launch,
        warm_up: 3,
        runs: 10,
    };
    let started = std::time::Instant::now();
    let tuned = loader.tune(&key, &candidates, measure)?;
    let took = started.elapsed();
    for (shape, result) in SHAPES.iter().zip(&tuned.answer.candidates) {
        match result.time() {
            Some(time) => println!("tile {shape:?}: {time:?}"),
            None => println!("tile {shape:?}: {:?}", result.outcome),
        }
    }
    let how = match tuned.origin {
        Origin::Measured => "measured now",
        Origin::Stored => "from the store, nothing measured",
        Origin::Waited => "measured by another process",
    };
    let spread = tuned
        .answer
        .spread()
        .map(|(fastest, slowest)| format!("{fastest:?} to {slowest:?}"))
        .unwrap_or_else(|| "none".to_owned());
    println!(
        "cuda_tune: winner tile {:?} ({how} in {took:?}; {}); spread {spread}; {} candidates \
         measured, {} launches this run, on {}",
        SHAPES[tuned.winner],
        tuned.answer.method,
        tuned.answer.measured(),
        launched,
        tuned.answer.device
    );
    // The winner is loaded: launch it as the program would, and check it.
    let block = block_of(&tuned.loaded)?;
    launch_gemm(&stream, &tuned.loaded, block, &a, &b, &mut c, count)?;
    let product = stream.clone_dtoh(&c)?;
    let expected = 0.5 * N as f32;
    if product.iter().any(|&value| value != expected) {
        return Err(format!("the winner's product is not {expected} everywhere").into());
    }
    Ok(())
}

/// One launch of a GEMM candidate with blocks of `x`×`y` threads.
fn launch_gemm(
    stream: &CudaStream,
    kernel: &LoadedKernel,
    (x, y): (u32, u32),
    a: &kiln::cuda::cudarc::driver::CudaSlice<f32>,
    b: &kiln::cuda::cudarc::driver::CudaSlice<f32>,
    c: &mut kiln::cuda::cudarc::driver::CudaSlice<f32>,
    n: i32,
) -> Result<(), String> {
    let function = kernel.function().map_err(|error| error.to_string())?;
    let size = n as u32;
    let config = LaunchConfig {
        grid_dim: (size.div_ceil(x), size.div_ceil(y), 1),
        block_dim: (x, y, 1),
        shared_mem_bytes: 0,
    };
    let mut launch = stream.launch_builder(function);
    launch.arg(a).arg(b).arg(c).arg(&n);
    // SAFETY: the arguments match gemm(const float*, const float*, float*,
    // int), and every buffer holds n×n floats.
    unsafe { launch.launch(config) }
        .map(|_| ())
        .map_err(|error| error.to_string())
}
