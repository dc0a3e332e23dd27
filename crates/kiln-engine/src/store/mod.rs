//! The persistent store seen from the core: what an artifact's key is made
//! of (`key`), the object-safe [`ArtifactStore`] trait a store implements
//! and what its lookups and writes answer ([`Lookup`], [`Miss`],
//! [`StoreOutcome`]), the named blobs a store keeps beside artifacts
//! ([`BlobKey`], `blob`), the store's [`Generation`], single flight among
//! processes (`claim`), and [`BoundStore`] (`binding`), the store bound to
//! a compiler's keys, through which the loader does every lookup, claim
//! and put of its [`CompilationTarget`]'s store. [`MemoryStore`]
//! (`memory`) is a store in the process's memory, for programs that want no
//! disk.
//!
//! # Keys (P1)
//!
//! Every key carries each component that changes an artifact's bytes, in the
//! clear, so that a record can be checked against the key it was asked for
//! and a miss can name what changed (P9):
//!
//! - the store format version ([`STORE_FORMAT`]),
//! - what the compiler names once for all its artifacts
//!   ([`KeyComponents`]: backend, compiler identity and version,
//!   architecture, options), from [`KeyedCompiler::key_components`],
//! - the variant the artifact is compiled under,
//! - the entry point, when the compiler is given one apart from the source,
//! - the subject: the kernel (its id, for lookups before lowering) or the
//!   BLAKE3 digest of the lowered source (for lookups after it, P7).
//!
//! A key's [`digest`](StoreKey::digest) is a BLAKE3 hash of all of that, so
//! two processes with the same inputs compute the same key, and any changed
//! component gives another.
//!
//! # Where it runs
//!
//! Nothing here is on the hot path: the loader touches a store only in a
//! batch. The one thing it reads on every launch is the store's
//! [`Generation`], a shared atomic that a [`BoundStore`] keeps a handle to,
//! so the loader's generation check stays one atomic load.
//!
//! [`CompilationTarget`]: crate::CompilationTarget

mod binding;
mod blob;
pub mod bytes;
mod claim;
mod counters;
mod default;
mod failure;
mod generation;
mod identity;
mod key;
mod lease;
mod memory;
mod rebuild;
mod recipe;

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use binding::{BoundStore, Claimed, PendingRekey};
pub use blob::BlobKey;
pub use claim::{Claim, ClaimGuard, ClaimWait};
pub use counters::StoreCounters;
pub use default::{DefaultStoreOpener, default_store, has_default_store, install_default_store};
pub use failure::{
    FAILURE_BLOB_KIND, QUARANTINE_AFTER, RememberedCause, RememberedFailure, UNDO_QUARANTINE,
};
pub use generation::Generation;
pub use identity::LibraryFile;
pub use key::{
    Difference, HeaderDigest, KeyComponent, KeyComponents, KeySubject, KeyedCompiler, Provenance,
    STORE_FORMAT, SourceCover, StoreKey, hex,
};
pub use lease::{DEFAULT_LEASE, Renewal};
pub use memory::{DEFAULT_CLAIM_TIMEOUT, MemoryStore};
pub use rebuild::{Rebuilt, decode_id, rebuild};
pub use recipe::{Recipe, Recompiled, StoredValue, decode_value, recompile};

/// Why a store had nothing to give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Miss {
    /// Nothing is stored under the key.
    Absent,
    /// Something was stored but failed verification; it was removed.
    Corrupt {
        /// What did not verify.
        detail: String,
    },
    /// The entry found was written for another key; it was removed.
    ForeignKey {
        /// Which component of the key differed.
        detail: String,
    },
    /// The store could not be read; this is a miss, never a failed launch.
    Unreadable {
        /// The I/O error.
        detail: String,
    },
}

impl std::fmt::Display for Miss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Absent => f.write_str("absent"),
            Self::Corrupt { detail } => write!(f, "corrupt: {detail}"),
            Self::ForeignKey { detail } => write!(f, "written for another key: {detail}"),
            Self::Unreadable { detail } => write!(f, "unreadable: {detail}"),
        }
    }
}

/// What a store lookup found.
#[derive(Debug, Clone)]
pub enum Lookup<A> {
    /// A verified artifact.
    Hit {
        /// The artifact.
        artifact: A,
        /// How many bytes were read.
        bytes: u64,
        /// How long compiling it took when it was stored: what this hit saved.
        work: Duration,
    },
    /// Nothing usable, and why.
    Miss(Miss),
}

