//! The [`CompilationTarget`] a backend implements beside its
//! [`ArtifactCompiler`]: the device, and which store its artifacts are kept
//! in, used from the loader's thread; and its [`DeviceStep`], shared with
//! the batch's workers, which makes each artifact a device object (F9).

use std::fmt::Debug;
use std::sync::{Arc, OnceLock};

use crate::compiler::ArtifactCompiler;
use crate::error::DeviceRefusal;
use crate::id::{ArtifactId, DeviceId};
use crate::store::{ArtifactStore, KeyedCompiler};

/// A device, and the store its artifacts are kept in: where a loader's
/// kernels go.
///
/// A target does device work only. It names its store
/// ([`store`](Self::store)) and the loader binds it to the target's
/// compiler once ([`BoundStore`](crate::BoundStore)): every lookup, claim,
/// put and generation read is the loader's, the same for every target.
///
/// Loading an artifact is two halves (F9): its device object is made by
/// the target's [`DeviceStep`] ([`device_step`](Self::device_step)), on the
/// batch's workers as soon as the artifact is ready, and the loader's
/// thread then [`publish`](Self::publish)es it.
///
/// # Contract
///
/// - Every method runs on the loader's thread; the device step's
///   [`make`](DeviceStep::make) runs on the batch's workers, unless
///   [`DeviceStep::on_workers`] says the driver needs one thread.
/// - [`store`](Self::store) answers the same store until the target is
///   changed through [`KernelLoader::target_mut`](crate::KernelLoader::target_mut)
///   (or before it is given to a loader): the loader binds it once, and
///   binds again only after the target was lent mutably and names another
///   store (L10).
/// - [`keeps`](Self::keeps) is a pure function of the variant.
/// - [`make`](DeviceStep::make) and [`publish`](Self::publish) each either
///   go on or refuse; a refused artifact is neither kept nor stored by the
///   loader, and a refusal fails that kernel alone (L6, L9).
/// - [`device_step`](Self::device_step) answers the device the target
///   loads on now: a target changed through
///   [`KernelLoader::target_mut`](crate::KernelLoader::target_mut) answers
///   its new one, which the next batch takes.
/// - The hooks ([`batch_started`](Self::batch_started),
///   [`found`](Self::found), [`batch_finished`](Self::batch_finished)) do
///   nothing by default; a panic in one reaches the loader's caller.
pub trait CompilationTarget {
    /// The compiler of this target's kernels; its keys name the target's
    /// artifacts in a store.
    type Compiler: KeyedCompiler;
    /// A loaded device kernel; cloning it must be cheap (an `Arc` or a driver
    /// handle), because every launch clones it.
    type Loaded: Clone + Debug;
    /// What makes this target's device objects, on the batch's workers.
    type Device: DeviceStep<Self::Compiler>;

    /// The compiler, shared with the batch's workers: they compile with it
    /// while the loader's thread loads what they finished (P12).
    fn compiler(&self) -> &Arc<Self::Compiler>;

    /// The device step, shared with the batch's workers: they make each
    /// artifact's device object while the loader's thread publishes those
    /// made before (F9).
    fn device_step(&self) -> &Arc<Self::Device>;

    /// The store this target's artifacts outlive the process in, if any:
    /// without one, a loader keeps its artifacts as long as itself.
    fn store(&self) -> Option<&Arc<dyn ArtifactStore>> {
        None
    }

    /// Which device of the machine the target loads on: `None` (the
    /// default) for a target that cannot tell, or has no device (a
    /// compile-only one). A loader keeps the warm-start profile of the
    /// device it is on (L12): device 0, and a target that cannot tell,
    /// the program's own; device N its own
    /// ([`Program::on_device`](crate::profile::Program::on_device)). The
    /// loader asks once, when it is made.
    fn device_id(&self) -> Option<DeviceId> {
        None
    }

