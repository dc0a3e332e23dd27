//! Batch packs against a real S3 server (Garage on loopback): a node that
//! compiled a batch leaves its pack, and a node with an empty disk reads
//! the batch in one request; a pack forged, cut short, flipped or moved
//! from another key set loads nothing and the keys are read one by one; a
//! lookup of another key set does not use it; a removed key leaves the
//! packs this process knows; a paused server costs a packed lookup one
//! timeout and one call (P10, P16).

#[path = "support/raw.rs"]
mod raw;
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_bucket::{BucketStore, BucketTier, PackOrder};
use kiln_engine::store::{KeyComponents, hex};
use kiln_engine::{
    ArtifactId, ArtifactStore, ArtifactStoreExt, Groups, KernelId, Lookup, Miss, StoreKey,
};
use kiln_remote::Keys;
use kiln_store::{DiskStore, StoreConfig};
use kiln_test_support::Scratch;

fn key(number: u32) -> StoreKey {
    let components = KeyComponents::new("bucket-test", "kiln pack test 1", "arch-1", "-O3");
    let id = ArtifactId::new(
        KernelId::named("pack.kernel").parameter(&number).build(),
        0u8,
    );
    StoreKey::for_artifact(&components, &id, None)
}

fn artifact(number: u32) -> Vec<u8> {
    (0..300)
        .map(|index| (number as usize * 31 + index * 7) as u8)
        .collect()
}

/// Nodes of one fleet on one Garage prefix, each with a disk of its own.
struct Fleet<'a> {
    garage: &'a support::Garage,
    keys: Keys,
    prefix: String,
    scratch: Scratch,
    order: PackOrder,
}

impl<'a> Fleet<'a> {
    fn new(garage: &'a support::Garage, order: PackOrder) -> Self {
        Self {
            garage,
            keys: support::fleet_keys(),
            prefix: support::fresh_prefix(),
            scratch: Scratch::new("bucket-pack"),
            order,
        }
    }

    fn bucket(&self, keys: Keys) -> BucketStore {
        let mut config = self.garage.config_at(self.garage.port, keys, &self.prefix);
        config.packs = self.order;
        BucketStore::open(config).expect("a store with a key opens")
    }

    /// A node with an empty disk.
    fn node(&self, name: &str) -> BucketTier {
        let disk = DiskStore::open(StoreConfig::at(self.scratch.join(name))).expect("a disk");
        BucketTier::new(Arc::new(disk), self.bucket(self.keys.clone()))
    }

    /// The object name of the pack of `keys`, as the store names it.
    fn pack_object(&self, keys: &[StoreKey]) -> String {
        let mut sorted: Vec<[u8; 32]> = keys.iter().map(StoreKey::digest).collect();
        sorted.sort_unstable();
        let mut hasher = blake3::Hasher::new_derive_key("kiln bucket batch pack 1");
        hasher.update(&(sorted.len() as u64).to_le_bytes());
        for digest in &sorted {
            hasher.update(digest);
        }
        format!("{}p/{}", self.prefix, hex(hasher.finalize().as_bytes()))
    }
}

/// A cold batch on `node`: its lookup misses, every kernel is put, the
/// batch ends and its writes (the pack among them) land.
fn compile_batch(node: &BucketTier, keys: &[StoreKey], numbers: &[u32]) {
    for lookup in node.lookup_many(keys) {
        assert!(matches!(lookup, Lookup::Miss(_)), "{lookup:?}");
    }
    for (key, number) in keys.iter().zip(numbers) {
        node.put(key, None, &artifact(*number), Duration::from_millis(4));
    }
    node.batch_finished();
    assert!(node.flush(Duration::from_secs(10)), "every write landed");
}

/// Checks every key of `numbers` hits with its own bytes.
fn all_hit(found: &[Lookup<Vec<u8>>], numbers: &[u32], what: &str) {
    assert_eq!(found.len(), numbers.len());
    for (lookup, number) in found.iter().zip(numbers) {
        match lookup {
            Lookup::Hit {
                artifact: bytes, ..
            } => {
                assert!(
                    *bytes == artifact(*number),
                    "{what}: key {number}'s own bytes"
                );
            }
            Lookup::Miss(miss) => panic!("{what}: key {number} misses: {miss}"),
        }
    }
}

fn batch(count: u32) -> (Vec<u32>, Vec<StoreKey>) {
    let numbers: Vec<u32> = (0..count).collect();
    let keys = numbers.iter().copied().map(key).collect();
    (numbers, keys)
}

