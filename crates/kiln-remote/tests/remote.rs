//! The remote tier against a real redis-server: what a fleet relies on
//! beyond the store contract (P10): hits written back to the disk, entries
//! that do not verify never loaded, read-only nodes that never write, and
//! a remote that is killed, paused, slow, full or not Redis costing
//! bounded time while the local store goes on working.
//!
//! The time bounds asserted here are generous multiples of the timeout:
//! they prove that nothing hangs, not how fast anything is.

mod support;

use std::io::Write as _;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use kiln_engine::store::{Claim, ClaimWait};
use kiln_engine::{
    ArtifactId, ArtifactStore, ArtifactStoreExt, Blobs, Claims, KernelId, KeyComponents, Lookup,
    Miss, StoreKey, StoreOutcome,
};
use kiln_remote::{Keys, RemoteStore, TieredStore, keygen};
use kiln_store::{DiskStore, StoreConfig};
use support::{Redis, config, fleet_keys, fresh_prefix, open};

fn key(number: u32) -> StoreKey {
    let components = KeyComponents::new("cuda", "nvrtc 13.0", "sm_90", "-O3");
    let id = ArtifactId::new(
        KernelId::named("remote.kernel").parameter(&number).build(),
        0u8,
    );
    StoreKey::for_artifact(&components, &id, None)
}

fn artifact(number: u32, length: usize) -> Vec<u8> {
    (0..length)
        .map(|index| (index as u32 ^ number) as u8)
        .collect()
}

fn redis_or_skip(what: &str) -> Option<Redis> {
    match Redis::single() {
        Ok(redis) => Some(redis),
        Err(reason) => {
            support::skip(what, &reason);
            None
        }
    }
}

fn raw(redis: &Redis) -> redis::Connection {
    redis::Client::open(redis.url())
        .and_then(|client| client.get_connection())
        .expect("the test's redis-server takes connections")
}

fn expect_hit(lookup: Lookup<Vec<u8>>, what: &str) -> Vec<u8> {
    match lookup {
        Lookup::Hit { artifact, .. } => artifact,
        Lookup::Miss(miss) => panic!("{what}: expected a hit, got {miss}"),
    }
}

fn disk(redis: &Redis, name: &str) -> DiskStore {
    DiskStore::open(StoreConfig::at(redis.scratch.join(name))).expect("a disk store opens")
}

fn database_size(redis: &Redis) -> i64 {
    redis::cmd("DBSIZE")
        .query(&mut raw(redis))
        .expect("DBSIZE answers")
}

#[test]
fn a_remote_hit_is_written_back_to_the_local_store() {
    // P10: reads go local, then remote; a remote hit is written locally,
    // so the machine's other processes read it from disk.
    let Some(redis) = redis_or_skip("remote write-back") else {
        return;
    };
    let (keys, prefix) = (fleet_keys(), fresh_prefix());
    let builder = TieredStore::new(
        disk(&redis, "builder"),
        open(&redis.url(), keys.clone(), &prefix),
    );
    let batch: Vec<StoreKey> = (0..8).map(key).collect();
    for (number, key) in batch.iter().enumerate() {
        builder.put(
            key,
            None,
            &artifact(number as u32, 5000),
            Duration::from_millis(40),
        );
    }
    assert!(builder.flush(Duration::from_secs(20)), "the queue drains");
    assert_eq!(builder.tiered_statistics().remote_writes, 8);

    let node = TieredStore::new(disk(&redis, "node"), open(&redis.url(), keys, &prefix));
    let found = node.lookup_many(&batch);
    for (number, lookup) in found.into_iter().enumerate() {
        let bytes = expect_hit(lookup, "a key the builder published");
        assert!(bytes == artifact(number as u32, 5000));
    }
    let statistics = node.tiered_statistics();
    assert_eq!(statistics.remote_hits, 8);
    // Written back off the launch path: done once the queue drains.
    assert!(node.flush(Duration::from_secs(20)), "the write-backs drain");
    assert_eq!(node.tiered_statistics().written_back, 8);
    drop(node);
    // The node's disk holds them now, with the work they saved.
    let node_disk = disk(&redis, "node");
    // Copies, not compiles: the node's totals (`kiln stats`) count none.
    let compiled: u64 = node_disk
        .activity()
        .backends
        .iter()
        .map(|backend| backend.compiles)
        .sum();
    assert_eq!(compiled, 0, "a written-back remote hit is no compile");
    for key in &batch {
        match node_disk.lookup(key) {
            Lookup::Hit { work, .. } => assert_eq!(work, Duration::from_millis(40)),
            Lookup::Miss(miss) => panic!("written back locally, yet {miss}"),
        }
    }
}

