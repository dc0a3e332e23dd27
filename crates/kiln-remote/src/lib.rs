//! kiln's shared remote tier (P10, P12): artifacts in Redis or Redis
//! Cluster, signed so that no one who can write the cache can put native
//! code on the machines that read it, behind each machine's disk store.
//!
//! - [`RemoteStore`] is an [`ArtifactStore`](kiln_engine::ArtifactStore)
//!   over Redis: one signed, self-describing value per key, a batch's
//!   lookups in one round trip, every call bounded by a timeout and a
//!   circuit breaker, claims as leases across machines.
//! - [`TieredStore`] composes a local store (the disk store) with a
//!   remote one: reads go local, then remote, and a remote hit is written
//!   back locally; remote writes go through a bounded background queue.
//! - [`Keys`] and [`keygen`] are the fleet key (keyed BLAKE3) or the
//!   builders' Ed25519 signing keys and the nodes' trusted public keys.
//!   Without a key the remote tier does not open. The same keys sign and
//!   verify bundles ([`Keys::sign_bundle`], [`Keys::verify_bundle`]).
//! - [`push`] and [`pull`] copy entries between a disk store and the
//!   remote, verified where read and signed where written.
//!   [`push_blobs`] and [`pull_blobs`] copy the named blobs (profiles,
//!   tuning answers, pipeline caches) with an entry naming each.
//!
//! # Design
//!
//! - **Degrade, never fail.** A remote that is down, slow, full or not
//!   Redis answers misses and counted failed writes, with one warning per
//!   outage; the breaker keeps a dead remote from costing each launch a
//!   timeout, and probes it again later (P5, P10).
//! - **Never trust the shared tier.** Every value is verified before its
//!   bytes leave this crate; anything else is a counted miss (P2, P10).
//! - **Blocking and small.** The `redis` crate's blocking connections,
//!   each call on a thread of its own under one deadline: no async
//!   runtime; `rediss://` over rustls, checked against the system's CA
//!   certificates or `KILN_REMOTE_CA`'s. The fleet's channel is heard on
//!   a connection of this crate's own that bounds every message.
//! - **Nothing large inside Redis's one thread.** No script is handed or
//!   returns a large value: long values are written by `SET NX` and read
//!   in pieces, so no call keeps Redis busy for a millisecond.
//! - **Claims that deletion cannot undo.** Leases are announced on the
//!   fleet's channel as they are taken, renewed and let go; who came first
//!   for a key is the channel's order, which no one can take back.
//! - **Round trips per batch step.** A batch's lookups and failure
//!   memories, its claims (in groups), its publishes and releases, and a
//!   store's lease renewals each go as one pipeline (one per shard).
//!
//! The settings and their `KILN_REMOTE_*` variables are in [`config`].

#![warn(missing_docs)]

mod announce;
mod blob_transfer;
pub mod breaker;
pub mod config;
// Public for the other shared tiers (the object-store tier), whose
// entries are these same signed values.
pub mod entry;
pub mod error;
mod fleet;
mod keys;
mod lease;
mod link;
mod queue;
mod remote;
mod signature;
mod statistics;
mod step;
mod subscription;
mod tiered;
mod transfer;

pub use blob_transfer::{BlobListing, BlobTransferReport, pull_blobs, push_blobs};
pub use config::RemoteConfig;
pub use error::{Error, Result};
pub use fleet::{FleetCounts, Listing};
pub use keys::{FleetKey, Keys, PublicKey, SigningKey, keygen};
pub use remote::RemoteStore;
pub use signature::BundleSigner;
pub use statistics::RemoteStatistics;
pub use tiered::{TieredStatistics, TieredStore};
pub use transfer::{TransferReport, pull, push};