#[test]
fn p16_a_node_with_an_empty_disk_reads_a_packed_batch_in_one_request() {
    let Some(garage) = support::shared("a packed batch read in one request") else {
        return;
    };
    for order in [PackOrder::First, PackOrder::Beside] {
        let fleet = Fleet::new(garage, order);
        let (numbers, keys) = batch(24);
        let builder = fleet.node("builder");
        compile_batch(&builder, &keys, &numbers);
        assert_eq!(builder.bucket().bucket_statistics().packs_written, 1);

        let fresh = fleet.node("fresh");
        let found = fresh.lookup_many(&keys);
        all_hit(&found, &numbers, "a packed batch");
        let counts = fresh.bucket().bucket_statistics();
        assert_eq!(counts.pack_hits, 24, "{order:?}: every key from the pack");
        if order == PackOrder::First {
            assert_eq!(counts.requests, 1, "one request for the whole batch");
        }
        assert!(counts.requests >= 1 && counts.calls == 1, "{counts:?}");
        // It read a whole pack: it writes none.
        fresh.batch_finished();
        assert!(fresh.flush(Duration::from_secs(10)));
        assert_eq!(fresh.bucket().bucket_statistics().packs_written, 0);
    }
}

#[test]
fn p16_a_cold_batch_of_a_pack_first_bucket_costs_the_pack_and_one_call() {
    let Some(garage) = support::shared("a cold batch's requests") else {
        return;
    };
    let fleet = Fleet::new(garage, PackOrder::First);
    let (_, keys) = batch(16);
    let node = fleet.node("cold");
    node.lookup_many(&keys);
    let counts = node.bucket().bucket_statistics();
    // The pack's GET, then the 16 keys' in one call (and the failure
    // memories of the 16 in the background, one call more).
    assert_eq!(counts.store.absent, 16);
    assert!(counts.requests >= 17, "{counts:?}");
}

#[test]
fn p10_a_forged_cut_flipped_or_moved_pack_loads_nothing_and_the_keys_are_read_alone() {
    let Some(garage) = support::shared("damaged batch packs") else {
        return;
    };
    let fleet = Fleet::new(garage, PackOrder::First);
    let (numbers, keys) = batch(8);
    compile_batch(&fleet.node("builder"), &keys, &numbers);
    let object = fleet.pack_object(&keys);
    let good = raw::raw_get(garage, &object);
    assert!(!good.is_empty(), "the builder wrote the pack");

    // A pack of another key set of this fleet, and the same batch packed
    // by a stranger (another fleet's key).
    let other_numbers = [100, 101, 102, 103];
    let other_keys = other_numbers.map(key);
    compile_batch(&fleet.node("other"), &other_keys, &other_numbers);
    let moved = raw::raw_get(garage, &fleet.pack_object(&other_keys));
    let forged = {
        // The stranger's pack of the same keys, from a prefix of its own.
        let own = Fleet {
            garage,
            keys: support::fleet_keys(),
            prefix: support::fresh_prefix(),
            scratch: Scratch::new("bucket-pack-stranger"),
            order: PackOrder::First,
        };
        compile_batch(&own.node("stranger"), &keys, &numbers);
        raw::raw_get(garage, &own.pack_object(&keys))
    };
    let mut flipped = good.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x01;
    let cases: [(&str, Vec<u8>); 5] = [
        ("a stranger's pack", forged),
        ("cut short", good[..good.len() - 7].to_vec()),
        ("a flipped bit", flipped),
        ("another key set's pack", moved),
        ("empty", Vec::new()),
    ];
    for (index, (what, bytes)) in cases.into_iter().enumerate() {
        raw::raw_put(garage, &object, &bytes);
        let reader = fleet.node(&format!("reader-{index}"));
        let found = reader.lookup_many(&keys);
        all_hit(&found, &numbers, what);
        let counts = reader.bucket().bucket_statistics();
        assert_eq!(counts.pack_hits, 0, "{what}: nothing from the pack");
        assert_eq!(counts.unverified, 1, "{what}: the pack is refused, counted");
        assert_eq!(counts.requests, 1 + 8, "{what}: the pack, then each key");
        // The reader replaces what did not verify with its own pack.
        reader.batch_finished();
        assert!(reader.flush(Duration::from_secs(10)));
        assert_eq!(
            reader.bucket().bucket_statistics().packs_written,
            1,
            "{what}"
        );
        let next = fleet.node(&format!("next-{index}"));
        all_hit(&next.lookup_many(&keys), &numbers, "the replaced pack");
        assert_eq!(next.bucket().bucket_statistics().requests, 1, "{what}");
    }
}