#[test]
fn keys_are_the_digest_alone_and_the_same_for_every_process() {
    // P10, P1: rank-agnostic keys: no process, device or path in them.
    let store = RemoteStore::open(config("redis://127.0.0.1:1", fleet_keys(), "kiln:"))
        .expect("opening connects to nothing");
    let other = RemoteStore::open(config("redis://127.0.0.1:2", fleet_keys(), "kiln:"))
        .expect("opening connects to nothing");
    let entry = store.entry_key(&key(1));
    assert_eq!(entry, other.entry_key(&key(1)));
    assert_eq!(
        entry,
        format!("kiln:e:{}", kiln_engine::store::hex(&key(1).digest()))
    );
}

#[test]
fn forged_truncated_unsigned_and_wrongly_keyed_entries_are_never_loaded() {
    // P10, P2: an entry that does not verify is a counted miss.
    let Some(redis) = redis_or_skip("forged remote entries") else {
        return;
    };
    let prefix = fresh_prefix();
    let store = open(&redis.url(), fleet_keys(), &prefix);
    let mut connection = raw(&redis);
    let (a, b) = (key(1), key(2));
    assert!(matches!(
        store.put(&a, None, &artifact(1, 3000), Duration::ZERO),
        StoreOutcome::Stored { .. }
    ));
    expect_hit(store.lookup(&a), "the entry as written");
    let value: Vec<u8> = redis::cmd("GET")
        .arg(store.entry_key(&a))
        .query(&mut connection)
        .expect("GET answers");
    let mut forged = value.clone();
    forged[100] ^= 1;
    let planted: Vec<(&str, Vec<u8>)> = vec![
        ("forged", forged),
        ("truncated", value[..value.len() - 10].to_vec()),
        ("unsigned", b"\x7fELF native code from anyone".to_vec()),
        ("empty", Vec::new()),
    ];
    for (what, bytes) in planted {
        let _: () = redis::cmd("SET")
            .arg(store.entry_key(&a))
            .arg(bytes)
            .query(&mut connection)
            .expect("SET answers");
        assert!(
            matches!(store.lookup(&a), Lookup::Miss(Miss::Corrupt { .. })),
            "a {what} entry is a corrupt miss"
        );
    }
    // A whole, verified entry copied under another key.
    let _: () = redis::cmd("SET")
        .arg(store.entry_key(&b))
        .arg(&value)
        .query(&mut connection)
        .expect("SET answers");
    assert!(matches!(
        store.lookup(&b),
        Lookup::Miss(Miss::ForeignKey { .. })
    ));
    // Signed with another fleet's key.
    let stranger = open(&redis.url(), fleet_keys(), &prefix);
    stranger.put(&a, None, &artifact(1, 3000), Duration::ZERO);
    assert!(matches!(
        store.lookup(&a),
        Lookup::Miss(Miss::Corrupt { .. })
    ));
    let statistics = store.remote_statistics();
    assert_eq!(statistics.unverified, 6);
    assert_eq!((statistics.store.corrupt, statistics.store.foreign), (5, 1));

    // Through the two-level store, a refused entry is a miss too, and the
    // kernel compiled here is stored and found.
    let tiered = TieredStore::new(
        disk(&redis, "local"),
        open(&redis.url(), fleet_keys(), &prefix),
    );
    assert!(matches!(
        tiered.lookup(&a),
        Lookup::Miss(Miss::Corrupt { .. })
    ));
    tiered.put(&a, None, &artifact(9, 100), Duration::ZERO);
    assert!(expect_hit(tiered.lookup(&a), "compiled here") == artifact(9, 100));
}

