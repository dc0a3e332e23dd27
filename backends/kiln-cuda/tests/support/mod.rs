//! What the CUDA tests share: targets that skip with a printed reason when
//! NVRTC or the GPU is missing, kernels, and a tiny random generator.

#![allow(
    dead_code,
    reason = "each test binary uses its own part of the support"
)]

use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::Arc;

use kiln_cuda::{Architecture, CudaArtifact, CudaKernel, CudaTarget};
use kiln_engine::{
    ArtifactCompiler, ArtifactId, ArtifactStore, Finalized, Kernel, KernelId, KernelLoader,
    LoaderConfig,
};
use kiln_store::{DiskStore, StoreConfig};
use kiln_test_support::require;
#[allow(
    unused_imports,
    reason = "each test binary uses its own part of the support"
)]
pub use kiln_test_support::{Random, Scratch};

/// The architecture a compile-only target compiles for: the H200's.
pub const ARCHITECTURE: Architecture = Architecture::new(9, 0);

/// Whether a missing NVRTC must fail the tests rather than skip them:
/// `cargo xtask test` sets `KILN_REQUIRE_NVRTC=1` after installing it, and a
/// device run needs it as much as the device.
pub fn nvrtc_is_required() -> bool {
    require::is_required(&["KILN_REQUIRE_NVRTC", "KILN_REQUIRE_DEVICE"])
}

/// A compile-only target on the real NVRTC, or `None` after printing why
/// `what` skips.
pub fn compile_only(what: &str) -> Option<CudaTarget> {
    match CudaTarget::compile_only(ARCHITECTURE) {
        Ok(target) => Some(target),
        Err(error) if nvrtc_is_required() => {
            panic!("{what} needs NVRTC, and KILN_REQUIRE_NVRTC=1: {error}")
        }
        Err(error) => {
            kiln_engine::conformance::skip(what, &format!("no NVRTC: {error}"));
            None
        }
    }
}

/// A target on GPU 0, or `None` after printing why `what` skips (a failure
/// instead when `KILN_REQUIRE_DEVICE=1`).
pub fn on_device(what: &str) -> Option<CudaTarget> {
    match CudaTarget::on_device(0) {
        Ok(target) => Some(target),
        Err(error) => {
            kiln_engine::conformance::skip(what, &format!("no CUDA device: {error}"));
            None
        }
    }
}

/// A cudarc context of the test's own on GPU 0, as a cudarc program makes
/// it, and a target on it; or `None` after printing why `what` skips (a
/// failure instead when `KILN_REQUIRE_DEVICE=1`).
pub fn on_own_context(
    what: &str,
) -> Option<(Arc<kiln_cuda::cudarc::driver::CudaContext>, CudaTarget)> {
    // kiln's device check comes first: it finds a missing driver library
    // and says so, where cudarc would panic.
    if let Err(error) = kiln_cuda::CudaDevice::open(0) {
        kiln_engine::conformance::skip(what, &format!("no CUDA device: {error}"));
        return None;
    }
    let context = kiln_cuda::cudarc::driver::CudaContext::new(0)
        .expect("cudarc opens GPU 0, which kiln just opened");
    match CudaTarget::from_context(context.clone()) {
        Ok(target) => Some((context, target)),
        Err(error) => {
            kiln_engine::conformance::skip(what, &format!("no CUDA target: {error}"));
            None
        }
    }
}

/// A loader on `target` with four workers, whatever the machine has.
pub fn loader(target: CudaTarget) -> KernelLoader<CudaTarget> {
    KernelLoader::with_config(
        target,
        LoaderConfig {
            parallelism: NonZeroUsize::new(4).expect("4 is not zero"),
            // A second loader on a store stands in for the next process:
            // no warm-start profile loads ahead of what the tests count.
            profile: false,
            ..LoaderConfig::default()
        },
    )
}

/// A kernel with a fixed source, in family `family`.
pub fn fixed(family: &'static str, entry: &str, source: &str) -> CudaKernel {
    CudaKernel::builder(KernelId::named(family), entry).source(source)
}

/// `kernel`'s id on `target`.
pub fn id_on(target: &CudaTarget, kernel: &CudaKernel) -> ArtifactId<kiln_cuda::CudaVariant> {
    ArtifactId::new(kernel.id(), target.variant())
}

/// Lowers and finalizes `kernel` with `target`'s compiler, outside a loader.
pub fn compile(
    target: &CudaTarget,
    kernel: &CudaKernel,
) -> Result<Finalized<CudaArtifact>, kiln_engine::CompileFailure> {
    use kiln_engine::CompilationTarget;
    let id = id_on(target, kernel);
    let compiler = target.compiler();
    let lowered = compiler.lower(kernel, &id)?;
    compiler.finalize(&id, lowered)
}

pub const SAXPY: &str = r#"extern "C" __global__ void saxpy(float a, const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}
"#;

