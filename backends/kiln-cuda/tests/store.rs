//! The CUDA target on a real disk store with the real NVRTC: the keys it
//! files artifacts under (P1), damaged entries (P2), sharing by text across
//! processes' worth of rebuilds (P7), and a second process that reads what
//! the first compiled (L5a) — the cubin's bytes without a GPU, and on a GPU
//! a kernel that launches with results identical to the first process's.
//!
//! What holds for every store whatever it holds (keys that differ in one
//! component, claims, replacement, explanations) is proved once by the store
//! conformance suite on the disk store (`crates/kiln-store/tests/
//! conformance.rs`); these tests prove what only real cubins show.
//!
//! The tests that need a second process run this test binary again, with
//! `KILN_CUDA_STORE_CHILD` naming the folder the first one filled: the same
//! test then plays the second process.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use kiln_cuda::{Architecture, CudaKernel, CudaOptions, CudaTarget, CudaVariant, LoadedImage};
use kiln_engine::{
    ArtifactId, CompilationTarget, Kernel, KernelId, KernelOutcome, KeyComponents, Lookup,
};
use kiln_test_support::child;
use kiln_test_support::target_store::{self, bound_store};
use support::{Random, Scratch, disk_store, fixed, id_on, loader};

/// Set in a second process: the folder the first process filled.
const CHILD: &str = "KILN_CUDA_STORE_CHILD";

/// How long a second process may take before it counts as hung.
const CHILD_LIMIT: Duration = Duration::from_secs(120);

/// The folder of the first process, when this process is the second.
fn child_folder() -> Option<PathBuf> {
    std::env::var_os(CHILD).map(PathBuf::from)
}

/// saxpy, with a fixed source: the same kernel id in every process.
fn saxpy() -> CudaKernel {
    fixed("tests.store.saxpy", "saxpy", support::SAXPY)
}

fn write_floats(path: &Path, values: &[f32]) {
    let bytes: Vec<u8> = values
        .iter()
        .flat_map(|value| value.to_le_bytes())
        .collect();
    std::fs::write(path, bytes).expect("the floats are written");
}

fn read_floats(path: &Path) -> Vec<f32> {
    std::fs::read(path)
        .expect("the floats are there")
        .chunks_exact(4)
        .map(|chunk| f32::from_le_bytes(chunk.try_into().expect("four bytes")))
        .collect()
}

// P1
#[test]
fn p1_the_store_key_names_cuda_nvrtc_the_architecture_and_the_default_options() {
    let Some(target) = support::compile_only("P1 store key") else {
        return;
    };
    let version = target.compiler().version();
    let library = target.compiler().library_file();
    let scratch = Scratch::new("key");
    let store = disk_store(&scratch.join("store"));
    let hopper = target.with_store(store.clone());
    let bound = bound_store(&hopper).expect("a target on a store has a binding");
    assert_eq!(
        *bound.components(),
        KeyComponents::new(
            "cuda",
            format!("nvrtc {version} ({library}) / artifact 3"),
            "sm_90",
            "-std=c++17"
        )
    );
    let kernel = saxpy();
    let compiled = support::compile(&hopper, &kernel).expect("saxpy compiles");
    assert_eq!(
        bound.components().compiler,
        compiled.artifact.key.components.compiler,
        "the artifact and its store key name the compiler alike"
    );

    // Two targets, as two processes would make them: the same key.
    let again = CudaTarget::compile_only(support::ARCHITECTURE)
        .expect("NVRTC opened once already")
        .with_store(store.clone());
    let id = id_on(&hopper, &kernel);
    let key = bound.artifact_key(hopper.compiler(), &id);
    let same = bound_store(&again)
        .expect("bound")
        .artifact_key(again.compiler(), &id);
    assert_eq!(key.digest(), same.digest());

    // Another architecture changes the architecture of the components and
    // nothing else; that keys differing in one component never see each
    // other's entries, and that a miss names the component, is the store
    // conformance suite's (P1, P9).
    let ampere = CudaTarget::compile_only(Architecture::new(8, 0))
        .expect("NVRTC opened once already")
        .with_store(store);
    assert_eq!(
        *bound_store(&ampere).expect("bound").components(),
        KeyComponents {
            architecture: "sm_80".into(),
            ..bound.components().clone()
        }
    );
    let fast = CudaKernel::builder(KernelId::named("tests.store.saxpy"), "saxpy")
        .options(CudaOptions::default().fast_math(true))
        .source(support::SAXPY);
    let fast_key = bound.artifact_key(hopper.compiler(), &id_on(&hopper, &fast));
    assert_ne!(
        fast_key.digest(),
        key.digest(),
        "a kernel's own options are in its id, so in its key"
    );
    let text = |kernel: &CudaKernel| {
        use kiln_engine::ArtifactCompiler;
        let lowered = hopper
            .compiler()
            .lower(kernel, &id_on(&hopper, kernel))
            .expect("lowers");
        bound
            .source_key(
                hopper.compiler(),
                &id_on(&hopper, kernel),
                kiln_cuda::CudaCompiler::source(&lowered).expect("text"),
            )
            .digest()
    };
    assert_ne!(
        text(&fast),
        text(&kernel),
        "a kernel's own options are in its lowered text, so in its source key"
    );
}

