//! F6 on one machine: N "nodes" (processes, each with its own disk store
//! and workers) asking for the same K kernels at once, side by side:
//!
//! - `remote`: the nodes share one redis-server behind their disk stores
//!   (a `TieredStore` each, signed with one fleet key), so they split the
//!   compiles through the remote tier's claims (P12);
//! - `alone`: the same nodes with no remote tier, each compiling all K.
//!
//! The compiler is the fake one, whose every compile sleeps a fixed time
//! (`KILN_BENCH_FLEET_COMPILE_MS`, default 20 ms), so that a 2-core machine
//! can host the nodes' workers. F6's goals: compiles across all nodes = K,
//! and the slowest node within 1.3 × Σwork / all workers.
//!
//! Then the remote warm start: a fresh node with an empty disk store (made
//! before the clock starts, as a machine makes its store once) loads the K
//! kernels from Redis (`remote_warm`), against a node loading them from its
//! own filled disk store (`local_warm`), in turns: within 2× plus one
//! round trip.
//! Every node is timed from its loader's creation until every kernel is
//! loaded; its note says how long making its stores took before that, and
//! how long its flush took after (a remote node's copies of its hits made
//! durable on its disk, which dropping the store waits for too).
//!
//! Then a remote far away: one cold node of up to 64 kernels with no
//! remote tier (`cold_alone`), and the same node with its remote behind a
//! proxy on loopback adding 0, 100 and 400 ms to each round trip
//! (`cold_rtt`, sized by the round trip in milliseconds, its note the
//! round trips the proxy counted), with `KILN_REMOTE_TIMEOUT=2`, as a fleet
//! across zones would set it; `KILN_BENCH_FLEET_DISTANCE_RUNS` times
//! (default 3), interleaved, and compared with (no remote + k round
//! trips), k the batch steps that must talk to the remote
//! ([`TALKING_STEPS`]).
//!
//! `KILN_BENCH_FLEET_NODES` (default 8), `KILN_BENCH_FLEET` (K, default
//! 256), `KILN_BENCH_FLEET_WORKERS` (per node; default the cores / nodes,
//! at least 2). Skips, saying why, without `redis-server`.
//!
//! ```text
//! cargo bench -p kiln-benches --bench fleet
//! ```

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode};
use kiln_benches::{BenchRecord, append_record, cores};
use kiln_engine::fake::{FakeKernel, FakeTarget};
use kiln_engine::{ArtifactStore, KernelLoader, KernelOutcome, LoaderConfig};
use kiln_remote::{RemoteStore, TieredStore};
use kiln_test_support::redis::{LatencyProxy, RedisServer};

/// Set on a node: its disk store's root.
const NODE_ROOT: &str = "KILN_BENCH_FLEET_NODE";
/// Set on a node: the case it runs in, which names its records.
const NODE_CASE: &str = "KILN_BENCH_FLEET_CASE";

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(default)
}

fn nodes() -> usize {
    setting("KILN_BENCH_FLEET_NODES", 8) as usize
}

fn kernels() -> u32 {
    setting("KILN_BENCH_FLEET", 256) as u32
}

fn compile_time() -> Duration {
    Duration::from_millis(setting("KILN_BENCH_FLEET_COMPILE_MS", 20))
}

fn workers() -> usize {
    setting(
        "KILN_BENCH_FLEET_WORKERS",
        (cores() / nodes().max(1)).max(2) as u64,
    ) as usize
}