#[test]
fn ed25519_entries_verify_only_with_a_trusted_key() {
    // P10: builders sign, nodes hold only trusted public keys.
    let Some(redis) = redis_or_skip("signed remote entries") else {
        return;
    };
    let prefix = fresh_prefix();
    let signing = keygen::signing_key().expect("random bytes");
    let public = signing.public_key();
    let builder = open(
        &redis.url(),
        Keys {
            signing: Some(signing),
            ..Keys::default()
        },
        &prefix,
    );
    let node = open(
        &redis.url(),
        Keys {
            trusted: vec![public],
            ..Keys::default()
        },
        &prefix,
    );
    let other_key = keygen::signing_key().expect("random bytes").public_key();
    let stranger = open(
        &redis.url(),
        Keys {
            trusted: vec![other_key],
            ..Keys::default()
        },
        &prefix,
    );
    let fleet_node = open(&redis.url(), fleet_keys(), &prefix);
    builder.put(&key(1), None, &artifact(1, 700), Duration::ZERO);
    assert!(expect_hit(node.lookup(&key(1)), "a trusting node") == artifact(1, 700));
    assert!(matches!(
        stranger.lookup(&key(1)),
        Lookup::Miss(Miss::Corrupt { .. })
    ));
    assert!(matches!(
        fleet_node.lookup(&key(1)),
        Lookup::Miss(Miss::Corrupt { .. })
    ));
}

#[test]
fn a_read_only_node_never_writes() {
    // P10: a node without a signing key, or told to only read, writes,
    // removes and claims nothing.
    let Some(redis) = redis_or_skip("read-only nodes") else {
        return;
    };
    let prefix = fresh_prefix();
    let public = keygen::signing_key().expect("random bytes").public_key();
    let without_signing_key = open(
        &redis.url(),
        Keys {
            trusted: vec![public],
            ..Keys::default()
        },
        &prefix,
    );
    let mut told = config(&redis.url(), fleet_keys(), &prefix);
    told.read_only = true;
    let told = RemoteStore::open(told).expect("opens");
    for node in [&without_signing_key, &told] {
        assert!(!node.writes());
        assert_eq!(
            node.put(&key(1), Some(&key(2)), b"bytes", Duration::ZERO),
            StoreOutcome::Skipped
        );
        assert_eq!(
            node.put_blob(&kiln_engine::store::BlobKey::new("blob"), b"bytes"),
            StoreOutcome::Skipped
        );
        node.remove(&key(1));
        assert!(matches!(
            node.claim(&key(1), ClaimWait::Once),
            Claim::Uncoordinated
        ));
        assert_eq!(node.statistics().writes_skipped, 2);
        let tiered = TieredStore::new(disk(&redis, &fresh_prefix()), node.clone());
        assert!(matches!(
            tiered.put(&key(3), None, b"local", Duration::ZERO),
            StoreOutcome::Stored { .. }
        ));
        assert!(tiered.flush(Duration::from_secs(10)));
        assert_eq!(tiered.tiered_statistics().remote_writes, 0);
    }
    assert_eq!(database_size(&redis), 0, "nothing reached Redis");
}

/// A two-level store whose remote times out after `timeout`.
fn tiered_with_timeout(redis: &Redis, timeout: Duration) -> TieredStore {
    tiered_with(redis, timeout, Duration::from_millis(300))
}

/// A tiered store whose remote gives up a call at `timeout` and, after a
/// failure, leaves the remote alone for `retry_after` before it probes.
fn tiered_with(redis: &Redis, timeout: Duration, retry_after: Duration) -> TieredStore {
    let mut settings = config(&redis.url(), fleet_keys(), &fresh_prefix());
    settings.timeout = timeout;
    settings.retry_after = retry_after;
    let remote = RemoteStore::open(settings).expect("opens");
    TieredStore::new(disk(redis, &fresh_prefix()), remote)
}

/// Lookups and puts of `count` new keys: every answer comes, the local
/// store keeps working, and the whole takes at most `bound`.
fn still_works_locally(store: &TieredStore, first: u32, count: u32, bound: Duration) {
    let started = Instant::now();
    for number in first..first + count {
        assert!(matches!(store.lookup(&key(number)), Lookup::Miss(_)));
        assert!(matches!(
            store.put(&key(number), None, &artifact(number, 500), Duration::ZERO),
            StoreOutcome::Stored { .. }
        ));
        expect_hit(store.lookup(&key(number)), "what was just stored locally");
    }
    let batch: Vec<StoreKey> = (first + count..first + count + 16).map(key).collect();
    assert!(
        store
            .lookup_many(&batch)
            .iter()
            .all(|lookup| matches!(lookup, Lookup::Miss(_)))
    );
    assert!(
        started.elapsed() < bound,
        "bounded: {:?} for {count} kernels and a batch, at most {bound:?}",
        started.elapsed()
    );
}

