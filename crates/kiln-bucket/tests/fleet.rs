//! The bucket tier between machines, against a real S3 server (Garage on
//! loopback): two nodes share a batch in one call of concurrent requests;
//! a server stopped, paused or slow costs one timeout and one warning;
//! objects cut short, flipped, replaced by another key's entry or signed
//! by another fleet are never loaded (P10, P16).

#[path = "support/raw.rs"]
mod raw;
mod support;

use std::time::{Duration, Instant};

use kiln_bucket::BucketStore;
use kiln_engine::store::{KeyComponents, Origin, Put, hex};
use kiln_engine::{ArtifactId, ArtifactStore, ArtifactStoreExt, KernelId, Lookup, Miss, StoreKey};
use kiln_test_support::redis::LatencyProxy;

fn key(number: u32) -> StoreKey {
    let components = KeyComponents::new("bucket-test", "kiln bucket test 1", "arch-1", "-O3");
    let id = ArtifactId::new(
        KernelId::named("bucket.kernel").parameter(&number).build(),
        0u8,
    );
    StoreKey::for_artifact(&components, &id, None)
}

fn artifact(number: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|index| (number as usize * 31 + index * 7) as u8)
        .collect()
}

/// Puts `count` artifacts with `store`, together.
fn fill(store: &BucketStore, count: u32) -> Vec<StoreKey> {
    let keys: Vec<StoreKey> = (0..count).map(key).collect();
    let bytes: Vec<Vec<u8>> = (0..count).map(|number| artifact(number, 2000)).collect();
    let copies: Vec<Put<'_>> = keys
        .iter()
        .zip(&bytes)
        .map(|(key, bytes)| Put {
            key,
            bytes,
            work: Duration::from_millis(5),
            origin: Origin::Copied,
        })
        .collect();
    for outcome in store.put_many(&copies) {
        assert!(
            matches!(outcome, kiln_engine::StoreOutcome::Stored { .. }),
            "{outcome:?}"
        );
    }
    keys
}

fn is_unreadable(lookup: &Lookup<Vec<u8>>) -> bool {
    matches!(lookup, Lookup::Miss(Miss::Unreadable { .. }))
}

#[test]
fn p16_two_nodes_share_a_batch_in_one_call_of_concurrent_requests() {
    let Some(garage) = support::shared("sharing through the bucket") else {
        return;
    };
    let keys = support::fleet_keys();
    let prefix = support::fresh_prefix();
    let builder = garage.store(keys.clone(), &prefix);
    let stored = fill(&builder, 64);
    let node = garage.store(keys, &prefix);
    let found = node.lookup_many(&stored);
    for (number, lookup) in found.into_iter().enumerate() {
        match lookup {
            Lookup::Hit {
                artifact: bytes,
                work,
                ..
            } => {
                assert!(bytes == artifact(number as u32, 2000), "kernel {number}");
                assert_eq!(work, Duration::from_millis(5));
            }
            Lookup::Miss(miss) => panic!("kernel {number} missed: {miss}"),
        }
    }
    let statistics = node.bucket_statistics();
    assert_eq!(statistics.calls, 1, "a batch is one call");
    assert_eq!(statistics.requests, 64, "of one GET per kernel");
    assert_eq!(statistics.store.hits, 64);
}

#[test]
fn p16_a_stopped_server_costs_one_timeout_and_one_warning_then_nothing() {
    let Some(mut garage) = support::garage("a bucket whose server stopped") else {
        return;
    };
    let mut config = garage.config_at(garage.port, support::fleet_keys(), &support::fresh_prefix());
    config.timeout = Duration::from_millis(500);
    config.retry_after = Duration::from_secs(30);
    let store = BucketStore::open(config).expect("a store opens");
    let stored = fill(&store, 8);
    garage.stop();
    let started = Instant::now();
    let found = store.lookup_many(&stored);
    let first = started.elapsed();
    assert!(found.iter().all(is_unreadable), "{found:?}");
    let started = Instant::now();
    let again = store.lookup_many(&stored);
    let second = started.elapsed();
    assert!(again.iter().all(is_unreadable));
    let statistics = store.bucket_statistics();
    assert_eq!(statistics.breaker_opened, 1, "one outage, one warning");
    assert_eq!(
        statistics.skipped_while_open, 1,
        "the second batch asks nothing"
    );
    // Bounded by one timeout (with room for a loaded machine), and the
    // second batch by none.
    assert!(first < Duration::from_millis(1500), "{first:?}");
    assert!(second < Duration::from_millis(100), "{second:?}");
    // A put is a counted failure, never a panic.
    let outcome = store.put(&key(99), None, b"x", Duration::ZERO);
    assert!(!matches!(outcome, kiln_engine::StoreOutcome::Stored { .. }));
}

