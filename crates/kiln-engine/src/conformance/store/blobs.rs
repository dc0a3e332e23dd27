//! Named blobs: found by their own key only, kept as artifacts are (P2).

use std::time::Duration;

use super::*;

/// The blob of the suite, for the driver `driver`.
pub(super) fn blob_key(driver: &str) -> BlobKey {
    BlobKey::new("conformance cache")
        .component("adapter", "adapter-1")
        .component("driver", driver)
}

/// P1, P2: a named blob is found by its key alone: the bytes put,
/// replaced by the next put, seen under no key that differs in one
/// component and by no artifact's lookup. A store that keeps no blobs
/// skips every put and misses every lookup as absent.
pub fn p2_a_named_blob_is_found_by_its_own_key_only<S: StoreSubject>(subject: &S) {
    let store = subject.store();
    if !has_part(
        "P2 (named blobs)",
        "named blobs",
        store.parts().blobs.is_some(),
    ) {
        return;
    }
    let key = blob_key("1");
    assert!(
        is_absent(&store.parts().lookup_blob(&key)),
        "an empty store"
    );
    let first = artifact(40, 3000);
    match store.parts().put_blob(&key, &first) {
        StoreOutcome::Stored { .. } => {}
        StoreOutcome::Skipped => {
            assert!(
                is_absent(&store.parts().lookup_blob(&key)),
                "a store that skips blobs holds none"
            );
            not_applicable("named blobs", "this store keeps no blobs");
            return;
        }
        StoreOutcome::Failed { detail } => panic!("a blob put failed: {detail}"),
    }
    let (found, read, work) = expect_hit(store.parts().lookup_blob(&key), "the blob just put");
    assert!(found == first, "the blob's bytes come back");
    assert_eq!(
        read,
        first.len() as u64,
        "a hit says how many bytes it read"
    );
    assert_eq!(work, Duration::ZERO, "a blob's hit reports no work");
    assert!(
        is_absent(&store.clone().parts().lookup_blob(&blob_key("2"))),
        "a key with another driver does not see the blob"
    );
    assert!(
        is_absent(&store.lookup(&kernel_key(0))),
        "no artifact's lookup sees the blob"
    );
    expect_stored(
        store.put(&kernel_key(0), None, &artifact(41, 100), Duration::ZERO),
        "an artifact beside the blob",
    );
    let second = artifact(42, 2000);
    expect_stored(store.parts().put_blob(&key, &second), "a second blob put");
    let (found, _, _) = expect_hit(store.parts().lookup_blob(&key), "the blob put again");
    assert!(found == second, "the later put replaced the blob");
    let (found, _, _) = expect_hit(store.lookup(&kernel_key(0)), "the artifact");
    assert!(
        found == artifact(41, 100),
        "the blob left the artifact alone"
    );
}