/// A kernel NVRTC compiles, with `value` in its text so that every index
/// gives another text.
/// A kernel like [`distinct`]'s whose generator takes 25 ms, as user code
/// that builds a large kernel does, counted in `overlap`: kernels lowered
/// at once are seen to overlap (L5).
pub fn lasting(index: usize, overlap: &Arc<kiln_engine::conformance::Overlap>) -> CudaKernel {
    let overlap = Arc::clone(overlap);
    CudaKernel::builder(KernelId::named("tests.lasting").parameter(&index), "fill").generator(
        move |_architecture| {
            overlap.during(|| std::thread::sleep(std::time::Duration::from_millis(25)));
            Ok(format!(
                "extern \"C\" __global__ void fill(float* y, int n) {{\n\
                 \x20   int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
                 \x20   if (i < n) y[i] = {index}.5f;\n\
                 }}\n"
            ))
        },
    )
}

pub fn distinct(index: usize) -> CudaKernel {
    CudaKernel::builder(KernelId::named("tests.distinct").parameter(&index), "fill").generator(
        move |_architecture| {
            Ok(format!(
                "extern \"C\" __global__ void fill(float* y, int n) {{\n\
                 \x20   int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
                 \x20   if (i < n) y[i] = {index}.0f;\n\
                 }}\n"
            ))
        },
    )
}

/// Source with two syntax errors, the first at line 3, column 5.
pub const BROKEN: &str = r#"extern "C" __global__ void broken(float* y) {
    float x = 1.0f
    y[0] = x + undefined_thing;
    int z = ;
}
"#;

/// A kernel whose source fails with located errors.
pub fn broken(index: usize) -> CudaKernel {
    CudaKernel::builder(KernelId::named("tests.broken").parameter(&index), "broken")
        .generator(|_architecture| Ok(BROKEN.to_owned()))
}

/// The disk store at `root`, as a target takes it: durable, as users have
/// it, and evicting only when asked.
pub fn disk_store(root: &Path) -> Arc<dyn ArtifactStore> {
    Arc::new(
        DiskStore::open(StoreConfig {
            collects_automatically: false,
            ..StoreConfig::at(root)
        })
        .expect("the store opens"),
    )
}

/// Fresh disk stores, each in a root of its own inside one scratch folder.
pub type StoreRoots = kiln_test_support::StoreRoots<Arc<dyn ArtifactStore>>;

/// Roots inside a new scratch folder named after `test`, each store opened
/// as [`disk_store`] opens it.
pub fn store_roots(test: &str) -> StoreRoots {
    StoreRoots::new(test, disk_store)
}

/// Launches [`SAXPY`] as loaded in `kernel` on `stream` of `device` with
/// fresh random inputs of `n` elements, and checks every element against
/// the CPU; `what` names the run in a failure.
pub fn check_saxpy(
    what: &str,
    device: &kiln_cuda::CudaDevice,
    stream: &kiln_cuda::cudarc::driver::CudaStream,
    kernel: &kiln_cuda::LoadedKernel,
    random: &mut Random,
    n: usize,
) {
    use kiln_cuda::{DeviceBuffer, LaunchConfig};
    let a = random.unit() * 4.0 - 2.0;
    let x = random.signed(n);
    let y = random.signed(n);
    let x_device = device.upload(&x).expect("upload");
    let y_device = device.upload(&y).expect("upload");
    let mut out: DeviceBuffer<f32> = device.alloc(n).expect("alloc");
    out.copy_from_host(&vec![f32::NAN; n]).expect("poison");
    let count = i32::try_from(n).expect("n fits");
    // SAFETY: the arguments match saxpy(float, const float*, const float*,
    // float*, int), and every buffer holds n floats.
    unsafe {
        kernel.launch(
            stream,
            LaunchConfig::for_elements(count as u32, 256),
            &[
                a.into(),
                (&x_device).into(),
                (&y_device).into(),
                (&out).into(),
                count.into(),
            ],
        )
    }
    .expect("launch");
    let result = out.to_vec().expect("read back");
    for (index, &got) in result.iter().enumerate() {
        let want = f64::from(a) * f64::from(x[index]) + f64::from(y[index]);
        let tolerance = 1e-6 * (f64::from(a * x[index]).abs() + f64::from(y[index]).abs()) + 1e-7;
        let error = (f64::from(got) - want).abs();
        assert!(
            error <= tolerance,
            "{what}[{index}] = {got}, expected {want} (error {error:e} over {tolerance:e})"
        );
    }
}

/// Loads `kernel` on `target` through a loader of its own, returning the
/// target's device and the kernel, which keeps its module after the
/// loader goes (B1).
pub fn load(
    target: CudaTarget,
    kernel: &CudaKernel,
) -> (kiln_cuda::CudaDevice, kiln_cuda::LoadedKernel) {
    let device = target.device().expect("a device target").clone();
    let mut loader = loader(target);
    let loaded = loader
        .load(kernel, &id_on(loader.target(), kernel))
        .unwrap_or_else(|error| panic!("{error}"));
    (device, loaded)
}
