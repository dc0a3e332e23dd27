//! kiln's object-store tier (P16): artifacts in an S3 bucket (AWS S3, or
//! any server of its API: Garage, MinIO, Ceph, GCS's XML API), behind the
//! disk store and, when there is one, Redis.
//!
//! - [`BucketStore`] is an [`ArtifactStore`](kiln_engine::ArtifactStore)
//!   over a bucket: the Redis tier's signed, self-describing entries, one
//!   object per key, a batch's lookups sent together and bounded, every
//!   call under one deadline and a circuit breaker.
//! - [`BucketTier`] puts a store in front of it (the disk store, or the
//!   disk store with Redis behind it): reads go to the front, then the
//!   bucket, and a bucket hit is copied to the front; writes go to the
//!   front and, through a bounded queue, to the bucket; claims are the
//!   front's.
//! - [`BucketConfig`] reads `KILN_REMOTE_URL=s3://BUCKET/PREFIX`, the
//!   remote tier's keys, and the usual AWS variables.
//!
//! # Design
//!
//! - **Never trust the bucket.** A bucket is often writable by more
//!   principals than a fleet's Redis; every object is verified with the
//!   fleet's keys before its bytes leave this crate, so a forged, damaged
//!   or misplaced object is a counted miss and the kernel compiles (P10).
//! - **Blocking and small.** Requests are signed by a sans-IO signer
//!   (rusty-s3) and sent by a blocking HTTP client (ureq, rustls): no
//!   async runtime in a library that runs inside GPU programs. A batch's
//!   requests go out on scoped threads, at most
//!   [`BucketConfig::concurrency`] at once.
//! - **Degrade, never fail.** A bucket that is down, slow, throttling or
//!   refusing answers misses and counted failed writes, with one warning
//!   per outage; the breaker keeps a dead bucket from costing each batch a
//!   timeout (P5, P10).
//! - **A batch in one GET.** A batch that asked the bucket for its
//!   kernels leaves a batch pack when it ends (one signed object of every
//!   artifact of that lookup, named by its set of keys), and a node whose
//!   batch asks for the same set reads it whole in one request
//!   ([`BucketConfig::packs`]).
//! - **Objects are never refreshed by reads.** An object store has no TTL
//!   to renew: the bucket's lifecycle rules are its eviction.

#![warn(missing_docs)]

mod client;
pub mod config;
pub mod error;
mod pack;
mod store;
mod tier;

pub use config::{BucketConfig, Credentials, PackOrder};
pub use error::{Error, Result};
pub use store::{BucketStatistics, BucketStore};
pub use tier::BucketTier;