#[test]
fn a_redis_killed_mid_run_degrades_to_local_with_one_breaker_trip() {
    // P10, P5: a dead remote costs at most one timeout, then nothing.
    let Some(mut redis) = redis_or_skip("a killed redis") else {
        return;
    };
    // A killed server refuses at once: the timeout is only there so that
    // a working one is never taken for dead on a loaded machine.
    let timeout = Duration::from_secs(1);
    let store = tiered_with_timeout(&redis, timeout);
    store.put(&key(0), None, &artifact(0, 500), Duration::ZERO);
    assert!(store.flush(Duration::from_secs(10)));
    redis.servers[0].stop();
    still_works_locally(&store, 100, 20, Duration::from_secs(10));
    assert!(
        store.flush(Duration::from_secs(10)),
        "queued writes end, failed"
    );
    let remote = store.tiered_statistics().remote;
    // One outage, one trip: the probes that find it still dead keep the
    // breaker open without tripping it again.
    assert_eq!(remote.breaker_opened, 1, "{remote:?}");
    assert!(remote.skipped_while_open > 0, "the breaker kept calls away");
    assert!(remote.store.unreadable > 0 && remote.store.put_failures > 0);
}

#[test]
fn a_paused_redis_costs_one_timeout_and_is_used_again_when_it_answers() {
    // P10: one error never turns the remote off for good; the breaker
    // probes again and finds it.
    let Some(redis) = redis_or_skip("a paused redis") else {
        return;
    };
    // The pause outlasts the timeout by far, so the first call meets it
    // however late a loaded machine makes it; and no probe comes before
    // the pause ends (the breaker opens a timeout after the pause began at
    // the earliest, and waits longer than the pause): every call until
    // then is the one that timed out or one the open breaker kept away.
    let (timeout, pause) = (Duration::from_secs(1), Duration::from_secs(3));
    let store = tiered_with(&redis, timeout, pause + Duration::from_secs(1));
    let remote = store.remote().clone();
    remote.put(&key(1), None, &artifact(1, 100), Duration::ZERO);
    let paused =
        redis.servers[0].command(&["CLIENT", "PAUSE", &pause.as_millis().to_string(), "ALL"]);
    assert!(paused.is_some_and(|reply| reply.starts_with("+OK")));
    still_works_locally(&store, 200, 10, Duration::from_secs(10));
    let statistics = remote.remote_statistics();
    assert_eq!(statistics.timeouts, 1, "{statistics:?}");
    assert!(statistics.skipped_while_open > 0, "{statistics:?}");
    // Once the pause ends, a probe finds the remote and hits come back.
    let started = Instant::now();
    loop {
        if let Lookup::Hit { .. } = remote.lookup(&key(1)) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the remote is used again"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!remote.remote_statistics().breaker_open);
}

#[test]
fn a_slow_redis_is_bounded_by_the_timeout() {
    // P10: `DEBUG SLEEP` blocks the server; a lookup gives up at the
    // timeout.
    let Some(redis) = redis_or_skip("a slow redis") else {
        return;
    };
    let store = tiered_with_timeout(&redis, Duration::from_millis(300));
    let port = redis.servers[0].port;
    let sleeper = std::thread::spawn(move || {
        let mut connection = redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .and_then(|client| client.get_connection())
            .expect("connects");
        let _: redis::RedisResult<()> = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(2)
            .query(&mut connection);
    });
    // Whenever the server begins its sleep (a loaded machine may run the
    // sleeper late), the node's calls meet it: rounds of work go on until
    // one timed out or the sleep is over, each of them bounded.
    let mut first = 300;
    while store.remote().remote_statistics().timeouts == 0 && !sleeper.is_finished() {
        still_works_locally(&store, first, 10, Duration::from_secs(8));
        first += 100;
    }
    sleeper.join().expect("the sleeper ends");
    let statistics = store.remote().remote_statistics();
    assert!(
        statistics.timeouts >= 1,
        "no call gave up at the timeout while the server slept: {statistics:?}"
    );
}

#[test]
fn a_server_that_is_not_redis_or_never_answers_is_a_miss() {
    // P10: not Redis, or silent: misses and failed writes, in bounded time.
    let Some(redis) = redis_or_skip("a server that is not redis") else {
        return;
    };
    for answers in [true, false] {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
        let port = listener.local_addr().expect("bound").port();
        let server = std::thread::spawn(move || {
            let mut held = Vec::new();
            listener.set_nonblocking(true).expect("non-blocking");
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(6) {
                if let Ok((mut stream, _)) = listener.accept() {
                    if answers {
                        let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n<html>");
                    }
                    held.push(stream);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let mut settings = config(&format!("redis://127.0.0.1:{port}"), fleet_keys(), "kiln:");
        settings.timeout = Duration::from_millis(300);
        let remote = RemoteStore::open(settings).expect("opens");
        let store = TieredStore::new(disk(&redis, &fresh_prefix()), remote);
        still_works_locally(&store, 400, 5, Duration::from_secs(5));
        let remote = store.remote().remote_statistics();
        assert!(
            remote.breaker_opened >= 1 && remote.store.hits == 0,
            "{remote:?}"
        );
        drop(store);
        server.join().expect("the fake server ends");
    }
}

#[test]
fn a_full_or_oversize_write_fails_counted_and_reads_go_on() {
    // P10, P5: a write the remote cannot take is a counted failure; the
    // remote still answers reads.
    let Some(redis) = redis_or_skip("a full redis") else {
        return;
    };
    let mut settings = config(&redis.url(), fleet_keys(), &fresh_prefix());
    settings.max_entry_bytes = 4096;
    let store = RemoteStore::open(settings).expect("opens");
    assert!(matches!(
        store.put(&key(1), None, &artifact(1, 8000), Duration::ZERO),
        StoreOutcome::Failed { .. }
    ));
    assert_eq!(store.remote_statistics().oversize, 1);
    assert!(matches!(store.lookup(&key(1)), Lookup::Miss(Miss::Absent)));

    store.put(&key(2), None, &artifact(2, 1000), Duration::ZERO);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("noeviction")
        .query(&mut raw(&redis))
        .expect("CONFIG SET");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query(&mut raw(&redis))
        .expect("CONFIG SET");
    assert!(matches!(
        store.put(&key(3), None, &artifact(3, 1000), Duration::ZERO),
        StoreOutcome::Failed { .. }
    ));
    expect_hit(store.lookup(&key(2)), "a full remote still serves reads");
    let statistics = store.remote_statistics();
    assert!(!statistics.breaker_open, "a refusal is not an outage");
    assert_eq!(statistics.store.put_failures, 2);
}

#[test]
fn a_remote_lease_is_released_only_once_its_artifact_is_in_the_remote() {
    // P4, P12: the remote write goes through the background queue, and the
    // lease is released behind it: a node that takes the key over always
    // finds the artifact, so no machine compiles it again.
    let Some(redis) = redis_or_skip("remote lease released behind the write") else {
        return;
    };
    let (keys, prefix) = (fleet_keys(), fresh_prefix());
    // A write of a mebibyte that a loaded machine makes time out would
    // leave the lease to run out instead of being released (as a remote
    // that failed the write would): the test's calls never time out.
    let patient = |keys: Keys| {
        let mut settings = config(&redis.url(), keys, &prefix);
        settings.timeout = Duration::from_secs(20);
        RemoteStore::open(settings).expect("opens")
    };
    let holder = TieredStore::new(disk(&redis, "holder"), patient(keys.clone()));
    let other = TieredStore::new(disk(&redis, "other"), patient(keys));
    for number in 0..20 {
        let key = key(number);
        let Claim::Held(guard) = holder.claim(&key, ClaimWait::Once) else {
            panic!("a free key is the holder's");
        };
        assert!(
            matches!(other.claim(&key, ClaimWait::Once), Claim::Busy),
            "the other node sees the key held"
        );
        // Large enough that the remote write takes a moment.
        holder.put(&key, None, &artifact(number, 1 << 20), Duration::ZERO);
        drop(guard);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match other.claim(&key, ClaimWait::Once) {
                Claim::Held(_) => {
                    expect_hit(
                        other.lookup(&key),
                        "a key whose lease was released is in the remote",
                    );
                    break;
                }
                Claim::Busy => {
                    assert!(
                        Instant::now() < deadline,
                        "the lease of kernel {number} was never released: the holder's {:?}, \
                         the other's {:?}",
                        holder.tiered_statistics(),
                        other.tiered_statistics().remote
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
                Claim::Uncoordinated => panic!("the remote tier coordinates claims"),
            }
        }
    }
}