fn main() {
    if let Some(root) = std::env::var_os(NODE_ROOT) {
        node(Path::new(&root));
        return;
    }
    let scratch = kiln_test_support::Scratch::new("fleet-bench");
    let server = match RedisServer::start(&scratch.folder("redis"), &[]) {
        Ok(server) => server,
        Err(why) => {
            eprintln!("fleet: skipped, no redis-server: {why}");
            return;
        }
    };
    let key = kiln_remote::keygen::fleet_key()
        .expect("the operating system gives randomness")
        .secret_text();
    // `KILN_BENCH_FLEET_ONLY=distance`: the cold node at 0 / 0.1 / 0.4 s
    // alone, the rows that count round trips.
    if std::env::var("KILN_BENCH_FLEET_ONLY").is_ok_and(|only| only == "distance") {
        at_a_distance(&server, &key, scratch.path());
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    fleet(&mut criterion, &server, &key, scratch.path());
    criterion.final_summary();
}

/// One node: loads every kernel in one batch on its own store (behind the
/// remote tier when `KILN_REMOTE_URL` is set) and prints its record.
fn node(root: &Path) {
    let case = std::env::var(NODE_CASE).unwrap_or_default();
    let making = Instant::now();
    let disk = kiln_benches::disk_store(root);
    let remote = RemoteStore::from_env().expect("the remote tier's settings read");
    let tiered = remote.map(|remote| Arc::new(TieredStore::new(disk.clone(), remote)));
    let store: Arc<dyn ArtifactStore> = match &tiered {
        Some(tiered) => Arc::clone(tiered) as Arc<dyn ArtifactStore>,
        None => Arc::new(disk),
    };
    let made = making.elapsed();
    // The clock runs from the loader's creation until every kernel is
    // loaded; the stores (and, behind a remote, the background connect
    // they start) are made just before, as a program makes them.
    let started = Instant::now();
    let mut loader = KernelLoader::with_config(
        FakeTarget::on_store(store),
        LoaderConfig {
            parallelism: NonZeroUsize::new(workers()).expect("at least one worker"),
            ..LoaderConfig::default()
        },
    )
    .without_profile();
    let compile = compile_time();
    for number in 0..kernels() {
        loader.enqueue(Box::new(FakeKernel::new(number).sleeping(compile)), ());
    }
    loader.compile_queued();
    let wall = started.elapsed();
    let batch = loader.records().back().expect("a batch").clone();
    // Outside the clock: what a node leaves for the others after its
    // batch, and the remote hits' copies made durable on its disk (which
    // dropping the store would wait for too).
    let flushing = Instant::now();
    let flushed = tiered
        .as_ref()
        .map(|tiered| tiered.flush(Duration::from_secs(60)));
    let flush = flushing.elapsed();
    let loaded = batch.count(KernelOutcome::Compiled)
        + batch.count(KernelOutcome::FromStore)
        + batch.count(KernelOutcome::Rekeyed);
    assert_eq!(loaded, kernels() as usize, "every kernel loads: {batch:?}");
    let record = BenchRecord {
        bench: "fleet".into(),
        case,
        size: Some(nodes().to_string()),
        kernels: kernels() as usize,
        wall: wall.as_secs_f64(),
        summed_work: batch.summed_work().as_secs_f64(),
        slowest: compile.as_secs_f64(),
        workers: batch.workers,
        cores: cores(),
        compiled: Some(batch.count(KernelOutcome::Compiled)),
        note: Some(format!(
            "{} from the store; stores made in {:.2} ms before the clock{}",
            batch.count(KernelOutcome::FromStore),
            made.as_secs_f64() * 1e3,
            match flushed {
                Some(flushed) => format!(
                    "; flushed ({}) {:.2} ms after",
                    if flushed {
                        "all written"
                    } else {
                        "not all written"
                    },
                    flush.as_secs_f64() * 1e3
                ),
                None => String::new(),
            }
        )),
        ..BenchRecord::default()
    };
    println!("{}", serde_json::to_string(&record).expect("serializes"));
}

/// Starts one node per root at once, with `remote` (URL, key, prefix) when
/// given: their records.
fn run(case: &str, roots: &[PathBuf], remote: Option<(&str, &str, &str)>) -> Vec<BenchRecord> {
    run_with(case, roots, remote, &[])
}

/// [`run`], each node with the variables `settings` too.
fn run_with(
    case: &str,
    roots: &[PathBuf],
    remote: Option<(&str, &str, &str)>,
    settings: &[(&str, String)],
) -> Vec<BenchRecord> {
    let children: Vec<_> = roots
        .iter()
        .map(|root| {
            let mut command = Command::new(std::env::current_exe().expect("this benchmark"));
            command
                .env(NODE_ROOT, root)
                .env(NODE_CASE, case)
                .env_remove("KILN_REMOTE_URL")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (name, value) in settings {
                command.env(name, value);
            }
            if let Some((url, key, prefix)) = remote {
                command
                    .env("KILN_REMOTE_URL", url)
                    .env("KILN_REMOTE_KEY", key)
                    .env("KILN_REMOTE_PREFIX", prefix);
            }
            command.spawn().expect("a node starts")
        })
        .collect();
    children
        .into_iter()
        .map(|child| {
            let output = child.wait_with_output().expect("the node ends");
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
        })
        .collect()
}

/// The run as a whole: its slowest node, every compile, and Σwork / all
/// workers as its ideal.
fn run_record(case: &str, records: &[BenchRecord]) -> BenchRecord {
    let summed: f64 = records.iter().map(|record| record.summed_work).sum();
    let workers: usize = records.iter().map(|record| record.workers.max(1)).sum();
    BenchRecord {
        bench: "fleet".into(),
        case: format!("{case}_run"),
        size: Some(records.len().to_string()),
        kernels: records.first().map_or(0, |record| record.kernels),
        wall: records.iter().map(|record| record.wall).fold(0.0, f64::max),
        summed_work: summed,
        slowest: summed / workers as f64,
        workers,
        cores: cores(),
        compiled: Some(records.iter().filter_map(|record| record.compiled).sum()),
        ..BenchRecord::default()
    }
}

fn fleet(criterion: &mut Criterion, server: &RedisServer, key: &str, scratch: &Path) {
    let url = server.url();
    let mut group = criterion.benchmark_group("fleet");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(1));
    group.measurement_time(Duration::from_secs(1));
    let mut iteration = 0u64;
    let mut fresh_roots = |name: &str, count: usize| -> Vec<PathBuf> {
        iteration += 1;
        (0..count)
            .map(|node| scratch.join(format!("{name}-{iteration}-node-{node}")))
            .collect()
    };
    let mut last_prefix = String::new();
    let mut filled_root = PathBuf::new();
    for case in ["remote", "alone"] {
        group.bench_function(BenchmarkId::new(case, nodes()), |bencher| {
            bencher.iter_custom(|iterations| {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    let roots = fresh_roots(case, nodes());
                    // A prefix of its own: every run starts from an empty
                    // remote tier.
                    let prefix = format!("kiln-bench:{}:", roots[0].display());
                    let remote = (case == "remote").then_some((url.as_str(), key, prefix.as_str()));
                    let records = run(case, &roots, remote);
                    for record in &records {
                        append_record(record);
                    }
                    let whole = run_record(case, &records);
                    append_record(&whole);
                    total += Duration::from_secs_f64(whole.wall);
                    if case == "remote" {
                        last_prefix = prefix;
                        filled_root = roots[0].clone();
                    }
                    for root in &roots {
                        if case != "remote" || *root != filled_root {
                            drop(std::fs::remove_dir_all(root));
                        }
                    }
                }
                total
            });
        });
    }
    group.finish();
    if last_prefix.is_empty() {
        eprintln!("fleet: no warm starts, the remote rows did not run (a filter?)");
    } else {
        warm_starts(&url, key, &last_prefix, &filled_root, scratch);
    }
    // The server's round trip, for the goal of the remote warm start.
    let started = Instant::now();
    for _ in 0..100 {
        server.command(&["PING"]);
    }
    append_record(&BenchRecord {
        bench: "fleet".into(),
        case: "round_trip".into(),
        wall: started.elapsed().as_secs_f64() / 100.0,
        cores: cores(),
        ..BenchRecord::default()
    });
    at_a_distance(server, key, scratch);
}