/// What storing an artifact did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreOutcome {
    /// Written; `bytes` is what it took.
    Stored {
        /// Bytes written.
        bytes: u64,
    },
    /// The target keeps nothing, or already held it.
    Skipped,
    /// The write failed; the kernel still loads, the failure is counted.
    Failed {
        /// The I/O error.
        detail: String,
    },
}

/// Why a store holds nothing for a kernel, or what changed (P9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Explanation {
    /// The store never held an entry for this kernel.
    NeverSeen,
    /// The store holds an entry under exactly this key.
    Held {
        /// When it was stored, in seconds since the Unix epoch.
        stored_at: u64,
    },
    /// The entry the store last held for the kernel had another key.
    Changed {
        /// The first component that differs.
        difference: Difference,
        /// When that entry was stored, in seconds since the Unix epoch.
        stored_at: u64,
    },
    /// The store held this very key and no longer does: evicted, or removed
    /// as bad.
    Gone {
        /// When it was stored, in seconds since the Unix epoch.
        stored_at: u64,
    },
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NeverSeen => f.write_str("never seen: the store never held this kernel"),
            Self::Held { .. } => f.write_str("held: the store has this kernel under this key"),
            Self::Changed { difference, .. } => write!(f, "{difference}"),
            Self::Gone { .. } => {
                f.write_str("gone: the store held this key and evicted or removed it")
            }
        }
    }
}

/// A store's counts since it was opened in this process (S4's store side).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreStatistics {
    /// Lookups that returned a verified artifact.
    pub hits: u64,
    /// Lookups that found nothing under the key.
    pub absent: u64,
    /// Lookups that found an entry that failed verification (removed).
    pub corrupt: u64,
    /// Lookups that found a record written for another key (removed).
    pub foreign: u64,
    /// Lookups that could not read the store.
    pub unreadable: u64,
    /// Claims that waited for another compiler of the same key.
    pub claims_waited: u64,
    /// Claims given up after the lock timeout.
    pub claims_timed_out: u64,
    /// Artifacts written.
    pub puts: u64,
    /// Writes that failed; each was counted under its cause and the
    /// kernel still loaded.
    pub put_failures: u64,
    /// Writes not attempted because the store is read-only.
    pub writes_skipped: u64,
    /// Bytes of artifacts read by hits.
    pub bytes_read: u64,
    /// Bytes of artifacts and records written.
    pub bytes_written: u64,
    /// Entries removed by eviction.
    pub evicted: u64,
}

/// One artifact of [`ArtifactStore::put_many`]: a copy of what another
/// store holds under `key`.
#[derive(Debug, Clone, Copy)]
pub struct ArtifactCopy<'a> {
    /// The key it is stored under.
    pub key: &'a StoreKey,
    /// Its bytes.
    pub bytes: &'a [u8],
    /// What compiling it took, returned by later hits.
    pub work: Duration,
}

/// One kernel of [`ArtifactStore::put_rekeyed_many`]: an artifact found by
/// its text, stored again under the kernel's own key.
#[derive(Debug, Clone, Copy)]
pub struct RekeyedPut<'a> {
    /// The kernel's own key, which the artifact is stored under.
    pub key: &'a StoreKey,
    /// The key of its text, which holds the artifact already (P7).
    pub source_key: &'a StoreKey,
    /// Its bytes.
    pub bytes: &'a [u8],
    /// What compiling it took, returned by later hits.
    pub work: Duration,
}