#[test]
fn p16_a_lookup_of_another_key_set_does_not_use_a_pack() {
    let Some(garage) = support::shared("a pack of another key set") else {
        return;
    };
    let fleet = Fleet::new(garage, PackOrder::First);
    let (numbers, keys) = batch(12);
    compile_batch(&fleet.node("builder"), &keys, &numbers);
    // One key fewer: another set, another pack name.
    let reader = fleet.node("reader");
    let found = reader.lookup_many(&keys[1..]);
    all_hit(&found, &numbers[1..], "another set");
    let counts = reader.bucket().bucket_statistics();
    assert_eq!(counts.pack_hits, 0);
    assert_eq!(
        counts.requests,
        1 + 11,
        "its own pack (absent), then each key"
    );
}

#[test]
fn p2_a_removed_key_leaves_the_packs_this_process_read() {
    let Some(garage) = support::shared("a removed key and its pack") else {
        return;
    };
    let fleet = Fleet::new(garage, PackOrder::First);
    let (numbers, keys) = batch(6);
    compile_batch(&fleet.node("builder"), &keys, &numbers);
    let reader = fleet.node("reader");
    all_hit(&reader.lookup_many(&keys), &numbers, "the packed batch");
    reader.remove(&keys[0]);
    let fresh = fleet.node("fresh");
    let found = fresh.lookup_many(&keys);
    assert!(
        matches!(found[0], Lookup::Miss(Miss::Absent)),
        "the removed key: {:?}",
        found[0]
    );
    all_hit(&found[1..], &numbers[1..], "the other keys");
    assert_eq!(fresh.bucket().bucket_statistics().pack_hits, 0);
}

#[test]
fn p16_a_paused_server_costs_a_packed_lookup_one_timeout_in_either_order() {
    let Some(garage) = support::garage("a packed lookup of a paused server") else {
        return;
    };
    for order in [PackOrder::First, PackOrder::Beside] {
        let fleet = Fleet::new(&garage, order);
        let (numbers, keys) = batch(8);
        compile_batch(&fleet.node("builder"), &keys, &numbers);
        let disk = DiskStore::open(StoreConfig::at(fleet.scratch.join("paused"))).expect("a disk");
        let mut config = garage.config_at(garage.port, fleet.keys.clone(), &fleet.prefix);
        config.packs = order;
        config.timeout = Duration::from_millis(500);
        let node = BucketTier::new(
            Arc::new(disk),
            BucketStore::open(config).expect("a store opens"),
        );
        garage.pause();
        let started = std::time::Instant::now();
        let found = node.lookup_many(&keys);
        let elapsed = started.elapsed();
        garage.resume();
        assert!(
            found.iter().all(|lookup| matches!(lookup, Lookup::Miss(_))),
            "{order:?}: {found:?}"
        );
        assert!(
            elapsed < Duration::from_millis(1200),
            "{order:?}: {elapsed:?}"
        );
        let counts = node.bucket().bucket_statistics();
        assert_eq!(counts.breaker_opened, 1, "{order:?}: one outage");
        assert_eq!(counts.calls, 1, "{order:?}: one call");
    }
}

