//! Compile-only process mode (L11): a program run under
//! `KILN_MODE=compile-only` on a machine without its GPU fills the store
//! with exactly what the same program loads on that GPU, so its run on the
//! device compiles nothing. Each run is a child process, since the mode's
//! variables belong to the whole process.

mod support;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::AtomicUsize;

use kiln::fake::{FakeKernel, FakeTarget};
use kiln::mode::{self, CompileOnly, ProcessMode, ProcessModeOverride};
use kiln::{KernelLoader, KernelOutcome, Store};
use kiln_test_support::{Scratch, child};
use support::{report, value};

/// The variable that tells a child what to do.
const CHILD: &str = "KILN_FACADE_COMPILE_ONLY_CHILD";

/// This test binary again, running `test` as the child `role` on the store
/// in `root`, in compile-only mode or not: the parent's `KILN_MODE` and
/// `KILN_CACHE_*` variables removed.
fn program(test: &str, role: &str, root: &Path, compile_only: bool) -> Command {
    let mut command = support::program(test, CHILD, role, &[mode::MODE_VARIABLE]);
    command.env("KILN_CACHE_DIR", root);
    if compile_only {
        command
            .env(mode::MODE_VARIABLE, "compile-only")
            .env(mode::CUDA_ARCH_VARIABLE, "sm_90");
    }
    command
}

/// The program of the fake-target case: a target on the default store,
/// sixteen kernels queued, each loaded and launched.
fn fake_program() {
    let store = Store::from_env()
        .expect("the store in KILN_CACHE_DIR opens")
        .expect("the store is not disabled");
    let target = FakeTarget::on_store(store);
    let compile_only = target.is_compile_only();
    // A process of its own: no warm-start profile loads ahead of the
    // batch it proves (L12).
    let mut loader = KernelLoader::new(target).without_profile();
    let kernels: Vec<FakeKernel> = (0..16).map(FakeKernel::new).collect();
    for kernel in &kernels {
        loader.enqueue(Box::new(kernel.clone()), ());
    }
    let launches = AtomicUsize::new(0);
    for kernel in &kernels {
        let module = loader
            .load(kernel, &kernel.artifact_id())
            .unwrap_or_else(|error| panic!("{error}"));
        module.launch(&launches);
    }
    let batch = &loader.records()[0];
    println!(
        "report: compile_only={compile_only} compiled={} from_store={} device_loads={} launched={}",
        batch.count(KernelOutcome::Compiled),
        batch.count(KernelOutcome::FromStore),
        loader.target().loaded(),
        launches.into_inner(),
    );
}

// L11: the program in compile-only mode compiles every kernel into the
// store and launches nothing; the same program on the device then
// compiles nothing and launches all.
#[test]
fn a_program_in_compile_only_mode_fills_the_store_its_run_on_the_device_reads() {
    const TEST: &str = "a_program_in_compile_only_mode_fills_the_store_its_run_on_the_device_reads";
    if child::is_child(CHILD, "fake") {
        return fake_program();
    }
    let scratch = Scratch::new("facade-compile-only");
    let root = scratch.join("store");

    let built = report(program(TEST, "fake", &root, true));
    assert_eq!(value(&built, "compile_only"), "true", "{built:?}");
    assert_eq!(value(&built, "compiled"), "16", "{built:?}");
    assert_eq!(value(&built, "device_loads"), "0", "no device: {built:?}");
    assert_eq!(
        value(&built, "launched"),
        "0",
        "launches do nothing: {built:?}"
    );

    let ran = report(program(TEST, "fake", &root, false));
    assert_eq!(value(&ran, "compile_only"), "false", "{ran:?}");
    assert_eq!(
        value(&ran, "compiled"),
        "0",
        "the device compiles nothing: {ran:?}"
    );
    assert_eq!(value(&ran, "from_store"), "16", "{ran:?}");
    assert_eq!(value(&ran, "device_loads"), "16", "{ran:?}");
    assert_eq!(value(&ran, "launched"), "16", "{ran:?}");
}

// L11: the scoped override makes the targets of its thread compile-only
// without any variable, and they run again once it drops.
#[test]
fn an_override_makes_the_targets_of_its_scope_compile_only() {
    {
        let _compile_only = ProcessModeOverride::new(ProcessMode::CompileOnly(
            CompileOnly::default().cuda_architecture("sm_90"),
        ));
        assert!(FakeTarget::storeless().is_compile_only());
    }
    let _run = ProcessModeOverride::new(ProcessMode::Run);
    assert!(!FakeTarget::storeless().is_compile_only());
}

