//! The two traits a backend implements: an [`ArtifactCompiler`] that lowers
//! and finalizes kernels on any thread, and a [`CompilationTarget`] that owns
//! the store and the device, used from the loader's thread only.

use std::fmt::Debug;
use std::hash::Hash;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::diagnostic::{CompileFailure, Diagnostic};
use crate::error::DeviceRefusal;
use crate::id::ArtifactId;
use crate::kernel::Kernel;
use crate::worker::WorkerRecipe;

/// Turns kernels into artifacts. Shared by every worker of a batch.
///
/// # Contract
///
/// - `lower` and `finalize` run on worker threads, several at once, and may
///   run in another process: they touch no device and keep no state that a
///   later call depends on.
/// - `lower` is deterministic: the same kernel and variant give the same
///   lowered form and the same [`source`](Self::source) text.
/// - Two lowered forms with the same `source` text and the same variant
///   finalize to interchangeable artifacts: the loader finalizes one and
///   gives the artifact to both.
/// - A panic in either step is caught by the loader and becomes that
///   kernel's failure, but a compiler should report errors as values.
pub trait ArtifactCompiler: Send + Sync {
    /// The kernels this compiler takes.
    type Kernel: Kernel + ?Sized;
    /// The compile choice an artifact is built under: architecture,
    /// fast-math, and so on. Part of every artifact's key.
    type Variant: Clone + Eq + Hash + Debug + Send + Sync + Serialize + DeserializeOwned + 'static;
    /// What lowering produces, ready to finalize, possibly in another process.
    type Lowered: Send + Serialize + DeserializeOwned;
    /// What finalizing produces: plain data a store can keep and a target can
    /// load.
    type Artifact: Clone + Send + Sync + Serialize + DeserializeOwned;

    /// Generates the backend source of `kernel` for `id`'s variant.
    ///
    /// # Errors
    ///
    /// What the generator reported; a bad kernel fails alone.
    fn lower(
        &self,
        kernel: &Self::Kernel,
        id: &ArtifactId<Self::Variant>,
    ) -> Result<Self::Lowered, CompileFailure>;

    /// The text `lowered` finalizes from, when it has one: kernels whose text
    /// is identical share one artifact. `None` opts the kernel out of
    /// sharing.
    fn source(lowered: &Self::Lowered) -> Option<&str>;

    /// Compiles `lowered` into an artifact, with the warnings and remarks of
    /// a successful compile.
    ///
    /// # Errors
    ///
    /// What the compiler reported, with its diagnostics.
    fn finalize(
        &self,
        id: &ArtifactId<Self::Variant>,
        lowered: Self::Lowered,
    ) -> Result<Finalized<Self::Artifact>, CompileFailure>;

    /// How a worker process rebuilds this compiler, when it can finalize in
    /// one: `Some(`[`WorkerRecipe::of`]`(self))` for a
    /// [`ProcessCompiler`](crate::worker::ProcessCompiler). A loader then
    /// finalizes in worker processes (see [`crate::worker`]). The default,
    /// `None`, keeps every compile on the loader's threads.
    fn worker_recipe(&self) -> Option<WorkerRecipe> {
        None
    }
}

/// A finalized artifact and what the compiler said while making it.
#[derive(Debug, Clone)]
pub struct Finalized<A> {
    /// The artifact.
    pub artifact: A,
    /// Warnings and remarks of the successful compile.
    pub diagnostics: Vec<Diagnostic>,
}

impl<A> Finalized<A> {
    /// An artifact the compiler said nothing about.
    pub fn quiet(artifact: A) -> Self {
        Self {
            artifact,
            diagnostics: Vec::new(),
        }
    }
}

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

/// A device and the store in front of it: where a loader's artifacts come
/// from and go.
///
/// # Contract
///
/// - Every method runs on the loader's thread.
/// - [`persists`](Self::persists) never changes for one target. A target that
///   does not persist answers every lookup with [`Miss::Absent`] and stores
///   nothing.
/// - A lookup verifies what it returns: a corrupt entry is a
///   [`Miss`], never an artifact.
/// - [`generation`](Self::generation) changes whenever the store behind the
///   target starts holding other content (another root, an import that
///   replaced entries). Reading it must not lock or allocate: the loader
///   reads it on every launch.
/// - [`load`](Self::load) either returns a device object or refuses; a
///   refused artifact is neither kept nor stored by the loader.
pub trait CompilationTarget {
    /// The compiler of this target's kernels.
    type Compiler: ArtifactCompiler;
    /// A loaded device kernel; cloning it must be cheap (an `Arc` or a driver
    /// handle), because every launch clones it.
    type Loaded: Clone + Debug;

    /// The compiler, shared with the batch's workers.
    fn compiler(&self) -> &Self::Compiler;

    /// Whether artifacts outlive the process in a store.
    fn persists(&self) -> bool;

    /// The generation of the store's content; see the contract.
    fn generation(&self) -> u64 {
        0
    }

    /// The artifact stored under `id`.
    fn lookup(&mut self, id: &ArtifactId<VariantOf<Self>>) -> Lookup<ArtifactOf<Self>>;

    /// The artifact stored for lowered `source` compiled under `id`'s variant
    /// by this compiler, whatever kernel it was stored for.
    fn lookup_source(
        &mut self,
        id: &ArtifactId<VariantOf<Self>>,
        source: &str,
    ) -> Lookup<ArtifactOf<Self>>;

    /// Keeps `artifact` under `id` and, when it has one, under its `source`;
    /// `work` is how long it took to obtain.
    fn store(
        &mut self,
        id: &ArtifactId<VariantOf<Self>>,
        artifact: &ArtifactOf<Self>,
        source: Option<&str>,
        work: Duration,
    ) -> StoreOutcome;

    /// Called once at the end of every batch, after the last load and store:
    /// where a target lets go of what it held for the batch, such as the
    /// store's per-key claims of kernels that failed and so were never
    /// stored (other processes waiting on them can compile them at once).
    /// A target on a store forwards it to
    /// [`BoundStore::batch_finished`](crate::BoundStore::batch_finished),
    /// which also lets the store hold its size limit (P6).
    fn batch_finished(&mut self) {}

    /// Makes `artifact` a device object.
    ///
    /// # Errors
    ///
    /// The device refused the artifact.
    fn load(
        &mut self,
        id: &ArtifactId<VariantOf<Self>>,
        artifact: &ArtifactOf<Self>,
    ) -> Result<Self::Loaded, DeviceRefusal>;
}

/// The variant of a target's compiler.
pub type VariantOf<T> = <<T as CompilationTarget>::Compiler as ArtifactCompiler>::Variant;
/// The artifact of a target's compiler.
pub type ArtifactOf<T> = <<T as CompilationTarget>::Compiler as ArtifactCompiler>::Artifact;
/// The lowered form of a target's compiler.
pub type LoweredOf<T> = <<T as CompilationTarget>::Compiler as ArtifactCompiler>::Lowered;
/// The kernel type of a target's compiler.
pub type KernelOf<T> = <<T as CompilationTarget>::Compiler as ArtifactCompiler>::Kernel;
