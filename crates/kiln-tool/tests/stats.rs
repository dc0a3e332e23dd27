//! `kiln stats`: the hits, misses, compiles and failures of every process
//! that used the store, per backend, kept across processes like
//! `ccache -s`, and `--zero`.

mod support;

use std::sync::Arc;

use kiln_engine::fake::{FakeKernel, FakeTarget};
use kiln_engine::{KernelLoader, LoaderConfig};
use kiln_store::{DiskStore, StoreConfig};
use support::{Scratch, backend, finish, kiln, run, wgsl_kernel};

// S4: reading the totals writes nothing: `stats` and `ls` where no store
// is make none, and say so (as `ccache -s` does).
#[test]
fn stats_and_ls_on_a_missing_store_create_nothing_and_say_so() {
    let scratch = Scratch::new("stats-missing");
    let missing = scratch.join("nowhere").join("store");
    let empty = scratch.folder("empty");
    for store in [&missing, &empty] {
        for command in ["stats", "ls"] {
            let human = run(store, &[command]);
            assert!(human.status.success(), "{command}: {human:?}");
            assert!(
                human.stdout.contains("no store at") && human.stdout.contains("yet"),
                "{command}: {human:?}"
            );
            let json = run(store, &["--json", command]).succeeded_json();
            assert_eq!(json["exists"], false, "{command}: {json:#}");
            assert_eq!(json["root"], store.display().to_string(), "{command}");
        }
    }
    assert!(!missing.exists(), "no folder was made");
    assert!(!scratch.join("nowhere").exists(), "nor its parent");
    let left: Vec<_> = std::fs::read_dir(&empty)
        .expect("the empty folder")
        .map(|entry| entry.expect("an entry").file_name())
        .collect();
    assert!(left.is_empty(), "nothing was written into it: {left:?}");
}

// P3: a store kiln makes is tagged as a cache (https://bford.info/cachedir/),
// so backup tools skip it; a store it opens again is left as it is (a tag
// the user removed stays removed).
#[test]
fn a_store_kiln_creates_carries_a_cache_directory_tag() {
    let scratch = Scratch::new("stats-cachedir");
    let store = scratch.join("store");
    DiskStore::open(StoreConfig::at(&store)).expect("a new store");
    let tag = std::fs::read_to_string(store.join("CACHEDIR.TAG")).expect("a tag");
    assert!(
        tag.starts_with("Signature: 8a477f597d28d172789f06886806bc55"),
        "{tag:?}"
    );
    let stats = run(&store, &["--json", "stats"]).succeeded_json();
    assert_eq!(stats["entries"], 0, "the tag is no entry: {stats:#}");
    let verify = run(&store, &["verify"]);
    assert!(
        verify.status.success(),
        "the tag is the store's: {verify:?}"
    );
    assert!(store.join("CACHEDIR.TAG").exists(), "verify keeps it");
    std::fs::remove_file(store.join("CACHEDIR.TAG")).expect("removes the tag");
    DiskStore::open(StoreConfig::at(&store)).expect("the store again");
    assert!(
        !store.join("CACHEDIR.TAG").exists(),
        "only a new store is tagged"
    );
}

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
    assert_eq!(stats["exists"], false, "no store yet: {stats:#}");
    assert!(!store.exists(), "stats made no store");

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
        LoaderConfig {
            profile: false,
            ..LoaderConfig::default()
        },
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

// L12, S4: the kernels a warm-start profile loads are store hits that
// `kiln stats` counts in its hit rate and `kiln records` shows, in the
// record the profile's load keeps.
#[test]
fn l12_a_profiles_hits_are_counted_in_stats_and_shown_in_records() {
    let scratch = Scratch::new("stats-profile");
    let store = scratch.join("store");
    let kernels: Vec<FakeKernel> = (0..4).map(FakeKernel::new).collect();
    // The second process keeps its loader to the end (it is never
    // dropped): its profile's hits count all the same.
    let profiled = |asked: &[FakeKernel], keep: bool| {
        let opened = DiskStore::open(StoreConfig::at(&store)).expect("opens");
        let mut loader = KernelLoader::with_config(
            FakeTarget::on_store(Arc::new(opened)),
            LoaderConfig::default(),
        )
        .with_profile(kiln_engine::profile::Program::named("profiled-program"));
        for kernel in asked {
            loader.load(kernel, &kernel.artifact_id()).expect("loads");
        }
        let statistics = loader.statistics();
        if keep {
            std::mem::forget(loader);
        }
        statistics
    };
    let first = profiled(&kernels, false);
    assert_eq!((first.compiled, first.profile_hits), (4, 0));
    let next = profiled(&kernels[..1], true);
    assert_eq!(next.profile_hits, 4, "{next:?}");

    let stats = run(&store, &["--json", "stats"]).succeeded_json();
    let fake = backend(&stats["activity"], "fake");
    assert_eq!(fake["profile_hits"], 4, "{stats:#}");
    assert_eq!(fake["hits"], 4, "{stats:#}");
    assert_eq!(fake["hit_rate"], 0.5, "4 found of 8 asked: {stats:#}");
    let table = run(&store, &["stats"]).stdout;
    assert!(table.contains("PROFILE"), "{table}");

    let records = run(&store, &["--json", "records"]).succeeded_json();
    let batches = records.as_array().expect("an array");
    assert!(
        batches
            .iter()
            .any(|batch| batch["profile_hits"] == 4 && batch["from_store"] == 4),
        "{records:#}"
    );
    let table = run(&store, &["records"]).stdout;
    assert!(table.contains("PROFILE"), "{table}");
}