#[cfg(feature = "cuda")]
mod cuda {
    use kiln::cuda::{Architecture, CudaKernel, CudaTarget};
    use kiln::{KernelId, KernelLoader, Store};
    use kiln_test_support::require::is_required;
    use kiln_test_support::{Scratch, child, skip};

    use super::support::load_in_one_batch;
    use super::{CHILD, program, report, value};

    fn kernels() -> Vec<CudaKernel> {
        (0..4)
            .map(|number: i32| {
                CudaKernel::builder(
                    KernelId::named("compile_only.scale").parameter(&number),
                    "scale",
                )
                .source(format!(
                    "extern \"C\" __global__ void scale(float* y) {{ y[threadIdx.x] *= {number}.0f; }}"
                ))
            })
            .collect()
    }

    /// On GPU 0, or compile-only in compile-only mode: every kernel loaded.
    fn cuda_program() {
        let target = CudaTarget::on_device(0)
            .unwrap_or_else(|error| panic!("{error}"))
            .with_optional_store(Store::from_env().expect("the store opens"));
        let compile_only = target.is_compile_only();
        let architecture = target.architecture();
        let variant = target.variant();
        // A process of its own: no warm-start profile loads ahead of the
        // batch it proves (L12).
        let mut loader = KernelLoader::new(target).without_profile();
        let batch = load_in_one_batch(&mut loader, &kernels(), &variant);
        println!("report: compile_only={compile_only} architecture={architecture} {batch}");
    }

    // L11 on NVRTC: compile-only mode needs no driver and compiles for the
    // architecture KILN_CUDA_ARCH names; on an sm_90 GPU the same program
    // then compiles nothing.
    #[test]
    fn a_cuda_program_in_compile_only_mode_fills_the_store_for_its_gpu() {
        const TEST: &str = "cuda::a_cuda_program_in_compile_only_mode_fills_the_store_for_its_gpu";
        if child::is_child(CHILD, "cuda") {
            return cuda_program();
        }
        if let Err(error) = CudaTarget::compile_only(Architecture::new(9, 0))
            && !is_required(&["KILN_REQUIRE_NVRTC"])
        {
            return skip("compile-only mode on NVRTC", &error.to_string());
        }
        let scratch = Scratch::new("facade-compile-only-cuda");
        let root = scratch.join("store");
        let built = report(program(TEST, "cuda", &root, true));
        assert_eq!(value(&built, "compile_only"), "true", "{built:?}");
        assert_eq!(value(&built, "architecture"), "sm_90", "{built:?}");
        assert_eq!(value(&built, "compiled"), "4", "{built:?}");

        let gpu = CudaTarget::on_device(0).map(|target| target.architecture());
        match gpu {
            Ok(architecture) if architecture == Architecture::new(9, 0) => {
                let ran = report(program(TEST, "cuda", &root, false));
                assert_eq!(value(&ran, "compile_only"), "false", "{ran:?}");
                assert_eq!(value(&ran, "compiled"), "0", "{ran:?}");
                assert_eq!(value(&ran, "from_store"), "4", "{ran:?}");
            }
            Ok(other) => skip(
                "the sm_90 device run after compile-only mode",
                &format!("GPU 0 is {other}"),
            ),
            Err(error) => skip(
                "the sm_90 device run after compile-only mode",
                &error.to_string(),
            ),
        }
    }
}

#[cfg(feature = "wgpu")]
mod wgpu {
    use kiln::wgpu::WgpuVariant;
    use kiln::{KernelLoader, Store};
    use kiln_test_support::{Scratch, child, skip};

    use super::support::{fill_kernels, load_in_one_batch, wgpu_target};
    use super::{CHILD, program, report, value};

    /// On the Vulkan adapter, or compile-only in compile-only mode.
    fn wgpu_program() {
        let Some(target) = wgpu_target() else {
            return;
        };
        let target = target.with_optional_store(Store::from_env().expect("the store opens"));
        let compile_only = target.device().is_none();
        // A process of its own: no warm-start profile loads ahead of the
        // batch it proves (L12).
        let mut loader = KernelLoader::new(target).without_profile();
        let batch = load_in_one_batch(
            &mut loader,
            &fill_kernels("compile_only.fill"),
            &WgpuVariant,
        );
        println!("report: no_adapter=0 compile_only={compile_only} {batch}");
    }