/// Where artifacts outlive the process: the object-safe interface every
/// store (disk, remote, a composition of both) implements.
///
/// The store deals in bytes: [`BoundStore`] serializes a compiler's artifacts
/// and makes its keys.
///
/// # Contract
///
/// - [`lookup`](Self::lookup) takes a key of either subject: a kernel (an
///   artifact key) or lowered source (a source key). It returns
///   [`Lookup::Hit`] only with bytes whose digest and record it verified
///   (P2). Anything that did not verify is a [`Miss`] — `Corrupt` or
///   `ForeignKey` — and is removed; anything it could not read is
///   [`Miss::Unreadable`] (P5). A lookup never fails a launch.
/// - [`put`](Self::put) publishes atomically (P3): a reader sees the whole
///   entry or none of it, even if the writer dies. A failed write is
///   [`StoreOutcome::Failed`], counted, never a panic (P5).
/// - [`claim`](Self::claim) gives one caller among processes the right to
///   compile a key (P4, P12): while the guard lives, every other claimant
///   of the key is [`Claim::Busy`]; once it drops (the key was published,
///   or its compile failed) the key is claimable again. A claim of a dead
///   process is released at once; a claim is a lease its holder renews
///   while it lives ([`ClaimGuard::leased`], [`Renewal`]), and a holder
///   that stops renewing (hung, stopped) loses it when the lease runs out:
///   the next claimant takes the key over. A patient claimant gives up
///   after [`claim_timeout`](Self::claim_timeout). Correctness never
///   depends on a lease: a lost one costs at most a duplicate compile.
/// - [`generation`](Self::generation) returns a handle to the store's one
///   generation: it moves when the store starts holding other content.
/// - [`batch_finished`](Self::batch_finished) is called after the last put
///   of every batch of a loader bound to the store; a store with limits
///   is within them when it returns (P6).
/// - A **named blob** ([`lookup_blob`](Self::lookup_blob),
///   [`put_blob`](Self::put_blob)) is data a backend keeps beside its
///   artifacts that is no kernel's (the driver's pipeline cache), under a
///   [`BlobKey`] of its own. It is kept as an artifact is: verified on
///   every read (P2), published atomically (P3), a failed write a counted
///   [`StoreOutcome::Failed`] (P5), evicted as any entry (P6), and counted
///   in [`statistics`](Self::statistics) as lookups and puts. A blob and
///   an artifact never see each other, and a put replaces the blob's
///   bytes. A blob has no claim, source key or explanation, and its hits
///   report no work. A store that keeps no blobs answers every lookup
///   [`Miss::Absent`] and every put [`StoreOutcome::Skipped`] (the
///   defaults).
/// - Every method may be called from any thread.
pub trait ArtifactStore: Send + Sync + fmt::Debug {
    /// The verified bytes stored under `key`, or why there are none.
    fn lookup(&self, key: &StoreKey) -> Lookup<Vec<u8>>;

    /// What [`lookup`](Self::lookup) answers for each of `keys`, in their
    /// order: a batch asks for all its kernels at once, so that a remote
    /// store answers in one round trip (P10). The default asks one key at
    /// a time.
    fn lookup_many(&self, keys: &[StoreKey]) -> Vec<Lookup<Vec<u8>>> {
        keys.iter().map(|key| self.lookup(key)).collect()
    }

    /// Asks for the right to compile `key`, waiting as `wait` allows for
    /// another process compiling it now.
    fn claim(&self, key: &StoreKey, wait: ClaimWait) -> Claim {
        let _ = (key, wait);
        Claim::Uncoordinated
    }

    /// The longest a caller waits for another holder of a key before
    /// compiling it too (`KILN_CACHE_LOCK_TIMEOUT` for the disk store). The
    /// default is [`DEFAULT_CLAIM_TIMEOUT`].
    fn claim_timeout(&self) -> Duration {
        DEFAULT_CLAIM_TIMEOUT
    }

    /// Publishes `bytes` under `key` and, when given, under `source_key`;
    /// `work` is what compiling them took, returned by later hits.
    fn put(
        &self,
        key: &StoreKey,
        source_key: Option<&StoreKey>,
        bytes: &[u8],
        work: Duration,
    ) -> StoreOutcome;

    /// Publishes `bytes` under `key` only, for a kernel that took the
    /// artifact of another kernel with the same text, stored under
    /// `source_key` already (P7): the text's entry is left as its compile
    /// wrote it, with that compile's recipe. A store that counts compiles
    /// counts a kernel rekeyed. The default puts without the text.
    fn put_rekeyed(
        &self,
        key: &StoreKey,
        source_key: &StoreKey,
        bytes: &[u8],
        work: Duration,
    ) -> StoreOutcome {
        let _ = source_key;
        self.put(key, None, bytes, work)
    }

