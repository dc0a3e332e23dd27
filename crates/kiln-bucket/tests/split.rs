//! The size split (P16), against a real redis-server and a real S3 server
//! (Garage on loopback): with Redis in front of the bucket, small
//! artifacts are written to Redis alone and large ones to the bucket
//! alone; a node with an empty disk finds both, asking the bucket only for
//! what Redis missed.

mod support;

use std::sync::Arc;
use std::time::Duration;

use kiln_bucket::{BucketStore, BucketTier};
use kiln_engine::store::KeyComponents;
use kiln_engine::{ArtifactId, ArtifactStore, ArtifactStoreExt, KernelId, Lookup, StoreKey};
use kiln_remote::{RemoteConfig, RemoteStore, TieredStore};
use kiln_store::{DiskStore, StoreConfig};
use kiln_test_support::redis::RedisServer;

/// The split of these tests: 4 KiB.
const SPLIT: u64 = 4 << 10;

fn key(number: u32) -> StoreKey {
    let components = KeyComponents::new("bucket-test", "kiln split test 1", "arch-1", "-O3");
    let id = ArtifactId::new(
        KernelId::named("split.kernel").parameter(&number).build(),
        0u8,
    );
    StoreKey::for_artifact(&components, &id, None)
}

fn artifact(number: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|index| (number as usize * 13 + index * 5) as u8)
        .collect()
}

fn is_hit(lookup: &Lookup<Vec<u8>>) -> bool {
    matches!(lookup, Lookup::Hit { .. })
}

struct Fleet {
    garage: &'static support::Garage,
    redis: RedisServer,
    keys: kiln_remote::Keys,
    redis_prefix: String,
    bucket_prefix: String,
    scratch: kiln_test_support::Scratch,
}

impl Fleet {
    fn start(what: &str) -> Option<Self> {
        let garage = support::shared(what)?;
        let scratch = kiln_test_support::Scratch::new("bucket-split");
        let redis = match RedisServer::start(&scratch.folder("redis"), &[]) {
            Ok(redis) => redis,
            Err(reason) => {
                kiln_test_support::redis::skip(what, &reason);
                return None;
            }
        };
        let bucket_prefix = support::fresh_prefix();
        Some(Self {
            garage,
            redis,
            keys: support::fleet_keys(),
            redis_prefix: format!("kiln-split-{}:", bucket_prefix.trim_end_matches('/')),
            bucket_prefix,
            scratch,
        })
    }

    fn redis(&self) -> RemoteStore {
        let mut config = RemoteConfig::new(self.redis.url(), self.keys.clone());
        config.prefix = self.redis_prefix.clone();
        config.timeout = Duration::from_secs(2);
        RemoteStore::open(config).expect("a store with a key opens")
    }

    fn bucket(&self) -> BucketStore {
        self.garage.store(self.keys.clone(), &self.bucket_prefix)
    }

    /// A node split at [`SPLIT`] whose bucket is reached through `port`.
    fn node_at(&self, name: &str, port: u16) -> BucketTier {
        let disk = DiskStore::open(StoreConfig::at(self.scratch.join(name))).expect("a disk store");
        let front = TieredStore::with_split(disk, self.redis(), SPLIT);
        let bucket = self
            .garage
            .store_at(port, self.keys.clone(), &self.bucket_prefix);
        BucketTier::with_split(Arc::new(front), bucket, SPLIT)
    }

    /// A node: its disk (`name`), Redis, then the bucket; split at
    /// [`SPLIT`] when `split`.
    fn node(&self, name: &str, split: bool) -> (TieredStore, BucketTier) {
        let disk = DiskStore::open(StoreConfig::at(self.scratch.join(name))).expect("a disk store");
        if split {
            let front = TieredStore::with_split(disk, self.redis(), SPLIT);
            let tier = BucketTier::with_split(Arc::new(front.clone()), self.bucket(), SPLIT);
            (front, tier)
        } else {
            let front = TieredStore::new(disk, self.redis());
            let tier = BucketTier::new(Arc::new(front.clone()), self.bucket());
            (front, tier)
        }
    }
}

