//! A Redis Cluster losing a shard (P10), on redis-servers on loopback: a
//! primary killed with no replica to take over, and one killed whose
//! replica takes over (`CLUSTER FAILOVER TAKEOVER`: the cluster's own vote
//! can take a minute on a loaded 2-core machine). A node goes on: locally while the shard is gone, with one
//! warning, never a wrong entry, and from the remote again once the
//! cluster serves every slot.

mod support;

use std::time::{Duration, Instant};

use kiln_engine::{
    ArtifactId, ArtifactStore, ArtifactStoreExt, KernelId, KeyComponents, Lookup, StoreKey,
    StoreOutcome,
};
use kiln_remote::{RemoteStore, TieredStore};
use kiln_store::{DiskStore, StoreConfig};
use support::{Redis, config, fleet_keys, fresh_prefix};

const KEYS: u32 = 24;
const TIMEOUT: Duration = Duration::from_secs(1);

fn key(number: u32) -> StoreKey {
    let components = KeyComponents::new("cuda", "nvrtc 13.0", "sm_90", "-O3");
    let id = ArtifactId::new(
        KernelId::named("cluster.kernel").parameter(&number).build(),
        0u8,
    );
    StoreKey::for_artifact(&components, &id, None)
}

fn artifact(number: u32) -> Vec<u8> {
    (0..2000u32).map(|index| (index ^ number) as u8).collect()
}

/// A builder publishes every key; a node (a disk store before the
/// remote) is opened and asks once, so it is connected to every shard.
fn published(redis: &Redis) -> (TieredStore, Vec<StoreKey>) {
    let keys = fleet_keys();
    let prefix = fresh_prefix();
    let builder = support::open(&redis.url(), keys.clone(), &prefix);
    let all: Vec<StoreKey> = (0..KEYS).map(key).collect();
    for (number, key) in (0..KEYS).zip(&all) {
        assert!(matches!(
            builder.put(key, None, &artifact(number), Duration::ZERO),
            StoreOutcome::Stored { .. }
        ));
    }
    let mut settings = config(&redis.url(), keys, &prefix);
    settings.timeout = TIMEOUT;
    settings.retry_after = Duration::from_millis(300);
    let disk = DiskStore::open(StoreConfig::at(redis.scratch.join("node"))).expect("opens");
    let node = TieredStore::new(disk, RemoteStore::open(settings).expect("opens"));
    assert!(node.remote().is_reachable());
    (node, all)
}

/// How many of `answers` are hits with their right bytes; a hit with
/// other bytes fails the test.
fn right_hits(answers: &[Lookup<Vec<u8>>]) -> usize {
    (0..KEYS)
        .zip(answers)
        .filter(|(number, answer)| match answer {
            Lookup::Hit {
                artifact: bytes, ..
            } => {
                assert_eq!(*bytes, artifact(*number), "never another key's bytes");
                true
            }
            Lookup::Miss(_) => false,
        })
        .count()
}

#[test]
fn p10_a_killed_shard_costs_one_warning_and_the_node_goes_on_locally() {
    let Some(mut redis) = Redis::cluster()
        .map_err(|reason| support::skip("a killed shard", &reason))
        .ok()
    else {
        return;
    };
    let (node, keys) = published(&redis);
    redis.servers[1].stop();
    let started = Instant::now();
    let answers = node.lookup_many(&keys);
    let took = started.elapsed();
    let hits = right_hits(&answers);
    eprintln!("with a shard killed: {hits} of {KEYS} hits in {took:?}");
    assert!(took < TIMEOUT * 4, "the lookup took {took:?}");
    // The node works on: what it stores lands locally, and it reads it.
    let extra = key(1000);
    node.put(&extra, None, b"compiled here", Duration::ZERO);
    assert!(matches!(node.lookup(&extra), Lookup::Hit { .. }));
    let statistics = node.tiered_statistics().remote;
    assert_eq!(statistics.breaker_opened, 1, "one warning: {statistics:?}");
}

