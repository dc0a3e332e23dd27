//! The persistent store seen from the core: what an artifact's key is made
//! of (`key`), the object-safe [`ArtifactStore`] contract every store
//! answers and what its lookups and writes answer ([`Lookup`], [`Miss`],
//! [`StoreOutcome`], [`Put`]), the parts a store may have beside it
//! ([`Claims`], [`Blobs`], [`Records`], [`Groups`]: `parts`), the named blobs a store keeps beside artifacts
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

mod ahead;
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
mod parts;
mod rebuild;
mod recipe;

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use ahead::ReadAhead;
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
pub use parts::{Blobs, Claims, Groups, Records, StoreParts};
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

/// One entry of [`ArtifactStore::put_many`]: bytes to publish under `key`,
/// and where they came from.
#[derive(Debug, Clone, Copy)]
pub struct Put<'a> {
    /// The key it is stored under.
    pub key: &'a StoreKey,
    /// Its bytes.
    pub bytes: &'a [u8],
    /// What compiling it took, returned by later hits.
    pub work: Duration,
    /// Where the bytes came from: what else the store does with them.
    pub origin: Origin<'a>,
}

/// Where the bytes of a [`Put`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin<'a> {
    /// A compile: published under the put's key and, when given, under
    /// `source_key`, the key of the lowered text it was compiled from (P7).
    /// A store that counts compiles counts it.
    Compiled {
        /// The key of its lowered text, when it has one.
        source_key: Option<&'a StoreKey>,
    },
    /// The artifact of another kernel with the same text, stored under
    /// `source_key` already (P7): published under the put's key only, and
    /// the text's entry is left as its compile wrote it, with that
    /// compile's recipe. A store that counts compiles counts a kernel
    /// rekeyed.
    Rekeyed {
        /// The key of the text, which holds the artifact already.
        source_key: &'a StoreKey,
    },
    /// A copy of what another store holds (a remote hit written back, a
    /// pull): published under the put's key, and no compile, so a store
    /// that counts compiles does not count it.
    Copied,
}

/// What [`ArtifactStore::lookup_each_shaped`]'s `shape` makes of an
/// answer: the caller's own type, handed back to it.
pub type Shaped = Box<dyn std::any::Any + Send>;

/// Where artifacts outlive the process: the object-safe contract every
/// store (disk, memory, remote, a composition of them) answers.
///
/// The store deals in bytes: [`BoundStore`] serializes a compiler's artifacts
/// and makes its keys. What only some stores have is a part of its own,
/// handed out by [`parts`](Self::parts):
///
/// ```text
///                     ArtifactStore: lookup_many, put_many, remove,
///                     generation, statistics, parts
///                               │ parts()
///        ┌───────────────┬──────┴────────┬────────────────┐
///     Claims           Blobs          Records          Groups
///  claim, holder,   lookup_blob,   keep_batch,       begin_group,
///  claim_timeout    put_blob       kept_batches,     commit_group,
///   (P4, P12)      (P2, P3, P6)    explain, found_   batch_finished
///                                  elsewhere (P9)    (P3, P6)
/// ```
///
/// # Contract
///
/// - [`lookup_many`](Self::lookup_many) takes keys of either subject: a
///   kernel (an artifact key) or lowered source (a source key). It returns
///   [`Lookup::Hit`] only with bytes whose digest and record it verified
///   (P2). Anything that did not verify is a [`Miss`] — `Corrupt` or
///   `ForeignKey` — and is removed; anything it could not read is
///   [`Miss::Unreadable`] (P5). A lookup never fails a launch.
/// - [`put_many`](Self::put_many) publishes each put atomically (P3): a
///   reader sees the whole entry or none of it, even if the writer dies. A
///   failed write is [`StoreOutcome::Failed`], counted, never a panic (P5).
/// - [`generation`](Self::generation) returns a handle to the store's one
///   generation: it moves when the store starts holding other content.
/// - Every method may be called from any thread.
///
/// Every part's own rules are on its trait: [`Claims`], [`Blobs`],
/// [`Records`], [`Groups`]. One-entry puts are [`ArtifactStoreExt`]'s.
pub trait ArtifactStore: Send + Sync + fmt::Debug {
    /// What the store holds under each of `keys`, in their order: the
    /// verified bytes, or why there are none. A batch asks for all its
    /// kernels at once, so that a remote store answers in one round trip
    /// (P10).
    fn lookup_many(&self, keys: &[StoreKey]) -> Vec<Lookup<Vec<u8>>>;

