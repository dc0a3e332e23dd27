//! The HIP compile-only target on a real disk store with the real hipRTC:
//! the keys it files code objects under (P1, with the compiler's whole
//! identity), sharing by text across rebuilds (P7), and a second process
//! that reads the identical code object the first compiled, without
//! compiling (L5a).
//!
//! What holds for every store whatever it holds (keys that differ in one
//! component, claims, replacement, explanations) is proved once by the store
//! conformance suite on the disk store (`crates/kiln-store/tests/
//! conformance.rs`); these tests prove what only real code objects show.
//!
//! The second process is this test binary run again, with
//! `KILN_HIP_STORE_CHILD` naming the folder the first one filled.
//!
//! Each test skips with a printed reason when hipRTC is missing, and fails
//! instead when `KILN_REQUIRE_DEVICE=1`.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use kiln_engine::{
    ArtifactCompiler, ArtifactId, CompilationTarget, Kernel, KernelId, KernelOutcome,
    KeyComponents, Lookup,
};
use kiln_hip::{Architecture, HipCompiler, HipKernel, HipTarget, HipVariant};
use kiln_test_support::Scratch;
use kiln_test_support::child;
use kiln_test_support::target_store::{self, bound_store};
use support::{compile_only, compiler, disk_store, loader};

/// Set in a second process: the folder the first process filled.
const CHILD: &str = "KILN_HIP_STORE_CHILD";

/// How long a second process may take before it counts as hung.
const CHILD_LIMIT: Duration = Duration::from_secs(120);

const SCALE: &str = r#"extern "C" __global__ void scale(float* x, float by, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= by;
}
"#;

fn gfx90a() -> Architecture {
    Architecture::new("gfx90a").expect("a valid architecture name")
}

fn id(kernel: &HipKernel, arch: &Architecture) -> ArtifactId<HipVariant> {
    ArtifactId::new(kernel.id(), HipVariant::new(arch.clone()))
}

fn scale() -> HipKernel {
    HipKernel::builder(KernelId::named("tests.store.scale"), "scale").source(SCALE)
}

/// A compile-only target on the store at `root`, for gfx90a.
fn target_on(compiler: &HipCompiler, root: &Path) -> HipTarget {
    compile_only(compiler, "gfx90a").with_store(disk_store(root))
}

// P1
#[test]
fn p1_the_store_key_names_hip_the_whole_compiler_identity_and_the_architecture() {
    let Some(compiler) = compiler("P1 store key") else {
        return;
    };
    let scratch = Scratch::new("key");
    let root = scratch.join("store");
    let target = target_on(&compiler, &root);
    let bound = bound_store(&target).expect("a target on a store has a binding");
    let identity = compiler.identity();
    assert_eq!(
        *bound.components(),
        KeyComponents::new(
            "hip",
            format!(
                "hiprtc {} ({}), comgr {} ({}) / artifact 3",
                identity.hiprtc_version,
                identity.hiprtc_library,
                identity.comgr_version,
                identity.comgr_library
            ),
            "gfx90a",
            ""
        )
    );
    assert!(
        bound.components().compiler.contains(".so"),
        "the library files are named: {}",
        bound.components().compiler
    );
    assert_eq!(target.architecture(), &gfx90a());
    assert!(target.is_compile_only());
    assert_eq!(
        target.device_id(),
        None,
        "a compile-only target is on no device"
    );

    // Two targets, as two processes would make them: the same key.
    let kernel = scale();
    let again = target_on(&compiler, &root);
    let key = bound.artifact_key(target.compiler(), &id(&kernel, &gfx90a()));
    let same = bound_store(&again)
        .expect("bound")
        .artifact_key(again.compiler(), &id(&kernel, &gfx90a()));
    assert_eq!(key.digest(), same.digest());

    // Another architecture changes the architecture of the components and
    // nothing else; that keys differing in one component never see each
    // other's entries, and that a miss names the component, is the store
    // conformance suite's (P1, P9).
    let other = compile_only(&compiler, "gfx908").with_store(disk_store(&root));
    assert_eq!(
        *bound_store(&other).expect("bound").components(),
        KeyComponents {
            architecture: "gfx908".into(),
            ..bound.components().clone()
        }
    );
}

