//! kiln turns GPU kernels into loaded device kernels as fast as the hardware
//! allows. It compiles what is missing in parallel batches, keeps every
//! artifact in a verified store so that no process compiles the same kernel
//! twice, and serves a kernel it already holds in one lookup.
//!
//! This is the crate to depend on: it re-exports what a program uses of the
//! core (kernels and their ids, the loader and its handles, errors,
//! reports and statistics, the target traits, [`mode`], [`tune`],
//! [`worker`], [`profile`]) and, behind the
//! `cuda`, `hip` and `wgpu` features, the backends (`kiln::cuda` with
//! the `cuda` feature). The `store` feature (on by default) adds the disk
//! store: [`Store::from_env`] opens the one the `KILN_CACHE_*` variables
//! name, shared with every other kiln program and the `kiln` command, and
//! every target made without a store is on it ([`Store`] says how to turn
//! it off); [`disk`] is kiln-store itself.
//!
//! The `remote` feature puts the fleet tier (Redis, `KILN_REMOTE_URL`)
//! behind the disk store. It is off by default: it takes a program from 34
//! external crates to 91 (a Redis client, TLS and its cryptography, built
//! from C) for a tier only a fleet of machines uses, and a program turns it
//! on in one line where it runs in one. A program built without it that
//! finds `KILN_REMOTE_URL` set says so once and uses the disk store alone,
//! so a fleet's setting is never ignored unseen; the `kiln` command has it
//! on. [`mode`] is compile-only process
//! mode (L11): a program run under `KILN_MODE=compile-only` fills the store
//! for a GPU its machine lacks. The `testing` feature adds kiln-engine's
//! fake target (`kiln::fake`), on which the examples here run without a
//! GPU, and its conformance suite.
//!
//! The CUDA backend's cudarc is built for CUDA 13.0 and loaded at run time
//! (the default features `cuda-13000` and `dynamic-loading`). A program on
//! another CUDA version turns the defaults off and names its version, here
//! (`cuda-12000` to `cuda-13040`, passed through to kiln-cuda) or on its own
//! cudarc: `default-features = false, features = ["store", "cuda",
//! "cuda-12080", "dynamic-loading"]`. kiln-cuda's crate documentation says
//! which combinations are tested.
//!
//! Each backend's target (the device a loader loads on, or a compile-only
//! one for an architecture named) and kernel builder:
//!
//! | backend | feature | target | kernel and its builder |
//! |---|---|---|---|
#![cfg_attr(
    feature = "cuda",
    doc = "| cuda (CUDA C++ through NVRTC) | `cuda` | [`CudaTarget`](cuda::CudaTarget) | [`CudaKernel`](cuda::CudaKernel), [`CudaKernelBuilder`](cuda::CudaKernelBuilder) |"
)]
#![cfg_attr(
    not(feature = "cuda"),
    doc = "| cuda (CUDA C++ through NVRTC) | `cuda` | `cuda::CudaTarget` | `cuda::CudaKernel`, `cuda::CudaKernelBuilder` |"
)]
#![cfg_attr(
    feature = "hip",
    doc = "| hip (HIP C++ through hipRTC) | `hip` | [`HipTarget`](hip::HipTarget) | [`HipKernel`](hip::HipKernel), [`HipKernelBuilder`](hip::HipKernelBuilder) |"
)]
#![cfg_attr(
    not(feature = "hip"),
    doc = "| hip (HIP C++ through hipRTC) | `hip` | `hip::HipTarget` | `hip::HipKernel`, `hip::HipKernelBuilder` |"
)]
#![cfg_attr(
    feature = "wgpu",
    doc = "| wgpu (WGSL and SPIR-V through naga, on Vulkan) | `wgpu` | [`WgpuTarget`](wgpu::WgpuTarget) | [`WgslKernel`](wgpu::WgslKernel), [`WgslKernelBuilder`](wgpu::WgslKernelBuilder) |"
)]
#![cfg_attr(
    not(feature = "wgpu"),
    doc = "| wgpu (WGSL and SPIR-V through naga, on Vulkan) | `wgpu` | `wgpu::WgpuTarget` | `wgpu::WgslKernel`, `wgpu::WgslKernelBuilder` |"
)]
//!
//! A program on a real backend, on the default store (no store line):
//!
//! ```no_run
//! # #[cfg(feature = "cuda")] {
//! use kiln::cuda::{CudaKernel, CudaTarget};
//! use kiln::{ArtifactId, Kernel, KernelId, KernelLoader};
//!
//! let target = CudaTarget::on_device(0)?;
//! let mut loader = KernelLoader::new(target);
//! let fill = CudaKernel::builder(KernelId::named("example.fill"), "fill")
//!     .source(r#"extern "C" __global__ void fill(float* y) { y[threadIdx.x] = 1.0f; }"#);
//! let kernel = loader.load(&fill, &ArtifactId::new(fill.id(), loader.target().variant()))?;
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! On the fake target, which needs no GPU:
//!
//! ```
//! use kiln::fake::{FakeKernel, FakeTarget};
//! use kiln::{Kernel, KernelLoader};
//!
//! let mut loader = KernelLoader::new(FakeTarget::storeless());
//! // Name everything the program will launch; nothing compiles yet.
//! for number in 0..16 {
//!     loader.enqueue(Box::new(FakeKernel::new(number)), ());
//! }
//! // The first launch compiles the whole queue in one parallel batch.
//! let kernel = FakeKernel::new(0);
//! let id = kernel.artifact_id();
//! let module = loader.load(&kernel, &id)?;
//! // Every later launch of a loaded kernel is one hash lookup.
//! let again = loader.load(&kernel, &id)?;
//! assert!(std::sync::Arc::ptr_eq(&module, &again));
//! # Ok::<(), kiln::KernelError>(())
//! ```

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// What a program uses, named one by one: kiln-engine's other modules (the
// store's keys and claims, the loader's and the worker pool's parts, the
// backend traits' helpers) are for the crates that build on it, and a
// change to this list is a change of `public-api.txt` (`cargo xtask lint`).