#[test]
fn p16_a_paused_server_costs_one_timeout_and_is_used_again_once_it_answers() {
    let Some(garage) = support::garage("a bucket whose server is paused") else {
        return;
    };
    let mut config = garage.config_at(garage.port, support::fleet_keys(), &support::fresh_prefix());
    config.timeout = Duration::from_millis(500);
    config.retry_after = Duration::from_millis(200);
    let store = BucketStore::open(config).expect("a store opens");
    let stored = fill(&store, 8);
    garage.pause();
    let started = Instant::now();
    let found = store.lookup_many(&stored);
    let elapsed = started.elapsed();
    garage.resume();
    assert!(found.iter().all(is_unreadable), "{found:?}");
    assert!(elapsed < Duration::from_millis(1500), "{elapsed:?}");
    assert_eq!(store.bucket_statistics().breaker_opened, 1);
    // Past the breaker's wait, the probe finds the server back.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found = store.lookup_many(&stored);
        if found
            .iter()
            .all(|lookup| matches!(lookup, Lookup::Hit { .. }))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the bucket is used again: {found:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn p16_a_server_slower_than_the_timeout_is_a_miss_within_it() {
    let Some(garage) = support::shared("a bucket behind a slow link") else {
        return;
    };
    let keys = support::fleet_keys();
    let prefix = support::fresh_prefix();
    let stored = fill(&garage.store(keys.clone(), &prefix), 4);
    let proxy = LatencyProxy::start(garage.port, Duration::from_millis(400));
    let mut config = garage.config_at(proxy.port, keys.clone(), &prefix);
    config.timeout = Duration::from_millis(250);
    let slow = BucketStore::open(config).expect("a store opens");
    let started = Instant::now();
    let found = slow.lookup_many(&stored);
    let elapsed = started.elapsed();
    assert!(found.iter().all(is_unreadable), "{found:?}");
    assert!(elapsed < Duration::from_millis(1000), "{elapsed:?}");
    // With time enough, the same link serves every kernel in one call.
    let patient = garage.store_at(proxy.port, keys, &prefix);
    let found = patient.lookup_many(&stored);
    assert!(
        found
            .iter()
            .all(|lookup| matches!(lookup, Lookup::Hit { .. })),
        "{found:?}"
    );
}

#[test]
fn p16_objects_cut_short_flipped_moved_or_of_another_fleet_are_never_loaded() {
    let Some(garage) = support::shared("forged and damaged objects") else {
        return;
    };
    let keys = support::fleet_keys();
    let prefix = support::fresh_prefix();
    let store = garage.store(keys.clone(), &prefix);
    let stored = fill(&store, 2);
    let object = |key: &StoreKey| format!("{prefix}e/{}", hex(&key.digest()));
    let (target, other) = (object(&stored[0]), object(&stored[1]));
    let good = raw::raw_get(garage, &target);
    let mut flipped = good.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x01;
    let stranger = support::fleet_keys();
    let foreign_store = garage.store(stranger, &support::fresh_prefix());
    let foreign_keys = fill(&foreign_store, 1);
    let foreign = raw::raw_get(
        garage,
        &format!(
            "{}e/{}",
            foreign_store.config().prefix,
            hex(&foreign_keys[0].digest())
        ),
    );
    let cases: [(&str, Vec<u8>); 5] = [
        ("cut short", good[..good.len() - 10].to_vec()),
        ("a flipped bit", flipped),
        ("another key's entry", raw::raw_get(garage, &other)),
        ("another fleet's entry", foreign),
        ("empty", Vec::new()),
    ];
    for (what, bytes) in cases {
        raw::raw_put(garage, &target, &bytes);
        let reader = garage.store(keys.clone(), &prefix);
        match reader.lookup(&stored[0]) {
            Lookup::Hit { .. } => panic!("{what}: loaded"),
            Lookup::Miss(Miss::Corrupt { .. } | Miss::ForeignKey { .. }) => {}
            Lookup::Miss(miss) => panic!("{what}: {miss}"),
        }
        assert_eq!(reader.bucket_statistics().unverified, 1, "{what}: counted");
    }
    // The right node's put writes over what does not verify.
    store.put(&stored[0], None, &artifact(0, 2000), Duration::ZERO);
    let reader = garage.store(keys, &prefix);
    match reader.lookup(&stored[0]) {
        Lookup::Hit {
            artifact: bytes, ..
        } => assert!(bytes == artifact(0, 2000)),
        Lookup::Miss(miss) => panic!("the repaired entry misses: {miss}"),
    }
}

#[test]
fn p16_a_node_with_an_empty_disk_loads_a_batch_from_the_bucket_and_keeps_it() {
    use kiln_bucket::BucketTier;
    use kiln_store::{DiskStore, StoreConfig};
    use std::sync::Arc;
    let Some(garage) = support::shared("a fresh node reading the bucket") else {
        return;
    };
    let keys = support::fleet_keys();
    let prefix = support::fresh_prefix();
    let scratch = kiln_test_support::Scratch::new("bucket-fresh-node");
    let open = |name: &str| {
        let disk = DiskStore::open(StoreConfig::at(scratch.join(name))).expect("a disk store");
        BucketTier::new(Arc::new(disk), garage.store(keys.clone(), &prefix))
    };
    let builder = open("builder");
    let stored: Vec<StoreKey> = (0..16).map(key).collect();
    for (number, key) in stored.iter().enumerate() {
        builder.put(key, None, &artifact(number as u32, 3000), Duration::ZERO);
    }
    assert!(
        builder.flush(Duration::from_secs(10)),
        "the bucket took every write"
    );
    let fresh = open("fresh");
    let found = fresh.lookup_many(&stored);
    assert!(
        found
            .iter()
            .all(|lookup| matches!(lookup, Lookup::Hit { .. }))
    );
    // One call for the batch; its set had no pack (the builder's puts
    // were not a batch), so the failure memories of its kernels were read
    // beside it, in one call of their own: the loader's question for one
    // of them waits for that read and sends nothing more.
    use kiln_engine::Blobs;
    use kiln_engine::store::RememberedFailure;
    let memory = fresh.lookup_blob(&RememberedFailure::blob_key(&stored[0]));
    assert!(matches!(memory, Lookup::Miss(Miss::Absent)), "{memory:?}");
    let calls = fresh.bucket().bucket_statistics().calls;
    assert_eq!(calls, 2, "one call for the batch, one for its memories");
    // Copied to its disk: the next batch asks the bucket nothing.
    let again = fresh.lookup_many(&stored);
    assert!(
        again
            .iter()
            .all(|lookup| matches!(lookup, Lookup::Hit { .. }))
    );
    assert_eq!(
        fresh.bucket().bucket_statistics().calls,
        calls,
        "a warm batch is local"
    );
}

#[test]
fn p16_a_refusing_bucket_is_a_miss_and_one_warning() {
    let Some(garage) = support::shared("a bucket that refuses this node's credentials") else {
        return;
    };
    let mut config = garage.config_at(garage.port, support::fleet_keys(), &support::fresh_prefix());
    if let Some(credentials) = &mut config.credentials {
        credentials.secret = "0".repeat(64);
    }
    config.retry_after = Duration::from_secs(30);
    let store = BucketStore::open(config).expect("a store opens");
    let keys: Vec<StoreKey> = (0..4).map(key).collect();
    let found = store.lookup_many(&keys);
    assert!(found.iter().all(is_unreadable), "{found:?}");
    let outcome = store.put(&key(9), None, b"x", Duration::ZERO);
    assert!(!matches!(outcome, kiln_engine::StoreOutcome::Stored { .. }));
    let statistics = store.bucket_statistics();
    assert_eq!(statistics.breaker_opened, 1, "one outage, one warning");
    assert_eq!(statistics.skipped_while_open, 1, "the put asked nothing");
}

/// A loopback server answering every request with `status`: a bucket
/// that throttles or fails (what Garage cannot be made to do).
fn answering(status: &'static str) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
    let port = listener.local_addr().expect("an address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut buffer = [0u8; 8192];
                while let Ok(read) = stream.read(&mut buffer) {
                    if read == 0 {
                        break;
                    }
                    let body = "<Error><Code>SlowDown</Code></Error>";
                    let reply = format!(
                        "HTTP/1.1 {status}\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if stream.write_all(reply.as_bytes()).is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

#[test]
fn p16_throttling_and_server_errors_are_misses_within_one_timeout() {
    for status in [
        "503 Slow Down",
        "429 Too Many Requests",
        "500 Internal Server Error",
    ] {
        let port = answering(status);
        let endpoint = url::Url::parse(&format!("http://127.0.0.1:{port}")).expect("a URL");
        let mut config =
            kiln_bucket::BucketConfig::new(endpoint, support::BUCKET, support::fleet_keys());
        config.timeout = Duration::from_millis(500);
        config.retry_after = Duration::from_secs(30);
        let store = BucketStore::open(config).expect("a store opens");
        let keys: Vec<StoreKey> = (0..8).map(key).collect();
        let started = Instant::now();
        let found = store.lookup_many(&keys);
        let elapsed = started.elapsed();
        assert!(found.iter().all(is_unreadable), "{status}: {found:?}");
        assert!(
            elapsed < Duration::from_millis(1500),
            "{status}: {elapsed:?}"
        );
        let again = store.lookup_many(&keys);
        assert!(again.iter().all(is_unreadable));
        let statistics = store.bucket_statistics();
        assert_eq!(statistics.breaker_opened, 1, "{status}: one warning");
        assert_eq!(
            statistics.skipped_while_open, 1,
            "{status}: then nothing asked"
        );
    }
}
