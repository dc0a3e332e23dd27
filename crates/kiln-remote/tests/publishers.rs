//! Several publishers of one remote tier, against a real redis-server and a
//! real three-shard cluster (P10): the first publish of a key wins and a
//! host whose compile gave other bytes is warned and counted, never
//! silently overwriting; a store replaces its own entry; `push` and `pull`
//! copy verified entries between disk stores through the remote.

mod support;

use std::time::Duration;

use kiln_engine::{
    ArtifactId, ArtifactStore, ArtifactStoreExt, KernelId, KeyComponents, Lookup, StoreKey,
    StoreOutcome,
};
use kiln_remote::{RemoteStore, TieredStore};
use kiln_store::{DiskStore, StoreConfig};
use support::{Redis, fleet_keys, fresh_prefix, open};

fn key(number: u32) -> StoreKey {
    let components = KeyComponents::new("cuda", "nvrtc 13.0", "sm_90", "-O3");
    let id = ArtifactId::new(
        KernelId::named("publishers.kernel")
            .parameter(&number)
            .build(),
        0u8,
    );
    StoreKey::for_artifact(&components, &id, None)
}

fn hit(lookup: Lookup<Vec<u8>>) -> Vec<u8> {
    match lookup {
        Lookup::Hit { artifact, .. } => artifact,
        Lookup::Miss(miss) => panic!("expected a hit, got {miss}"),
    }
}

fn redis_or_skip(redis: Result<Redis, String>, what: &str) -> Option<Redis> {
    redis.map_err(|reason| support::skip(what, &reason)).ok()
}

fn first_publish_wins(redis: &Redis) {
    let url = redis.url();
    let keys = fleet_keys();
    let prefix = fresh_prefix();
    // Two hosts: two stores, each with its own connections and memory.
    let (first, second) = (
        open(&url, keys.clone(), &prefix),
        open(&url, keys.clone(), &prefix),
    );
    let work = Duration::from_millis(4);
    assert!(matches!(
        first.put(&key(0), None, b"bytes of host one", work),
        StoreOutcome::Stored { .. }
    ));
    // The same bytes from another host: written again, nothing to say.
    assert!(matches!(
        second.put(&key(0), None, b"bytes of host one", work),
        StoreOutcome::Stored { .. }
    ));
    assert_eq!(second.remote_statistics().nondeterministic, 0);

    // Other bytes from another host: the first stays, counted.
    for _ in 0..3 {
        assert_eq!(
            second.put(&key(0), None, b"other bytes of host two", work),
            StoreOutcome::Skipped
        );
    }
    assert_eq!(second.remote_statistics().nondeterministic, 3);
    let third = open(&url, keys.clone(), &prefix);
    assert_eq!(hit(third.lookup(&key(0))), b"bytes of host one");

    // A store replaces what it published itself (P2).
    assert!(matches!(
        first.put(&key(0), None, b"host one, compiled again", work),
        StoreOutcome::Stored { .. }
    ));
    assert_eq!(hit(third.lookup(&key(0))), b"host one, compiled again");
    assert_eq!(first.remote_statistics().nondeterministic, 0);

    // An entry another key signed (another fleet's, or a node given the
    // wrong key) cannot be told from a forgery: only what verifies is
    // kept, so it is replaced, and the fleet's readers hit again.
    let stranger = open(&url, fleet_keys(), &prefix);
    assert!(matches!(
        stranger.put(&key(1), None, b"not this fleet's", work),
        StoreOutcome::Stored { .. }
    ));
    assert!(matches!(
        second.put(&key(1), None, b"this fleet's", work),
        StoreOutcome::Stored { .. }
    ));
    assert_eq!(second.remote_statistics().replaced_unverified, 1);
    assert_eq!(hit(third.lookup(&key(1))), b"this fleet's");
    // What is no entry of kiln's at all is written over.
    if redis.is_cluster {
        return;
    }
    let mut connection = redis::Client::open(redis.url())
        .and_then(|client| client.get_connection())
        .expect("the test's redis-server takes connections");
    let () = redis::cmd("SET")
        .arg(second.entry_key(&key(2)))
        .arg("garbage")
        .query(&mut connection)
        .expect("SET answers");
    assert!(matches!(
        second.put(&key(2), None, b"this fleet's", work),
        StoreOutcome::Stored { .. }
    ));
    assert_eq!(hit(third.lookup(&key(2))), b"this fleet's");
    assert_eq!(second.remote_statistics().nondeterministic, 3);
}

// P10
#[test]
fn two_hosts_that_publish_different_bytes_for_one_key_keep_the_first_and_count_it() {
    if let Some(redis) = redis_or_skip(Redis::single(), "first publish wins on redis-server") {
        first_publish_wins(&redis);
    }
}

// P10
#[test]
fn the_first_publish_wins_on_a_cluster_too() {
    if let Some(redis) = redis_or_skip(Redis::cluster(), "first publish wins on a cluster") {
        first_publish_wins(&redis);
    }
}

// P10
#[test]
fn a_nondeterministic_compile_through_two_level_stores_is_counted_for_the_fleet() {
    let Some(redis) = redis_or_skip(Redis::single(), "nondeterministic compiles in tiers") else {
        return;
    };
    let keys = fleet_keys();
    let prefix = fresh_prefix();
    let tiered = |name: &str| {
        let local = DiskStore::open(StoreConfig::at(redis.scratch.join(name))).expect("opens");
        TieredStore::new(local, open(&redis.url(), keys.clone(), &prefix))
    };
    let (one, two) = (tiered("one"), tiered("two"));
    one.put(&key(7), None, b"one's", Duration::ZERO);
    assert!(one.flush(Duration::from_secs(10)));
    two.put(&key(7), None, b"two's", Duration::ZERO);
    assert!(two.flush(Duration::from_secs(10)));
    // Each host keeps its own bytes locally; the remote keeps the first.
    assert_eq!(hit(two.lookup(&key(7))), b"two's");
    assert_eq!(two.tiered_statistics().remote.nondeterministic, 1);
    let counted = two.remote().fleet_counts().expect("redis answers");
    assert_eq!(counted.nondeterministic, 1, "{counted:?}");
    assert_eq!(counted.processes, 2, "{counted:?}");
    let fresh = open(&redis.url(), keys, &prefix);
    assert_eq!(hit(fresh.lookup(&key(7))), b"one's");
}

