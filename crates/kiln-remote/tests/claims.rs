//! Claims across machines against a real redis-server (P12): a lease's
//! value names its holder for a node that waits on it, a value without a
//! valid authenticator (an earlier version's, anyone's) is written over,
//! and a lease is let go only by its own holder (compared on the token).
//! A user with a password hears the fleet's claims; one that may use no
//! channel claims from the keys alone.

mod support;

use kiln_engine::store::{Claim, ClaimWait, hex};
use kiln_engine::{ArtifactId, Claims, KernelId, KeyComponents, StoreKey};
use std::time::Duration;

use kiln_remote::{Keys, RemoteStore, TieredStore};
use kiln_store::{DiskStore, StoreConfig};
use support::{Redis, config, fleet_keys, fresh_prefix, open};

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

fn held(claim: Claim) -> kiln_engine::store::ClaimGuard {
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
fn p12_an_unauthenticated_lease_is_written_over_and_a_lease_taken_over_stays_its_holders() {
    let Some(redis) = redis_or_skip("unauthenticated lease values") else {
        return;
    };
    let (keys, prefix) = (fleet_keys(), fresh_prefix());
    let store = open(&redis.url(), keys.clone(), &prefix);
    let mut connection = raw(&redis);
    // The values of earlier versions carry no authenticator: anyone who
    // can write Redis could have written them. Nobody is named for them,
    // and the key is taken.
    for (number, value) in [
        (
            2,
            "build-3 pid 4242 a1b2c3d4e5f60718 Instant { tv_sec: 9, tv_nsec: 1 }",
        ),
        (
            5,
            "kiln-lease-2 ffffffffffffffffffffffffffffffff 77 build-9",
        ),
    ] {
        let () = redis::cmd("SET")
            .arg(claim_key(&prefix, &key(number)))
            .arg(value)
            .arg("PX")
            .arg(60_000)
            .query(&mut connection)
            .expect("SET answers");
        assert_eq!(store.holder(&key(number)), None);
        let _taken = held(store.claim(&key(number), ClaimWait::Once));
        assert_eq!(store.holder(&key(number)), Some(this_process()));
    }

    // A lease that ran out (its holder hung, its key gone) and was taken
    // by another holder is not freed when the first holder lets go.
    let short = |keys: Keys| {
        let mut settings = config(&redis.url(), keys, &prefix);
        settings.lease = Duration::from_secs(1);
        RemoteStore::open(settings).expect("the store opens")
    };
    let hung = short(keys.clone());
    let other = short(keys.clone());
    let guard = held(hung.claim(&key(3), ClaimWait::Once));
    guard.stop_renewing();
    let () = redis::cmd("DEL")
        .arg(claim_key(&prefix, &key(3)))
        .query(&mut connection)
        .expect("DEL answers");
    // Two missed beats, the last word given, the clocks' allowance: then
    // the other takes the key (asked until then, as late as a loaded
    // machine makes it).
    let hung_at = std::time::Instant::now();
    let theirs = loop {
        match other.claim(&key(3), ClaimWait::Once) {
            Claim::Held(guard) => break guard,
            Claim::Busy => {
                assert!(
                    hung_at.elapsed() < Duration::from_secs(60),
                    "the hung lease never ran out: {:?}",
                    other.remote_statistics()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            Claim::Uncoordinated => panic!("the remote coordinates claims"),
        }
    };
    drop(guard);
    let third = open(&redis.url(), keys, &prefix);
    assert!(
        matches!(third.claim(&key(3), ClaimWait::Once), Claim::Busy),
        "the newer lease stays"
    );
    assert_eq!(third.holder(&key(3)), Some(this_process()));
    drop(theirs);
    assert_eq!(third.holder(&key(3)), None, "released");
    let _mine = held(third.claim(&key(3), ClaimWait::Once));
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

#[test]
fn p12_a_redis_user_that_may_not_publish_still_claims_from_the_keys() {
    // P12: leases are announced on the fleet's channel, but a Redis user
    // whose ACL allows no channel still takes, honours and lets go leases
    // by their keys, as without the channel.
    let Some(redis) = redis_or_skip("a user without channels") else {
        return;
    };
    let mut connection = raw(&redis);
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("nochannels")
        .arg("on")
        .arg(">secret")
        .arg("~*")
        .arg("+@all")
        .arg("resetchannels")
        .query(&mut connection)
        .expect("ACL SETUSER answers");
    let url = redis
        .url()
        .replacen("redis://", "redis://nochannels:secret@", 1);
    let (keys, prefix) = (fleet_keys(), fresh_prefix());
    let holder = open(&url, keys.clone(), &prefix);
    let waiter = open(&url, keys, &prefix);
    let guard = held(holder.claim(&key(9), ClaimWait::Once));
    assert!(
        matches!(waiter.claim(&key(9), ClaimWait::Once), Claim::Busy),
        "the lease in its key is honoured"
    );
    drop(guard);
    let _mine = held(waiter.claim(&key(9), ClaimWait::Once));
    assert_eq!(holder.remote_statistics().errors, 0);
}

#[test]
fn p12_a_redis_user_with_a_password_hears_the_fleets_claims() {
    // P12: the listener authenticates as the address says (user and
    // password) on its connection of its own: a lease whose key is deleted
    // still holds for a node that heard it announced.
    let Some(redis) = redis_or_skip("a user with a password, listening") else {
        return;
    };
    let mut connection = raw(&redis);
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("listener")
        .arg("on")
        .arg(">secret")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .query(&mut connection)
        .expect("ACL SETUSER answers");
    let url = redis
        .url()
        .replacen("redis://", "redis://listener:secret@", 1);
    let (keys, prefix) = (fleet_keys(), fresh_prefix());
    let holder = open(&url, keys.clone(), &prefix);
    let listener = open(&url, keys, &prefix);
    // Listening: it has claimed once.
    let _first = held(listener.claim(&key(100), ClaimWait::Once));
    let guard = held(holder.claim(&key(10), ClaimWait::Once));
    let () = redis::cmd("DEL")
        .arg(claim_key(&prefix, &key(10)))
        .query(&mut connection)
        .expect("DEL answers");
    assert!(
        matches!(listener.claim(&key(10), ClaimWait::Once), Claim::Busy),
        "the lease was heard on the channel"
    );
    // The subscriptions are the user's: none goes as the default user.
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut connection)
        .expect("CLIENT LIST answers");
    let subscribed: Vec<&str> = clients
        .lines()
        .filter(|client| client.contains(" sub=1 "))
        .collect();
    assert!(
        !subscribed.is_empty()
            && subscribed
                .iter()
                .all(|client| client.contains(" user=listener ")),
        "{clients}"
    );
    drop(guard);
    let _mine = held(listener.claim(&key(10), ClaimWait::Patiently));
}
