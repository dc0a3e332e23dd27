//! The parts a store may have beside its contract
//! ([`ArtifactStore`](super::ArtifactStore)): claims among processes
//! ([`Claims`]), named blobs ([`Blobs`]), the memory of its kernels and
//! batches ([`Records`]) and group commits ([`Groups`]). A store hands out
//! the parts it has through
//! [`ArtifactStore::parts`](super::ArtifactStore::parts), as a
//! [`StoreParts`], whose methods answer for a missing part what a store
//! without it answers: no claim, no blob, no record, each write durable
//! when it returns.
//!
//! Every method of every part may be called from any thread.

use std::time::Duration;

use super::blob::BlobKey;
use super::claim::{Claim, ClaimWait};
use super::key::StoreKey;
use super::memory::DEFAULT_CLAIM_TIMEOUT;
use super::{Explanation, Lookup, Miss, StoreOutcome};

/// Single flight among processes (P4, P12): who compiles a key.
///
/// # Invariant
///
/// [`claim`](Self::claim) gives one caller among processes the right to
/// compile a key: while the guard lives, every other claimant of the key
/// is [`Claim::Busy`]; once it drops (the key was published, or its
/// compile failed) the key is claimable again. A claim of a dead process
/// is released at once; a claim is a lease its holder renews while it
/// lives ([`ClaimGuard::leased`](super::ClaimGuard::leased),
/// [`Renewal`](super::Renewal)), and a holder that stops renewing (hung,
/// stopped) loses it when the lease runs out: the next claimant takes the
/// key over. A patient claimant gives up after
/// [`claim_timeout`](Self::claim_timeout). Correctness never depends on a
/// lease: a lost one costs at most a duplicate compile.
pub trait Claims: Send + Sync {
    /// Asks for the right to compile `key`, waiting as `wait` allows for
    /// another process compiling it now.
    fn claim(&self, key: &StoreKey, wait: ClaimWait) -> Claim;

    /// The longest a caller waits for another holder of a key before
    /// compiling it too (`KILN_CACHE_LOCK_TIMEOUT` for the disk store). The
    /// default is [`DEFAULT_CLAIM_TIMEOUT`].
    fn claim_timeout(&self) -> Duration {
        DEFAULT_CLAIM_TIMEOUT
    }

    /// Who holds the claim of `key` (P12), as a person reads it: `process
    /// 4242 on build-3`; `None` when nobody does or the store cannot say.
    /// A batch that waits for others names them in its progress and log.
    /// The default cannot say.
    fn holder(&self, key: &StoreKey) -> Option<String> {
        let _ = key;
        None
    }
}

/// Named blobs: data a backend keeps beside its artifacts that is no
/// kernel's (the driver's pipeline cache, a failure memory, a tuning
/// answer), under a [`BlobKey`] of its own.
///
/// # Invariant
///
/// A blob is kept as an artifact is: verified on every read (P2), published
/// atomically (P3), a failed write a counted [`StoreOutcome::Failed`] (P5),
/// evicted as any entry (P6), and counted in the store's
/// [`statistics`](super::ArtifactStore::statistics) as lookups and puts.
/// A blob and an artifact never see each other, and a put replaces the
/// blob's bytes. A blob has no claim, source key or explanation, and its hits
/// report no work. A store without blobs answers every lookup
/// [`Miss::Absent`] and every put [`StoreOutcome::Skipped`].
pub trait Blobs: Send + Sync {
    /// The verified bytes of the blob named `key`, or why there are none.
    fn lookup_blob(&self, key: &BlobKey) -> Lookup<Vec<u8>>;

    /// Publishes `bytes` as the blob named `key`, in place of what it held.
    fn put_blob(&self, key: &BlobKey, bytes: &[u8]) -> StoreOutcome;
}

/// What a store remembers of its kernels and batches: why a key is or is
/// not held (P9), and the records of the last batches of every process
/// that used it.
///
/// # Invariant
///
/// A record is the store's memory, never its content: keeping or losing
/// one changes no lookup, and a record the store cannot keep is dropped,
/// never an error.
pub trait Records: Send + Sync {
    /// Keeps the record of a batch that just ended, encoded by the loader
    /// (a `StoredBatch`), among the last few of every process that used the
    /// store, so what a slow start spent its time on can be read after the
    /// fact (`kiln records`). Bounded by the store. The default keeps
    /// nothing.
    fn keep_batch(&self, record: &[u8]) {
        let _ = record;
    }