fn push_and_pull(redis: &Redis) {
    let keys = fleet_keys();
    let prefix = fresh_prefix();
    let disk = |name: &str| {
        DiskStore::open(StoreConfig::at(
            redis.scratch.join(&format!("{prefix}{name}")),
        ))
        .expect("opens")
    };
    let (source, destination) = (disk("source"), disk("destination"));
    for number in 0..20 {
        source.put(
            &key(number),
            None,
            format!("artifact {number}").as_bytes(),
            Duration::from_millis(u64::from(number)),
        );
    }
    let remote: RemoteStore = open(&redis.url(), keys.clone(), &prefix);
    let pushed = kiln_remote::push(&source, &remote, &|_| true, &mut |_| {}).expect("pushes");
    assert_eq!((pushed.entries, pushed.copied), (20, 20), "{pushed:?}");
    let listing = remote.stored_keys().expect("redis answers");
    assert_eq!(listing.keys.len(), 20);
    assert_eq!(listing.refused, 0);
    let pulled = kiln_remote::pull(&destination, &remote, &|_| true, &mut |_| {}).expect("pulls");
    assert_eq!((pulled.copied, pulled.refused), (20, 0), "{pulled:?}");
    for number in 0..20 {
        let found = destination.lookup(&key(number));
        let Lookup::Hit { artifact, work, .. } = found else {
            panic!("kernel {number} was pulled");
        };
        assert_eq!(artifact, format!("artifact {number}").as_bytes());
        assert_eq!(work, Duration::from_millis(u64::from(number)));
    }
}

// P10
#[test]
fn push_and_pull_copy_every_entry_through_redis() {
    if let Some(redis) = redis_or_skip(Redis::single(), "push and pull on redis-server") {
        push_and_pull(&redis);
    }
}

// P10
#[test]
fn push_and_pull_copy_every_entry_through_a_cluster() {
    if let Some(redis) = redis_or_skip(Redis::cluster(), "push and pull on a cluster") {
        push_and_pull(&redis);
    }
}

#[test]
fn p7_a_kernel_found_by_its_text_is_published_with_its_own_recipe() {
    // P7, P10: two nodes, two kernels with one text, no fault. Node one
    // compiles kernel 0; node two finds kernel 1 by its text and publishes
    // it under kernel 1's id with kernel 1's recipe, leaving the text's
    // entry as node one wrote it: no false "nondeterministic" alarm, no
    // write counted failed, and kernel 1's entry finalizes again to its
    // bytes (`kiln verify --recompile`).
    use std::sync::Arc;

    use kiln_engine::KernelLoader;
    use kiln_engine::fake::{FakeCompiler, FakeKernel, FakeTarget};
    use kiln_engine::store::{Recompiled, recompile};

    let Some(redis) = redis_or_skip(Redis::single(), "a text shared by two kernels") else {
        return;
    };
    let (keys, prefix) = (fleet_keys(), fresh_prefix());
    let kernels = [
        FakeKernel::new(0).sharing_source("one text"),
        FakeKernel::new(1).sharing_source("one text"),
    ];
    let log = redis.scratch.join("compiles.log");
    for (index, kernel) in kernels.iter().enumerate() {
        let disk = DiskStore::open(StoreConfig::at(
            redis.scratch.join(&format!("node-{index}")),
        ))
        .expect("a node's disk store opens");
        let store = TieredStore::new(disk, open(&redis.url(), keys.clone(), &prefix));
        let target = FakeTarget::on_store(Arc::new(store.clone()) as Arc<dyn ArtifactStore>)
            .with_compiler(FakeCompiler::default().logging_compiles_to(&log));
        let mut loader = KernelLoader::new(target);
        loader.enqueue(Box::new(kernel.clone()), ());
        loader.compile_queued();
        let module = loader
            .load(kernel, &kernel.artifact_id())
            .expect("the kernel loads");
        assert_eq!(module.text, "one text");
        assert!(store.flush(Duration::from_secs(10)), "node {index} flushed");
        let statistics = store.tiered_statistics().remote;
        assert_eq!(
            statistics.nondeterministic, 0,
            "node {index}: {statistics:?}"
        );
        assert_eq!(
            statistics.store.put_failures, 0,
            "node {index}: {statistics:?}"
        );
        assert!(statistics.store.puts >= 1, "node {index}: {statistics:?}");
    }
    assert_eq!(
        FakeCompiler::read_compile_log(&log)
            .expect("the compile log reads")
            .len(),
        1,
        "kernel 1 was found by its text"
    );
    let reader = open(&redis.url(), keys, &prefix);
    for kernel in &kernels {
        let key = StoreKey::for_artifact(
            &FakeCompiler::default_key_components(),
            &kernel.artifact_id(),
            None,
        );
        let stored = hit(reader.lookup(&key));
        assert_eq!(
            recompile(&FakeCompiler::default(), &key, &stored),
            Recompiled::Same,
            "kernel {:?}'s entry keeps its own recipe",
            kernel.artifact_id()
        );
    }
}