    /// What [`lookup_many`](Self::lookup_many) answers, handed to `found`
    /// with each key's place in `keys` as soon as it is ready, on the
    /// caller's thread, each place once, in any order (F11): a batch makes
    /// each hit's device object while the rest are still read. By default,
    /// every answer once [`lookup_many`](Self::lookup_many) returns, in
    /// order.
    fn lookup_each(&self, keys: &[StoreKey], found: &mut dyn FnMut(usize, Lookup<Vec<u8>>)) {
        for (at, answer) in self.lookup_many(keys).into_iter().enumerate() {
            found(at, answer);
        }
    }

    /// What [`lookup_each`](Self::lookup_each) answers, each answer first
    /// given to `shape` on the thread that read it, and what `shape` made
    /// of it handed to `found` on the caller's thread, each place once
    /// (F11): a loader decodes each artifact where it was read, and its own
    /// thread only loads. By default, `shape` runs on the caller's thread
    /// as each answer of [`lookup_each`](Self::lookup_each) comes.
    fn lookup_each_shaped(
        &self,
        keys: &[StoreKey],
        shape: &(dyn Fn(usize, Lookup<Vec<u8>>) -> Shaped + Sync),
        found: &mut dyn FnMut(usize, Shaped),
    ) {
        self.lookup_each(keys, &mut |at, answer| found(at, shape(at, answer)));
    }

    /// What [`lookup_many`](Self::lookup_many) answers for one key.
    fn lookup(&self, key: &StoreKey) -> Lookup<Vec<u8>> {
        self.lookup_many(std::slice::from_ref(key))
            .pop()
            .unwrap_or(Lookup::Miss(Miss::Absent))
    }

    /// Publishes each of `puts` as its [`Origin`] says, and answers each in
    /// their order. Each is published atomically (P3); a store that can
    /// make a slice of them durable together (one sync rather than one per
    /// entry) does, as a remote tier's hits written back or a round's
    /// rekeyed kernels are.
    fn put_many(&self, puts: &[Put<'_>]) -> Vec<StoreOutcome>;

    /// Removes whatever is stored under `key`: for bytes that verified but
    /// that the caller cannot use.
    fn remove(&self, key: &StoreKey);

    /// A handle to the store's generation.
    fn generation(&self) -> Generation;

    /// Counts since the store was opened.
    fn statistics(&self) -> StoreStatistics;

    /// The parts this store has beside its contract. The default has none:
    /// no claims ([`Claim::Uncoordinated`]), no blobs, no records, each
    /// write durable when it returns.
    fn parts(&self) -> StoreParts<'_> {
        StoreParts::default()
    }
}

/// One-entry puts over [`ArtifactStore::put_many`], for every store: a
/// store implements `put_many`, never these. A kernel rekeyed, one of a
/// round's, is a [`Put`] of [`Origin::Rekeyed`] given to `put_many`.
pub trait ArtifactStoreExt: ArtifactStore {
    /// Publishes `bytes` under `key` and, when given, under `source_key`
    /// ([`Origin::Compiled`]); `work` is what compiling them took, returned
    /// by later hits.
    fn put(
        &self,
        key: &StoreKey,
        source_key: Option<&StoreKey>,
        bytes: &[u8],
        work: Duration,
    ) -> StoreOutcome {
        one(self.put_many(&[Put {
            key,
            bytes,
            work,
            origin: Origin::Compiled { source_key },
        }]))
    }

    /// Stores a copy of an artifact another store holds
    /// ([`Origin::Copied`]): no compile.
    fn put_copy(&self, key: &StoreKey, bytes: &[u8], work: Duration) -> StoreOutcome {
        one(self.put_many(&[Put {
            key,
            bytes,
            work,
            origin: Origin::Copied,
        }]))
    }
}

impl<T: ArtifactStore + ?Sized> ArtifactStoreExt for T {}

/// The one answer of a put of one.
fn one(mut outcomes: Vec<StoreOutcome>) -> StoreOutcome {
    outcomes.pop().unwrap_or_else(|| StoreOutcome::Failed {
        detail: "the store gave no answer for this put".to_owned(),
    })
}
