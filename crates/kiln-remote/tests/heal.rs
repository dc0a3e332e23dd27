//! Entries that heal, values that cost nothing, one timeout and no false
//! alarms (P10), on a real redis-server:
//!
//! - an entry damaged, extended or cut short by a writer without the key
//!   is replaced by the fleet's next writer, and the next reader hits;
//! - eight 60 MiB values under a batch's keys are skipped by its lookup,
//!   not read past its timeout: the batch keeps its other hits;
//! - calls in flight when the breaker opens end with it;
//! - two kernels of one text (their recipes name each its own kernel)
//!   publishing under one source key raise no nondeterminism alarm.

mod support;

use std::time::{Duration, Instant};

use kiln_engine::store::{Recipe, hex};
use kiln_engine::{
    ArtifactId, ArtifactStore, ArtifactStoreExt, KernelId, KeyComponents, Lookup, StoreKey,
};
use support::{Redis, config, fleet_keys, fresh_prefix, open};

fn key(number: u32) -> StoreKey {
    let components = KeyComponents::new("cuda", "nvrtc 13.0", "sm_90", "-O3");
    let id = ArtifactId::new(
        KernelId::named("heal.kernel").parameter(&number).build(),
        0u8,
    );
    StoreKey::for_artifact(&components, &id, None)
}

fn artifact(number: u32) -> Vec<u8> {
    format!("artifact {number} ").repeat(40).into_bytes()
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
        .expect("a raw connection")
}

/// What a writer without the key does to a value.
type Damage = fn(&mut Vec<u8>);

fn entry_key(prefix: &str, key: &StoreKey) -> String {
    format!("{prefix}e:{}", hex(&key.digest()))
}

#[test]
fn p10_damaged_extended_and_truncated_entries_are_replaced_by_the_next_writer() {
    let Some(redis) = redis_or_skip("entries that heal") else {
        return;
    };
    let prefix = fresh_prefix();
    let keys = fleet_keys();
    let first = open(&redis.url(), keys.clone(), &prefix);
    let next = open(&redis.url(), keys.clone(), &prefix);
    let reader = open(&redis.url(), keys, &prefix);
    let mut connection = raw(&redis);
    let damages: [(&str, Damage); 4] = [
        ("one byte appended", |value| value.push(0)),
        ("cut short", |value| {
            value.pop();
        }),
        ("its tag changed", |value| {
            let last = value.len() - 1;
            value[last] ^= 1;
        }),
        ("its payload changed", |value| value[80] ^= 1),
    ];
    for (number, (what, damage)) in (0u32..).zip(damages) {
        let key = key(number);
        first.put(&key, None, &artifact(number), Duration::from_millis(3));
        let mut value: Vec<u8> = redis::cmd("GET")
            .arg(entry_key(&prefix, &key))
            .query(&mut connection)
            .expect("GET answers");
        damage(&mut value);
        let () = redis::cmd("SET")
            .arg(entry_key(&prefix, &key))
            .arg(&value)
            .arg("PX")
            .arg(120_000)
            .query(&mut connection)
            .expect("SET answers");
        assert!(
            matches!(reader.lookup(&key), Lookup::Miss(_)),
            "an entry {what} is never loaded"
        );
        next.put(&key, None, &artifact(number), Duration::from_millis(3));
        match reader.lookup(&key) {
            Lookup::Hit { artifact: got, .. } => assert_eq!(got, artifact(number), "{what}"),
            other => panic!("an entry {what} was not replaced by the next writer: {other:?}"),
        }
        let ttl: i64 = redis::cmd("PTTL")
            .arg(entry_key(&prefix, &key))
            .query(&mut connection)
            .expect("PTTL answers");
        assert!(ttl > 120_000, "written whole, with its own time: {ttl} ms");
    }
    assert_eq!(next.remote_statistics().replaced_unverified, 4);
}