/// The remote warm start against the local one, each a fresh process,
/// `KILN_BENCH_FLEET_WARM_PAIRS` pairs (default 30) run in turn, so that
/// the machine's load moves both alike: a node with an empty disk store
/// (made before the clock: a machine makes its store once) loading the
/// batch from the remote at `prefix`, then the node that filled `filled`
/// loading it from its disk.
fn warm_starts(url: &str, key: &str, prefix: &str, filled: &Path, scratch: &Path) {
    for pair in 0..setting("KILN_BENCH_FLEET_WARM_PAIRS", 30).max(1) {
        let empty = scratch.join(format!("remote-warm-{pair}"));
        drop(kiln_benches::disk_store(&empty));
        let remote = run(
            "remote_warm",
            std::slice::from_ref(&empty),
            Some((url, key, prefix)),
        );
        drop(std::fs::remove_dir_all(&empty));
        let local = run("local_warm", &[filled.to_path_buf()], None);
        for record in remote.iter().chain(&local) {
            assert_eq!(
                record.compiled,
                Some(0),
                "{}: nothing compiles",
                record.case
            );
            append_record(record);
        }
    }
}

/// The batch steps of a cold node that must talk to the remote before
/// its last kernel can load, each costing it a round trip the node alone
/// does not pay:
///
/// 1. the batch's lookup (its entries and failure memories, one pipeline);
/// 2. the lookup of the lowered sources (one pipeline);
/// 3. the first claim group (later groups are asked for in the background
///    while the workers compile);
/// 4. to 6. hearing the fleet's channel before the first claim: the
///    listener starts once the lookup missed, and its subscription, its
///    hello and the wait for holders to answer it (twice the hello's
///    round trip) outlast the source lookup by three round trips.
///
/// The publishes and the releases behind them go from the writer's queue,
/// off the launch path.
const TALKING_STEPS: u32 = 6;