// L5a, B1: the second process is the same test, run with `CHILD` set.
#[test]
fn l5a_a_second_process_reads_the_identical_cubin_from_the_store_without_compiling() {
    const TEST: &str =
        "l5a_a_second_process_reads_the_identical_cubin_from_the_store_without_compiling";
    if let Some(folder) = child_folder() {
        return second_process_reads_the_cubin(&folder);
    }
    let Some(target) = support::compile_only("L5a across processes") else {
        return;
    };
    let scratch = Scratch::new("cubin");
    let kernel = saxpy();
    let reference = support::compile(&target, &kernel)
        .expect("saxpy compiles")
        .artifact;
    let mut first = loader(target.with_store(disk_store(&scratch.join("store"))));
    let id = id_on(first.target(), &kernel);
    first.load(&kernel, &id).expect("saxpy loads");
    assert_eq!(first.records()[0].count(KernelOutcome::Compiled), 1);
    assert!(first.records()[0].stored, "the first process stored saxpy");
    drop(first);

    child::run_second_process(TEST, CHILD, scratch.path(), CHILD_LIMIT);
    let cubin = std::fs::read(scratch.join("second.cubin")).expect("the second process wrote it");
    let ptx = std::fs::read_to_string(scratch.join("second.ptx")).expect("and the PTX");
    assert!(!cubin.is_empty());
    assert!(
        cubin == reference.cubin,
        "the cubin read from the store is the one NVRTC makes ({} and {} bytes)",
        cubin.len(),
        reference.cubin.len()
    );
    assert_eq!(ptx, reference.ptx);
}

/// The second process of the test above: loads saxpy from the store the
/// first filled, proves nothing compiled, and writes the cubin it read.
fn second_process_reads_the_cubin(folder: &Path) {
    let target = CudaTarget::compile_only(support::ARCHITECTURE)
        .expect("NVRTC is there: the first process used it")
        .with_store(disk_store(&folder.join("store")));
    let mut second = loader(target);
    let kernel = saxpy();
    let id = id_on(second.target(), &kernel);
    let loaded = second
        .load(&kernel, &id)
        .expect("saxpy loads from the store");
    let batch = &second.records()[0];
    assert_eq!(batch.count(KernelOutcome::FromStore), 1, "{batch:?}");
    assert_eq!(second.statistics().compiled, 0, "nothing was compiled");
    assert_eq!(second.statistics().hits, 1);
    assert!(!batch.stored, "nothing new to store");
    assert_eq!(loaded.lowered_name(), "saxpy");
    let bound = second.bound_store().expect("the loader bound the store");
    let Lookup::Hit { artifact, .. } = bound.lookup(second.target().compiler(), &id) else {
        panic!("the store still holds saxpy");
    };
    std::fs::write(folder.join("second.cubin"), &artifact.cubin).expect("written");
    std::fs::write(folder.join("second.ptx"), &artifact.ptx).expect("written");
}

