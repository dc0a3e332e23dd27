//! HIP without an AMD GPU: 32 specializations of one kernel compiled with
//! hipRTC for gfx90a (an MI200) in one parallel batch, each code object
//! checked as a device of that architecture would check it, ahead of time
//! for a machine that has one.
//!
//! ```text
//! cargo run --release -p kiln --features hip --example hip_compile_only
//! ```
//!
//! Without hipRTC it says why and exits 0.

use std::process::ExitCode;
use std::time::Instant;

use kiln::hip::{Architecture, HipKernel, HipOptions, HipTarget};
use kiln::{ArtifactId, Kernel, KernelId, KernelLoader};

const AFFINE: &str = r#"extern "C" __global__ void affine(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * SCALE + OFFSET;
}
"#;

const SPECIALIZATIONS: u32 = 32;

fn specialization(number: u32) -> HipKernel {
    HipKernel::builder(
        KernelId::named("hip_compile_only.affine").parameter(&number),
        "affine",
    )
    .options(
        HipOptions::new()
            .define("SCALE", format!("{}.0f", number % 7 + 1))
            .define("OFFSET", format!("{number}.0f")),
    )
    .source(AFFINE)
}

fn main() -> ExitCode {
    // hipRTC compiles in worker processes: this program is its own worker.
    kiln::worker::run_if_worker(&[kiln::hip::worker_entry()]);
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("hip_compile_only: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let architecture = Architecture::new("gfx90a")?;
    let target = match HipTarget::compile_only(architecture.clone()) {
        Ok(target) => target,
        Err(no_hiprtc) => {
            println!("hip_compile_only: skipping: {no_hiprtc}");
            return Ok(());
        }
    };
    let variant = target.variant();
    let mut loader = KernelLoader::new(target);
    let kernels: Vec<HipKernel> = (0..SPECIALIZATIONS).map(specialization).collect();
    for kernel in &kernels {
        loader.enqueue(Box::new(kernel.clone()), variant.clone());
    }
    let started = Instant::now();
    loader.compile_queued();
    let mut code_object_bytes = 0;
    for kernel in &kernels {
        let described = loader.load(kernel, &ArtifactId::new(kernel.id(), variant.clone()))?;
        if !described.kernels().iter().any(|name| name == "affine") {
            return Err(format!(
                "the code object of {} lacks `affine`: it holds {:?}",
                kernel.id(),
                described.kernels()
            )
            .into());
        }
        code_object_bytes += described.code_object_bytes();
    }
    println!(
        "hip_compile_only: compiled {} specializations for {architecture} in {:.2?}: \
         {code_object_bytes} bytes of code objects, each holding `affine`",
        kernels.len(),
        started.elapsed()
    );
    Ok(())
}
