//! `kiln manifest` end to end (R5): the manifest written from a program's
//! profile and the store, read by two "ranks" (loaders on the same store),
//! which decide alike: the listed kernels load from the store without a
//! compile, an unlisted one answers the fallback on both and compiles in
//! the background.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kiln_engine::fake::{FakeKernel, FakeTarget};
use kiln_engine::profile::Program;
use kiln_engine::{ArtifactStore, JobManifest, KernelLoader, KernelOutcome, LoaderConfig};
use kiln_store::{DiskStore, StoreConfig};
use support::{Scratch, run};

fn loader(root: &Path) -> KernelLoader<FakeTarget> {
    let store: Arc<dyn ArtifactStore> =
        Arc::new(DiskStore::open(StoreConfig::at(root)).expect("the store opens"));
    KernelLoader::with_config(
        FakeTarget::on_store(store),
        LoaderConfig {
            profile: false,
            ..LoaderConfig::default()
        },
    )
}

#[test]
fn r5_every_rank_decides_alike_from_the_job_s_manifest() {
    let scratch = Scratch::new("job-manifest");
    let root = scratch.join("store");
    {
        let store: Arc<dyn ArtifactStore> =
            Arc::new(DiskStore::open(StoreConfig::at(&root)).expect("the store opens"));
        let mut first =
            KernelLoader::with_config(FakeTarget::on_store(store), LoaderConfig::default())
                .with_profile(Program::named("trainer"));
        for number in 0..=3 {
            let kernel = FakeKernel::new(number);
            first.load(&kernel, &kernel.artifact_id()).expect("loads");
        }
    }
    let path = scratch.join("job.manifest");
    let written = run(
        &root,
        &[
            "--json",
            "manifest",
            "--profile",
            "trainer",
            "--out",
            path.to_str().expect("text"),
        ],
    );
    assert!(written.status.success(), "{written:?}");
    assert_eq!(
        written.json()["manifests"][0]["kernels"],
        4,
        "{}",
        written.stdout
    );
    let manifest =
        JobManifest::from_bytes(&std::fs::read(&path).expect("written")).expect("a manifest");
    assert_eq!(manifest.kernels.len(), 4);

    let unlisted = FakeKernel::new(7).sleeping(Duration::from_millis(200));
    let fallback = FakeKernel::new(0).artifact_id();
    for rank in 0..2 {
        let mut loader = loader(&root).with_manifest(&manifest);
        for number in 0..=3 {
            let kernel = FakeKernel::new(number);
            let loaded = loader
                .load_listed(&kernel, &kernel.artifact_id(), &fallback)
                .expect("listed: from the store");
            assert_eq!(loaded.kernel, kernel.artifact_id().kernel);
        }
        let served = loader
            .load_listed(&unlisted, &unlisted.artifact_id(), &fallback)
            .expect("the fallback");
        assert_eq!(
            served.kernel, fallback.kernel,
            "rank {rank}: not listed, the fallback"
        );
        let health = loader.statistics().health;
        assert_eq!(health.request_path_compiles, 0, "rank {rank}: {health:?}");
        let waited: usize = loader
            .records()
            .iter()
            .filter(|record| !record.background)
            .map(|record| record.count(KernelOutcome::Compiled))
            .sum();
        assert_eq!(waited, 0, "rank {rank}: the listed kernels are store hits");
        assert!(loader.wait_for_background(Duration::from_secs(30)));
    }
}