    /// The encoded records of the last batches the store keeps
    /// ([`keep_batch`](Self::keep_batch)), oldest first: a batch hands out
    /// first the kernels they say took longest. The default keeps none.
    fn kept_batches(&self) -> Vec<Vec<u8>> {
        Vec::new()
    }

    /// Why `key` (a kernel's key) is or is not held (P9). The default
    /// never saw it.
    fn explain(&self, key: &StoreKey) -> Explanation {
        let _ = key;
        Explanation::NeverSeen
    }

    /// Says that `key`, which this store missed, was found in another
    /// store (a remote tier) and is being copied here: its miss is none to
    /// remember (no history of it is written). The default does nothing.
    fn found_elsewhere(&self, key: &StoreKey) {
        let _ = key;
    }
}

/// Group commits and the end of a batch: when a store makes what a batch
/// wrote durable, and brings itself within its limits.
///
/// # Invariant
///
/// Inside a group every write is still published whole or not at all to
/// every reader however the writer ends (P3); only its durability waits
/// for the group's commit. A store with limits is within them when
/// [`batch_finished`](Self::batch_finished) returns (P6).
pub trait Groups: Send + Sync {
    /// Opens a group commit on the calling thread (or keeps the one open):
    /// until [`commit_group`](Self::commit_group) or
    /// [`batch_finished`](Self::batch_finished), the puts and blobs this
    /// thread writes are published as they are written and made durable
    /// together when the group commits: a few syncs for a batch step
    /// rather than several for each entry. A loader opens one for its
    /// batch. The default does nothing: each write is durable when it
    /// returns.
    fn begin_group(&self) {}

    /// Makes durable what the calling thread wrote since
    /// [`begin_group`](Self::begin_group), and ends its group; nothing
    /// when it wrote nothing that must be waited for. A failed sync is
    /// counted as a failed write (P5). The default does nothing.
    fn commit_group(&self) {}

    /// A batch of a loader bound to the store ended: where a store with a
    /// size limit brings itself within it, so a run that fills the store
    /// ends within its limits (P6), and where it commits the calling
    /// thread's group. Called after the last put of every batch. The
    /// default does nothing.
    fn batch_finished(&self) {}
}

/// The parts a store has
/// ([`ArtifactStore::parts`](super::ArtifactStore::parts)); a missing part
/// is `None`, and the methods here answer for it as a store without it
/// does.
///
/// ```
/// use kiln_engine::store::{ArtifactStore, ClaimWait, MemoryStore};
/// # use kiln_engine::{ArtifactId, KernelId, KeyComponents, StoreKey};
/// # let key = StoreKey::for_artifact(
/// #     &KeyComponents::new("cuda", "nvrtc 12.4", "sm_90", "-O3"),
/// #     &ArtifactId::new(KernelId::named("saxpy").build(), 0u8),
/// #     None,
/// # );
/// let store: &dyn ArtifactStore = &MemoryStore::new();
/// // Claims through the store's part, whatever the store.
/// let claim = store.parts().claim(&key, ClaimWait::Once);
/// ```
#[derive(Clone, Copy, Default)]
pub struct StoreParts<'a> {
    /// Claims among processes, when the store coordinates compiles.
    pub claims: Option<&'a dyn Claims>,
    /// Named blobs, when the store keeps them.
    pub blobs: Option<&'a dyn Blobs>,
    /// Explanations and batch records, when the store keeps them.
    pub records: Option<&'a dyn Records>,
    /// Group commits and the batch's end, when the store has them.
    pub groups: Option<&'a dyn Groups>,
}

impl<'a> StoreParts<'a> {
    /// Every part, each `store` itself: for a store that has them all.
    pub fn all<S: Claims + Blobs + Records + Groups>(store: &'a S) -> Self {
        Self {
            claims: Some(store),
            blobs: Some(store),
            records: Some(store),
            groups: Some(store),
        }
    }

    /// [`Claims::claim`]; without claims, [`Claim::Uncoordinated`].
    pub fn claim(&self, key: &StoreKey, wait: ClaimWait) -> Claim {
        match self.claims {
            Some(claims) => claims.claim(key, wait),
            None => Claim::Uncoordinated,
        }
    }

    /// [`Claims::claim_timeout`]; without claims,
    /// [`DEFAULT_CLAIM_TIMEOUT`].
    pub fn claim_timeout(&self) -> Duration {
        self.claims
            .map_or(DEFAULT_CLAIM_TIMEOUT, |claims| claims.claim_timeout())
    }

