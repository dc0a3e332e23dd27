//! The two-level store's side of the size split (P16), on a real
//! redis-server: made with a split, it offers the remote only artifacts
//! of at most the split, counting the others (the bucket behind takes
//! them); made without one, it offers every artifact.

mod support;

use std::time::Duration;

use kiln_engine::store::MemoryStore;
use kiln_engine::{
    ArtifactId, ArtifactStore, ArtifactStoreExt, KernelId, KeyComponents, Lookup, StoreKey,
};
use kiln_remote::TieredStore;
use support::{Redis, fleet_keys, fresh_prefix, open};

fn key(number: u32) -> StoreKey {
    let components = KeyComponents::new("cuda", "nvrtc 13.0", "sm_90", "-O3");
    let id = ArtifactId::new(
        KernelId::named("split.kernel").parameter(&number).build(),
        0u8,
    );
    StoreKey::for_artifact(&components, &id, None)
}

/// Puts a 1000-byte artifact (key 0) and a 9000-byte one (key 1) through
/// a two-level store split at 4 KiB (or not), and says which the remote
/// holds afterwards, with the store's count of artifacts split off.
fn remote_holds(split: bool) -> Option<([bool; 2], u64)> {
    let redis = Redis::single()
        .map_err(|reason| support::skip("the size split's two-level store", &reason))
        .ok()?;
    let (keys, prefix) = (fleet_keys(), fresh_prefix());
    let remote = open(&redis.url(), keys.clone(), &prefix);
    let store = if split {
        TieredStore::with_split(MemoryStore::new(), remote, 4 << 10)
    } else {
        TieredStore::new(MemoryStore::new(), remote)
    };
    store.put(&key(0), None, &[1u8; 1000], Duration::ZERO);
    store.put(&key(1), None, &[2u8; 9000], Duration::ZERO);
    assert!(store.flush(Duration::from_secs(10)), "the queue empties");
    let found = open(&redis.url(), keys, &prefix).lookup_many(&[key(0), key(1)]);
    let hit = |lookup: &Lookup<Vec<u8>>| matches!(lookup, Lookup::Hit { .. });
    Some((
        [hit(&found[0]), hit(&found[1])],
        store.tiered_statistics().split_off,
    ))
}

#[test]
fn p16_a_split_two_level_store_offers_the_remote_only_artifacts_up_to_the_split() {
    let Some((held, split_off)) = remote_holds(true) else {
        return;
    };
    assert_eq!(held, [true, false], "the small one only");
    assert_eq!(split_off, 1);
}

#[test]
fn p16_without_a_split_every_artifact_is_offered() {
    let Some((held, split_off)) = remote_holds(false) else {
        return;
    };
    assert_eq!(held, [true, true]);
    assert_eq!(split_off, 0);
}
