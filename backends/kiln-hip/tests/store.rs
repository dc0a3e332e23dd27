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

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kiln_engine::{
    ArtifactCompiler, ArtifactId, BoundStore, CompilationTarget, Kernel, KernelId, KernelLoader,
    KernelOutcome, KeyComponents, LoaderConfig, Lookup,
};
use kiln_hip::{Architecture, HipCompiler, HipKernel, HipTarget, HipVariant};
use support::{Scratch, compile_only, compiler, disk_store};

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

fn loader(target: HipTarget) -> KernelLoader<HipTarget> {
    KernelLoader::with_config(
        target,
        LoaderConfig {
            parallelism: NonZeroUsize::new(2).expect("2 is not zero"),
            // The second process proves the batch's store hit: no
            // warm-start profile loads scale ahead of it.
            profile: false,
            ..LoaderConfig::default()
        },
    )
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

    run_second_process(TEST, scratch.path());
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

/// Runs test `test` of this binary again as a second process on `folder`,
/// and fails with its output unless it passes.
fn run_second_process(test: &str, folder: &Path) {
    let stdout = folder.join("child.stdout");
    let stderr = folder.join("child.stderr");
    let mut child = Command::new(std::env::current_exe().expect("the test binary's path"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, folder)
        .stdout(std::fs::File::create(&stdout).expect("a file for stdout"))
        .stderr(std::fs::File::create(&stderr).expect("a file for stderr"))
        .spawn()
        .expect("the test binary runs again");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            break status;
        }
        if started.elapsed() > CHILD_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the second process ran past {CHILD_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = std::fs::read_to_string(&stdout).unwrap_or_default()
        + &std::fs::read_to_string(&stderr).unwrap_or_default();
    assert!(
        status.success(),
        "the second process failed ({status}):\n{output}"
    );
    assert!(
        output.contains("1 passed"),
        "the second process ran its test:\n{output}"
    );
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
    for round in 0..2 {
        let mut on_store = loader(target_on(&compiler, &root));
        on_store
            .load(&kernel, &id(&kernel, &gfx908))
            .expect("a gfx908 kernel compiles on a gfx90a store's target");
        let batch = &on_store.records()[0];
        assert_eq!(
            batch.count(KernelOutcome::Compiled),
            1,
            "round {round}: compiled, never read from the store"
        );
        assert!(!batch.stored, "round {round}: and not stored");
    }
}

// L5a, L10: a target without a store stays storeless.
#[test]
fn a_target_without_a_store_keeps_nothing_and_cannot_switch_to_one() {
    let Some(compiler) = compiler("a storeless target") else {
        return;
    };
    let mut target = compile_only(&compiler, "gfx90a");
    assert!(target.store().is_none());
    assert!(bound_store(&target).is_none());
    let scratch = Scratch::new("storeless");
    assert!(
        !target.switch_store(disk_store(&scratch.join("store"))),
        "a storeless target does not switch"
    );
    assert!(
        target.store().is_none(),
        "whether a target has a store never changes"
    );
    let mut storeless = loader(target);
    assert!(
        storeless.bound_store().is_none(),
        "the loader binds no store"
    );
    let kernel = scale();
    storeless
        .load(&kernel, &id(&kernel, &gfx90a()))
        .expect("scale loads");
    assert!(!storeless.records()[0].stored);
    assert_eq!(storeless.statistics().stored, 0);
}

/// `target`'s store bound to its compiler's keys, as its loader binds it.
fn bound_store(target: &HipTarget) -> Option<BoundStore<HipCompiler>> {
    target
        .store()
        .map(|store| BoundStore::new(std::sync::Arc::clone(store), &**target.compiler()))
}
