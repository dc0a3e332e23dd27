//! What a process hears of a remote that fails (P10, docs/FLEET.md): a
//! Redis that is down or paused costs each process one warning, however
//! many lookups and writes ask for it, and the local store goes on working.
//!
//! The warnings are counted by a logger of this binary's own; the tests run
//! one at a time, so that each counts only its own.

mod support;

use std::time::Duration;

use kiln_engine::{
    ArtifactId, ArtifactStore, ArtifactStoreExt, KernelId, KeyComponents, Lookup, StoreKey,
};
use kiln_remote::{RemoteStore, TieredStore};
use kiln_store::{DiskStore, StoreConfig};
use support::warned::{one_at_a_time, warnings};
use support::{Redis, config, fleet_keys, fresh_prefix};

const TIMEOUT: Duration = Duration::from_secs(1);

fn key(number: u32) -> StoreKey {
    let components = KeyComponents::new("cuda", "nvrtc 13.0", "sm_90", "-O3");
    let id = ArtifactId::new(
        KernelId::named("warnings.kernel")
            .parameter(&number)
            .build(),
        0u8,
    );
    StoreKey::for_artifact(&components, &id, None)
}

fn redis_or_skip(what: &str) -> Option<Redis> {
    Redis::single()
        .map_err(|reason| support::skip(what, &reason))
        .ok()
}

fn tiered(redis: &Redis, retry_after: Duration) -> TieredStore {
    let mut settings = config(&redis.url(), fleet_keys(), &fresh_prefix());
    // Long enough that a working Redis on a loaded machine is never taken
    // for an outage (a second warning).
    settings.timeout = TIMEOUT;
    settings.retry_after = retry_after;
    let remote = RemoteStore::open(settings).expect("the remote opens");
    let disk = DiskStore::open(StoreConfig::at(redis.scratch.join(&fresh_prefix())))
        .expect("a disk store opens");
    TieredStore::new(disk, remote)
}

/// Many lookups, puts and a batch lookup, each answered by the local store.
fn use_it(store: &TieredStore, first: u32) {
    for number in first..first + 20 {
        assert!(matches!(store.lookup(&key(number)), Lookup::Miss(_)));
        store.put(&key(number), None, &[7u8; 300], Duration::ZERO);
        assert!(
            matches!(store.lookup(&key(number)), Lookup::Hit { .. }),
            "the local store keeps working"
        );
    }
    let batch: Vec<StoreKey> = (first + 20..first + 36).map(key).collect();
    assert_eq!(store.lookup_many(&batch).len(), batch.len());
    assert!(store.flush(Duration::from_secs(10)), "queued writes end");
}

// P10
#[test]
fn a_redis_that_goes_down_costs_the_process_one_warning() {
    let _turn = one_at_a_time();
    let Some(mut redis) = redis_or_skip("one warning for a dead redis") else {
        return;
    };
    // Probes come every 100 ms at first: several find the remote dead, and
    // none of them warns again.
    let store = tiered(&redis, Duration::from_millis(100));
    store.put(&key(0), None, &[1u8; 300], Duration::ZERO);
    assert!(store.flush(Duration::from_secs(10)));
    assert!(warnings().is_empty(), "a working remote: {:?}", warnings());
    redis.servers[0].stop();
    use_it(&store, 100);
    std::thread::sleep(Duration::from_millis(250));
    use_it(&store, 200);
    let heard = warnings();
    assert_eq!(heard.len(), 1, "one outage, one warning: {heard:#?}");
    assert!(
        heard[0].contains("not answering") && heard[0].contains(&redis.url()),
        "the warning says which remote and what happened: {}",
        heard[0]
    );
}

// P10
#[test]
fn a_paused_redis_costs_the_process_one_warning() {
    let _turn = one_at_a_time();
    let Some(redis) = redis_or_skip("one warning for a paused redis") else {
        return;
    };
    let store = tiered(&redis, Duration::from_millis(100));
    store.put(&key(0), None, &[1u8; 300], Duration::ZERO);
    assert!(store.flush(Duration::from_secs(10)));
    // Paused for three timeouts: the first call meets the pause however
    // late a loaded machine makes it.
    let pause = (TIMEOUT * 3).as_millis().to_string();
    let paused = redis.servers[0].command(&["CLIENT", "PAUSE", &pause, "ALL"]);
    assert!(paused.is_some_and(|reply| reply.starts_with("+OK")));
    use_it(&store, 100);
    std::thread::sleep(Duration::from_millis(250));
    use_it(&store, 200);
    let heard = warnings();
    assert_eq!(heard.len(), 1, "one outage, one warning: {heard:#?}");
}
