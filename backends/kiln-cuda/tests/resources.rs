//! D4 with the real NVRTC: every artifact carries its compile's warnings
//! and its kernel's resources as ptxas reported them, a store hit returns
//! the same record as the compile did, and a kernel forced to spill
//! (`max_registers`) is reported as spilling, once, to the reporter (D3).
//!
//! The tests compile without a GPU (the compile-only target) and skip with
//! a printed reason when NVRTC is missing, failing instead when
//! `KILN_REQUIRE_NVRTC=1`. Where NVIDIA's compute cache gives NVRTC a
//! cubin without ptxas's report, the figures come from the cubin and the
//! spill checks are left out, saying so.

mod support;

use kiln_cuda::{CudaKernel, CudaOptions, CudaTarget};
use kiln_engine::{DeviceId, KernelCache, KernelId, KernelOutcome, LoaderConfig, Reported};
use kiln_test_support::reports::{BOUNDED, Heard, spilling_source};
use support::{Scratch, compile, compile_only, disk_store, fixed, id_on, loader};

const DEVICE: DeviceId = DeviceId::new("cuda", 0);

/// A kernel whose unrolled array of 64 floats cannot stay in 24
/// registers.
fn spilling_text() -> String {
    spilling_source(64)
}

fn spilling() -> CudaKernel {
    CudaKernel::builder(KernelId::named("tests.d4.spilling"), "spilling")
        .options(CudaOptions::default().max_registers(24))
        .source(spilling_text())
}

/// Whether ptxas's report reached the artifact. NVIDIA's compute cache
/// hands NVRTC the cubin of a text it compiled before without running
/// ptxas, and so without its report: the registers, shared and constant
/// memory then come from the cubin, and the spills are unknown. Says so
/// when they are, where the run's log shows it; with the cache off
/// (`CUDA_CACHE_DISABLE=1`, which `cargo xtask test` sets) the report must
/// be there, and its absence fails `what`.
fn ptxas_reported(what: &str, resources: &kiln_engine::ResourceUsage) -> bool {
    let reported = resources.spill_store_bytes.is_some();
    if !reported {
        kiln_test_support::skip_unless(
            &["CUDA_CACHE_DISABLE"],
            &format!("{what}'s checks of ptxas's report"),
            "NVRTC gave this cubin without ptxas's report (NVIDIA's compute cache; \
             CUDA_CACHE_DISABLE=1 turns it off): the spills are unknown",
        );
    }
    reported
}

fn cache(target: CudaTarget) -> KernelCache<CudaTarget> {
    KernelCache::with_config(DEVICE, target, LoaderConfig::default())
}

// D4
#[test]
fn d4_the_report_of_a_store_hit_equals_the_report_of_the_compile() {
    let Some(target) = compile_only("D4 report on compile and on hit") else {
        return;
    };
    let scratch = Scratch::new("cuda-d4-hit");
    let root = scratch.join("store");
    let kernel = fixed("tests.d4.bounded", "bounded", BOUNDED);

    let mut first = loader(target.with_store(disk_store(&root)));
    let id = id_on(first.target(), &kernel);
    let compiled = first.load(&kernel, &id).expect("the kernel compiles");
    assert_eq!(
        first.records()[0].count(KernelOutcome::Compiled),
        1,
        "the first loader compiles"
    );
    let resources = compiled.resources();
    assert!(
        resources.registers.is_some_and(|registers| registers > 0),
        "{resources:?}"
    );
    assert_eq!(resources.max_threads_per_block, Some(128), "launch bounds");
    assert!(!resources.spills());
    if ptxas_reported("D4 report on compile and on hit", resources) {
        assert_eq!(resources.shared_memory_bytes, Some(1024), "256 floats");
        assert_eq!(resources.spill_store_bytes, Some(0));
        assert_eq!(resources.spill_load_bytes, Some(0));
        assert!(resources.local_memory_bytes.is_some(), "{resources:?}");
    }
    assert!(
        compiled.report().warnings.is_empty(),
        "ptxas's report is no warning: {:?}",
        compiled.report().warnings
    );

    let second_target = compile_only("D4 second loader").expect("NVRTC opened just now");
    let mut second = loader(second_target.with_store(disk_store(&root)));
    let hit = second.load(&kernel, &id).expect("the stored kernel loads");
    assert_eq!(
        second.records()[0].count(KernelOutcome::FromStore),
        1,
        "the second loader reads the store"
    );
    assert_eq!(hit.report(), compiled.report(), "the same record");
}