#[test]
fn p10_a_shard_failed_over_to_its_replica_serves_the_node_again() {
    // The replica is promoted by hand (below), so the nodes' failure
    // detection only has to never fire by itself: a node stalled for a
    // second on a loaded machine must not start a failover of its own.
    let Some(mut redis) = Redis::cluster_of(1, "15000")
        .map_err(|reason| support::skip("a shard failed over", &reason))
        .ok()
    else {
        return;
    };
    let (node, keys) = published(&redis);
    let dead_port = redis.servers[0].port;
    let nodes = redis.servers[1]
        .command(&["CLUSTER", "NODES"])
        .expect("CLUSTER NODES answers");
    // Its replica takes over (as an operator, or the cluster's own vote on
    // a machine that is not this loaded, would have it do).
    let dead_id = nodes
        .lines()
        .find(|line| line.contains(&format!(":{dead_port}@")))
        .and_then(|line| line.split(' ').next())
        .expect("the killed primary is listed")
        .trim_start_matches(|character: char| !character.is_ascii_hexdigit())
        .to_owned();
    let replica_port: u16 = nodes
        .lines()
        .find(|line| line.contains("slave") && line.contains(&dead_id))
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|address| address.split(['@', ':']).nth(1))
        .and_then(|port| port.parse().ok())
        .expect("the killed primary has a replica");
    let replica = redis
        .servers
        .iter()
        .position(|server| server.port == replica_port)
        .expect("the replica is one of the test's servers");
    // The replica holds what was published before its primary goes.
    let size = |server: &kiln_test_support::redis::RedisServer| server.command(&["DBSIZE"]);
    let synced = Instant::now();
    while size(&redis.servers[replica]) != size(&redis.servers[0]) {
        assert!(
            synced.elapsed() < Duration::from_secs(30),
            "the replica did not catch up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    redis.servers[0].stop();
    let started = Instant::now();
    assert!(
        redis.servers[replica]
            .command(&["CLUSTER", "FAILOVER", "TAKEOVER"])
            .is_some_and(|reply| reply.starts_with("+OK")),
        "the replica takes over"
    );
    // The cluster's failover first: every survivor says every slot is
    // served again, and all of them name the same owners.
    let survivors: Vec<usize> = (1..redis.servers.len()).collect();
    let agreed = || {
        let views: Vec<Option<String>> = survivors
            .iter()
            .map(|&index| redis.servers[index].command(&["CLUSTER", "SLOTS"]))
            .collect();
        survivors.iter().all(|&index| {
            redis.servers[index]
                .command(&["CLUSTER", "INFO"])
                .is_some_and(|info| info.contains("cluster_state:ok"))
        }) && views.iter().all(|view| view.is_some() && *view == views[0])
            && views[0]
                .as_deref()
                .is_some_and(|slots| !slots.contains(&format!("{dead_port}")))
    };
    while !agreed() || started.elapsed() < Duration::from_secs(2) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the cluster did not fail over: {:?}",
            redis.servers[1].command(&["CLUSTER", "NODES"])
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let failed_over = started.elapsed();
    let mut first = None;
    let mut hits = 0;
    let mut seen = Vec::new();
    // Then the node: at its breaker's next probe, at most a minute apart.
    while started.elapsed() < failed_over + Duration::from_secs(65) {
        let answers = node.lookup_many(&keys);
        hits = right_hits(&answers);
        first.get_or_insert(hits);
        seen.push((started.elapsed().as_millis(), hits));
        if hits == KEYS as usize {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "the cluster failed over after {failed_over:?}; {hits} of {KEYS} hits after {:?} \
         (first lookup {first:?})",
        started.elapsed()
    );
    let statistics = node.tiered_statistics().remote;
    eprintln!("{statistics:?}");
    assert_eq!(
        hits, KEYS as usize,
        "the promoted replica serves its shard; (ms, hits) of each lookup: {seen:?}; \
         {statistics:?}"
    );
    assert!(
        statistics.breaker_opened <= 2,
        "an outage, not a warning per lookup: {statistics:?}"
    );
}
