//! Round trips per batch, not per kernel (P10, P12): a cold batch's
//! remote calls counted by a proxy on loopback in front of a real
//! redis-server, adding a round-trip time as a remote far away would.

mod support;

use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kiln_engine::fake::{FakeCompiler, FakeKernel, FakeTarget};
use kiln_engine::{ArtifactStore, KernelLoader, LoaderConfig};
use kiln_remote::{RemoteStore, TieredStore};
use kiln_store::{DiskStore, StoreConfig};
use kiln_test_support::redis::LatencyProxy;
use support::{Redis, config, fleet_keys, fresh_prefix};

/// A node whose remote is `round_trip` away (a proxy in front of
/// `redis`), on a disk store at `root` that syncs when `durable`; the
/// proxy is returned to be kept for as long as the store is used.
fn far_node(
    redis: &Redis,
    round_trip: Duration,
    root: &Path,
    durable: bool,
) -> (LatencyProxy, TieredStore) {
    let proxy = LatencyProxy::start(redis.servers[0].port, round_trip);
    let mut settings = config(&proxy.url(), fleet_keys(), &fresh_prefix());
    settings.timeout = Duration::from_secs(5);
    // Held past the batch: no renewal falls inside it (each lease renews
    // on its own, a round trip each, off the launch path).
    settings.lease = Duration::from_secs(60);
    let disk = DiskStore::open(StoreConfig {
        collects_automatically: false,
        durable,
        ..StoreConfig::at(root)
    })
    .expect("a disk store opens");
    let store = TieredStore::new(disk, RemoteStore::open(settings).expect("the remote opens"));
    (proxy, store)
}

/// A loader of `target` with two workers.
fn two_workers(target: FakeTarget) -> KernelLoader<FakeTarget> {
    KernelLoader::with_config(
        target,
        LoaderConfig {
            parallelism: NonZeroUsize::new(2).expect("two workers"),
            ..LoaderConfig::default()
        },
    )
}

/// The round trips a cold batch of `kernels` costs a node whose remote is
/// `round_trip` away, from its lookup until its writes are flushed.
fn cold_batch(redis: &Redis, kernels: &[FakeKernel], round_trip: Duration, root: &Path) -> u64 {
    let (proxy, store) = far_node(redis, round_trip, root, true);
    assert!(store.remote().is_reachable(), "the proxy forwards");
    let before = proxy.round_trips();
    let target = FakeTarget::on_store(Arc::new(store.clone()) as Arc<dyn ArtifactStore>)
        .with_compiler(FakeCompiler::default().logging_compiles_to(root.join("compiles.log")));
    let mut loader = two_workers(target);
    for kernel in kernels {
        loader.enqueue(Box::new(kernel.clone()), ());
    }
    loader.compile_queued();
    for kernel in kernels {
        loader
            .load(kernel, &kernel.artifact_id())
            .expect("every kernel loads");
    }
    assert!(store.flush(Duration::from_secs(60)), "the writes drain");
    let statistics = store.tiered_statistics();
    assert_eq!(
        statistics.remote_writes,
        kernels.len() as u64,
        "{statistics:?}"
    );
    proxy.round_trips() - before
}

