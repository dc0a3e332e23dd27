//! The [`CompilationTarget`] a backend implements beside its
//! [`ArtifactCompiler`]: the store and the device, used from the loader's
//! thread only.

use std::fmt::Debug;
use std::time::Duration;

use crate::compiler::ArtifactCompiler;
use crate::error::DeviceRefusal;
use crate::id::ArtifactId;
use crate::store::{Lookup, StoreOutcome};

/// A device and the store in front of it: where a loader's artifacts come
/// from and go.
///
/// # Contract
///
/// - Every method runs on the loader's thread.
/// - [`persists`](Self::persists) never changes for one target. A target that
///   does not persist answers every lookup with
///   [`Miss::Absent`](crate::store::Miss::Absent) and stores nothing.
/// - A lookup verifies what it returns: a corrupt entry is a
///   [`Miss`](crate::store::Miss), never an artifact.
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
