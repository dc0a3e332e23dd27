//! `kiln verify --recompile FRACTION`: a sample of the store's kernels is
//! compiled again from what each was compiled from (kept after its
//! artifact), and the bytes are compared with the stored ones: an entry
//! whose bytes digest right but are not what its recipe compiles to is
//! reported, and the command fails.

mod support;

use std::path::Path;
use std::time::Duration;

use kiln_engine::ArtifactStore;
use kiln_engine::store::decode_value;
use kiln_store::{DiskStore, Entry, Record, StoreConfig};
use kiln_wgpu::WgpuArtifact;
use serde_json::Value;
use support::{Scratch, finish, kiln, run, wgsl_kernel};

fn warm(store: &Path, folder: &Path) {
    let warmed = finish(
        kiln(store, &["--json", "warm", "--backend", "wgpu"])
            .arg(folder)
            .env("MESA_SHADER_CACHE_DIR", store.with_extension("mesa")),
    );
    assert!(warmed.status.success(), "{warmed:?}");
}

fn kernel_records(store: &DiskStore) -> Vec<Record> {
    let mut records = Vec::new();
    store
        .entries(&mut |entry| {
            if let Entry::Record(record) = entry.entry
                && record.key.kernel().is_some()
            {
                records.push(record);
            }
        })
        .expect("the entries");
    records.sort_by_key(|record| record.key.digest());
    records
}

fn bytes(store: &DiskStore, record: &Record) -> Vec<u8> {
    store.object_bytes(record).expect("the entry is there")
}