    /// Publishes each of `puts` as [`put_rekeyed`](Self::put_rekeyed)
    /// would, and answers each in their order: a batch that found many
    /// kernels by their text (a store another tool filled under other
    /// names) stores them under their own keys together, and a store that
    /// can make them durable together (one sync for the batch rather than
    /// one per entry) does. Each is still published atomically (P3). The
    /// default puts one at a time.
    fn put_rekeyed_many(&self, puts: &[RekeyedPut<'_>]) -> Vec<StoreOutcome> {
        puts.iter()
            .map(|put| self.put_rekeyed(put.key, put.source_key, put.bytes, put.work))
            .collect()
    }

    /// Removes whatever is stored under `key`: for bytes that verified but
    /// that the caller cannot use.
    fn remove(&self, key: &StoreKey);

    /// Says that `key`, which this store missed, was found in another
    /// store (a remote tier) and is being copied here: its miss is none to
    /// remember (no history of it is written). The default does nothing.
    fn found_elsewhere(&self, key: &StoreKey) {
        let _ = key;
    }

    /// Stores a copy of an artifact another store holds (a remote hit
    /// written back, a pull): as [`put`](Self::put), but it is no compile,
    /// so a store that counts compiles does not count it. The default
    /// puts.
    fn put_copy(&self, key: &StoreKey, bytes: &[u8], work: Duration) -> StoreOutcome {
        self.put(key, None, bytes, work)
    }

    /// Stores many copies at once, each as [`put_copy`](Self::put_copy)
    /// would, and answers each in their order: a store that can make them
    /// durable together (one sync for the batch rather than one per entry)
    /// does, as a remote tier's hits are written back. Each copy is still
    /// published atomically (P3). The default copies one at a time.
    fn put_many(&self, copies: &[ArtifactCopy<'_>]) -> Vec<StoreOutcome> {
        copies
            .iter()
            .map(|copy| self.put_copy(copy.key, copy.bytes, copy.work))
            .collect()
    }

    /// A handle to the store's generation.
    fn generation(&self) -> Generation;

    /// Counts since the store was opened.
    fn statistics(&self) -> StoreStatistics;

    /// A batch of a loader bound to the store ended: where a store with a
    /// size limit brings itself within it, so a run that fills the store
    /// ends within its limits (P6), and where it commits the calling
    /// thread's group ([`begin_group`](Self::begin_group)). The default
    /// does nothing.
    fn batch_finished(&self) {}

    /// Opens a group commit on the calling thread (or keeps the one open):
    /// until [`commit_group`](Self::commit_group) or
    /// [`batch_finished`](Self::batch_finished), the puts and blobs this
    /// thread writes are published as they are written, each whole or
    /// absent to every reader however the writer ends (P3), and made
    /// durable together when the group commits: a few syncs for a batch
    /// step rather than several for each entry. A loader opens one for
    /// its batch. The default does nothing: each write is durable when it
    /// returns.
    fn begin_group(&self) {}

    /// Makes durable what the calling thread wrote since
    /// [`begin_group`](Self::begin_group), and ends its group; nothing
    /// when it wrote nothing that must be waited for. A failed sync is
    /// counted as a failed write (P5). The default does nothing.
    fn commit_group(&self) {}

    /// Who holds the claim of `key` (P12), as a person reads it: `process
    /// 4242 on build-3`; `None` when nobody does or the store cannot say.
    /// A batch that waits for others names them in its progress and log.
    /// The default cannot say.
    fn holder(&self, key: &StoreKey) -> Option<String> {
        let _ = key;
        None
    }

    /// The encoded records of the last batches the store keeps
    /// ([`keep_batch`](Self::keep_batch)), oldest first: a batch hands out
    /// first the kernels they say took longest. The default keeps none.
    fn kept_batches(&self) -> Vec<Vec<u8>> {
        Vec::new()
    }

    /// Keeps the record of a batch that just ended, encoded by the loader
    /// (a `StoredBatch`), among the last few of every process that used the
    /// store, so what a slow start spent its time on can be read after the
    /// fact (`kiln records`). Bounded by the store; an encoded record it
    /// cannot keep is dropped, never an error. The default keeps nothing.
    fn keep_batch(&self, record: &[u8]) {
        let _ = record;
    }

    /// Why `key` (a kernel's key) is or is not held (P9).
    fn explain(&self, key: &StoreKey) -> Explanation {
        let _ = key;
        Explanation::NeverSeen
    }

    /// The verified bytes of the blob named `key`, or why there are none.
    /// The default keeps no blobs: [`Miss::Absent`].
    fn lookup_blob(&self, key: &BlobKey) -> Lookup<Vec<u8>> {
        let _ = key;
        Lookup::Miss(Miss::Absent)
    }

    /// Publishes `bytes` as the blob named `key`, in place of what it held.
    /// The default keeps no blobs: [`StoreOutcome::Skipped`].
    fn put_blob(&self, key: &BlobKey, bytes: &[u8]) -> StoreOutcome {
        let _ = (key, bytes);
        StoreOutcome::Skipped
    }
}