    /// [`Claims::holder`]; without claims, `None`.
    pub fn holder(&self, key: &StoreKey) -> Option<String> {
        self.claims.and_then(|claims| claims.holder(key))
    }

    /// [`Blobs::lookup_blob`]; without blobs, [`Miss::Absent`].
    pub fn lookup_blob(&self, key: &BlobKey) -> Lookup<Vec<u8>> {
        match self.blobs {
            Some(blobs) => blobs.lookup_blob(key),
            None => Lookup::Miss(Miss::Absent),
        }
    }

    /// [`Blobs::put_blob`]; without blobs, [`StoreOutcome::Skipped`].
    pub fn put_blob(&self, key: &BlobKey, bytes: &[u8]) -> StoreOutcome {
        match self.blobs {
            Some(blobs) => blobs.put_blob(key, bytes),
            None => StoreOutcome::Skipped,
        }
    }

    /// [`Records::keep_batch`]; without records, nothing.
    pub fn keep_batch(&self, record: &[u8]) {
        if let Some(records) = self.records {
            records.keep_batch(record);
        }
    }

    /// [`Records::kept_batches`]; without records, none.
    pub fn kept_batches(&self) -> Vec<Vec<u8>> {
        self.records
            .map_or_else(Vec::new, |records| records.kept_batches())
    }

    /// [`Records::explain`]; without records, [`Explanation::NeverSeen`].
    pub fn explain(&self, key: &StoreKey) -> Explanation {
        self.records
            .map_or(Explanation::NeverSeen, |records| records.explain(key))
    }

    /// [`Records::found_elsewhere`]; without records, nothing.
    pub fn found_elsewhere(&self, key: &StoreKey) {
        if let Some(records) = self.records {
            records.found_elsewhere(key);
        }
    }

    /// [`Groups::begin_group`]; without groups, nothing.
    pub fn begin_group(&self) {
        if let Some(groups) = self.groups {
            groups.begin_group();
        }
    }

    /// [`Groups::commit_group`]; without groups, nothing.
    pub fn commit_group(&self) {
        if let Some(groups) = self.groups {
            groups.commit_group();
        }
    }

    /// [`Groups::batch_finished`]; without groups, nothing.
    pub fn batch_finished(&self) {
        if let Some(groups) = self.groups {
            groups.batch_finished();
        }
    }
}

impl std::fmt::Debug for StoreParts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreParts")
            .field("claims", &self.claims.is_some())
            .field("blobs", &self.blobs.is_some())
            .field("records", &self.records.is_some())
            .field("groups", &self.groups.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::{ArtifactId, KernelId};
    use crate::store::{KeyComponents, MemoryStore};

    fn key() -> StoreKey {
        StoreKey::for_artifact(
            &KeyComponents::new("cuda", "nvrtc 12.4", "sm_90", "-O3"),
            &ArtifactId::new(KernelId::named("saxpy").build(), 0u8),
            None,
        )
    }

    // P4, P9: a store without a part answers as a store without it did:
    // no claim, no blob, no record, nothing to commit.
    #[test]
    fn p4_a_missing_part_answers_as_a_store_without_it() {
        let none = StoreParts::default();
        let key = key();
        assert!(matches!(
            none.claim(&key, ClaimWait::Once),
            Claim::Uncoordinated
        ));
        assert_eq!(none.claim_timeout(), DEFAULT_CLAIM_TIMEOUT);
        assert_eq!(none.holder(&key), None);
        let blob = BlobKey::new("parts test");
        assert!(matches!(
            none.lookup_blob(&blob),
            Lookup::Miss(Miss::Absent)
        ));
        assert_eq!(none.put_blob(&blob, b"bytes"), StoreOutcome::Skipped);
        none.keep_batch(b"record");
        assert!(none.kept_batches().is_empty());
        assert_eq!(none.explain(&key), Explanation::NeverSeen);
        none.found_elsewhere(&key);
        none.begin_group();
        none.commit_group();
        none.batch_finished();
    }

    // P4: a part that is there is the store's own: its claim holds the key.
    #[test]
    fn p4_a_present_part_is_the_stores_own() {
        let store = MemoryStore::new();
        let parts = StoreParts {
            claims: Some(&store),
            ..StoreParts::default()
        };
        let key = key();
        let Claim::Held(_guard) = parts.claim(&key, ClaimWait::Once) else {
            panic!("a fresh store's key is free");
        };
        assert!(matches!(store.claim(&key, ClaimWait::Once), Claim::Busy));
    }
}