// L5a, B1, B4: the second process is the same test, run with `CHILD` set.
#[test]
fn l5a_a_kernel_loaded_from_the_store_by_a_second_process_launches_with_identical_results() {
    const TEST: &str =
        "l5a_a_kernel_loaded_from_the_store_by_a_second_process_launches_with_identical_results";
    if let Some(folder) = child_folder() {
        return second_process_launches(&folder);
    }
    let Some(target) = support::on_device("L5a across processes on the GPU") else {
        return;
    };
    let scratch = Scratch::new("launch");
    let device = target.device().expect("a device target").clone();
    let mut first = loader(target.with_store(disk_store(&scratch.join("store"))));
    let kernel = saxpy();
    let id = id_on(first.target(), &kernel);
    let saxpy = first.load(&kernel, &id).expect("saxpy loads");
    assert_eq!(first.records()[0].count(KernelOutcome::Compiled), 1);
    assert!(first.records()[0].stored, "the first process stored saxpy");

    let mut random = Random::fresh("saxpy across processes");
    let n = 1 << 20;
    let a = random.unit() * 4.0 - 2.0;
    let x = random.signed(n);
    let y = random.signed(n);
    write_floats(&scratch.join("a"), &[a]);
    write_floats(&scratch.join("x"), &x);
    write_floats(&scratch.join("y"), &y);
    let first_output = launch_saxpy(&device, &saxpy, a, &x, &y);
    assert!(first_output.iter().all(|value| value.is_finite()));
    drop(saxpy);
    drop(first);

    child::run_second_process(TEST, CHILD, scratch.path(), CHILD_LIMIT);
    let second_output = read_floats(&scratch.join("second.out"));
    assert_eq!(second_output.len(), n);
    let differing = first_output
        .iter()
        .zip(&second_output)
        .filter(|(first, second)| first.to_bits() != second.to_bits())
        .count();
    assert_eq!(
        differing, 0,
        "the kernel from the store gives the first process's results, bit for bit"
    );
}

/// saxpy on `device` over `x` and `y`, on a new stream.
fn launch_saxpy(
    device: &kiln_cuda::CudaDevice,
    saxpy: &kiln_cuda::LoadedKernel,
    a: f32,
    x: &[f32],
    y: &[f32],
) -> Vec<f32> {
    let stream = device.context().new_stream().expect("a stream");
    support::launch_saxpy(device, &stream, saxpy, a, x, y)
}

/// The second process of the test above: loads saxpy from the store, proves
/// nothing compiled, launches it on the first process's inputs and writes
/// what it computed.
fn second_process_launches(folder: &Path) {
    let target = CudaTarget::on_device(0)
        .expect("the GPU is there: the first process used it")
        .with_store(disk_store(&folder.join("store")));
    let device = target.device().expect("a device target").clone();
    let mut second = loader(target);
    let kernel = saxpy();
    let id = id_on(second.target(), &kernel);
    let saxpy = second
        .load(&kernel, &id)
        .expect("saxpy loads from the store");
    let batch = &second.records()[0];
    assert_eq!(batch.count(KernelOutcome::FromStore), 1, "{batch:?}");
    assert_eq!(second.statistics().compiled, 0, "nothing was compiled");
    assert_eq!(
        saxpy.image(),
        LoadedImage::Cubin,
        "the stored cubin loads as it is"
    );
    let a = read_floats(&folder.join("a"))[0];
    let x = read_floats(&folder.join("x"));
    let y = read_floats(&folder.join("y"));
    let output = launch_saxpy(&device, &saxpy, a, &x, &y);
    write_floats(&folder.join("second.out"), &output);
}

