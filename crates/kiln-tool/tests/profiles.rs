//! `kiln profiles` through the real binary (L12): the profile a program's
//! run left in the store is listed, and forgotten, after which its next
//! start loads nothing ahead.

mod support;

use std::sync::Arc;

use kiln_engine::fake::{FakeKernel, FakeTarget};
use kiln_engine::profile::Program;
use kiln_engine::{ArtifactStore, KernelLoader, LoaderConfig};
use kiln_store::{DiskStore, StoreConfig};
use support::{Scratch, run};

/// A run of `program` on the store at `root` that launches kernels
/// `numbers`; returns how many kernels were on the device after its first
/// launch.
fn start(root: &std::path::Path, program: &str, numbers: std::ops::Range<u32>) -> usize {
    let store: Arc<dyn ArtifactStore> =
        Arc::new(DiskStore::open(StoreConfig::at(root)).expect("the store opens"));
    let mut loader =
        KernelLoader::with_config(FakeTarget::on_store(store), LoaderConfig::default())
            .with_profile(Program::named(program));
    let mut after_first = 0;
    for number in numbers {
        let kernel = FakeKernel::new(number);
        loader.load(&kernel, &kernel.artifact_id()).expect("loads");
        if after_first == 0 {
            after_first = loader.target().loaded();
        }
    }
    after_first
}

// L12
#[test]
fn profiles_are_listed_and_forgotten() {
    let scratch = Scratch::new("profiles");
    let root = scratch.join("store");
    assert_eq!(start(&root, "server", 0..6), 1);
    assert_eq!(
        start(&root, "server", 0..6),
        6,
        "the second start loads all six ahead"
    );
    assert_eq!(start(&root, "trainer", 10..12), 1);

    let listed = run(&root, &["--json", "profiles"]).succeeded_json();
    let profiles = listed.as_array().expect("an array of profiles");
    assert_eq!(profiles.len(), 2, "{listed:#}");
    let server = &profiles[0];
    assert_eq!(server["program"], "server");
    assert_eq!(server["backend"], "fake");
    assert_eq!(
        (server["kernels"].as_u64(), server["runs"].as_u64()),
        (Some(6), Some(2))
    );
    assert_eq!(server["asked_last_run"], 6);

    let forgotten = run(&root, &["--json", "profiles", "server", "--forget"]).succeeded_json();
    assert_eq!(forgotten["forgotten"][0], "server on fake fake_1");
    let left = run(&root, &["profiles"]).stdout.clone();
    assert!(
        left.contains("trainer") && !left.contains("server"),
        "{left}"
    );
    assert_eq!(start(&root, "server", 0..6), 1, "forgotten: nothing ahead");
}
