//! A program outside kiln's workspace, built the way a user's is: kiln by
//! path, and its own cudarc and wgpu at the least versions kiln allows
//! (wgpu 30.0.1 and cudarc 0.19.9, where kiln's `Cargo.lock` holds 30.0.2
//! and 0.19.10), with cudarc on
//! CUDA 12.8's bindings rather than kiln's default 13.0. That it resolves and
//! builds is the test (`cargo xtask test` builds and runs it); running it
//! also shows the types are one: the program's own cudarc context and wgpu
//! types are what kiln takes.
//!
//! It compiles one CUDA kernel with NVRTC for sm_90 (when NVRTC is here;
//! `KILN_REQUIRE_NVRTC=1` makes a missing one a failure) and one WGSL kernel
//! with naga, and exits non-zero when either fails.

use std::process::ExitCode;
use std::sync::Arc;

use kiln::cuda::{Architecture, CudaKernel, CudaTarget, Nvrtc};
use kiln::wgpu::{WgpuDevice, WgpuTarget, WgpuVariant, WgslKernel};
use kiln::{ArtifactId, Kernel, KernelId, KernelLoader};

const SCALE: &str = r#"extern "C" __global__ void scale(float* y, float factor, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] *= factor;
}
"#;

const DOUBLE: &str = "
@group(0) @binding(0) var<storage, read_write> values: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&values) {
        values[id.x] = values[id.x] * 2.0;
    }
}
";

/// kiln's CUDA target takes the program's own cudarc context: this only
/// compiles when the two cudarcs are one crate.
#[allow(
    dead_code,
    reason = "called for its type only: this machine may have no GPU"
)]
fn target_on(context: Arc<cudarc::driver::CudaContext>) -> Result<CudaTarget, kiln::cuda::Error> {
    CudaTarget::from_context(context)
}

/// kiln's wgpu target takes the program's own wgpu device and queue.
#[allow(
    dead_code,
    reason = "called for its type only: this machine may have no adapter"
)]
fn wgpu_target_on(device: wgpu::Device, queue: wgpu::Queue) -> WgpuTarget {
    WgpuTarget::on_device(WgpuDevice::new(device, queue))
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("kiln-outside: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    compile_cuda()?;
    let kernel = WgslKernel::builder(KernelId::named("outside.double"), "main").source(DOUBLE);
    let mut loader = KernelLoader::new(WgpuTarget::compile_only());
    loader.load(&kernel, &ArtifactId::new(kernel.id(), WgpuVariant))?;
    println!("kiln-outside: compiled a WGSL kernel with naga (wgpu 30.0.1)");
    Ok(())
}

fn compile_cuda() -> Result<(), Box<dyn std::error::Error>> {
    let nvrtc = match Nvrtc::open() {
        Ok(nvrtc) => nvrtc,
        Err(no_nvrtc) => {
            if std::env::var("KILN_REQUIRE_NVRTC").is_ok_and(|value| value == "1") {
                return Err(format!("KILN_REQUIRE_NVRTC=1 and {no_nvrtc}").into());
            }
            println!("kiln-outside: skipped the CUDA compile: {no_nvrtc}");
            return Ok(());
        }
    };
    let target = CudaTarget::compile_only(Architecture::new(9, 0))?;
    let variant = target.variant();
    let mut loader = KernelLoader::new(target);
    let kernel = CudaKernel::builder(KernelId::named("outside.scale"), "scale").source(SCALE);
    loader.load(&kernel, &ArtifactId::new(kernel.id(), variant))?;
    println!(
        "kiln-outside: compiled a CUDA kernel for sm_90 with NVRTC {} (cudarc's \
         cuda-12080 bindings)",
        nvrtc.version()
    );
    Ok(())
}