// D4, D3
#[test]
fn d4_a_kernel_forced_to_spill_is_reported_as_spilling_once_to_the_reporter() {
    let Some(target) = compile_only("D4 a kernel forced to spill") else {
        return;
    };
    let scratch = Scratch::new("cuda-d4-spill");
    let root = scratch.join("store");
    let heard = Heard::default();

    let built = cache(target.with_store(disk_store(&root)));
    heard.listen(&built);
    let variant = built.with_target(CudaTarget::variant);
    let kernel = built
        .get(DEVICE, spilling(), variant)
        .expect("the kernel compiles");
    let resources = kernel.resources();
    assert!(
        resources.registers.is_some_and(|registers| registers <= 24),
        "{resources:?}"
    );
    if !ptxas_reported("D4 spills", resources) {
        return;
    }
    assert!(resources.spills(), "{resources:?}");
    assert!(
        resources.spill_store_bytes.is_some_and(|bytes| bytes > 0)
            && resources.spill_load_bytes.is_some_and(|bytes| bytes > 0),
        "{resources:?}"
    );
    assert!(
        resources.local_memory_bytes.is_some_and(|bytes| bytes >= 4),
        "spills live in local memory: {resources:?}"
    );
    heard.assert_one_spill_warning("`spilling`", &kernel.report().warnings);

    // A store hit carries the same record and tells the reporter nothing.
    let warm_target = compile_only("D4 spill from the store").expect("NVRTC opened just now");
    let warm = cache(warm_target.with_store(disk_store(&root)));
    heard.listen(&warm);
    let variant = warm.with_target(CudaTarget::variant);
    let hit = warm
        .get(DEVICE, spilling(), variant)
        .expect("the stored kernel loads");
    assert_eq!(warm.records()[0].count(KernelOutcome::FromStore), 1);
    assert_eq!(hit.report(), kernel.report());
    assert_eq!(heard.records().len(), 1, "a hit is never reported (D3)");
}

// D4
#[test]
fn d4_the_same_kernel_without_a_register_cap_does_not_spill() {
    let Some(target) = compile_only("D4 no cap, no spill") else {
        return;
    };
    let kernel = fixed("tests.d4.spilling", "spilling", &spilling_text());
    let finalized = compile(&target, &kernel).expect("the kernel compiles");
    let report = finalized.artifact.report();
    assert!(!report.spills(), "{report:?}");
    assert!(
        report
            .resources
            .registers
            .is_some_and(|registers| registers > 24),
        "{report:?}"
    );
    assert_eq!(report.warnings, finalized.diagnostics);
}

// D4
#[test]
fn d4_the_cubin_gives_the_registers_and_stack_frame_ptxas_reports() {
    let Some(target) = compile_only("D4 figures read from the cubin") else {
        return;
    };
    for (id, name, source) in [
        ("tests.d4.cubin.bounded", "bounded", BOUNDED.to_owned()),
        ("tests.d4.cubin.spilling", "spilling", spilling_text()),
    ] {
        let kernel = fixed(id, name, &source);
        let finalized = compile(&target, &kernel).expect("the kernel compiles");
        let artifact = &finalized.artifact;
        let from_cubin = kiln_cuda::cubin_resources(&artifact.cubin, &artifact.lowered_name);
        let reported = &artifact.report().resources;
        assert!(
            from_cubin.registers.is_some_and(|registers| registers > 0),
            "{from_cubin:?}"
        );
        assert_eq!(from_cubin.registers, reported.registers, "{name}");
        if ptxas_reported(name, reported) {
            assert_eq!(
                from_cubin.local_memory_bytes, reported.local_memory_bytes,
                "{name}: the stack frame"
            );
        }
        assert_eq!(
            from_cubin.shared_memory_bytes, None,
            "not read from the cubin"
        );
        assert_eq!(from_cubin.spill_store_bytes, None, "not in the cubin");
        // Any prefix or damage of the image reads as nothing or as figures,
        // never a panic.
        for cut in (0..artifact.cubin.len()).step_by(7) {
            let _ = kiln_cuda::cubin_resources(&artifact.cubin[..cut], &artifact.lowered_name);
        }
        let mut damaged = artifact.cubin.clone();
        for at in (0..damaged.len()).step_by(13) {
            damaged[at] ^= 0xa5;
        }
        let _ = kiln_cuda::cubin_resources(&damaged, &artifact.lowered_name);
        assert_eq!(
            kiln_cuda::cubin_resources(&artifact.cubin, "no_such_entry"),
            kiln_engine::ResourceUsage::default()
        );
    }
}
