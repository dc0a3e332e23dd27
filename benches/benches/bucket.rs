//! F6's bucket rows (P16), on a real S3 server (Garage, single node on
//! loopback) behind the loopback latency proxy the fleet tests use:
//!
//! - **Cold** (`bucket_cold_alone`, `bucket_cold_rtt`): one node with an
//!   empty disk store and an empty bucket prefix loads K kernels (default
//!   64), compiling them all; with no remote tier, then with the bucket
//!   0, 50 and 200 ms away (`KILN_BENCH_BUCKET_RTTS`, in ms; at 0 the
//!   proxy's and the server's own cost). Goal: within
//!   1.2 × (no remote + [`COLD_STEPS`] round trips).
//! - **Warm** (`bucket_warm_rtt`, `bucket_local_warm`): a node with an
//!   empty disk store loading the K kernels a cold node left in the
//!   bucket, against the cold node loading them again from its own disk.
//!   Goal: within 2 × local warm + one round trip.
//! - **A round trip** (`bucket_round_trip`): one GET of a small object
//!   through the proxy, on a connection already open, the median of 20:
//!   the proxy delays each piece of an answer by half the round trip, and
//!   Garage sends a GET's head and body apart, so one GET through it takes
//!   about 1.5 × the proxy's round trip. The goals use this measured time.
//!
//! Every node is a fresh process (this binary again), timed from its
//! loader's creation until every kernel is loaded; its note counts the
//! bucket's calls and HTTP requests during the batch, and those of the
//! flush after it (the cold node's puts, off the launch path). The
//! compiler is the fake one sleeping `KILN_BENCH_FLEET_COMPILE_MS` (20 ms)
//! per kernel, on `KILN_BENCH_FLEET_WORKERS` workers (2). Rows run
//! `KILN_BENCH_BUCKET_RUNS` times (3), interleaved; medians are printed.
//! Skips, saying why, without Garage (`cargo xtask setup` builds it).
//!
//! ```text
//! cargo bench -p kiln-benches --bench bucket
//! ```

use std::num::NonZeroUsize;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_benches::{BenchRecord, append_record, cores};
use kiln_bucket::{BucketStore, BucketTier};
use kiln_engine::fake::{FakeKernel, FakeTarget};
use kiln_engine::{ArtifactStore, KernelLoader, KernelOutcome, LoaderConfig};
use kiln_test_support::redis::LatencyProxy;

#[path = "../../crates/kiln-bucket/tests/support/mod.rs"]
mod garage;

/// Set on a node: its disk store's root.
const NODE_ROOT: &str = "KILN_BENCH_BUCKET_NODE";
/// Set on a node: the case it runs in, which names its record.
const NODE_CASE: &str = "KILN_BENCH_BUCKET_CASE";

/// The calls a cold node must make to the bucket before its last kernel
/// loads, each a round trip (its requests go out together): the batch's
/// lookup of its entries, and of the lowered sources (the failure
/// memories of the kernels the bucket lacks are read beside the latter,
/// in the background). The puts go from the writer's queue, off the
/// launch path.
const COLD_STEPS: u32 = 2;

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(default)
}

fn kernels() -> u32 {
    setting("KILN_BENCH_BUCKET", 64) as u32
}

fn main() {
    if let Some(root) = std::env::var_os(NODE_ROOT) {
        node(Path::new(&root));
        return;
    }
    // Criterion's arguments (`--bench`) are not this benchmark's.
    let server = match garage::Garage::start("bucket-bench") {
        Ok(server) => server,
        Err(why) => {
            eprintln!("bucket: skipped, no S3 server: {why}");
            return;
        }
    };
    let key = kiln_remote::keygen::fleet_key()
        .expect("the operating system gives randomness")
        .secret_text();
    rows(&server, &key);
}