// L5a, B2: the second process is the same test, run with `CHILD` set.
#[test]
fn l5a_a_second_process_reads_the_identical_code_object_from_the_store_without_compiling() {
    const TEST: &str =
        "l5a_a_second_process_reads_the_identical_code_object_from_the_store_without_compiling";
    if let Some(folder) = std::env::var_os(CHILD).map(PathBuf::from) {
        return second_process_reads_the_code_object(&folder);
    }
    let Some(compiler) = compiler("L5a across processes") else {
        return;
    };
    let scratch = Scratch::new("code-object");
    let kernel = scale();
    let artifact_id = id(&kernel, &gfx90a());
    let lowered = compiler.lower(&kernel, &artifact_id).expect("lowers");
    let reference = compiler
        .finalize(&artifact_id, lowered)
        .expect("compiles")
        .artifact;
    let mut first = loader(target_on(&compiler, &scratch.join("store")));
    first.load(&kernel, &artifact_id).expect("scale loads");
    assert_eq!(first.records()[0].count(KernelOutcome::Compiled), 1);
    assert!(first.records()[0].stored, "the first process stored scale");
    drop(first);

    child::run_second_process(TEST, CHILD, scratch.path(), CHILD_LIMIT);
    let code_object =
        std::fs::read(scratch.join("second.co")).expect("the second process wrote it");
    assert!(!code_object.is_empty());
    assert!(
        code_object == reference.code_object,
        "the code object read from the store is the one hipRTC makes ({} and {} bytes)",
        code_object.len(),
        reference.code_object.len()
    );
}

/// The second process of the test above: loads scale from the store the
/// first filled, proves nothing compiled, and writes the code object it
/// read.
fn second_process_reads_the_code_object(folder: &Path) {
    let compiler = HipCompiler::new().expect("hipRTC is there: the first process used it");
    let mut second = loader(target_on(&compiler, &folder.join("store")));
    let kernel = scale();
    let artifact_id = id(&kernel, &gfx90a());
    let loaded = second
        .load(&kernel, &artifact_id)
        .expect("scale loads from the store");
    let batch = &second.records()[0];
    assert_eq!(batch.count(KernelOutcome::FromStore), 1, "{batch:?}");
    assert_eq!(second.statistics().compiled, 0, "nothing was compiled");
    assert_eq!(second.statistics().hits, 1);
    assert_eq!(loaded.lowered_name(), "scale");
    let bound = second.bound_store().expect("the loader bound the store");
    let Lookup::Hit { artifact, .. } = bound.lookup(second.target().compiler(), &artifact_id)
    else {
        panic!("the store still holds scale");
    };
    std::fs::write(folder.join("second.co"), &artifact.code_object).expect("written");
}

// P7, L5c
#[test]
fn p7_a_rebuilt_kernel_with_a_new_id_and_the_same_text_takes_the_stored_artifact() {
    let Some(compiler) = compiler("P7 with hipRTC") else {
        return;
    };
    let scratch = Scratch::new("rekeyed");
    let root = scratch.join("store");
    // Two generated kernels with the same text: ids of two builds of a
    // program whose id scheme changed.
    let generated = |version: u32| {
        HipKernel::builder(
            KernelId::named("tests.store.rebuilt").parameter(&version),
            "scale",
        )
        .generator(|_architecture| Ok(SCALE.to_owned()))
    };
    let (old, new) = (generated(1), generated(2));
    assert_ne!(old.id(), new.id());
    let mut first = loader(target_on(&compiler, &root));
    first
        .load(&old, &id(&old, &gfx90a()))
        .expect("the old build loads");
    drop(first);

    let mut second = loader(target_on(&compiler, &root));
    second
        .load(&new, &id(&new, &gfx90a()))
        .expect("the new build loads");
    let batch = &second.records()[0];
    assert_eq!(
        batch.count(KernelOutcome::Rekeyed),
        1,
        "the text was found in the store: {batch:?}"
    );
    assert_eq!(second.statistics().compiled, 0, "hipRTC was not run");
}

// P1: a store's keys name one architecture.
#[test]
fn a_kernel_asked_for_another_architecture_compiles_without_the_store() {
    let Some(compiler) = compiler("another architecture") else {
        return;
    };
    let scratch = Scratch::new("other-architecture");
    let root = scratch.join("store");
    let kernel = scale();
    let gfx908 = Architecture::new("gfx908").expect("a valid architecture name");
    target_store::assert_another_architecture_compiles_without_the_store(
        |_round| loader(target_on(&compiler, &root)),
        &kernel,
        &id(&kernel, &gfx908),
        "a gfx908 kernel compiles on a gfx90a store's target",
    );
}

// L5a, L10: a target without a store stays storeless.
#[test]
fn a_target_without_a_store_keeps_nothing_and_cannot_switch_to_one() {
    let Some(compiler) = compiler("a storeless target") else {
        return;
    };
    let scratch = Scratch::new("storeless");
    let kernel = scale();
    target_store::assert_a_storeless_target_keeps_nothing(
        compile_only(&compiler, "gfx90a"),
        disk_store(&scratch.join("store")),
        HipTarget::switch_store,
        loader,
        &kernel,
        &id(&kernel, &gfx90a()),
    );
}