/// Puts a small (key 0) and a large (key 1) artifact through `node`'s
/// tiers and writes what they queued.
fn publish(front: &TieredStore, tier: &BucketTier) -> Vec<StoreKey> {
    let keys = vec![key(0), key(1)];
    tier.put(&keys[0], None, &artifact(0, 1000), Duration::ZERO);
    tier.put(&keys[1], None, &artifact(1, 20_000), Duration::ZERO);
    assert!(
        tier.flush(Duration::from_secs(10)),
        "the bucket took its writes"
    );
    assert!(
        front.flush(Duration::from_secs(10)),
        "Redis took its writes"
    );
    keys
}

#[test]
fn p16_with_redis_in_front_small_artifacts_go_to_redis_and_large_ones_to_the_bucket() {
    let Some(fleet) = Fleet::start("the size split") else {
        return;
    };
    let (front, tier) = fleet.node("builder", true);
    let keys = publish(&front, &tier);
    let in_redis = fleet.redis().lookup_many(&keys);
    let in_bucket = fleet.bucket().lookup_many(&keys);
    assert!(is_hit(&in_redis[0]), "the small one is in Redis");
    assert!(
        !is_hit(&in_redis[1]),
        "the large one is not: {:?}",
        in_redis[1]
    );
    assert!(!is_hit(&in_bucket[0]), "the small one is not in the bucket");
    assert!(
        is_hit(&in_bucket[1]),
        "the large one is: {:?}",
        in_bucket[1]
    );
    assert_eq!(front.tiered_statistics().split_off, 1);

    // A node with an empty disk finds both; the bucket is asked only for
    // what Redis missed.
    let (_, fresh) = fleet.node("fresh", true);
    let found = fresh.lookup_many(&keys);
    assert!(found.iter().all(is_hit), "{found:?}");
    match &found[1] {
        Lookup::Hit {
            artifact: bytes, ..
        } => assert!(*bytes == artifact(1, 20_000)),
        Lookup::Miss(miss) => panic!("{miss}"),
    }
    let asked = fresh.bucket().bucket_statistics();
    assert_eq!(
        (asked.calls, asked.requests),
        (1, 1),
        "one GET, of the large one"
    );
}

#[test]
fn p16_without_the_split_both_tiers_take_every_artifact() {
    // The control of the test above: the same writes through unsplit
    // tiers land in both.
    let Some(fleet) = Fleet::start("tiers without a size split") else {
        return;
    };
    let (front, tier) = fleet.node("builder", false);
    let keys = publish(&front, &tier);
    assert!(fleet.redis().lookup_many(&keys).iter().all(is_hit));
    assert!(fleet.bucket().lookup_many(&keys).iter().all(is_hit));
    assert_eq!(front.tiered_statistics().split_off, 0);
}

#[test]
fn p12_with_the_split_a_large_artifacts_claim_is_let_go_once_the_bucket_holds_it() {
    // The claim is Redis's lease; the large artifact is the bucket's alone.
    // The holder's bucket is 800 ms away, so its write lands well after a
    // release through Redis alone would (the waiter found nothing then):
    // the waiter that takes the claim must find the artifact.
    use kiln_engine::store::{Claim, ClaimWait};
    use kiln_engine::{ArtifactStoreExt, Claims};
    use kiln_test_support::redis::LatencyProxy;
    use std::time::Instant;
    let Some(fleet) = Fleet::start("a large artifact's claim under the size split") else {
        return;
    };
    let proxy = LatencyProxy::start(fleet.garage.port, Duration::from_millis(800));
    let holder = fleet.node_at("holder", proxy.port);
    let (_, waiter) = fleet.node("waiter", true);
    let large = key(7);
    let Claim::Held(guard) = holder.claim(&large, ClaimWait::Once) else {
        panic!("the first claim of a fresh key is held");
    };
    holder.put(&large, None, &artifact(7, 20_000), Duration::ZERO);
    drop(guard);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match waiter.claim(&large, ClaimWait::Once) {
            Claim::Held(_mine) => {
                let found = waiter.lookup(&large);
                assert!(
                    is_hit(&found),
                    "the claim was let go before the bucket held the artifact: {found:?}"
                );
                break;
            }
            _ => {
                assert!(Instant::now() < deadline, "the claim is let go in time");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}