#[test]
fn every_kernel_compiles_again_to_the_bytes_stored() {
    let scratch = Scratch::new("recompile-same");
    let store = scratch.join("store");
    let folder = scratch.folder("kernels");
    for value in 0..4 {
        std::fs::write(folder.join(format!("k{value}.wgsl")), wgsl_kernel(value))
            .expect("a kernel file");
    }
    warm(&store, &folder);
    let verified = run(&store, &["--json", "verify", "--recompile", "1"]);
    assert!(verified.status.success(), "{verified:?}");
    let report: Value = serde_json::from_str(&verified.stdout).expect("JSON");
    let recompile = &report["recompile"];
    assert_eq!(recompile["sampled"], 4, "{report:#}");
    assert_eq!(recompile["same"], 4, "{report:#}");
    assert_eq!(recompile["no_recipe"], 0, "{report:#}");
    assert_eq!(report["objects"].as_u64().map(|n| n > 0), Some(true));

    let none = run(&store, &["--json", "verify", "--recompile", "0"]);
    let none: Value = serde_json::from_str(&none.stdout).expect("JSON");
    assert_eq!(none["recompile"]["sampled"], 0);
    let plain = run(&store, &["--json", "verify"]);
    let plain: Value = serde_json::from_str(&plain.stdout).expect("JSON");
    assert!(plain.get("recompile").is_none(), "{plain:#}");
    let bad = run(&store, &["verify", "--recompile", "2"]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
}

#[test]
fn an_entry_that_is_not_what_its_recipe_compiles_to_is_reported() {
    let scratch = Scratch::new("recompile-different");
    let root = scratch.join("store");
    let folder = scratch.folder("kernels");
    for value in 0..2 {
        std::fs::write(folder.join(format!("k{value}.wgsl")), wgsl_kernel(value))
            .expect("a kernel file");
    }
    warm(&root, &folder);
    {
        // Stored damaged, in a way no digest sees: the first kernel's
        // artifact with the second's recipe after it, put under the
        // second's key.
        let store = DiskStore::open(StoreConfig::at(&root)).expect("the store opens");
        let records = kernel_records(&store);
        assert_eq!(records.len(), 2);
        let first = bytes(&store, &records[0]);
        let second = bytes(&store, &records[1]);
        let first_artifact = decode_value::<WgpuArtifact>(&first)
            .expect("an artifact")
            .artifact_bytes
            .len();
        let second_artifact = decode_value::<WgpuArtifact>(&second)
            .expect("an artifact")
            .artifact_bytes
            .len();
        assert!(second.len() > second_artifact, "a recipe was kept");
        let mut damaged = first[..first_artifact].to_vec();
        damaged.extend_from_slice(&second[second_artifact..]);
        store.put(&records[1].key, None, &damaged, Duration::ZERO);
    }
    let plain = run(&root, &["verify"]);
    assert!(plain.status.success(), "its digest is right: {plain:?}");
    let verified = run(&root, &["--json", "verify", "--recompile", "1"]);
    assert_eq!(verified.status.code(), Some(3), "{verified:?}");
    let report: Value = serde_json::from_str(&verified.stdout).expect("one JSON value");
    let different = report["recompile"]["different"].as_array().expect("a list");
    assert_eq!(different.len(), 1, "{report:#}");
    assert_eq!(report["recompile"]["same"], 1, "{report:#}");
    let human = run(&root, &["verify", "--recompile", "1"]);
    assert_eq!(human.status.code(), Some(3), "{human:?}");
    assert!(human.stdout.contains("other bytes: warm/k"), "{human:?}");
    assert!(
        human.stderr.contains("not deterministic"),
        "the failure says what it means: {human:?}"
    );
}

// P2
#[test]
fn a_record_naming_another_kernels_artifact_is_named_and_removed() {
    let scratch = Scratch::new("recompile-forged");
    let root = scratch.join("store");
    let folder = scratch.folder("kernels");
    for value in 0..2 {
        std::fs::write(folder.join(format!("k{value}.wgsl")), wgsl_kernel(value))
            .expect("a kernel file");
    }
    warm(&root, &folder);
    let forged_key = {
        // The first kernel's whole value, recipe and all, put under the
        // second's key: every digest checks out, and the recipe compiles
        // to the bytes it sits beside.
        let store = DiskStore::open(StoreConfig::at(&root)).expect("the store opens");
        let records = kernel_records(&store);
        assert_eq!(records.len(), 2);
        let first = bytes(&store, &records[0]);
        store.put(&records[1].key, None, &first, Duration::ZERO);
        records[1].key.clone()
    };
    let verified = run(&root, &["--json", "verify", "--recompile", "1"]);
    assert_eq!(verified.status.code(), Some(3), "{verified:?}");
    let report: Value = serde_json::from_str(&verified.stdout).expect("one JSON value");
    let named = report["recompile"]["other_key"].as_array().expect("a list");
    assert_eq!(named.len(), 1, "{report:#}");
    assert!(
        named[0]["note"]
            .as_str()
            .is_some_and(|note| note.contains("record removed")),
        "{report:#}"
    );
    assert_eq!(report["recompile"]["same"], 1, "{report:#}");
    assert!(
        verified.stderr.contains("another kernel's artifact"),
        "{}",
        verified.stderr
    );
    let store = DiskStore::open(StoreConfig::at(&root)).expect("the store opens");
    assert!(
        !kernel_records(&store)
            .iter()
            .any(|record| record.key == forged_key),
        "the forged record is gone"
    );
    let again = run(&root, &["--json", "verify", "--recompile", "1"]);
    assert!(again.status.success(), "{again:?}");
}

/// `kiln warm --backend BACKEND` on a file of two specializations, then
/// `kiln verify --recompile 1`: the JSON report's recompile part.
fn recompiled_cxx(name: &str, backend: &str, options: &[&str]) -> Value {
    let scratch = Scratch::new(name);
    let store = scratch.join("store");
    let folder = scratch.folder("kernels");
    std::fs::write(
        folder.join("scale.cu"),
        "// kiln entry: scale\n// kiln specialize: SCALE_BY=2\n// kiln specialize: SCALE_BY=3\n\
         extern \"C\" __global__ void scale(float* x) { x[threadIdx.x] *= SCALE_BY; }\n",
    )
    .expect("a kernel file");
    let warmed = finish(
        kiln(&store, &["--json", "warm", "--backend", backend])
            .args(options)
            .arg(&folder),
    );
    assert!(warmed.status.success(), "{warmed:?}");
    let verified = run(&store, &["--json", "verify", "--recompile", "1"]);
    let report: Value = serde_json::from_str(&verified.stdout).expect("JSON");
    assert!(verified.status.success(), "{verified:?}");
    report["recompile"].clone()
}

#[test]
fn nvrtc_compiles_a_kernel_again_to_the_same_bytes() {
    if let Err(reason) = kiln_cuda::CudaCompiler::new() {
        kiln_engine::conformance::skip(
            "nvrtc_compiles_a_kernel_again_to_the_same_bytes",
            &reason.to_string(),
        );
        return;
    }
    let recompiled = recompiled_cxx("recompile-cuda", "cuda", &[]);
    assert_eq!(recompiled["sampled"], 2, "{recompiled:#}");
    assert_eq!(recompiled["same"], 2, "{recompiled:#}");
}

#[test]
fn hiprtc_compiles_a_kernel_again_to_the_same_bytes() {
    if let Err(reason) = kiln_hip::HipCompiler::new() {
        kiln_engine::conformance::skip(
            "hiprtc_compiles_a_kernel_again_to_the_same_bytes",
            &reason.to_string(),
        );
        return;
    }
    let recompiled = recompiled_cxx("recompile-hip", "hip", &["--hip-arch", "gfx90a"]);
    assert_eq!(recompiled["sampled"], 2, "{recompiled:#}");
    assert_eq!(recompiled["same"], 2, "{recompiled:#}");
}
