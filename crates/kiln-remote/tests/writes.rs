//! Bounded reads and careful writes against a real redis-server (P10): a
//! reader never fetches a value over its limit, a publish of the same
//! bytes keeps the entry there, a node with another key never replaces
//! the fleet's entries, and a key of the wrong type is repaired by the
//! next writer instead of failing every batch that includes it.

mod support;

use std::time::Duration;

use kiln_engine::store::hex;
use kiln_engine::{
    ArtifactId, ArtifactStore, ArtifactStoreExt, KernelId, KeyComponents, Lookup, Miss, StoreKey,
};
use kiln_remote::RemoteStore;
use support::{Redis, config, fleet_keys, fresh_prefix, open};

fn key(number: u32) -> StoreKey {
    let components = KeyComponents::new("cuda", "nvrtc 13.0", "sm_90", "-O3");
    let id = ArtifactId::new(
        KernelId::named("writes.kernel").parameter(&number).build(),
        0u8,
    );
    StoreKey::for_artifact(&components, &id, None)
}

fn artifact(number: u32) -> Vec<u8> {
    (0..3000u32).map(|index| (index ^ number) as u8).collect()
}

fn redis_or_skip(what: &str) -> Option<Redis> {
    Redis::single()
        .map_err(|reason| support::skip(what, &reason))
        .ok()
}

fn raw(redis: &Redis) -> redis::Connection {
    redis::Client::open(redis.url())
        .and_then(|client| client.get_connection())
        .expect("the test's redis-server takes connections")
}

fn entry_key(prefix: &str, key: &StoreKey) -> String {
    format!("{prefix}e:{}", hex(&key.digest()))
}

/// The bytes redis-server has sent to its clients so far.
fn sent_by(redis: &Redis) -> u64 {
    let info = redis.servers[0]
        .command(&["INFO", "stats"])
        .expect("INFO answers");
    info.lines()
        .find_map(|line| line.strip_prefix("total_net_output_bytes:"))
        .and_then(|number| number.trim().parse().ok())
        .expect("INFO stats counts the bytes sent")
}

#[test]
fn p10_a_reader_never_fetches_a_value_over_its_limit() {
    // P10: anyone who can write Redis puts 8 MiB values where a batch
    // looks; a reader limited to 1 MiB entries reads their length only.
    let Some(redis) = redis_or_skip("bounded reads") else {
        return;
    };
    let prefix = fresh_prefix();
    let mut settings = config(&redis.url(), fleet_keys(), &prefix);
    settings.max_entry_bytes = 1 << 20;
    let reader = RemoteStore::open(settings).expect("the store opens");
    let mut connection = raw(&redis);
    let huge = vec![7u8; 8 << 20];
    let keys: Vec<StoreKey> = (0..4).map(key).collect();
    for key in &keys {
        let () = redis::cmd("SET")
            .arg(entry_key(&prefix, key))
            .arg(&huge)
            .query(&mut connection)
            .expect("SET answers");
    }
    let before = sent_by(&redis);
    let found = reader.lookup_many(&keys);
    let sent = sent_by(&redis) - before;
    for found in &found {
        assert!(
            matches!(found, Lookup::Miss(Miss::Corrupt { detail }) if detail.contains("over the limit")),
            "{found:?}"
        );
    }
    assert!(
        sent < 64 << 10,
        "the reader was sent {sent} bytes for four values it may not read"
    );
    assert_eq!(reader.remote_statistics().oversize_reads, 4);
}

#[test]
fn p10_an_entry_that_does_not_verify_is_replaced_and_the_fleets_next_writer_heals_it() {
    // P10: only an entry that verifies is kept. A node given the wrong
    // key cannot tell the fleet's entries from forgeries and replaces
    // them; the fleet's next writer replaces its entries in turn, and the
    // fleet hits again. Nothing is kept forever because a few bytes match.
    let Some(redis) = redis_or_skip("a node with another key") else {
        return;
    };
    let prefix = fresh_prefix();
    let fleet = open(&redis.url(), fleet_keys(), &prefix);
    let stranger = open(&redis.url(), fleet_keys(), &prefix);
    let (same, other) = (key(1), key(2));
    for key in [&same, &other] {
        assert!(matches!(
            fleet.put(key, None, &artifact(1), Duration::from_millis(5)),
            kiln_engine::StoreOutcome::Stored { .. }
        ));
    }
    stranger.put(&same, None, &artifact(1), Duration::from_millis(5));
    stranger.put(&other, None, &artifact(9), Duration::from_millis(5));
    assert_eq!(stranger.remote_statistics().replaced_unverified, 2);
    for key in [&same, &other] {
        assert!(
            matches!(fleet.lookup(key), Lookup::Miss(_)),
            "the stranger's entries do not verify for the fleet"
        );
        fleet.put(key, None, &artifact(1), Duration::from_millis(5));
        assert!(
            matches!(fleet.lookup(key), Lookup::Hit { .. }),
            "the fleet's next writer healed it"
        );
    }
}