#[test]
fn p10_a_cold_batch_of_64_costs_round_trips_per_batch_step_not_per_kernel() {
    let Some(redis) = Redis::single()
        .map_err(|reason| support::skip("round trips per batch", &reason))
        .ok()
    else {
        return;
    };
    const KERNELS: u32 = 64;
    let round_trip = Duration::from_millis(100);
    // Kernels whose lowered source is not looked up: every step the batch
    // takes is one of the store's.
    let plain: Vec<FakeKernel> = (0..KERNELS)
        .map(|number| FakeKernel::new(number).without_source())
        .collect();
    let counted = cold_batch(&redis, &plain, round_trip, &redis.scratch.join("plain"));
    // With lowered sources: the round's kernels are lowered first and
    // their sources asked for in one lookup (P7).
    let lowered: Vec<FakeKernel> = (0..KERNELS).map(FakeKernel::new).collect();
    let with_sources = cold_batch(&redis, &lowered, round_trip, &redis.scratch.join("lowered"));
    eprintln!(
        "a cold batch of {KERNELS}: {counted} round trips, {with_sources} with its sources \
         looked up"
    );
    // One lookup (with the failure memories), the claims in groups of 8
    // (each with its re-check of the entries), the publishes and releases
    // in the writer's groups, one round trip each while the batch loads:
    // fewer than one per kernel, where each kernel used to cost several.
    assert!(
        counted < u64::from(KERNELS),
        "{counted} round trips for a cold batch of {KERNELS}"
    );
    // The sources cost the batch one step more (one lookup of every
    // source), not one round trip per kernel: 117 when each worker asked
    // for its kernel's. The writer's round trips follow how long the batch
    // loads, not how many kernels it has.
    assert!(
        with_sources < u64::from(KERNELS),
        "{with_sources} round trips with the sources looked up, {counted} without"
    );
}

/// The claim round trips (one per claim group) of a cold batch of
/// `kernels`, each compiling 20 ms on two workers, on a node whose remote
/// is `round_trip` away, and the claims it held.
fn claim_groups(redis: &Redis, kernels: u32, round_trip: Duration, root: &Path) -> (u64, u64) {
    // A disk that does not sync: the workers come to their keys at the
    // pace of their compiles, not of this machine's disk.
    let (_proxy, store) = far_node(redis, round_trip, root, false);
    let target = FakeTarget::on_store(Arc::new(store.clone()) as Arc<dyn ArtifactStore>);
    let mut loader = two_workers(target).without_profile();
    let compile = Duration::from_millis(20);
    for number in 0..kernels {
        loader.enqueue(
            Box::new(FakeKernel::new(number).without_source().sleeping(compile)),
            (),
        );
    }
    loader.compile_queued();
    assert!(store.flush(Duration::from_secs(60)), "the writes drain");
    let statistics = store.remote().remote_statistics();
    (statistics.claim_round_trips, statistics.claims_held)
}

#[test]
fn p12_a_remote_far_away_claims_a_cold_batch_in_a_few_groups_not_one_per_eight_kernels() {
    let Some(redis) = Redis::single()
        .map_err(|reason| support::skip("claim groups far away", &reason))
        .ok()
    else {
        return;
    };
    // 400 ms away, 64 kernels of 20 ms on two workers: the batch comes to
    // a key every 10 ms, 40 keys a round trip, so its first group takes
    // the whole batch (groups of 8 took 8 round trips, each a stall).
    let (far, held) = claim_groups(
        &redis,
        64,
        Duration::from_millis(400),
        &redis.scratch.join("far"),
    );
    assert_eq!(held, 64, "every key claimed here");
    assert!(far <= 2, "{far} claim round trips 400 ms away");
    // 100 ms away: the first group covers two round trips at the pace
    // assumed before one is measured (10 ms a key), the next ones, sized
    // by the pace measured, are asked for while the workers compile: a
    // group per 20 keys or so, never one per 8.
    let (near, held) = claim_groups(
        &redis,
        64,
        Duration::from_millis(100),
        &redis.scratch.join("near"),
    );
    assert_eq!(held, 64, "every key claimed here");
    assert!(near < 64 / 8, "{near} claim round trips 100 ms away");
    let (larger, held) = claim_groups(
        &redis,
        192,
        Duration::from_millis(100),
        &redis.scratch.join("larger"),
    );
    assert_eq!(held, 192, "every key claimed here");
    assert!(
        larger < 192 / 8,
        "{larger} claim round trips for 192 kernels 100 ms away ({near} for 64)"
    );
    eprintln!("claim round trips: 400 ms {far}; 100 ms {near} (64), {larger} (192)");
}