/// One node: loads every kernel in one batch on its disk store, behind
/// the bucket when `KILN_REMOTE_URL` names one, and prints its record.
fn node(root: &Path) {
    let case = std::env::var(NODE_CASE).unwrap_or_default();
    let disk = kiln_benches::disk_store(root);
    let bucket = BucketStore::from_env().expect("the bucket's settings read");
    let tier = bucket.map(|bucket| BucketTier::new(Arc::new(disk.clone()), bucket));
    let store: Arc<dyn ArtifactStore> = match &tier {
        Some(tier) => Arc::new(tier.clone()),
        None => Arc::new(disk),
    };
    let started = Instant::now();
    let mut loader = KernelLoader::with_config(
        FakeTarget::on_store(store),
        LoaderConfig {
            parallelism: NonZeroUsize::new(setting("KILN_BENCH_FLEET_WORKERS", 2).max(1) as usize)
                .expect("at least one worker"),
            ..LoaderConfig::default()
        },
    )
    .without_profile();
    let compile = Duration::from_millis(setting("KILN_BENCH_FLEET_COMPILE_MS", 20));
    for number in 0..kernels() {
        loader.enqueue(Box::new(FakeKernel::new(number).sleeping(compile)), ());
    }
    loader.compile_queued();
    let wall = started.elapsed();
    let batch = loader.records().back().expect("a batch").clone();
    let during = tier.as_ref().map(|tier| tier.bucket().bucket_statistics());
    let flushing = Instant::now();
    let flushed = tier
        .as_ref()
        .map(|tier| tier.flush(Duration::from_secs(60)));
    let flush = flushing.elapsed();
    let after = tier.as_ref().map(|tier| tier.bucket().bucket_statistics());
    let loaded = batch.count(KernelOutcome::Compiled)
        + batch.count(KernelOutcome::FromStore)
        + batch.count(KernelOutcome::Rekeyed);
    assert_eq!(loaded, kernels() as usize, "every kernel loads: {batch:?}");
    let from_store = batch.count(KernelOutcome::FromStore);
    let note = match (during, after) {
        (Some(during), Some(after)) => format!(
            "{from_store} from the store; batch {} calls {} requests {} failed, {} keys from a \
             pack, {} connection opened ahead used; flush {} calls {} requests ({}, {:.0} ms)",
            during.calls,
            during.requests,
            during.failed_calls,
            during.pack_hits,
            during.connections_ahead_used,
            after.calls - during.calls,
            after.requests - during.requests,
            if flushed == Some(true) {
                "all written"
            } else {
                "not all written"
            },
            flush.as_secs_f64() * 1e3,
        ),
        _ => format!("{from_store} from the store; no remote"),
    };
    let record = BenchRecord {
        bench: "bucket".into(),
        case,
        kernels: kernels() as usize,
        wall: wall.as_secs_f64(),
        summed_work: batch.summed_work().as_secs_f64(),
        slowest: compile.as_secs_f64(),
        workers: batch.workers,
        cores: cores(),
        compiled: Some(batch.count(KernelOutcome::Compiled)),
        note: Some(note),
        ..BenchRecord::default()
    };
    println!("{}", serde_json::to_string(&record).expect("serializes"));
}

/// Where a node's bucket is: the proxy's port, and the prefix.
struct Remote<'a> {
    server: &'a garage::Garage,
    port: u16,
    key: &'a str,
    prefix: &'a str,
}

/// Runs one node on `root`, behind `remote` when given: its record.
fn run(case: &str, root: &Path, remote: Option<&Remote<'_>>) -> BenchRecord {
    let mut command = Command::new(std::env::current_exe().expect("this benchmark"));
    command
        .env(NODE_ROOT, root)
        .env(NODE_CASE, case)
        .env_remove("KILN_REMOTE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(remote) = remote {
        let credentials = &remote.server.credentials;
        command
            .env(
                "KILN_REMOTE_URL",
                format!("s3://{}/{}", garage::BUCKET, remote.prefix),
            )
            .env("KILN_REMOTE_KEY", remote.key)
            .env(
                "AWS_ENDPOINT_URL",
                format!("http://127.0.0.1:{}", remote.port),
            )
            .env("AWS_REGION", "garage")
            .env("AWS_ACCESS_KEY_ID", &credentials.key_id)
            .env("AWS_SECRET_ACCESS_KEY", &credentials.secret);
    }
    let output = command
        .spawn()
        .expect("a node starts")
        .wait_with_output()
        .expect("the node ends");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| serde_json::from_str::<BenchRecord>(line).ok())
        .unwrap_or_else(|| {
            panic!(
                "a node gave no record ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )
        })
}

fn rtts() -> Vec<u64> {
    std::env::var("KILN_BENCH_BUCKET_RTTS")
        .ok()
        .map(|list| {
            list.split(',')
                .filter_map(|rtt| rtt.trim().parse().ok())
                .collect::<Vec<u64>>()
        })
        .filter(|list| !list.is_empty())
        .unwrap_or_else(|| vec![0, 50, 200])
}