#[test]
fn p10_eight_60_mib_values_do_not_cost_a_batch_its_other_hits() {
    let Some(redis) = redis_or_skip("large values") else {
        return;
    };
    const KERNELS: u32 = 64;
    let prefix = fresh_prefix();
    let keys = fleet_keys();
    let mut settings = config(&redis.url(), keys.clone(), &prefix);
    settings.timeout = Duration::from_millis(500);
    let writer = open(&redis.url(), keys, &prefix);
    let mut connection = raw(&redis);
    let large = vec![7u8; 60 << 20];
    for number in 0..KERNELS {
        if number % 8 == 0 {
            let () = redis::cmd("SET")
                .arg(entry_key(&prefix, &key(number)))
                .arg(&large)
                .query(&mut connection)
                .expect("SET answers");
        } else {
            writer.put(&key(number), None, &artifact(number), Duration::ZERO);
        }
    }
    let reader = kiln_remote::RemoteStore::open(settings).expect("the reader opens");
    let batch: Vec<StoreKey> = (0..KERNELS).map(key).collect();
    let started = Instant::now();
    let found = reader.lookup_many(&batch);
    let took = started.elapsed();
    let hits = found
        .iter()
        .filter(|found| matches!(found, Lookup::Hit { .. }))
        .count();
    let statistics = reader.remote_statistics();
    eprintln!("a batch past eight 60 MiB values: {hits} hits in {took:?}");
    assert_eq!(hits, 56, "every entry but the large ones: {statistics:?}");
    assert_eq!(statistics.timeouts, 0, "{statistics:?}");
    assert!(statistics.oversize_reads >= 8, "{statistics:?}");
}

#[test]
fn p10_calls_in_flight_when_the_breaker_opens_end_with_it() {
    let Some(redis) = redis_or_skip("one timeout") else {
        return;
    };
    const TIMEOUT: Duration = Duration::from_millis(800);
    let mut settings = config(&redis.url(), fleet_keys(), &fresh_prefix());
    settings.timeout = TIMEOUT;
    settings.retry_after = Duration::from_secs(60);
    let store = kiln_remote::RemoteStore::open(settings).expect("the store opens");
    // Connected first, then frozen: every call hangs.
    assert!(store.is_reachable());
    redis.servers[0].pause();
    let started = Instant::now();
    let ended: Vec<Duration> = std::thread::scope(|scope| {
        let calls: Vec<_> = (0..4u32)
            .map(|number| {
                let store = &store;
                scope.spawn(move || {
                    // Each call goes a quarter of the timeout after the
                    // one before: without the breaker ending them, the
                    // last would end 1.75 timeouts after the first began.
                    std::thread::sleep(TIMEOUT / 4 * number);
                    let _ = store.lookup(&key(number));
                    started.elapsed()
                })
            })
            .collect();
        calls
            .into_iter()
            .map(|call| call.join().expect("a call ends"))
            .collect()
    });
    redis.servers[0].resume();
    let last = ended.iter().max().copied().unwrap_or_default();
    let statistics = store.remote_statistics();
    eprintln!("calls ended after {ended:?}: {statistics:?}");
    assert!(
        last < TIMEOUT + TIMEOUT / 4,
        "the last call ended {last:?} after the first began (timeout {TIMEOUT:?})"
    );
    assert_eq!(statistics.breaker_opened, 1, "{statistics:?}");
    assert!(statistics.ended_by_breaker >= 1, "{statistics:?}");
}

/// A stored value as the loader writes it: the artifact's bytes, then the
/// recipe of the kernel that asked for it.
fn value_with_recipe(artifact: &[u8], kernel: &str) -> Vec<u8> {
    let mut value =
        bincode::serde::encode_to_vec(artifact, bincode::config::standard()).expect("bytes encode");
    let recipe = Recipe {
        id: format!("id of {kernel}").into_bytes(),
        lowered: b"__global__ void k() {}".to_vec(),
    };
    value.extend(
        bincode::serde::encode_to_vec(&recipe, bincode::config::standard())
            .expect("a recipe encodes"),
    );
    value
}

#[test]
fn p10_one_text_under_two_kernel_names_is_no_nondeterministic_compile() {
    let Some(redis) = redis_or_skip("false alarms") else {
        return;
    };
    let prefix = fresh_prefix();
    let keys = fleet_keys();
    let one = open(&redis.url(), keys.clone(), &prefix);
    let two = open(&redis.url(), keys, &prefix);
    let source = key(100);
    let compiled = artifact(1);
    one.put(
        &source,
        None,
        &value_with_recipe(&compiled, "a.cu"),
        Duration::ZERO,
    );
    two.put(
        &source,
        None,
        &value_with_recipe(&compiled, "b.cu"),
        Duration::ZERO,
    );
    assert_eq!(
        two.remote_statistics().nondeterministic,
        0,
        "the same artifact, recipes naming two files"
    );
    // Another artifact is still told apart.
    two.put(
        &source,
        None,
        &value_with_recipe(&artifact(2), "b.cu"),
        Duration::ZERO,
    );
    assert_eq!(two.remote_statistics().nondeterministic, 1);
}
