//! D4 with naga, no device needed: a WGSL artifact carries its entry
//! point's workgroup size, the resources it binds and its workgroup memory
//! (sized after its `override` constants are applied), and a store hit
//! returns the same record as the compile did.

mod support;

use kiln_engine::{KernelId, KernelOutcome, Reported, ResourceUsage};
use kiln_wgpu::{WgpuTarget, WgslKernel};
use support::{fresh_folder, id_of, loader, store_at};

/// A reduction with a workgroup array sized by an override, one workgroup
/// scalar, two buffers, and a workgroup variable the entry never touches.
const REDUCE: &str = r#"
override WG: u32 = 64;

@group(0) @binding(0) var<storage, read> input: array<f32>;
@group(0) @binding(1) var<storage, read_write> output: array<f32>;

var<workgroup> partial: array<f32, WG>;
var<workgroup> count: u32;
var<workgroup> unused: array<vec4<f32>, 32>;

@compute @workgroup_size(WG, 1, 1)
fn reduce(@builtin(local_invocation_id) local: vec3<u32>,
          @builtin(workgroup_id) group: vec3<u32>) {
    partial[local.x] = input[group.x * WG + local.x];
    workgroupBarrier();
    if (local.x == 0u) {
        var total = 0.0;
        for (var i = 0u; i < WG; i++) {
            total += partial[i];
        }
        count = WG;
        output[group.x] = total;
    }
}

@compute @workgroup_size(1)
fn other() {
    unused[0] = vec4<f32>(1.0);
}
"#;

fn reduce(workgroup: f64) -> WgslKernel {
    WgslKernel::builder(
        KernelId::named("tests.d4.reduce").parameter(&workgroup.to_bits()),
        "reduce",
    )
    .constant("WG", workgroup)
    .source(REDUCE)
}

// D4
#[test]
fn d4_a_wgsl_artifact_reports_workgroup_size_bindings_and_workgroup_memory() {
    let mut loader = loader(WgpuTarget::compile_only());
    let kernel = reduce(128.0);
    let pipeline = loader
        .load(&kernel, &id_of(&kernel))
        .expect("naga takes the reduction");
    assert_eq!(
        *pipeline.resources(),
        ResourceUsage {
            workgroup_size: Some([128, 1, 1]),
            bindings: Some(2),
            // 128 floats of `partial`, then the u32 `count`; `unused`
            // belongs to another entry point.
            shared_memory_bytes: Some(128 * 4 + 4),
            ..ResourceUsage::default()
        }
    );
    assert!(pipeline.report().warnings.is_empty());
    assert!(!pipeline.report().spills());

    let smaller = reduce(32.0);
    let pipeline = loader
        .load(&smaller, &id_of(&smaller))
        .expect("naga takes the reduction");
    assert_eq!(
        pipeline.resources().shared_memory_bytes,
        Some(32 * 4 + 4),
        "the override sizes the array"
    );
}

// D4
#[test]
fn d4_the_report_of_a_store_hit_equals_the_report_of_the_compile() {
    let folder = fresh_folder("d4-hit");
    let kernel = reduce(64.0);
    let id = id_of(&kernel);

    let mut first = loader(WgpuTarget::compile_only().with_store(store_at(&folder)));
    let compiled = first.load(&kernel, &id).expect("naga takes the reduction");
    assert_eq!(first.records()[0].count(KernelOutcome::Compiled), 1);
    assert_eq!(compiled.resources().shared_memory_bytes, Some(64 * 4 + 4));

    let mut second = loader(WgpuTarget::compile_only().with_store(store_at(&folder)));
    let hit = second.load(&kernel, &id).expect("the stored kernel loads");
    assert_eq!(
        second.records()[0].count(KernelOutcome::FromStore),
        1,
        "the second loader reads the store"
    );
    assert_eq!(hit.report(), compiled.report(), "the same record");
    let _ = std::fs::remove_dir_all(&folder);
}