// Kernels and their ids.
pub use kiln_engine::{ArtifactId, DeviceId, Kernel, KernelId, KernelIdBuilder};

// The loader, its settings and the handles over it.
pub use kiln_engine::{
    BatchProgress, JobManifest, KernelCache, KernelLoader, KeyedCache, ListedError, LoaderConfig,
    Loading, ManifestKernel, PendingKernel, Waiting, WorkerMode,
};

// What a failed kernel says.
pub use kiln_engine::{
    BuildFailure, CacheError, CompileFailure, ConfigError, DefineProblem, DeviceRefusal,
    Diagnostic, Failure, FallbackMissing, KernelError, Location, Severity, Stage,
};

// What each compile reports, and the loader's statistics and records.
pub use kiln_engine::{
    ArtifactReport, BatchRecord, CollectorScope, Health, KernelCounts, KernelOutcome, KernelRecord,
    LoaderStatistics, Reported, ResourceUsage, StatisticsCollector,
};

// A store as a program holds one: the trait a target's store setter takes
// (and its one-entry puts), the store in memory, what a store counts, and
// a program's kernels read from it while its device is made.
pub use kiln_engine::store::ReadAhead;
pub use kiln_engine::{
    ArtifactStore, ArtifactStoreExt, MemoryStore, StoreCounters, StoreStatistics,
};

// The targets' traits, for code generic over a backend, and timing for
// tuning.
pub use kiln_engine::{
    ArtifactCompiler, ArtifactOf, CompilationTarget, DeviceStep, DeviceTimer, Finalized, KernelOf,
    KeyedCompiler, LoweredOf, MadeOf, TargetStore, TimedTarget, TimingError, VariantOf,
};

// The process's mode (compile-only), tuning and compile workers, whole.
pub use kiln_engine::{mode, tune, worker};

/// Warm-start profiles: a loader with a store keeps one of its program and
/// loads its kernels ahead at the next start
/// ([`KernelLoader::with_profile`]).
pub mod profile {
    pub use kiln_engine::profile::Program;
}

// The fake target and the conformance suites, for a program's tests.
#[cfg(feature = "testing")]
pub use kiln_engine::{conformance, conformance_suite, fake, store_conformance_suite};

#[cfg(feature = "store")]
mod default_store;

#[cfg(feature = "store")]
pub use default_store::{Store, StoreError};

#[cfg(feature = "store")]
mod tiers;

#[cfg(feature = "store")]
pub use tiers::Tiers;

/// kiln's disk store (kiln-store): verified, shared between processes,
/// size-limited; its settings ([`StoreConfig`]),
/// bundles and maintenance. [`Store`] opens the default one.
#[cfg(feature = "store")]
#[doc(inline)]
pub use kiln_store as disk;

#[cfg(feature = "store")]
pub use kiln_store::{DiskStore, StoreConfig};

// Inlined, so that the facade's documentation lists every backend's target
// and kernel builder on its own pages. rustdoc then inlines the cudarc and
// wgpu the backends re-export too, whole (neither `doc(no_inline)` nor a
// module of globs stops it): the price of pages a user browses without
// leaving the facade.

/// The CUDA backend: CUDA C++ through NVRTC to a cubin, loaded with the
/// driver and launched. NVRTC and the driver are opened at run time, so this
/// feature builds on any machine.
#[cfg(feature = "cuda")]
#[doc(inline)]
pub use kiln_cuda as cuda;

/// The HIP backend: hipRTC to code objects, loaded with the HIP runtime.
#[cfg(feature = "hip")]
#[doc(inline)]
pub use kiln_hip as hip;

/// The wgpu backend: WGSL through naga to compute pipelines on a Vulkan
/// device, with the driver's pipeline cache kept in the store. A machine
/// without a Vulkan loader compiles with naga alone.
#[cfg(feature = "wgpu")]
#[doc(inline)]
pub use kiln_wgpu as wgpu;

/// The README's examples, compiled and run as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeExamples;