// P2
#[test]
fn p2_a_damaged_cubin_in_the_store_is_never_loaded_and_compiles_again() {
    let Some(target) = support::compile_only("P2 with NVRTC") else {
        return;
    };
    let scratch = Scratch::new("damaged");
    let root = scratch.join("store");
    // Every entry a file, so the damage below reaches each copy of the
    // cubin; the packed store's damage tests are the store's own.
    let file_store = || -> std::sync::Arc<dyn kiln_engine::ArtifactStore> {
        let config = kiln_store::StoreConfig {
            pack_below: 0,
            ..kiln_store::StoreConfig::evicting_only_when_asked(&root)
        };
        std::sync::Arc::new(kiln_store::DiskStore::open(config).expect("the store opens"))
    };
    let mut first = loader(target.with_store(file_store()));
    let kernel = saxpy();
    let id = id_on(first.target(), &kernel);
    first.load(&kernel, &id).expect("saxpy loads");
    drop(first);

    // A small artifact's bytes live in its kernel's record as well as in its
    // object, so both are damaged: every copy of the cubin is bad.
    let mut damaged = 0;
    for file in files_under(&root.join("objects"))
        .into_iter()
        .chain(files_under(&root.join("records")))
    {
        let mut bytes = std::fs::read(&file).expect("a store file reads");
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0xff;
        std::fs::write(&file, bytes).expect("a store file writes");
        damaged += 1;
    }
    assert!(damaged > 1, "the store held saxpy's object and records");

    let target = CudaTarget::compile_only(support::ARCHITECTURE)
        .expect("NVRTC opened once already")
        .with_store(file_store());
    let mut second = loader(target);
    second.load(&kernel, &id).expect("saxpy compiles again");
    let batch = &second.records()[0];
    assert_eq!(
        batch.count(KernelOutcome::Compiled),
        1,
        "the damaged entry was a miss: {batch:?}"
    );
    assert!(batch.stored, "and the new artifact took its place");
}

fn files_under(folder: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut folders = vec![folder.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

// P7, L5c
#[test]
fn p7_a_rebuilt_kernel_with_a_new_id_and_the_same_text_takes_the_stored_artifact() {
    let Some(target) = support::compile_only("P7 with NVRTC") else {
        return;
    };
    let scratch = Scratch::new("rekeyed");
    let root = scratch.join("store");
    // Two generated kernels with the same text: ids of two builds of a
    // program whose id scheme changed.
    let generated = |version: u32| {
        CudaKernel::builder(
            KernelId::named("tests.store.rebuilt").parameter(&version),
            "saxpy",
        )
        .generator(|_architecture| Ok(support::SAXPY.to_owned()))
    };
    let (old, new) = (generated(1), generated(2));
    assert_ne!(old.id(), new.id());
    let mut first = loader(target.with_store(disk_store(&root)));
    let old_id = id_on(first.target(), &old);
    first.load(&old, &old_id).expect("the old build loads");
    drop(first);

    let target = CudaTarget::compile_only(support::ARCHITECTURE)
        .expect("NVRTC opened once already")
        .with_store(disk_store(&root));
    let mut second = loader(target);
    let new_id = id_on(second.target(), &new);
    second.load(&new, &new_id).expect("the new build loads");
    let batch = &second.records()[0];
    assert_eq!(
        batch.count(KernelOutcome::Rekeyed),
        1,
        "the text was found in the store: {batch:?}"
    );
    assert_eq!(second.statistics().compiled, 0, "NVRTC was not run");
}

// P1: a store's keys name one architecture.
#[test]
fn a_kernel_asked_for_another_architecture_compiles_without_the_store() {
    let Some(target) = support::compile_only("another architecture") else {
        return;
    };
    let scratch = Scratch::new("other-architecture");
    let root = scratch.join("store");
    let kernel = saxpy();
    let ampere = ArtifactId::new(
        kernel.id(),
        CudaVariant {
            architecture: Architecture::new(8, 0),
        },
    );
    let mut first_target = Some(target);
    target_store::assert_another_architecture_compiles_without_the_store(
        |_round| {
            // The second round is a new target, as a second process has.
            let target = first_target.take().unwrap_or_else(|| {
                CudaTarget::compile_only(support::ARCHITECTURE).expect("NVRTC opened once already")
            });
            loader(target.with_store(disk_store(&root)))
        },
        &kernel,
        &ampere,
        "an sm_80 kernel loads on a compile-only sm_90 target",
    );
}

// L5a, L10: a target without a store stays storeless.
#[test]
fn a_target_without_a_store_keeps_nothing_and_cannot_switch_to_one() {
    let Some(target) = support::compile_only("a storeless target") else {
        return;
    };
    let target = target.with_optional_store(None);
    assert!(target.store().is_none());
    let scratch = Scratch::new("storeless");
    let kernel = saxpy();
    let id = id_on(&target, &kernel);
    target_store::assert_a_storeless_target_keeps_nothing(
        target,
        disk_store(&scratch.join("store")),
        CudaTarget::switch_store,
        loader,
        &kernel,
        &id,
    );
}
