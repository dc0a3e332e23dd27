//! A cudarc program that adopts kiln: it keeps its own context, stream and
//! buffers, and asks kiln for 100 specializations of one kernel, compiled
//! in one parallel batch (or read from the store), then launches each with
//! cudarc's own launch builder on its own stream and checks every result.
//!
//! ```text
//! cargo run --release -p kiln --features cuda --example cudarc_program
//! ```
//!
//! Without a GPU it says why, compiles the 100 kernels with NVRTC alone
//! (for sm_90) when NVRTC is here, and exits 0; `KILN_REQUIRE_DEVICE=1`
//! makes a missing GPU a failure instead.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use kiln::cuda::cudarc::driver::{CudaContext, CudaStream, LaunchConfig, PushKernelArg};
use kiln::cuda::{Architecture, CudaKernel, CudaOptions, CudaTarget};
use kiln::{ArtifactId, Kernel, KernelId, KernelLoader, Store};

/// One kernel, specialized at compile time by two macros.
const AFFINE: &str = r#"extern "C" __global__ void affine(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * SCALE + OFFSET;
}
"#;

const SPECIALIZATIONS: u32 = 100;
const ELEMENTS: usize = 1 << 16;

/// Specialization `number`: its scale and offset, as the program would
/// pick them (an autotuner's candidates, a model's shapes).
fn constants(number: u32) -> (f32, f32) {
    ((number % 7 + 1) as f32, number as f32)
}

fn specialization(number: u32) -> CudaKernel {
    let (scale, offset) = constants(number);
    CudaKernel::builder(
        KernelId::named("cudarc_program.affine").parameter(&number),
        "affine",
    )
    .options(
        CudaOptions::default()
            .define("SCALE", format!("{scale:.1}f"))
            .define("OFFSET", format!("{offset:.1}f")),
    )
    .source(AFFINE)
}

fn main() -> ExitCode {
    // NVRTC compiles in worker processes: this program is its own worker.
    kiln::worker::run_if_worker(&[kiln::cuda::worker_entry()]);
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("cudarc_program: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let kernels: Vec<CudaKernel> = (0..SPECIALIZATIONS).map(specialization).collect();
    // kiln's own check comes first: it names a missing driver, where
    // cudarc would panic.
    if let Err(no_gpu) = kiln::cuda::CudaDevice::open(0) {
        if std::env::var("KILN_REQUIRE_DEVICE").is_ok_and(|value| value == "1") {
            return Err(format!("KILN_REQUIRE_DEVICE=1 and {no_gpu}").into());
        }
        println!("cudarc_program: skipping the launches: {no_gpu}");
        return compile_without_a_gpu(&kernels);
    }

    // The program as it was before kiln: its context, its stream, its buffers.
    let context: Arc<CudaContext> = CudaContext::new(0)?;
    let stream: Arc<CudaStream> = context.new_stream()?;
    let input: Vec<f32> = (0..ELEMENTS).map(|index| (index % 1000) as f32).collect();
    let device_input = stream.clone_htod(&input)?;
    let mut device_output = stream.alloc_zeros::<f32>(ELEMENTS)?;

    // Adopting kiln: a target on the program's context and the default
    // store, every specialization queued, compiled in one batch.
    let target = CudaTarget::from_context(context.clone())?.with_optional_store(Store::from_env()?);
    let variant = target.variant();
    let mut loader = KernelLoader::new(target);
    for kernel in &kernels {
        loader.enqueue(Box::new(kernel.clone()), variant);
    }
    let started = Instant::now();
    loader.compile_queued();
    let compiled_in = started.elapsed();

    let count = i32::try_from(ELEMENTS)?;
    let mut wrong = 0usize;
    for (number, kernel) in (0..SPECIALIZATIONS).zip(&kernels) {
        let loaded = loader.load(kernel, &ArtifactId::new(kernel.id(), variant))?;
        let mut launch = stream.launch_builder(loaded.function()?);
        launch
            .arg(&device_input)
            .arg(&mut device_output)
            .arg(&count);
        // SAFETY: the arguments match affine(const float*, float*, int), and
        // both buffers hold `count` floats.
        unsafe { launch.launch(LaunchConfig::for_num_elems(ELEMENTS as u32)) }?;
        let output = stream.clone_dtoh(&device_output)?;
        let (scale, offset) = constants(number);
        wrong += input
            .iter()
            .zip(&output)
            .filter(|&(&x, &y)| y != x * scale + offset)
            .count();
    }
    let statistics = loader.statistics();
    println!(
        "cudarc_program: {SPECIALIZATIONS} specializations on {} ({}): {} compiled, {} from the \
         store, in {compiled_in:.2?}; each launched on the program's stream",
        context.name()?,
        loader.target().architecture(),
        statistics.compiled,
        statistics.hits,
    );
    if wrong > 0 {
        return Err(format!("{wrong} results differ from the CPU's").into());
    }
    println!("cudarc_program: every result matches the CPU's");
    Ok(())
}

/// What the program can do without a GPU: compile its kernels for the
/// H200's architecture with NVRTC, when NVRTC is here.
fn compile_without_a_gpu(kernels: &[CudaKernel]) -> Result<(), Box<dyn std::error::Error>> {
    let target = match CudaTarget::compile_only(Architecture::new(9, 0)) {
        Ok(target) => target,
        Err(no_nvrtc) => {
            println!("cudarc_program: not compiling either: {no_nvrtc}");
            return Ok(());
        }
    };
    let variant = target.variant();
    let mut loader = KernelLoader::new(target);
    for kernel in kernels {
        loader.enqueue(Box::new(kernel.clone()), variant);
    }
    let started = Instant::now();
    loader.compile_queued();
    for kernel in kernels {
        loader.load(kernel, &ArtifactId::new(kernel.id(), variant))?;
    }
    println!(
        "cudarc_program: compiled {} specializations for sm_90 with NVRTC alone in {:.2?}",
        kernels.len(),
        started.elapsed()
    );
    Ok(())
}
