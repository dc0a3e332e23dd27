//! The request path's health in `kiln stats` and `kiln records` (R3): a
//! program that waited on one compile and left the rest to a background
//! batch, read after it ended by another process.

mod support;

use std::sync::Arc;
use std::time::Duration;

use kiln_engine::fake::{FakeKernel, FakeTarget};
use kiln_engine::{ArtifactStore, KernelLoader, LoaderConfig, WorkerMode};
use kiln_store::{DiskStore, StoreConfig};
use support::{Scratch, run};

#[test]
fn r3_stats_and_records_show_request_path_compiles_fallback_loads_and_background_batches() {
    let scratch = Scratch::new("health");
    let root = scratch.join("store");
    {
        let store: Arc<dyn ArtifactStore> =
            Arc::new(DiskStore::open(StoreConfig::at(&root)).expect("the store opens"));
        let mut loader = KernelLoader::with_config(
            FakeTarget::on_store(store),
            LoaderConfig {
                profile: false,
                ..LoaderConfig::default()
            },
        )
        .with_worker_mode(WorkerMode::Threads);
        let fallback = FakeKernel::new(0).sleeping(Duration::from_millis(5));
        let fallback_id = fallback.artifact_id();
        loader.load(&fallback, &fallback_id).expect("compiles");
        for number in 1..=3 {
            let kernel = FakeKernel::new(number).sleeping(Duration::from_millis(5));
            loader
                .load_or(&kernel, &kernel.artifact_id(), &fallback_id)
                .expect("the fallback is loaded");
        }
        assert!(loader.wait_for_background(Duration::from_secs(30)));
    }

    let records = run(&root, &["--json", "records"]);
    assert!(records.status.success(), "{records:?}");
    let batches = records.json();
    let batches = batches.as_array().expect("an array");
    assert!(
        batches
            .iter()
            .any(|batch| batch["background"] == true && batch["compiled"] == 3),
        "{batches:#?}"
    );
    let waited = batches
        .iter()
        .find(|batch| batch["background"] == false)
        .expect("the fallback's batch");
    assert_eq!(waited["request_path_compiles"], 1);

    let stats = run(&root, &["--json", "stats"]).json();
    let health = &stats["health"];
    assert_eq!(health["request_path_compiles"], 1, "{stats:#}");
    assert_eq!(health["fallback_loads"], 3, "{stats:#}");
    assert_eq!(health["background_batches"], 1, "{stats:#}");
    assert_eq!(health["processes"], 1);

    let table = run(&root, &["stats"]);
    assert!(
        table.stdout.contains("1 request-path compiles"),
        "{}",
        table.stdout
    );
    let table = run(&root, &["records"]);
    assert!(table.stdout.contains("background"), "{}", table.stdout);
    assert!(table.stdout.contains("request path:"), "{}", table.stdout);
}
