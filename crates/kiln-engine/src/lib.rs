//! kiln's core: kernel identities, the batch loader every backend plugs
//! into, statistics, diagnostics, and the traits a backend implements.
//!
//! # The flow of a kernel
//!
//! A kernel names itself with a [`KernelId`] — its type and parameters,
//! hashed stably — without generating any code. Under a target's compile
//! choice (the *variant*) it becomes an [`ArtifactId`]. A [`KernelLoader`],
//! one per device, turns artifact ids into loaded device kernels:
//!
//! 1. **Queue.** [`KernelLoader::enqueue`] records a wanted kernel and
//!    compiles nothing. A kernel already loaded or queued is not queued again;
//!    queuing a kernel whose failure was never reported drops the failure
//!    and tries it again.
//! 2. **Launch.** [`KernelLoader::load`] of a kernel that is loaded, with an
//!    empty queue, is one hash lookup and one clone of the loaded handle: no
//!    lock, no allocation, no system call. Every other load first compiles
//!    the whole queue, together with the asked kernel when it is missing, in
//!    one batch — a non-empty queue is a promise that it compiles before the
//!    next launch. [`KernelLoader::compile_queued`] runs that batch without a
//!    launch.
//! 3. **Batch.** Each kernel is first asked of the target's store by id. The
//!    missing ones are lowered (source generated) on the shared worker
//!    threads, each worker taking the next kernel when it finishes one.
//!    Kernels whose lowered text is identical form a group: the first asks
//!    the store by source and finalizes only when the store has nothing, the
//!    others take its artifact (they are *rekeyed*). The rest finalize on the
//!    workers; a kernel with no text to share, or any kernel of a storeless
//!    target, finalizes right where it was lowered, so a batch lasts about as
//!    long as its slowest kernel. Artifacts are then loaded in order on the
//!    calling thread, and each that did not come from the store under its
//!    own id is stored.
//! 4. **Failures.** A kernel that fails to lower, finalize or load fails
//!    alone; members of a source group fail with their leader's error without
//!    finalizing the same text again. A panic in a generator or compiler
//!    becomes that kernel's failure with the panic's message. A device that
//!    refuses an artifact fails that kernel, which is neither kept nor
//!    stored. A failure is kept until the kernel's own load reports it —
//!    once, without compiling again — and the load after that tries again;
//!    a later batch drops failures nobody reported, so a stale error is
//!    never served.
//! 5. **Store switches.** The loaded map belongs to the store generation it
//!    was filled under: when the store changes (another root, an import that
//!    replaced content), the next access drops every loaded kernel and loads
//!    from the new store. A storeless loader never resets.
//!
//! # Statistics
//!
//! A [`StatisticsCollector`] counts kernels registered while one of its
//! guards is open on the queuing thread, and they settle to it even when
//! their batch runs later; each attempt settles exactly once. Every batch
//! leaves a [`BatchRecord`], and [`KernelLoader::statistics`] is a
//! serializable snapshot of the loader's totals.
//!
//! # Diagnostics
//!
//! Compiler messages carry a [`Severity`] (`Note < Warning < Error`; an
//! unknown native severity is an error). A failure's message leads with the
//! first error and where it is, adds a hint for configuration mistakes, and
//! counts the rest of the cascade; every diagnostic stays on the error.
//!
//! # Backends
//!
//! A backend implements [`ArtifactCompiler`] (lower and finalize, on any
//! thread) and [`CompilationTarget`] (the device, and which store it keeps
//! artifacts in, on the loader's thread; the loader binds that store and
//! makes every store call), and proves itself with the conformance suite.
//!
//! # Testing
//!
//! The `testing` feature adds what tests and examples need and a program
//! does not: the fake target (`kiln_engine::fake`), a compiler and device
//! whose every behaviour can be chosen, which drives the loader's tests and
//! lets kiln run without a GPU; and the conformance suite
//! (`kiln_engine::conformance`, instantiated with `conformance_suite!`) that
//! every backend runs on its real compiler. A crate turns it on in its
//! `[dev-dependencies]`; a build without it holds neither, and its worker
//! processes serve only the compilers their program lists.

#![warn(missing_docs)]

pub mod compiler;
pub mod config;
#[cfg(feature = "testing")]
pub mod conformance;
pub mod define;
pub mod diagnostic;
mod encoding;
pub mod error;
#[cfg(feature = "testing")]
pub mod fake;
pub mod handle;
pub mod id;
pub mod kernel;
pub mod loader;
pub mod mode;
mod panic;
mod pool;
pub mod profile;
pub mod resources;
pub mod statistics;
pub mod store;
pub mod target;
pub mod timing;
pub mod tune;
pub mod worker;

pub use compiler::{ArtifactCompiler, Finalized};
pub use config::{LoaderConfig, WorkerMode};
pub use define::DefineProblem;
pub use diagnostic::{CompileFailure, Diagnostic, Location, Severity};
pub use error::{
    BuildFailure, CacheError, ConfigError, DeviceRefusal, Failure, FallbackMissing, KernelError,
    Stage,
};
pub use handle::{KernelCache, KeyedCache, PendingKernel};
pub use id::{ArtifactId, DeviceId, KernelId, KernelIdBuilder};
pub use kernel::Kernel;
pub use loader::{
    BatchProgress, JobManifest, KernelLoader, ListedError, Loading, ManifestKernel,
    STORED_BATCH_LIMIT, StoredBatch, Waiting,
};
pub use resources::{ArtifactReport, Reported, ResourceUsage};
pub use statistics::{
    BatchRecord, CollectorScope, Health, KernelCounts, KernelOutcome, KernelRecord,
    LoaderStatistics, StatisticsCollector,
};
pub use store::{
    ArtifactStore, ArtifactStoreExt, Blobs, BoundStore, Claim, ClaimGuard, ClaimWait, Claims,
    Difference, Explanation, Generation, Groups, KeyComponent, KeyComponents, KeySubject,
    KeyedCompiler, Lookup, MemoryStore, Miss, Origin, Put, Records, RememberedFailure,
    STORE_FORMAT, StoreCounters, StoreKey, StoreOutcome, StoreParts, StoreStatistics,
};
pub use target::{
    ArtifactOf, CompilationTarget, DeviceStep, KernelOf, LoweredOf, MadeOf, TargetStore, VariantOf,
};
pub use timing::{DeviceTimer, TimedTarget, TimingError};
