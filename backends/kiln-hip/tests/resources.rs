//! D4 with the real hipRTC for gfx90a: every artifact carries its
//! compile's warnings and its kernel's resources as the code object's
//! metadata gives them, a store hit returns the same record as the compile
//! did, and a kernel that spills is reported as spilling, once, to the
//! reporter (D3).
//!
//! Each test skips with a printed reason when hipRTC is missing, and fails
//! instead when `KILN_REQUIRE_DEVICE=1`.

mod support;

use kiln_engine::{
    ArtifactId, DeviceId, Kernel, KernelCache, KernelId, KernelOutcome, LoaderConfig, Reported,
};
use kiln_hip::{HipKernel, HipTarget};
use kiln_test_support::Scratch;
use kiln_test_support::reports::{BOUNDED, Heard, spilling_source};
use support::{compile_only, compiler, disk_store, loader};

const DEVICE: DeviceId = DeviceId::new("hip", 0);

/// A kernel whose unrolled array of 192 floats, all live at once, does
/// not fit in gfx90a's vector registers.
fn spilling_text() -> String {
    spilling_source(192)
}

fn kernel(name: &'static str, entry: &str, source: &str) -> HipKernel {
    HipKernel::builder(KernelId::named(name), entry).source(source)
}

// D4
#[test]
fn d4_the_report_of_a_store_hit_equals_the_report_of_the_compile() {
    let Some(compiler) = compiler("D4 report on compile and on hit") else {
        return;
    };
    let scratch = Scratch::new("hip-d4-hit");
    let root = scratch.join("store");
    let bounded = kernel("tests.d4.bounded", "bounded", BOUNDED);

    let mut first = loader(compile_only(&compiler, "gfx90a").with_store(disk_store(&root)));
    let id = ArtifactId::new(bounded.id(), first.target().variant());
    let compiled = first.load(&bounded, &id).expect("the kernel compiles");
    assert_eq!(first.records()[0].count(KernelOutcome::Compiled), 1);
    let resources = compiled.resources();
    assert!(
        resources.registers.is_some_and(|vgprs| vgprs > 0),
        "{resources:?}"
    );
    assert!(
        resources.scalar_registers.is_some_and(|sgprs| sgprs > 0),
        "{resources:?}"
    );
    assert_eq!(
        resources.shared_memory_bytes,
        Some(1024),
        "256 floats of LDS"
    );
    assert_eq!(resources.max_threads_per_block, Some(128), "launch bounds");
    assert_eq!(resources.spilled_vector_registers, Some(0));
    assert_eq!(resources.spilled_scalar_registers, Some(0));
    assert!(resources.local_memory_bytes.is_some(), "{resources:?}");
    assert!(!resources.spills());

    let mut second = loader(compile_only(&compiler, "gfx90a").with_store(disk_store(&root)));
    let hit = second.load(&bounded, &id).expect("the stored kernel loads");
    assert_eq!(
        second.records()[0].count(KernelOutcome::FromStore),
        1,
        "the second loader reads the store"
    );
    assert_eq!(hit.report(), compiled.report(), "the same record");
}

// D4, D3
#[test]
fn d4_a_kernel_that_spills_is_reported_as_spilling_once_to_the_reporter() {
    let Some(compiler) = compiler("D4 a kernel that spills") else {
        return;
    };
    let scratch = Scratch::new("hip-d4-spill");
    let root = scratch.join("store");
    let heard = Heard::default();
    let spilling = || kernel("tests.d4.spilling", "spilling", &spilling_text());

    let built = KernelCache::with_config(
        DEVICE,
        compile_only(&compiler, "gfx90a").with_store(disk_store(&root)),
        LoaderConfig::default(),
    );
    heard.listen(&built);
    let variant = built.with_target(HipTarget::variant);
    let compiled = built
        .get(DEVICE, spilling(), variant.clone())
        .expect("the kernel compiles");
    let resources = compiled.resources();
    assert!(resources.spills(), "{resources:?}");
    assert!(
        resources
            .spilled_vector_registers
            .is_some_and(|spilled| spilled > 0),
        "{resources:?}"
    );
    assert!(
        resources.local_memory_bytes.is_some_and(|bytes| bytes > 0),
        "spills live in scratch: {resources:?}"
    );
    heard.assert_one_spill_warning("VGPRs", &compiled.report().warnings);

    let warm = KernelCache::with_config(
        DEVICE,
        compile_only(&compiler, "gfx90a").with_store(disk_store(&root)),
        LoaderConfig::default(),
    );
    heard.listen(&warm);
    let hit = warm
        .get(DEVICE, spilling(), variant)
        .expect("the stored kernel loads");
    assert_eq!(warm.records()[0].count(KernelOutcome::FromStore), 1);
    assert_eq!(hit.report(), compiled.report());
    assert_eq!(heard.records().len(), 1, "a hit is never reported (D3)");
}