/// Waits until `node`'s connection opened ahead is open, at most 5 s.
fn connected_ahead(node: &BucketTier) -> bool {
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < until {
        if node.bucket().bucket_statistics().connections_ahead == 1 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

#[test]
fn p16_a_bound_tier_opens_a_connection_ahead_and_its_first_request_takes_it() {
    let Some(garage) = support::shared("a connection opened ahead") else {
        return;
    };
    for order in [PackOrder::First, PackOrder::Beside] {
        let fleet = Fleet::new(garage, order);
        let (numbers, keys) = batch(12);
        compile_batch(&fleet.node("builder"), &keys, &numbers);
        let fresh = fleet.node("fresh");
        assert!(connected_ahead(&fresh), "{order:?}: a connection opened");
        let found = fresh.lookup_many(&keys);
        all_hit(
            &found,
            &numbers,
            "a packed batch on the connection opened ahead",
        );
        let counts = fresh.bucket().bucket_statistics();
        assert_eq!(counts.pack_hits, 12, "{order:?}: {counts:?}");
        assert_eq!(
            (counts.connections_ahead, counts.connections_ahead_used),
            (1, 1),
            "{order:?}: the pack's GET took it"
        );
        assert_eq!(counts.failed_calls, 0, "{counts:?}");
    }
}

#[test]
fn p16_a_connection_opened_ahead_and_left_unused_goes_stale_and_is_not_used() {
    let Some(garage) = support::shared("a connection opened ahead, stale") else {
        return;
    };
    let fleet = Fleet::new(garage, PackOrder::First);
    let (numbers, keys) = batch(6);
    compile_batch(&fleet.node("builder"), &keys, &numbers);
    let fresh = fleet.node("fresh");
    assert!(connected_ahead(&fresh), "a connection opened");
    // Past the seconds a server may keep a silent connection open.
    std::thread::sleep(Duration::from_millis(2200));
    let found = fresh.lookup_many(&keys);
    all_hit(&found, &numbers, "a packed batch on a new connection");
    let counts = fresh.bucket().bucket_statistics();
    assert_eq!(counts.connections_ahead_used, 0, "{counts:?}");
    assert_eq!(counts.failed_calls, 0, "{counts:?}");
}

#[test]
fn p16_a_pack_answering_after_the_head_start_spares_most_per_key_gets() {
    let Some(garage) = support::shared("per-key GETs in waves") else {
        return;
    };
    // 62 ms away: the pack answers after the head start (60 ms), when an
    // eighth of the per-key GETs went, and before the third wave (75 ms).
    // On a loaded machine one answer may come late: three tries.
    let proxy =
        kiln_test_support::redis::LatencyProxy::start(garage.port, Duration::from_millis(62));
    let fleet = Fleet::new(garage, PackOrder::Beside);
    let (numbers, keys) = batch(32);
    compile_batch(&fleet.node("builder"), &keys, &numbers);
    let mut sent = Vec::new();
    for attempt in 0..3 {
        let mut config = garage.config_at(proxy.port, fleet.keys.clone(), &fleet.prefix);
        config.packs = PackOrder::Beside;
        let root = fleet.scratch.join(&format!("fresh-{attempt}"));
        let disk = DiskStore::open(StoreConfig::at(root)).expect("a disk");
        let fresh = BucketTier::new(Arc::new(disk), BucketStore::open(config).expect("opens"));
        let found = fresh.lookup_many(&keys);
        all_hit(&found, &numbers, "a packed batch 62 ms away");
        let counts = fresh.bucket().bucket_statistics();
        assert_eq!(counts.pack_hits, 32, "{counts:?}");
        sent.push(counts.requests);
        if counts.requests < 1 + 32 {
            return;
        }
    }
    panic!("every per-key GET went beside the pack each time: {sent:?} requests");
}

#[test]
fn p16_a_batch_new_to_the_fleet_reads_its_failure_memories_beside_its_per_key_gets() {
    use kiln_engine::Blobs;
    use kiln_engine::store::RememberedFailure;
    let Some(garage) = support::shared("failure memories read early") else {
        return;
    };
    // 300 ms away: the pack's 404 comes at 300 ms, the per-key GETs
    // (every wave out by 82.5 ms) answer from 382.5 ms.
    let rtt = Duration::from_millis(300);
    let proxy = kiln_test_support::redis::LatencyProxy::start(garage.port, rtt);
    let fleet = Fleet::new(garage, PackOrder::Beside);
    let (_, keys) = batch(16);
    let mut config = garage.config_at(proxy.port, fleet.keys.clone(), &fleet.prefix);
    config.packs = PackOrder::Beside;
    let disk = DiskStore::open(StoreConfig::at(fleet.scratch.join("cold"))).expect("a disk");
    let cold = BucketTier::new(Arc::new(disk), BucketStore::open(config).expect("opens"));
    for lookup in cold.lookup_many(&keys) {
        assert!(matches!(lookup, Lookup::Miss(Miss::Absent)), "{lookup:?}");
    }
    // The memories went at the pack's 404, before the per-key GETs
    // answered, not after the lookup.
    let sent = cold.bucket().bucket_statistics().requests;
    assert!(sent >= 1 + 16 + 16, "{sent} requests when the lookup ended");
    let asked = Instant::now();
    let memory = cold.lookup_blob(&RememberedFailure::blob_key(&keys[0]));
    let waited = asked.elapsed();
    assert!(matches!(memory, Lookup::Miss(Miss::Absent)), "{memory:?}");
    assert!(
        waited < rtt - Duration::from_millis(10),
        "the memory came {waited:?} after the lookup: it went after it"
    );
    let counts = cold.bucket().bucket_statistics();
    assert_eq!(
        counts.requests, sent,
        "the loader's question sends nothing more"
    );
    // Connections were opened at the 404 for the requests that follow
    // (one when the tier was bound).
    assert!(counts.connections_ahead > 1, "{counts:?}");
}

/// A disk store whose lookup of more than one key is slow (a loaded or
/// cold disk): at its end it notes whether the bucket had been sent a
/// request by then, waiting for one at most `slow`.
#[derive(Debug)]
struct SlowDisk {
    disk: DiskStore,
    bucket: BucketStore,
    slow: Duration,
    /// The bucket's requests when each slow lookup ended.
    requests_then: std::sync::Mutex<Vec<u64>>,
}

impl ArtifactStore for SlowDisk {
    fn lookup_many(&self, keys: &[StoreKey]) -> Vec<Lookup<Vec<u8>>> {
        let found = self.disk.lookup_many(keys);
        if keys.len() > 1 {
            let until = Instant::now() + self.slow;
            while self.bucket.bucket_statistics().requests == 0 && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(2));
            }
            let requests = self.bucket.bucket_statistics().requests;
            self.requests_then
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(requests);
        }
        found
    }

    fn put_many(&self, puts: &[kiln_engine::Put<'_>]) -> Vec<kiln_engine::StoreOutcome> {
        self.disk.put_many(puts)
    }

    fn remove(&self, key: &StoreKey) {
        self.disk.remove(key);
    }

    fn generation(&self) -> kiln_engine::Generation {
        self.disk.generation()
    }

    fn statistics(&self) -> kiln_engine::StoreStatistics {
        self.disk.statistics()
    }

    fn parts(&self) -> kiln_engine::StoreParts<'_> {
        self.disk.parts()
    }
}