#[test]
fn p10_a_key_of_the_wrong_type_is_a_miss_and_the_next_writer_repairs_it() {
    let Some(redis) = redis_or_skip("keys of the wrong type") else {
        return;
    };
    let prefix = fresh_prefix();
    let store = open(&redis.url(), fleet_keys(), &prefix);
    let mut connection = raw(&redis);
    let (broken, fine) = (key(3), key(4));
    assert!(matches!(
        store.put(&fine, None, &artifact(4), Duration::ZERO),
        kiln_engine::StoreOutcome::Stored { .. }
    ));
    let () = redis::cmd("HSET")
        .arg(entry_key(&prefix, &broken))
        .arg("field")
        .arg("value")
        .query(&mut connection)
        .expect("HSET answers");
    let found = store.lookup_many(&[broken.clone(), fine.clone()]);
    assert!(
        matches!(found[0], Lookup::Miss(Miss::Absent)),
        "{:?}",
        found[0]
    );
    assert!(
        matches!(found[1], Lookup::Hit { .. }),
        "the rest of the batch hits"
    );
    assert!(matches!(
        store.put(&broken, None, &artifact(3), Duration::ZERO),
        kiln_engine::StoreOutcome::Stored { .. }
    ));
    assert!(
        matches!(store.lookup(&broken), Lookup::Hit { .. }),
        "repaired"
    );
}

#[test]
fn p10_a_fleet_count_that_is_no_number_is_no_outage() {
    // P10: anyone can write the counts' hash; a field that holds no
    // number counts nothing, and the remote is still taken as answering.
    let Some(redis) = redis_or_skip("fleet counts that are no numbers") else {
        return;
    };
    let prefix = fresh_prefix();
    let store = open(&redis.url(), fleet_keys(), &prefix);
    let mut connection = raw(&redis);
    let () = redis::cmd("HSET")
        .arg(format!("{prefix}stats"))
        .arg("timeouts")
        .arg("many")
        .arg("written")
        .arg("3")
        .query(&mut connection)
        .expect("HSET answers");
    let counts = store.fleet_counts().expect("the remote answers");
    assert_eq!((counts.timeouts, counts.written), (0, 3));
    assert!(!store.remote_statistics().breaker_open, "no outage");
}

#[test]
fn p10_a_fleet_count_that_is_no_number_is_bad_data_for_that_count_alone() {
    // P10: a field of the counts' hash that someone made no number does
    // not stop a node adding its counts: that count starts again from what
    // is added, every other one adds up as before.
    let Some(redis) = redis_or_skip("fleet counts added over garbage") else {
        return;
    };
    let prefix = fresh_prefix();
    let mut connection = raw(&redis);
    let () = redis::cmd("HSET")
        .arg(format!("{prefix}stats"))
        .arg("written")
        .arg("many")
        .arg("processes")
        .arg("2")
        .query(&mut connection)
        .expect("HSET answers");
    let node = |name: &str| {
        let disk =
            kiln_store::DiskStore::open(kiln_store::StoreConfig::at(redis.scratch.join(name)))
                .expect("a disk store opens");
        kiln_remote::TieredStore::new(disk, open(&redis.url(), fleet_keys(), &prefix))
    };
    for (round, name) in ["one", "two"].into_iter().enumerate() {
        let store = node(name);
        assert!(matches!(
            store.put(&key(40 + round as u32), None, &artifact(4), Duration::ZERO),
            kiln_engine::StoreOutcome::Stored { .. }
        ));
        assert!(store.flush(Duration::from_secs(10)));
        let counts = store.remote().fleet_counts().expect("the remote answers");
        assert_eq!(counts.processes, 3 + round as u64, "{counts:?}");
        assert_eq!(counts.written, 1 + round as u64, "{counts:?}");
        assert!(
            !store.remote().remote_statistics().breaker_open,
            "no outage"
        );
        assert_eq!(store.remote().remote_statistics().errors, 0, "no error");
    }
}
