//! kiln's verified on-disk artifact store.
//!
//! A [`DiskStore`] keeps compiled artifacts in a folder shared by every
//! process of the machine, implements [`kiln_engine::ArtifactStore`], and so
//! sits behind any backend's target through [`kiln_engine::BoundStore`].
//!
//! # Design
//!
//! - **Content-addressed objects, small records.** Artifact bytes are files
//!   named by their BLAKE3 digest. A record per key — by kernel id or by
//!   lowered source — carries every component of its key and the digest of
//!   its object. Every read checks the record's digest, that the record is
//!   the key asked for, the object's length and the object's digest (P1, P2).
//! - **Small artifacts travel in their kernel's record.** A kernel's record
//!   also carries a copy of an artifact of at most 16 KiB, sealed with it,
//!   so a warm hit opens one file instead of two (F3); the object stays,
//!   for source records, bundles and the eviction order.
//! - **Small entries in packs.** By default an artifact below 64 KiB
//!   ([`StoreConfig::pack_below`], `KILN_CACHE_PACK_BELOW`; 0 packs nothing), its records and its kernel's history are frames
//!   appended to one of 512 shard packs, each with an index of fixed slots
//!   (`pack/`): about a thousand files at any size (F10). Appends take the
//!   shard's lock and publish a slot only once its frame is durable;
//!   readers take no lock and verify every frame as a file's bytes (P2);
//!   eviction, `gc` and `verify` rewrite a shard into a new generation.
//!   Every lookup reads packs first, then files.
//! - **Sharded folders.** Records, objects and kernel histories live two
//!   shard levels deep (`ab/c/abc…`), so a lookup opens known paths and
//!   never lists a folder; `docs/design/store.md` has the measurements
//!   behind the choice.
//! - **Only its own files.** The store removes a file only when it can
//!   prove it is its own: inside the root, reached without following a
//!   link (every folder below the root is opened from the root's descriptor
//!   with `O_NOFOLLOW`, see `tree.rs`), named as the store names its files,
//!   in a folder that carries the `LAYOUT` marker, and still the file that
//!   was judged. An error other than "not found" never counts as "gone".
//!   A hit still opens one path, refusing a link only at the file's name.
//! - **Adopts only a store.** Opening makes a store of an empty folder and
//!   refuses one that holds files and no marker ([`Error::NotAStore`]); it
//!   repairs the store's own names at the root, and reports what it would
//!   not repair ([`Error::Damaged`]). It also sweeps the staging files of
//!   dead processes, at most once an hour (the time of the `swept` file).
//! - **Atomic, durable publication.** Files are written whole in
//!   `staging/`, synced, renamed into place and their folder synced (P3),
//!   through one function whether the bytes are in memory or streamed from
//!   a bundle. A put that cannot finish takes back what it published.
//! - **Kernel-kept locks.** One byte-range lock per key in one `locks`
//!   file gives single flight across processes (P4); the kernel drops a dead
//!   process's locks, and a waiter gives up after
//!   [`StoreConfig::lock_timeout`]. Publishers hold a shared lock on an
//!   object, which eviction must take alone (P6). Readers take none: files
//!   are never changed in place, and an open descriptor reads a whole file
//!   even after eviction unlinks it.
//! - **Misses, never failures.** A lookup that cannot read is a miss; a put
//!   that cannot write is a counted warning (P5), one warning per
//!   [`WriteCause`], listed by [`DiskStore::write_failures`]. A put checks
//!   its files against the process's file size limit before writing, so
//!   the store never depends on how `SIGXFSZ` is handled.
//! - **Read-only stores.** Asked for ([`StoreConfig::read_only`],
//!   `KILN_CACHE_READ_ONLY=1`) or found when the folder cannot be written
//!   (a read-only mount), a store serves hits and writes and removes
//!   nothing; a folder that holds no store and cannot be written is
//!   [`Error::ReadOnlyEmpty`].
//! - **Explicit access times, bounded size.** A hit sets the object's
//!   access time itself (at most once a minute), whichever file it read,
//!   so `noatime` mounts still evict in least-recently-used order. A put
//!   that takes the store over [`StoreConfig::max_bytes`] or
//!   [`StoreConfig::max_entries`] evicts on a thread of its own, and every
//!   batch that stored something ends within the limits (P6).
//! - **Bundles.** [`DiskStore::export`] and [`DiskStore::import`] move a
//!   store between machines in one verified file (P8).
//! - **Named blobs.** Data a backend keeps beside its artifacts (the
//!   driver's pipeline cache) is an object and a record of its own kind
//!   under a [`kiln_engine::store::BlobKey`], verified, evicted and listed as
//!   an artifact's entry is ([`Entry::Blob`]); bundles carry artifacts
//!   only.
//! - **Activity across processes.** Every process counts its hits, misses,
//!   compiles and failures per backend and merges them into one small
//!   file at the end of each batch ([`DiskStore::activity`], `kiln stats`),
//!   under the file's lock, in two sealed slots so a killed writer tears
//!   neither the totals nor a launch.
//! - **Explanations.** A history per kernel id remembers the key it was
//!   last stored under and the key it last missed under, so
//!   [`kiln_engine::Records::explain`] names what changed (P9).

#![warn(missing_docs)]

mod activity;
mod batches;
mod bundle;
pub mod config;
mod disk;
mod durable;
mod envelope;
pub mod error;
mod file_size;
mod files;
#[cfg(test)]
mod fixtures;
mod layout;
mod lock;
mod maintenance;
mod pack;
mod partial;
mod record;
mod sealed;
mod skeleton;
mod staging;
mod tree;
mod usage;
mod walk;

pub use activity::{Activity, BackendActivity};
pub use bundle::{
    BUNDLE_VERSION, BundleHeader, BundleSeal, ExportReport, ImportReport, SignBundle, read_header,
};
pub use config::{DEFAULT_PACK_BELOW, StoreConfig, parse_size};
pub use disk::{DiskStore, Footprint, Limits};
pub use durable::{syncs, syncs_on_this_thread};
pub use error::{Error, Result, WriteCause, WriteFailure};
pub use maintenance::{CollectReport, Entry, EntryInfo, Progress, VerifyReport};
pub use record::{BlobRecord, KernelHistory, Record, Seen};
pub use usage::Usage;
