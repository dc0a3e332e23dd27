//! `kiln coverage` end to end (R4): a program's warm-start profile, or a
//! list of kernel ids, against a store and against a bundle exported from
//! another store; `--require` refuses a pack below it with exit code 5.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kiln_engine::fake::{FakeKernel, FakeTarget};
use kiln_engine::profile::Program;
use kiln_engine::{ArtifactStore, Kernel, KernelLoader, LoaderConfig};
use kiln_store::{DiskStore, StoreConfig};
use support::{Scratch, run};

/// A run of `program` on the store at `root` that loads kernels
/// `numbers`, each taking a little compiling; its profile is kept.
fn serve(root: &Path, program: &str, numbers: std::ops::RangeInclusive<u32>) {
    let store: Arc<dyn ArtifactStore> =
        Arc::new(DiskStore::open(StoreConfig::at(root)).expect("the store opens"));
    let mut loader =
        KernelLoader::with_config(FakeTarget::on_store(store), LoaderConfig::default())
            .with_profile(Program::named(program));
    for number in numbers {
        let kernel = FakeKernel::new(number).sleeping(Duration::from_millis(30));
        loader.load(&kernel, &kernel.artifact_id()).expect("loads");
    }
}

#[test]
fn r4_coverage_of_a_profile_and_of_ids_against_a_store_and_a_bundle() {
    let scratch = Scratch::new("coverage");
    let store = scratch.join("store");
    let partial = scratch.join("partial");
    let bundle = scratch.join("partial.kiln");
    serve(&store, "server", 1..=4);
    serve(&partial, "other", 1..=2);
    let exported = run(&partial, &["export", bundle.to_str().expect("a text path")]);
    assert!(exported.status.success(), "{exported:?}");

    let whole = run(
        &store,
        &[
            "--json",
            "coverage",
            "--profile",
            "server",
            "--require",
            "100",
        ],
    );
    assert!(whole.status.success(), "{whole:?}");
    let report = whole.json();
    assert_eq!(report["needed"], 4, "{report:#}");
    assert_eq!(report["present"], 4);
    assert_eq!(report["percent"], 100.0);
    assert_eq!(report["compared_with"], "store");
    assert!(
        report["present_compile_seconds"].as_f64().unwrap_or(0.0) >= 0.1,
        "{report:#}"
    );

    let against_bundle = run(
        &store,
        &[
            "--json",
            "coverage",
            "--profile",
            "server",
            "--bundle",
            bundle.to_str().expect("a text path"),
            "--require",
            "90",
        ],
    );
    assert_eq!(against_bundle.status.code(), Some(5), "{against_bundle:?}");
    let report = against_bundle.json();
    assert_eq!(
        (report["present"].as_u64(), report["missing"].as_u64()),
        (Some(2), Some(2)),
        "{report:#}"
    );
    assert_eq!(report["compared_with"], "bundle");
    let missing: Vec<&serde_json::Value> = report["kernels"]
        .as_array()
        .expect("kernels")
        .iter()
        .filter(|kernel| kernel["present"] == false)
        .collect();
    assert!(
        missing
            .iter()
            .all(|kernel| kernel["compile_seconds"].as_f64().unwrap_or(0.0) >= 0.03),
        "the seconds recorded for them: {missing:#?}"
    );
    assert!(
        against_bundle.stderr.contains("below the 90 % required"),
        "{against_bundle:?}"
    );

    let table = run(
        &store,
        &[
            "coverage",
            "--profile",
            "server",
            "--bundle",
            bundle.to_str().expect("text"),
        ],
    );
    assert!(table.status.success(), "no --require: {table:?}");
    assert!(
        table.stdout.contains("2 of 4 needed kernels present"),
        "{}",
        table.stdout
    );
    assert!(table.stdout.contains("missing: 2"), "{}", table.stdout);

    let ids = scratch.join("ids.txt");
    std::fs::write(
        &ids,
        format!(
            "# from a compile-only run\n{} one\n{}\n",
            FakeKernel::new(1).id().digest_hex(),
            FakeKernel::new(9).id().digest_hex()
        ),
    )
    .expect("written");
    let listed = run(
        &store,
        &[
            "--json",
            "coverage",
            "--ids",
            ids.to_str().expect("text"),
            "--require",
            "50",
        ],
    );
    assert!(listed.status.success(), "{listed:?}");
    let report = listed.json();
    assert_eq!(
        (report["needed"].as_u64(), report["present"].as_u64()),
        (Some(2), Some(1)),
        "{report:#}"
    );

    let unknown = run(&store, &["coverage", "--profile", "nobody"]);
    assert_eq!(unknown.status.code(), Some(1), "{unknown:?}");
    assert!(unknown.stderr.contains("kiln profiles"), "{unknown:?}");
}
