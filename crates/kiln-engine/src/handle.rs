//! The shared handle: one device's kernels, asked for from many threads and
//! paid for in batches.
//!
//! A [`KernelLoader`](crate::KernelLoader) belongs to the one thread that launches on its device.
//! A program whose kernels are wanted from many threads — an inference
//! server's request threads, an autotuner generating candidates — shares a
//! [`KernelCache`] instead: a cheaply cloneable handle over one device's
//! loader. Each thread names what it needs with
//! [`request`](KernelCache::request), which compiles nothing and returns a
//! [`PendingKernel`]; the first [`resolve`](PendingKernel::resolve) of any
//! pending kernel, or a [`build`](KernelCache::build), compiles every
//! outstanding request in one batch.
//!
//! ```
//! use kiln_engine::fake::{FakeKernel, FakeTarget};
//! use kiln_engine::{DeviceId, KernelCache};
//!
//! let device = DeviceId::new("fake", 0);
//! let cache = KernelCache::new(device, FakeTarget::storeless());
//! let pending: Vec<_> = (0..4)
//!     .map(|number| cache.request(FakeKernel::new(number), ()))
//!     .collect();
//! std::thread::scope(|scope| {
//!     for kernel in &pending {
//!         scope.spawn(move || {
//!             let loaded = kernel.resolve(device).expect("fake kernels compile");
//!             assert_eq!(loaded.kernel, kernel.id().kernel);
//!         });
//!     }
//! });
//! // Whichever thread came first built all four, in one batch.
//! assert_eq!(cache.records().len(), 1);
//! assert_eq!(cache.records()[0].kernels, 4);
//! ```
//!
//! # A request's life
//!
//! ```text
//!  request ──▶ waiting ──(a build takes it)──▶ building ──▶ loaded, for good
//!                 ▲                               │
//!                 └──────── failed, wanted ───────┤
//!                                                 └──▶ failed, asked only by a `get`: forgotten
//! ```
//!
//! - **Requests** (K1, K2) are keyed by [`ArtifactId`](crate::ArtifactId): a kernel already
//!   loaded, being built, or waiting is not added again, and the handle
//!   returned names the same request.
//! - **Builds** (K4) are serialized by the one lock that owns the loader. A
//!   build takes every waiting request at once, compiles them without any
//!   other lock held, and publishes the outcomes; a request made meanwhile
//!   waits for the next batch, and a build or resolve that arrives meanwhile
//!   waits for the batch in flight before it looks for more work.
//! - **Failures** (K3) go back to the front of the queue, still wanted, so
//!   the next build tries them again and reports them again until they
//!   succeed. A resolve answers with its own kernel's failure; one that
//!   waited for a batch that tried its kernel takes that batch's answer
//!   rather than compiling the kernel once more. A kernel only a direct
//!   [`get`](KernelCache::get) asked for is not a request and is not kept.
//! - **Resolving a built kernel** is a device comparison and one atomic
//!   load: no lock, no allocation, no write to shared memory, so it scales
//!   across threads.
//! - **A keyed index** ([`KeyedCache`], K5) finds a kernel by the caller's
//!   own compact key, so a hit neither builds a kernel description nor
//!   hashes one.
//! - **One device** (K6): a cache is made for a [`DeviceId`](crate::DeviceId), and every call
//!   that hands out a kernel names the device the caller launches on; any
//!   other is refused with [`CacheError::WrongDevice`](crate::CacheError::WrongDevice).
//! - **Reporting** (D3): a reporter set with
//!   [`set_reporter`](KernelCache::set_reporter) hears the record of every
//!   artifact a build compiled, with the compiler's warnings and remarks,
//!   once, and never one served from memory or from the store. It is called
//!   with no lock held, so it may replace itself or use the cache.
//!
//! # Locks
//!
//! | lock | guards | held |
//! |---|---|---|
//! | build lock | the loader | for one whole batch: the only lock held while compiling |
//! | state lock | requests, the waiting queue | for bookkeeping only, never while compiling or calling user code |
//! | reporter lock | the reporter | to clone or replace it, never while calling it |
//! | a request's failures | its latest failure | to read or record one failure |
//! | a keyed index | key → request | for one map lookup or insert; factories run outside it |
//!
//! They are taken in that order (build, state, failures; an index, then
//! failures), so no two threads can wait on each other.

// Each file uses only those before it: `slot` (one request) → `cache` (the
// `KernelCache`, its locks and batches) → `pending` (`PendingKernel`, and
// `KernelCache::request`) → `keyed` (`KeyedCache`, and `KernelCache::keyed`).
mod background;
mod builds;
mod cache;
mod keyed;
mod pending;
mod slot;

pub use cache::KernelCache;
pub use keyed::KeyedCache;
pub use pending::PendingKernel;
