//! What a batch costs in calls to the bucket (P16), against a real S3
//! server (Garage on loopback): a cold batch's lookup asks for its
//! artifacts in one call and for the failure memories of those the bucket
//! lacks in one more, in the background; the loader's later questions of the same keys (its
//! check after a claim, its failure-memory read before a compile) ask the
//! bucket nothing until the batch ends.

mod support;

use std::sync::Arc;

use kiln_bucket::BucketTier;
use kiln_engine::store::{KeyComponents, RememberedFailure};
use kiln_engine::{ArtifactId, ArtifactStore, Blobs, Groups, KernelId, Lookup, Miss, StoreKey};
use kiln_store::{DiskStore, StoreConfig};

fn key(number: u32) -> StoreKey {
    let components = KeyComponents::new("bucket-test", "kiln batch test 1", "arch-1", "-O3");
    let id = ArtifactId::new(
        KernelId::named("batch.kernel").parameter(&number).build(),
        0u8,
    );
    StoreKey::for_artifact(&components, &id, None)
}

#[test]
fn p16_a_cold_batch_asks_the_bucket_twice_not_once_per_kernel() {
    let Some(garage) = support::shared("a cold batch's calls") else {
        return;
    };
    let scratch = kiln_test_support::Scratch::new("bucket-batch");
    let disk = DiskStore::open(StoreConfig::at(scratch.join("disk"))).expect("a disk store");
    let tier = BucketTier::new(
        Arc::new(disk),
        garage.store(support::fleet_keys(), &support::fresh_prefix()),
    );
    let keys: Vec<StoreKey> = (0..16).map(key).collect();
    let calls = || tier.bucket().bucket_statistics().calls;
    let found = tier.lookup_many(&keys);
    assert!(
        found
            .iter()
            .all(|lookup| matches!(lookup, Lookup::Miss(Miss::Absent)))
    );
    for key in &keys {
        assert!(matches!(tier.lookup(key), Lookup::Miss(_)));
        let memory = tier.lookup_blob(&RememberedFailure::blob_key(key));
        assert!(matches!(memory, Lookup::Miss(Miss::Absent)), "{memory:?}");
    }
    assert_eq!(
        calls(),
        2,
        "the artifacts, then their failure memories (in the background); \
         nothing more for the batch's own answers read again"
    );
    // A new batch asks again: another node may have published since.
    tier.batch_finished();
    tier.lookup(&keys[0]);
    tier.lookup_blob(&RememberedFailure::blob_key(&keys[0]));
    assert_eq!(calls(), 4);
}

#[test]
fn p12_a_key_another_holds_is_asked_of_the_bucket_again() {
    // With Redis in front and the size split, a large artifact another
    // machine compiles lands in the bucket alone: its waiters must look.
    use kiln_engine::store::{Claim, ClaimWait};
    use kiln_engine::{Blobs, Claims};
    let Some(garage) = support::shared("a waiter's polls of the bucket") else {
        return;
    };
    let scratch = kiln_test_support::Scratch::new("bucket-batch-waiter");
    let open = || DiskStore::open(StoreConfig::at(scratch.join("disk"))).expect("a disk store");
    let (holder, disk) = (open(), open());
    let tier = BucketTier::new(
        Arc::new(disk),
        garage.store(support::fleet_keys(), &support::fresh_prefix()),
    );
    let keys: Vec<StoreKey> = (100..104).map(key).collect();
    tier.lookup_many(&keys);
    let Claim::Held(_held) = holder.claim(&keys[0], ClaimWait::Once) else {
        panic!("the first claim of a fresh key is held");
    };
    let calls = || tier.bucket().bucket_statistics().calls;
    tier.lookup_blob(&RememberedFailure::blob_key(&keys[0]));
    let before = calls();
    assert!(matches!(tier.claim(&keys[0], ClaimWait::Once), Claim::Busy));
    tier.lookup(&keys[0]);
    assert!(calls() > before, "the waiter's poll asks the bucket");
    // (Its failure memory, read again beside it, landed.)
    tier.lookup_blob(&RememberedFailure::blob_key(&keys[0]));
    // A key this node holds is not asked again.
    let Claim::Held(_mine) = tier.claim(&keys[1], ClaimWait::Once) else {
        panic!("a fresh key's claim is held");
    };
    let before = calls();
    tier.lookup(&keys[1]);
    assert_eq!(calls(), before, "the claimant's check reads the front");
}