    /// Whether the store keeps artifacts compiled under `variant`. A target
    /// whose store holds one architecture's artifacts answers `false` for
    /// another's: such a kernel bypasses the store (its lookups miss, its
    /// artifact is not stored), rather than being filed under key
    /// components that misname it.
    fn keeps(&self, variant: &VariantOf<Self>) -> bool {
        let _ = variant;
        true
    }

    /// Called once at the start of every batch, before its first lookup.
    fn batch_started(&mut self) {}

    /// A store hit of `id` that the loader will load later in the batch,
    /// told before its device object is made (on the workers, as a compiled
    /// kernel's is).
    fn found(&mut self, id: &ArtifactId<VariantOf<Self>>, artifact: &ArtifactOf<Self>) {
        let _ = (id, artifact);
    }

    /// Called once at the end of every batch, after the last load and store:
    /// where a target lets go of what it held for the batch. The loader has
    /// already ended the batch on the store (its claims, its limits).
    fn batch_finished(&mut self) {}

    /// Publishes `made`, the device object a worker made of `artifact`: the
    /// loader's thread's half of a load, where a target counts what it
    /// made and wraps it as the kernel its launches take.
    ///
    /// # Errors
    ///
    /// The target refuses the device object after all.
    fn publish(
        &mut self,
        id: &ArtifactId<VariantOf<Self>>,
        artifact: &ArtifactOf<Self>,
        made: MadeOf<Self>,
    ) -> Result<Self::Loaded, DeviceRefusal>;

    /// Makes `artifact` a device object here and publishes it, both halves
    /// on the calling thread: for a program loading one artifact by hand.
    ///
    /// # Errors
    ///
    /// The device refused the artifact.
    fn load(
        &mut self,
        id: &ArtifactId<VariantOf<Self>>,
        artifact: &ArtifactOf<Self>,
    ) -> Result<Self::Loaded, DeviceRefusal> {
        let made = self.device_step().make(id, artifact)?;
        self.publish(id, artifact, made)
    }
}

/// The half of a load that makes an artifact a device object (a wgpu
/// pipeline, a CUDA or HIP module), shared with a batch's workers so that
/// device objects are made side by side as their artifacts come ready
/// (F9), for compiled kernels and store hits alike.
///
/// # Contract
///
/// - [`make`](Self::make) may run on any thread, on several at once,
///   while the loader's thread holds the target mutably: a driver that
///   binds a context to the calling thread binds it in `make`.
/// - A driver that can make device objects on one thread only answers
///   `false` to [`on_workers`](Self::on_workers): the loader's thread then
///   makes each one, as it publishes it.
/// - A panic in `make` fails that kernel alone, with the panic's message
///   (L8).
pub trait DeviceStep<C: ArtifactCompiler>: Send + Sync {
    /// A device object made, on its way to the loader's thread.
    type Made: Send;

    /// Whether device objects may be made on the batch's workers, several
    /// at once. `true` unless the driver needs one thread.
    fn on_workers(&self) -> bool {
        true
    }

    /// Whether several device objects made at once are done sooner than
    /// one after another. `true` unless the driver serializes them: then a
    /// round with nothing to compile (a warm start) makes every one on the
    /// loader's thread, whatever they cost (F11).
    fn spreads(&self) -> bool {
        true
    }

    /// Makes `artifact` a device object.
    ///
    /// # Errors
    ///
    /// The device refused the artifact.
    fn make(
        &self,
        id: &ArtifactId<C::Variant>,
        artifact: &C::Artifact,
    ) -> Result<Self::Made, DeviceRefusal>;
}

/// The variant of a target's compiler.
pub type VariantOf<T> = <<T as CompilationTarget>::Compiler as ArtifactCompiler>::Variant;
/// The artifact of a target's compiler.
pub type ArtifactOf<T> = <<T as CompilationTarget>::Compiler as ArtifactCompiler>::Artifact;
/// The lowered form of a target's compiler.
pub type LoweredOf<T> = <<T as CompilationTarget>::Compiler as ArtifactCompiler>::Lowered;
/// What a target's device step makes, before the loader's thread publishes
/// it.
pub type MadeOf<T> =
    <<T as CompilationTarget>::Device as DeviceStep<<T as CompilationTarget>::Compiler>>::Made;