#[test]
fn p16_a_batch_packs_get_goes_beside_the_disks_lookup_and_a_disk_hit_still_wins() {
    let Some(garage) = support::shared("a pack's GET beside the disk's lookup") else {
        return;
    };
    for order in [PackOrder::First, PackOrder::Beside] {
        let fleet = Fleet::new(garage, order);
        let (numbers, keys) = batch(16);
        compile_batch(&fleet.node("builder"), &keys, &numbers);
        // The node's disk lacks the first key and holds the fourth with
        // bytes of its own: the bucket's (its pack's) must not replace them.
        let disk =
            DiskStore::open(StoreConfig::at(fleet.scratch.join("slow-disk"))).expect("a disk");
        let own = b"this disk's own bytes".to_vec();
        disk.put(&keys[3], None, &own, Duration::from_millis(4));
        let bucket = fleet.bucket(fleet.keys.clone());
        let front = Arc::new(SlowDisk {
            disk,
            bucket: bucket.clone(),
            slow: Duration::from_secs(2),
            requests_then: std::sync::Mutex::default(),
        });
        let node = BucketTier::new(Arc::clone(&front) as Arc<dyn ArtifactStore>, bucket);
        let found = node.lookup_many(&keys);
        match &found[3] {
            Lookup::Hit { artifact, .. } => assert!(*artifact == own, "{order:?}: the disk's hit"),
            miss => panic!("{order:?}: the disk's hit is lost: {miss:?}"),
        }
        let others: Vec<Lookup<Vec<u8>>> = found
            .into_iter()
            .enumerate()
            .filter(|(index, _)| *index != 3)
            .map(|(_, lookup)| lookup)
            .collect();
        let numbers_but_3: Vec<u32> = numbers.iter().copied().filter(|n| *n != 3).collect();
        all_hit(&others, &numbers_but_3, "the bucket's");
        let then = front
            .requests_then
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        assert_eq!(
            then.first().copied(),
            Some(1),
            "{order:?}: the pack's GET was out before the disk's lookup ended ({then:?})"
        );
        let counts = node.bucket().bucket_statistics();
        assert_eq!(counts.pack_hits, 15, "{order:?}: {counts:?}");
        assert_eq!(counts.calls, 1, "{order:?}: {counts:?}");
        if order == PackOrder::First {
            assert_eq!(counts.requests, 1, "the pack's GET alone: {counts:?}");
        }
        // Once the bucket's hits are on the disk, a lookup of the batch
        // hits its first key there and sends nothing.
        node.batch_finished();
        assert!(node.flush(Duration::from_secs(10)));
        let before = node.bucket().bucket_statistics();
        let warm = node.lookup_many(&keys);
        assert!(
            warm.iter()
                .all(|lookup| matches!(lookup, Lookup::Hit { .. }))
        );
        let after = node.bucket().bucket_statistics();
        assert_eq!(
            (after.calls, after.requests),
            (before.calls, before.requests),
            "{order:?}: a warm disk sends nothing"
        );
    }
}
