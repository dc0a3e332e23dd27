//! A CUDA program that fills the store for a GPU its machine does not have:
//! run once under compile-only mode (a CI machine, an image build), it
//! compiles every kernel it would launch for the architecture named, with
//! NVRTC alone; run on the GPU afterwards, on the same store, it compiles
//! nothing.
//!
//! ```text
//! # on the build machine (NVRTC, no GPU, no driver):
//! KILN_MODE=compile-only KILN_CUDA_ARCH=sm_90 KILN_CACHE_DIR=/shared/kiln \
//!     cargo run --release -p kiln --features cuda --example compile_only
//! # on the H200, on that store:
//! KILN_CACHE_DIR=/shared/kiln cargo run --release -p kiln --features cuda --example compile_only
//! ```
//!
//! The program is written once, for the GPU: in compile-only mode its
//! target has no device, so it skips its own device work (buffers,
//! readbacks) where `kiln::mode::is_compile_only()` says so. Without a GPU
//! and outside compile-only mode it says why and exits 0, as do the other
//! examples; `KILN_REQUIRE_DEVICE=1` makes that a failure.

use std::process::ExitCode;

use kiln::cuda::{CudaKernel, CudaTarget, KernelArgument, LaunchConfig};
use kiln::{ArtifactId, Kernel, KernelId, KernelLoader};

/// One kernel in eight specializations, each a define.
const SOURCE: &str = r#"
extern "C" __global__ void scale(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = y[i] * FACTOR;
}
"#;

const SPECIALIZATIONS: u32 = 8;
const ELEMENTS: usize = 1024;

fn specialization(factor: u32) -> CudaKernel {
    CudaKernel::builder(
        KernelId::named("compile_only.scale").parameter(&factor),
        "scale",
    )
    .options(kiln::cuda::CudaOptions::default().define("FACTOR", format!("{factor}.0f")))
    .source(SOURCE)
}

fn main() -> ExitCode {
    // NVRTC compiles in worker processes: this program is its own worker.
    kiln::worker::run_if_worker(&[kiln::cuda::worker_entry()]);
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("compile_only: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    // In compile-only mode this opens no device: the target compiles for
    // KILN_CUDA_ARCH and describes what it would load.
    let target = match CudaTarget::on_device(0) {
        Ok(target) => target,
        Err(no_gpu) => {
            if std::env::var("KILN_REQUIRE_DEVICE").is_ok_and(|value| value == "1") {
                return Err(format!("KILN_REQUIRE_DEVICE=1 and {no_gpu}").into());
            }
            println!(
                "compile_only: no GPU here ({no_gpu}); run with KILN_MODE=compile-only \
                 KILN_CUDA_ARCH=sm_90 to fill the store for one"
            );
            return Ok(());
        }
    };
    let target = target.with_optional_store(kiln::Store::from_env()?);
    let variant = target.variant();
    let device = target.device().cloned();
    let mut loader = KernelLoader::new(target);
    let kernels: Vec<CudaKernel> = (1..=SPECIALIZATIONS).map(specialization).collect();
    for kernel in &kernels {
        loader.enqueue(Box::new(kernel.clone()), variant);
    }
    loader.compile_queued();

    let mut wrong = 0usize;
    for (factor, kernel) in (1..=SPECIALIZATIONS).zip(&kernels) {
        let loaded = loader.load(kernel, &ArtifactId::new(kernel.id(), variant))?;
        // The program's own device work: none in compile-only mode.
        let Some(device) = &device else { continue };
        let stream = device.context().new_stream()?;
        let mut values = device.alloc::<f32>(ELEMENTS)?;
        values.copy_from_host(&vec![1.5f32; ELEMENTS])?;
        let count = i32::try_from(ELEMENTS)?;
        // SAFETY: the arguments match scale(float*, int), and `values` holds
        // the `count` floats the launch touches.
        unsafe {
            loaded.launch(
                &stream,
                LaunchConfig::for_elements(ELEMENTS as u32, 256),
                &[KernelArgument::from(&values), count.into()],
            )?;
        }
        let expected = 1.5 * factor as f32;
        wrong += values
            .to_vec()?
            .iter()
            .filter(|&&value| value != expected)
            .count();
    }
    let statistics = loader.statistics();
    let mode = if kiln::mode::is_compile_only() {
        "compile-only"
    } else {
        "on the GPU"
    };
    println!(
        "compile_only: {SPECIALIZATIONS} kernels for {} {mode}: {} compiled, {} from the store",
        loader.target().architecture(),
        statistics.compiled,
        statistics.hits,
    );
    if wrong > 0 {
        return Err(format!("{wrong} results differ from the CPU's").into());
    }
    Ok(())
}
