//! Claims across machines against a real redis-server (P12): a lease's
//! value names its holder for a node that waits on it, an earlier
//! version's value is read too, and a lease is released only by its own
//! holder (compare-and-delete on the token).

mod support;

use kiln_core::store::{Claim, ClaimWait, hex};
use kiln_core::{ArtifactId, ArtifactStore, KernelId, KeyComponents, StoreKey};
use kiln_remote::TieredStore;
use kiln_store::{DiskStore, StoreConfig};
use support::{Redis, fleet_keys, fresh_prefix, open};

fn key(number: u32) -> StoreKey {
    let components = KeyComponents::new("cuda", "nvrtc 13.0", "sm_90", "-O3");
    let id = ArtifactId::new(
        KernelId::named("claims.kernel").parameter(&number).build(),
        0u8,
    );
    StoreKey::for_artifact(&components, &id, None)
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

/// The Redis key of `key`'s claim under `prefix`.
fn claim_key(prefix: &str, key: &StoreKey) -> String {
    format!("{prefix}c:{}", hex(&key.digest()))
}

/// How this process is named as a holder.
fn this_process() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|host| host.trim().to_owned())
        .expect("the host has a name");
    format!("process {} on {host}", std::process::id())
}

fn held(claim: Claim) -> kiln_core::store::ClaimGuard {
    match claim {
        Claim::Held(guard) => guard,
        other => panic!("expected the claim to be held, got {other:?}"),
    }
}

#[test]
fn p12_a_remote_claim_names_its_holder_until_it_is_released() {
    let Some(redis) = redis_or_skip("remote claim holders") else {
        return;
    };
    let (keys, prefix) = (fleet_keys(), fresh_prefix());
    let holder = open(&redis.url(), keys.clone(), &prefix);
    let waiter = open(&redis.url(), keys, &prefix);
    assert_eq!(waiter.holder(&key(1)), None, "nobody holds it yet");
    let guard = held(holder.claim(&key(1), ClaimWait::Once));
    assert_eq!(waiter.holder(&key(1)), Some(this_process()));
    assert!(matches!(
        waiter.claim(&key(1), ClaimWait::Once),
        Claim::Busy
    ));
    drop(guard);
    assert_eq!(waiter.holder(&key(1)), None, "released");
}

#[test]
fn p12_an_earlier_versions_lease_is_read_and_left_to_its_holder() {
    let Some(redis) = redis_or_skip("earlier lease values") else {
        return;
    };
    let prefix = fresh_prefix();
    let store = open(&redis.url(), fleet_keys(), &prefix);
    let mut connection = raw(&redis);
    // The value a node of the version before this one writes.
    let () = redis::cmd("SET")
        .arg(claim_key(&prefix, &key(2)))
        .arg("build-3 pid 4242 a1b2c3d4e5f60718 Instant { tv_sec: 9, tv_nsec: 1 }")
        .arg("PX")
        .arg(60_000)
        .query(&mut connection)
        .expect("SET answers");
    assert_eq!(
        store.holder(&key(2)).as_deref(),
        Some("process 4242 on build-3")
    );
    assert!(matches!(store.claim(&key(2), ClaimWait::Once), Claim::Busy));

    // Compare-and-delete: a lease taken over by another holder (its value
    // replaced) is not freed when the first holder lets go.
    let guard = held(store.claim(&key(3), ClaimWait::Once));
    let theirs = "kiln-lease-2 ffffffffffffffffffffffffffffffff 77 build-9";
    let () = redis::cmd("SET")
        .arg(claim_key(&prefix, &key(3)))
        .arg(theirs)
        .query(&mut connection)
        .expect("SET answers");
    drop(guard);
    let left: Option<String> = redis::cmd("GET")
        .arg(claim_key(&prefix, &key(3)))
        .query(&mut connection)
        .expect("GET answers");
    assert_eq!(left.as_deref(), Some(theirs), "the newer lease stays");
    assert_eq!(
        store.holder(&key(3)).as_deref(),
        Some("process 77 on build-9")
    );
}

#[test]
fn p12_a_two_level_store_names_the_machines_holder_then_the_fleets() {
    let Some(redis) = redis_or_skip("two-level claim holders") else {
        return;
    };
    let (keys, prefix) = (fleet_keys(), fresh_prefix());
    let disk = |name: &str| {
        DiskStore::open(StoreConfig::at(redis.scratch.join(name))).expect("a disk store opens")
    };
    let holder = TieredStore::new(disk("one"), open(&redis.url(), keys.clone(), &prefix));
    let same_machine = TieredStore::new(disk("one"), open(&redis.url(), keys.clone(), &prefix));
    let other_machine = TieredStore::new(disk("two"), open(&redis.url(), keys, &prefix));
    assert_eq!(same_machine.holder(&key(4)), None);
    let guard = held(holder.claim(&key(4), ClaimWait::Once));
    // The disk store's claim names it on this machine, the remote's lease
    // on another: the same holder, as a person reads it.
    assert_eq!(same_machine.holder(&key(4)), Some(this_process()));
    assert_eq!(other_machine.holder(&key(4)), Some(this_process()));
    assert!(matches!(
        other_machine.claim(&key(4), ClaimWait::Once),
        Claim::Busy
    ));
    drop(guard);
    // The remote lease is released behind the queued writes.
    assert!(holder.flush(std::time::Duration::from_secs(20)));
    assert_eq!(other_machine.holder(&key(4)), None);
    assert_eq!(same_machine.holder(&key(4)), None);
}
