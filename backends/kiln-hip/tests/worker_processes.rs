//! hipRTC in compile worker processes, for real: this binary's `main` starts
//! with the worker hook, so it is its own worker and needs no harness.
//!
//! The crash is hipRTC's own: with the target check turned off (a switch for
//! these tests only), a kernel for a target comgr lacks reaches hipRTC,
//! comgr aborts the worker that compiles it, and only that kernel fails.
//!
//! Each test skips with a printed reason when hipRTC is missing, and fails
//! instead when `KILN_REQUIRE_DEVICE=1`. The binary prints libtest's
//! `test result:` line.

mod support;

use kiln_test_support::workers;

use kiln_engine::{ArtifactId, Kernel, KernelId, KernelLoader, KernelOutcome, WorkerMode};
use kiln_hip::{Architecture, HipCompiler, HipKernel, HipTarget, HipVariant};
use support::{compile_only, compiler};

kiln_test_support::worker_test_main!(
    [kiln_hip::worker_entry()],
    b2_hiprtc_in_worker_processes_builds_the_code_objects_it_builds_in_process,
    l6_a_kernel_whose_target_aborts_hiprtc_fails_alone_and_its_worker_is_replaced,
);

fn loader(compiler: HipCompiler, mode: WorkerMode) -> KernelLoader<HipTarget> {
    kiln_test_support::loader(compile_only(&compiler, "gfx90a"), 2).with_worker_mode(mode)
}

fn variant(arch: &str) -> HipVariant {
    HipVariant::new(Architecture::new(arch).expect("a valid architecture name"))
}

fn scale(index: usize) -> HipKernel {
    HipKernel::builder(
        KernelId::named("tests.worker.scale"),
        format!("scale_{index}"),
    )
    .source(format!(
        "extern \"C\" __global__ void scale_{index}(float* x, float by, unsigned n) {{\n\
             \x20   unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n\
             \x20   if (i < n) x[i] *= by + {index}.0f;\n\
             }}\n"
    ))
}

fn b2_hiprtc_in_worker_processes_builds_the_code_objects_it_builds_in_process() {
    let test = "b2_hiprtc_in_worker_processes_builds_the_code_objects_it_builds_in_process";
    let Some(compiler) = compiler(test) else {
        return;
    };
    let kernels: Vec<HipKernel> = (0..4).map(scale).collect();
    let mut in_workers = loader(compiler.clone(), WorkerMode::Processes);
    let mut in_process = loader(compiler, WorkerMode::Threads);
    let built = workers::compile_in_workers_and_in_process(
        &mut in_workers,
        &mut in_process,
        &kernels,
        &variant("gfx90a"),
    );
    for (built_there, built_here) in built {
        assert_eq!(built_there.lowered_name(), built_here.lowered_name());
        assert_eq!(built_there.architecture(), built_here.architecture());
        assert_eq!(built_there.elf_flags(), built_here.elf_flags());
        assert_eq!(built_there.kernels(), built_here.kernels());
        assert_eq!(
            built_there.code_object_bytes(),
            built_here.code_object_bytes(),
            "code objects of one size"
        );
    }
}

fn l6_a_kernel_whose_target_aborts_hiprtc_fails_alone_and_its_worker_is_replaced() {
    let test = "l6_a_kernel_whose_target_aborts_hiprtc_fails_alone_and_its_worker_is_replaced";
    let Some(compiler) = compiler(test) else {
        return;
    };
    // The check would refuse it, and without the check comgr aborts the
    // process that compiles it.
    let unsupported = support::unsupported_processor(&compiler);
    let mut loader = loader(
        compiler.without_target_check_for_crash_tests(),
        WorkerMode::Processes,
    );
    let crashing = scale(7);
    for index in 0..4 {
        loader.enqueue(Box::new(scale(index)), variant("gfx90a"));
    }
    loader.enqueue(Box::new(crashing.clone()), variant(unsupported));
    loader.enqueue(Box::new(scale(5)), variant("gfx908"));
    loader.compile_queued();

    let batch = loader.records().back().expect("a batch").clone();
    assert_eq!(batch.mode, WorkerMode::Processes);
    assert_eq!(batch.count(KernelOutcome::Compiled), 5, "{batch:#?}");
    assert_eq!(batch.count(KernelOutcome::Failed), 1, "{batch:#?}");
    let error = loader
        .load(
            &crashing,
            &ArtifactId::new(crashing.id(), variant(unsupported)),
        )
        .expect_err("the aborting target fails");
    let message = error.to_string();
    eprintln!("the crashed kernel's error: {message}");
    assert!(message.contains("the compiler crashed"), "{message}");
    assert!(message.contains("signal"), "{message}");
    for index in 0..4 {
        let kernel = scale(index);
        assert!(loader.is_loaded(&ArtifactId::new(kernel.id(), variant("gfx90a"))));
    }

    let workers = loader.worker_processes();
    assert_eq!(workers.replaced, 1, "{workers:?}");
    assert!(workers.unavailable.is_none(), "{workers:?}");
    // The replacement compiles the next batch.
    loader.enqueue(Box::new(scale(6)), variant("gfx1030"));
    loader.compile_queued();
    let batch = loader.records().back().expect("a second batch");
    assert_eq!(batch.mode, WorkerMode::Processes);
    assert_eq!(batch.count(KernelOutcome::Compiled), 1, "{batch:#?}");
}