/// The rows, [`KILN_BENCH_BUCKET_RUNS`] times interleaved, then their
/// medians and ratios to the goals.
fn rows(server: &garage::Garage, key: &str) {
    let scratch = kiln_test_support::Scratch::new("bucket-bench-nodes");
    let rtts = rtts();
    let mut alone = Vec::new();
    let mut local = Vec::new();
    let mut cold: Vec<Vec<f64>> = rtts.iter().map(|_| Vec::new()).collect();
    let mut warm: Vec<Vec<f64>> = rtts.iter().map(|_| Vec::new()).collect();
    let mut trips: Vec<f64> = rtts.iter().map(|rtt| *rtt as f64 / 1000.0).collect();
    for run_index in 0..setting("KILN_BENCH_BUCKET_RUNS", 3).max(1) {
        let root = scratch.join(&format!("alone-{run_index}"));
        let record = run("bucket_cold_alone", &root, None);
        alone.push(record.wall);
        append_record(&record);
        let record = run("bucket_local_warm", &root, None);
        assert_eq!(
            record.compiled,
            Some(0),
            "a local warm start compiles nothing"
        );
        local.push(record.wall);
        append_record(&record);
        drop(std::fs::remove_dir_all(&root));
        for (place, rtt) in rtts.iter().enumerate() {
            let proxy = LatencyProxy::start(server.port, Duration::from_millis(*rtt));
            let prefix = format!("bench-{}-{rtt}-{run_index}/", std::process::id());
            let remote = Remote {
                server,
                port: proxy.port,
                key,
                prefix: &prefix,
            };
            if run_index == 0 {
                trips[place] = round_trip(server, proxy.port, *rtt).unwrap_or(trips[place]);
            }
            for (case, walls) in [
                ("bucket_cold_rtt", &mut cold[place]),
                ("bucket_warm_rtt", &mut warm[place]),
            ] {
                // The warm node's disk is empty: a machine new to the fleet.
                let root = scratch.join(&format!("{case}-{rtt}-{run_index}"));
                let mut record = run(case, &root, Some(&remote));
                if case == "bucket_warm_rtt" {
                    assert_eq!(record.compiled, Some(0), "the bucket holds every kernel");
                }
                record.size = Some(rtt.to_string());
                if case == "bucket_cold_rtt" {
                    let note = record.note.take().unwrap_or_default();
                    record.note = Some(format!("{note}; {COLD_STEPS} steps talk"));
                }
                walls.push(record.wall);
                println!(
                    "bucket {case} {rtt} ms: {:.3} s; {}",
                    record.wall,
                    record.note.as_deref().unwrap_or_default()
                );
                append_record(&record);
                drop(std::fs::remove_dir_all(&root));
            }
        }
    }
    let kernels = kernels();
    let (Some(alone), Some(local)) = (median(alone), median(local)) else {
        return;
    };
    println!(
        "bucket x{kernels}: cold, no remote {alone:.3} s; warm from the local disk {local:.3} s (medians)"
    );
    for (((rtt, cold), warm), seconds) in rtts.iter().zip(cold).zip(warm).zip(trips) {
        if let Some(cold) = median(cold) {
            let goal = alone + f64::from(COLD_STEPS) * seconds;
            println!(
                "bucket x{kernels} cold, {rtt} ms away: {cold:.3} s; / (no remote + {COLD_STEPS} \
                 x one GET {:.0} ms) = {:.2} (goal <= 1.2)",
                seconds * 1e3,
                cold / goal
            );
        }
        if let Some(warm) = median(warm) {
            println!(
                "bucket x{kernels} warm from the bucket, {rtt} ms away: {warm:.3} s; / (2 x local \
                 warm + one GET {:.0} ms) = {:.2} (goal <= 1)",
                seconds * 1e3,
                warm / (2.0 * local + seconds)
            );
        }
    }
}

/// One GET of a small object through the proxy at `port`, 20 times in
/// turn after a first that opens the connection: the median, recorded
/// as `bucket_round_trip` sized by the proxy's round trip.
fn round_trip(server: &garage::Garage, port: u16, rtt: u64) -> Option<f64> {
    use kiln_engine::Blobs;
    use kiln_engine::store::BlobKey;
    let store = server.store_at(port, garage::fleet_keys(), &garage::fresh_prefix());
    let blob = BlobKey::new("round-trip");
    store.put_blob(&blob, &[7u8; 2048]);
    drop(store.lookup_blob(&blob));
    let times: Vec<f64> = (0..20)
        .map(|_| {
            let started = Instant::now();
            let found = store.lookup_blob(&blob);
            assert!(
                matches!(found, kiln_engine::Lookup::Hit { .. }),
                "{found:?}"
            );
            started.elapsed().as_secs_f64()
        })
        .collect();
    let wall = median(times)?;
    println!(
        "bucket round trip, proxy at {rtt} ms: one GET {:.1} ms",
        wall * 1e3
    );
    append_record(&BenchRecord {
        bench: "bucket".into(),
        case: "bucket_round_trip".into(),
        size: Some(rtt.to_string()),
        wall,
        cores: cores(),
        ..BenchRecord::default()
    });
    Some(wall)
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    Some(if values.len().is_multiple_of(2) {
        (values[middle - 1] + values[middle]) / 2.0
    } else {
        values[middle]
    })
}