/// The kernel type of a target's compiler.
pub type KernelOf<T> = <<T as CompilationTarget>::Compiler as ArtifactCompiler>::Kernel;

/// The store a target keeps its artifacts in, or none: the field every
/// target that persists holds, and the one place its rules are kept.
///
/// A target answers [`CompilationTarget::store`] with [`get`](Self::get).
/// A target made with [`TargetStore::default`] is on the process's default
/// store ([`default_store`](crate::store::default_store): the facade's
/// `KILN_CACHE_*` store, with the fleet tier behind it when one is set),
/// opened when its loader first asks, so that a target given another store
/// before then never opens it. [`set`](Self::set) chooses a store,
/// [`none`](Self::none) and [`clear`](Self::clear) none at all. Whether a
/// target has a store never changes once its loader has asked: a target in
/// a loader may only swap its store for another ([`switch`](Self::switch),
/// L10), which the loader notices and binds at its next access.
///
/// ```
/// use std::sync::Arc;
///
/// use kiln_engine::{ArtifactStore, MemoryStore, TargetStore};
///
/// let mut storeless = TargetStore::none();
/// assert!(!storeless.switch(Arc::new(MemoryStore::new())));
/// assert!(storeless.get().is_none());
///
/// let first: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
/// let second: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
/// let mut stored = TargetStore::none();
/// stored.set(Arc::clone(&first));
/// assert!(stored.switch(Arc::clone(&second)));
/// assert!(Arc::ptr_eq(stored.get().expect("a store"), &second));
/// ```
#[derive(Debug, Clone)]
pub struct TargetStore(Choice);

/// What a target's store is.
#[derive(Debug, Clone)]
enum Choice {
    /// The process's default store, opened at the first `get`.
    Default(OnceLock<Option<Arc<dyn ArtifactStore>>>),
    /// A store the program chose, or none.
    Chosen(Option<Arc<dyn ArtifactStore>>),
}

impl Default for TargetStore {
    /// On the process's default store, opened when first asked for.
    fn default() -> Self {
        Self(Choice::Default(OnceLock::new()))
    }
}

impl TargetStore {
    /// No store: artifacts are kept as long as the target's loader.
    pub fn none() -> Self {
        Self(Choice::Chosen(None))
    }

    /// Keeps artifacts in `store`, in place of any store chosen before.
    pub fn set(&mut self, store: Arc<dyn ArtifactStore>) {
        self.0 = Choice::Chosen(Some(store));
    }

    /// Keeps artifacts in `store` when there is one, and changes nothing
    /// otherwise: for a store that may be disabled, such as
    /// `kiln_store::DiskStore::open_from_env()`'s under
    /// `KILN_CACHE_DISABLE=1` (the default store is then off too).
    pub fn set_optional(&mut self, store: Option<Arc<dyn ArtifactStore>>) {
        if let Some(store) = store {
            self.set(store);
        }
    }

    /// Keeps no store, not even the default one: a target's
    /// `without_store()`.
    pub fn clear(&mut self) {
        self.0 = Choice::Chosen(None);
    }

    /// Puts `store` in place of the store there is, as opening another root
    /// does (L10). Returns `false`, changing nothing, when there is none:
    /// whether a target has a store never changes.
    #[must_use = "a storeless target does not switch"]
    pub fn switch(&mut self, store: Arc<dyn ArtifactStore>) -> bool {
        if self.get().is_none() {
            return false;
        }
        self.set(store);
        true
    }

    /// The store, if there is one: a target's answer to
    /// [`CompilationTarget::store`]. The first call of a target on the
    /// default store opens it.
    pub fn get(&self) -> Option<&Arc<dyn ArtifactStore>> {
        match &self.0 {
            Choice::Default(opened) => opened.get_or_init(crate::store::default_store).as_ref(),
            Choice::Chosen(store) => store.as_ref(),
        }
    }
}
