//! `kiln stats`: the hits, misses, compiles and failures of every process
//! that used the store, per backend, kept across processes like
//! `ccache -s`, and `--zero`.

mod support;

use std::sync::Arc;

use kiln_core::fake::{FakeKernel, FakeTarget};
use kiln_core::{KernelLoader, LoaderConfig};
use kiln_store::{DiskStore, StoreConfig};
use support::{Scratch, backend, finish, kiln, run, wgsl_kernel};

// S4, P11
#[test]
fn stats_counts_the_runs_of_every_process_and_zero_starts_again() {
    let scratch = Scratch::new("stats-activity");
    let folder = scratch.folder("kernels");
    for number in 0..3 {
        std::fs::write(folder.join(format!("k{number}.wgsl")), wgsl_kernel(number))
            .expect("a kernel file");
    }
    std::fs::write(
        folder.join("broken.wgsl"),
        "@compute @workgroup_size(1) fn main() { let x = 1.0 + ; }\n",
    )
    .expect("a kernel file");
    let store = scratch.join("store");
    let stats = run(&store, &["--json", "stats"]).succeeded_json();
    assert_eq!(stats["activity"]["since"], 0, "nothing yet: {stats:#}");

    for _ in 0..2 {
        let warm = finish(kiln(&store, &["--json", "warm"]).arg(&folder));
        assert_eq!(
            warm.status.code(),
            Some(3),
            "a kernel failed: {}",
            warm.stderr
        );
    }
    let stats = run(&store, &["--json", "stats"]).succeeded_json();
    let wgpu = backend(&stats["activity"], "wgpu");
    assert_eq!(wgpu["compiles"], 3, "compiled by the first run: {stats:#}");
    assert_eq!(wgpu["hits"], 3, "found by the second: {stats:#}");
    assert_eq!(wgpu["misses"], 4, "the first run's: {stats:#}");
    assert_eq!(wgpu["failures"], 1, "{stats:#}");
    assert_eq!(
        wgpu["failures_remembered"], 1,
        "the second run did not compile the broken kernel again: {stats:#}"
    );
    assert_eq!(wgpu["hit_rate"], 3.0 / 7.0, "{stats:#}");
    assert!(wgpu["compile_seconds"].as_f64().is_some_and(|s| s > 0.0));
    assert!(wgpu["saved_seconds"].as_f64().is_some_and(|s| s > 0.0));

    // A library user's process counts in the same totals.
    let opened = DiskStore::open(StoreConfig::at(&store)).expect("opens");
    let mut loader = KernelLoader::with_config(
        FakeTarget::on_store(Arc::new(opened)),
        LoaderConfig::default(),
    );
    let kernel = FakeKernel::new(7);
    loader.load(&kernel, &kernel.artifact_id()).expect("loads");
    drop(loader);
    let stats = run(&store, &["--json", "stats"]).succeeded_json();
    assert_eq!(
        backend(&stats["activity"], "fake")["compiles"],
        1,
        "{stats:#}"
    );
    let table = run(&store, &["stats"]).stdout;
    assert!(
        table.contains("HIT RATE") && table.lines().any(|line| line.starts_with("wgpu")),
        "{table}"
    );

    let zeroed = run(&store, &["--json", "stats", "--zero"]).succeeded_json();
    assert_eq!(zeroed["zeroed"], true);
    let stats = run(&store, &["--json", "stats"]).succeeded_json();
    assert_eq!(
        stats["activity"]["backends"].as_array().map(Vec::len),
        Some(0),
        "{stats:#}"
    );
    assert!(
        stats["entries"]
            .as_u64()
            .is_some_and(|entries| entries >= 4),
        "kept: {stats:#}"
    );
}