/// How many times the distance rows run, interleaved (no remote, 0, 100,
/// 400 ms): the machine's disk (every compile's durable put) moves one
/// run by seconds, so the report takes medians.
fn distance_runs() -> u64 {
    setting("KILN_BENCH_FLEET_DISTANCE_RUNS", 3).max(1)
}

/// One cold node with no remote tier, then with its remote `rtt` away
/// (0, 100 and 400 ms) through a proxy that counts the round trips, each
/// [`distance_runs`] times; prints the medians and the ratios to
/// (no remote + [`TALKING_STEPS`] round trips).
fn at_a_distance(server: &RedisServer, key: &str, scratch: &Path) {
    let kernels = kernels().min(64);
    let settings = [
        ("KILN_BENCH_FLEET", kernels.to_string()),
        ("KILN_BENCH_FLEET_NODES", "1".to_owned()),
        ("KILN_REMOTE_TIMEOUT", "2".to_owned()),
    ];
    let rtts = [0u64, 100, 400];
    let mut alone_walls = Vec::new();
    let mut walls: Vec<Vec<f64>> = rtts.iter().map(|_| Vec::new()).collect();
    for run in 0..distance_runs() {
        let alone = scratch.join(format!("cold-alone-{run}"));
        for record in run_with("cold_alone", std::slice::from_ref(&alone), None, &settings) {
            alone_walls.push(record.wall);
            append_record(&record);
        }
        drop(std::fs::remove_dir_all(&alone));
        for (place, rtt) in rtts.iter().enumerate() {
            let proxy = LatencyProxy::start(server.port, Duration::from_millis(*rtt));
            let root = scratch.join(format!("cold-rtt-{rtt}-{run}"));
            let prefix = format!("kiln-bench:{}:", root.display());
            let url = proxy.url();
            let before = proxy.round_trips();
            let records = run_with(
                "cold_rtt",
                std::slice::from_ref(&root),
                Some((&url, key, &prefix)),
                &settings,
            );
            let round_trips = proxy.round_trips() - before;
            for mut record in records {
                record.size = Some(rtt.to_string());
                record.note = Some(format!(
                    "{round_trips} round trips; {TALKING_STEPS} steps talk"
                ));
                walls[place].push(record.wall);
                append_record(&record);
            }
            drop(std::fs::remove_dir_all(&root));
        }
    }
    let Some(alone) = median(alone_walls) else {
        return;
    };
    println!("fleet cold x{kernels}: no remote {alone:.3} s (median)");
    for (rtt, walls) in rtts.iter().zip(walls) {
        let Some(wall) = median(walls) else { continue };
        let few = f64::from(TALKING_STEPS) * *rtt as f64 / 1000.0;
        println!(
            "fleet cold x{kernels}, {rtt} ms away: {wall:.3} s (median); / (no remote + \
             {TALKING_STEPS} x {rtt} ms) = {:.2} (goal <= 1.2)",
            wall / (alone + few)
        );
    }
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
