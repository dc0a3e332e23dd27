//! D4 with the real hipRTC for gfx90a: every artifact carries its
//! compile's warnings and its kernel's resources as the code object's
//! metadata gives them, a store hit returns the same record as the compile
//! did, and a kernel that spills is reported as spilling, once, to the
//! reporter (D3).
//!
//! Each test skips with a printed reason when hipRTC is missing, and fails
//! instead when `KILN_REQUIRE_DEVICE=1`.

mod support;

use std::sync::{Arc, Mutex};

use kiln_engine::{
    ArtifactId, DeviceId, Kernel, KernelCache, KernelId, KernelOutcome, KernelRecord, LoaderConfig,
    Reported, Severity,
};
use kiln_hip::{HipKernel, HipTarget};
use support::{Scratch, compile_only, compiler, disk_store, loader};

const DEVICE: DeviceId = DeviceId::new("hip", 0);

/// A kernel with 1 KiB of LDS and launch bounds, that does not spill.
const BOUNDED: &str = r#"extern "C" __global__ void __launch_bounds__(128) bounded(float* y, int n) {
    __shared__ float tile[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? y[i] : 0.0f;
    __syncthreads();
    if (i < n) y[i] = tile[(threadIdx.x + 1) % 128] * 2.0f;
}
"#;

/// A kernel whose unrolled array of 192 floats, all live at once, does
/// not fit in gfx90a's vector registers.
const SPILLING: &str = r#"extern "C" __global__ void spilling(float* out, int n) {
    float a[192];
#pragma unroll
    for (int i = 0; i < 192; ++i) a[i] = out[i * n + threadIdx.x];
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int i = 0; i < 192; ++i) a[i] = a[i] * a[(i + j) % 192] + 1.0f;
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < 192; ++i) total += a[i];
    out[threadIdx.x] = total;
}
"#;

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
    let heard: Arc<Mutex<Vec<KernelRecord>>> = Arc::default();
    let listen = |cache: &KernelCache<HipTarget>| {
        let listener = Arc::clone(&heard);
        cache.set_reporter(move |_, record| {
            listener
                .lock()
                .expect("the listener does not panic")
                .push(record.clone());
        });
    };
    let spilling = || kernel("tests.d4.spilling", "spilling", SPILLING);

    let built = KernelCache::with_config(
        DEVICE,
        compile_only(&compiler, "gfx90a").with_store(disk_store(&root)),
        LoaderConfig::default(),
    );
    listen(&built);
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
    {
        let heard = heard.lock().expect("the listener does not panic");
        assert_eq!(heard.len(), 1, "one built artifact, one report");
        let spill_warnings: Vec<_> = heard[0]
            .diagnostics
            .iter()
            .filter(|diagnostic| diagnostic.message.contains("spills registers"))
            .collect();
        assert_eq!(spill_warnings.len(), 1, "{:?}", heard[0].diagnostics);
        assert_eq!(spill_warnings[0].severity, Severity::Warning);
        assert!(
            spill_warnings[0].message.contains("VGPRs"),
            "{}",
            spill_warnings[0].message
        );
        assert_eq!(heard[0].diagnostics, compiled.report().warnings);
    }

    let warm = KernelCache::with_config(
        DEVICE,
        compile_only(&compiler, "gfx90a").with_store(disk_store(&root)),
        LoaderConfig::default(),
    );
    listen(&warm);
    let hit = warm
        .get(DEVICE, spilling(), variant)
        .expect("the stored kernel loads");
    assert_eq!(warm.records()[0].count(KernelOutcome::FromStore), 1);
    assert_eq!(hit.report(), compiled.report());
    assert_eq!(
        heard.lock().expect("the listener does not panic").len(),
        1,
        "a hit is never reported (D3)"
    );
}
