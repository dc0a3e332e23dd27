//! `kiln verify --recompile FRACTION`: a sample of the store's kernels is
//! compiled again from what each was compiled from (kept after its
//! artifact), and the bytes are compared with the stored ones: an entry
//! whose bytes digest right but are not what its recipe compiles to is
//! reported, and the command fails.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use kiln_engine::ArtifactStoreExt;
use kiln_engine::store::decode_value;
use kiln_store::{DiskStore, Entry, Record, StoreConfig};
use kiln_wgpu::WgpuArtifact;
use serde_json::Value;
use support::kernels::{TWO_SPECIALIZATIONS, wgsl_kernels, write_kernel};
use support::{Finished, Scratch, finish, run};

/// A store at `store` warmed with `kernels` WGSL kernels; the scratch
/// folder holding it.
fn warmed(name: &str, kernels: u32) -> (Scratch, PathBuf) {
    let scratch = Scratch::new(name);
    let store = scratch.join("store");
    let folder = scratch.folder("kernels");
    wgsl_kernels(&folder, kernels);
    let warmed = finish(&mut support::warm(&store, &["--backend", "wgpu"], &folder));
    assert!(warmed.status.success(), "{warmed:?}");
    (scratch, store)
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

/// The store at `root`, its two kernels' records and their values.
fn two_kernels(root: &Path) -> (DiskStore, Vec<Record>, [Vec<u8>; 2]) {
    let store = DiskStore::open(StoreConfig::at(root)).expect("the store opens");
    let records = kernel_records(&store);
    assert_eq!(records.len(), 2);
    let bytes = |record: &Record| store.object_bytes(record).expect("the entry is there");
    let values = [bytes(&records[0]), bytes(&records[1])];
    (store, records, values)
}

/// `kiln --json verify --recompile FRACTION ARGUMENTS...` on `store`: the
/// run, and its report.
fn verify(store: &Path, fraction: &str) -> (Finished, Value) {
    let verified = run(store, &["--json", "verify", "--recompile", fraction]);
    let report = serde_json::from_str(&verified.stdout).expect("one JSON value");
    (verified, report)
}

#[test]
fn every_kernel_compiles_again_to_the_bytes_stored() {
    let (_scratch, store) = warmed("recompile-same", 4);
    let (verified, report) = verify(&store, "1");
    assert!(verified.status.success(), "{verified:?}");
    let recompile = &report["recompile"];
    assert_eq!(recompile["sampled"], 4, "{report:#}");
    assert_eq!(recompile["same"], 4, "{report:#}");
    assert_eq!(recompile["no_recipe"], 0, "{report:#}");
    assert_eq!(report["objects"].as_u64().map(|n| n > 0), Some(true));

    let (_, none) = verify(&store, "0");
    assert_eq!(none["recompile"]["sampled"], 0);
    let plain = run(&store, &["--json", "verify"]);
    let plain: Value = serde_json::from_str(&plain.stdout).expect("JSON");
    assert!(plain.get("recompile").is_none(), "{plain:#}");
    let bad = run(&store, &["verify", "--recompile", "2"]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
}

#[test]
fn an_entry_that_is_not_what_its_recipe_compiles_to_is_reported() {
    let (_scratch, root) = warmed("recompile-different", 2);
    {
        // Stored damaged, in a way no digest sees: the first kernel's
        // artifact with the second's recipe after it, put under the
        // second's key.
        let (store, records, [first, second]) = two_kernels(&root);
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
    let (verified, report) = verify(&root, "1");
    assert_eq!(verified.status.code(), Some(3), "{verified:?}");
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
    let (_scratch, root) = warmed("recompile-forged", 2);
    let forged_key = {
        // The first kernel's whole value, recipe and all, put under the
        // second's key: every digest checks out, and the recipe compiles
        // to the bytes it sits beside.
        let (store, records, [first, _]) = two_kernels(&root);
        store.put(&records[1].key, None, &first, Duration::ZERO);
        records[1].key.clone()
    };
    let (verified, report) = verify(&root, "1");
    assert_eq!(verified.status.code(), Some(3), "{verified:?}");
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
    let (again, _) = verify(&root, "1");
    assert!(again.status.success(), "{again:?}");
}

/// `kiln warm --backend BACKEND` on a file of two specializations, then
/// `kiln verify --recompile 1`: both kernels compiled again to the same
/// bytes, unless `compiler` says why there is no compiler here (a skip).
fn compiles_again_to_the_same_bytes<E: ToString>(
    test: &str,
    compiler: Result<impl Sized, E>,
    backend: &str,
    options: &[&str],
) {
    // The compiler is asked for only to know it is here.
    if let Err(reason) = compiler.map(drop) {
        kiln_engine::conformance::skip(test, &reason.to_string());
        return;
    }
    let scratch = Scratch::new(&format!("recompile-{backend}"));
    let store = scratch.join("store");
    let folder = scratch.folder("kernels");
    write_kernel(&folder, "scale.cu", TWO_SPECIALIZATIONS);
    let mut arguments = vec!["--backend", backend];
    arguments.extend_from_slice(options);
    let warmed = finish(&mut support::warm(&store, &arguments, &folder));
    assert!(warmed.status.success(), "{warmed:?}");
    let (verified, report) = verify(&store, "1");
    assert!(verified.status.success(), "{verified:?}");
    let recompiled = &report["recompile"];
    assert_eq!(recompiled["sampled"], 2, "{recompiled:#}");
    assert_eq!(recompiled["same"], 2, "{recompiled:#}");
}

#[test]
fn nvrtc_compiles_a_kernel_again_to_the_same_bytes() {
    compiles_again_to_the_same_bytes(
        "nvrtc_compiles_a_kernel_again_to_the_same_bytes",
        kiln_cuda::CudaCompiler::new(),
        "cuda",
        &[],
    );
}

#[test]
fn hiprtc_compiles_a_kernel_again_to_the_same_bytes() {
    compiles_again_to_the_same_bytes(
        "hiprtc_compiles_a_kernel_again_to_the_same_bytes",
        kiln_hip::HipCompiler::new(),
        "hip",
        &["--hip-arch", "gfx90a"],
    );
}