    // L11 on wgpu: compile-only mode opens no adapter and validates with
    // naga; the program on the adapter (lavapipe here) then compiles
    // nothing.
    #[test]
    fn a_wgpu_program_in_compile_only_mode_fills_the_store_the_adapter_reads() {
        const TEST: &str =
            "wgpu::a_wgpu_program_in_compile_only_mode_fills_the_store_the_adapter_reads";
        if child::is_child(CHILD, "wgpu") {
            return wgpu_program();
        }
        let scratch = Scratch::new("facade-compile-only-wgpu");
        let root = scratch.join("store");
        let built = report(program(TEST, "wgpu", &root, true));
        assert_eq!(value(&built, "no_adapter"), "0", "compile-only needs none");
        assert_eq!(value(&built, "compile_only"), "true", "{built:?}");
        assert_eq!(value(&built, "compiled"), "4", "{built:?}");

        let ran = report(program(TEST, "wgpu", &root, false));
        if value(&ran, "no_adapter") == "1" {
            return skip(
                "the wgpu adapter run after compile-only mode",
                "no Vulkan adapter",
            );
        }
        assert_eq!(value(&ran, "compile_only"), "false", "{ran:?}");
        assert_eq!(value(&ran, "compiled"), "0", "{ran:?}");
        assert_eq!(value(&ran, "from_store"), "4", "{ran:?}");
    }
}

#[cfg(feature = "hip")]
mod hip {
    use kiln::hip::{HipKernel, HipTarget};
    use kiln::{KernelId, KernelLoader, Store};
    use kiln_test_support::{Scratch, child, skip};

    use super::support::load_in_one_batch;
    use super::{CHILD, program, report, value};

    /// `HipTarget::on_device(0)` on the default store: in compile-only
    /// mode, no runtime or GPU is opened.
    fn hip_program() {
        let target = match HipTarget::on_device(0) {
            Ok(target) => target,
            Err(error) => return println!("report: unavailable=1 ({error})"),
        };
        let target = target.with_optional_store(Store::from_env().expect("the store opens"));
        let compile_only = target.is_compile_only();
        let architecture = target.architecture().to_string();
        let variant = target.variant();
        // A process of its own: no warm-start profile loads ahead of the
        // batch it proves (L12).
        let mut loader = KernelLoader::new(target).without_profile();
        let kernels: Vec<HipKernel> = (0..2)
            .map(|number: i32| {
                HipKernel::builder(
                    KernelId::named("compile_only.hip_fill").parameter(&number),
                    "fill",
                )
                .source(format!(
                    "extern \"C\" __global__ void fill(float* y) {{ y[threadIdx.x] = {number}.0f; }}"
                ))
            })
            .collect();
        let batch = load_in_one_batch(&mut loader, &kernels, &variant);
        println!(
            "report: unavailable=0 compile_only={compile_only} architecture={architecture} {batch}"
        );
    }

    // L11 on hipRTC: KILN_HIP_ARCH names the architecture; the second run
    // in the mode reads the first's artifacts.
    #[test]
    fn a_hip_program_in_compile_only_mode_compiles_for_the_architecture_named() {
        const TEST: &str =
            "hip::a_hip_program_in_compile_only_mode_compiles_for_the_architecture_named";
        if child::is_child(CHILD, "hip") {
            return hip_program();
        }
        let scratch = Scratch::new("facade-compile-only-hip");
        let root = scratch.join("store");
        let in_mode = || {
            let mut command = program(TEST, "hip", &root, true);
            command.env(kiln::mode::HIP_ARCH_VARIABLE, "gfx90a");
            command
        };
        let built = report(in_mode());
        if value(&built, "unavailable") == "1" {
            return skip("compile-only mode on hipRTC", &format!("{built:?}"));
        }
        assert_eq!(value(&built, "compile_only"), "true", "{built:?}");
        assert_eq!(value(&built, "architecture"), "gfx90a", "{built:?}");
        assert_eq!(value(&built, "compiled"), "2", "{built:?}");
        let again = report(in_mode());
        assert_eq!(value(&again, "compiled"), "0", "{again:?}");
        assert_eq!(value(&again, "from_store"), "2", "{again:?}");
    }
}

// L11: a mode that names no architecture for a backend makes its device
// constructor fail, naming the variable, rather than open the device.
#[cfg(feature = "cuda")]
#[test]
fn compile_only_mode_without_an_architecture_names_the_variable() {
    if std::env::var_os(mode::CUDA_ARCH_VARIABLE).is_some() {
        return kiln_test_support::skip(
            "compile-only mode without an architecture",
            "KILN_CUDA_ARCH is set in this environment",
        );
    }
    let _compile_only = ProcessModeOverride::new(ProcessMode::CompileOnly(CompileOnly::default()));
    let error = kiln::cuda::CudaTarget::on_device(0).expect_err("no architecture named");
    assert!(
        error.to_string().contains(mode::CUDA_ARCH_VARIABLE),
        "{error}"
    );
}
