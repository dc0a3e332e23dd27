//! A kernel asked for and not necessarily built yet, and
//! [`KernelCache::request`], which asks for one.

use std::fmt;
use std::sync::Arc;

use super::cache::KernelCache;
use super::slot::Slot;
use crate::error::CacheError;
use crate::id::{ArtifactId, DeviceId};
use crate::kernel::Kernel;
use crate::target::{CompilationTarget, KernelOf, VariantOf};

/// A kernel requested from a [`KernelCache`], built by the first
/// [`resolve`](Self::resolve) of any pending kernel of that cache or by its
/// next [`build`](KernelCache::build).
///
/// Cloning is cheap, and clones share the request. Keep the handle where the
/// kernel is launched: once built, resolving it costs a device comparison
/// and one atomic load, and lends the kernel for as long as the handle
/// lives.
pub struct PendingKernel<T: CompilationTarget> {
    cache: KernelCache<T>,
    slot: Arc<Slot<T>>,
}

impl<T: CompilationTarget> KernelCache<T> {
    /// Asks for `kernel` under `variant` without compiling it (K1): the next
    /// [`build`](Self::build), or the first
    /// [`resolve`](PendingKernel::resolve) of any pending kernel of this
    /// cache, builds it together with every other outstanding request.
    ///
    /// A kernel already loaded, being built or waiting is not asked for
    /// twice (K2): the handle returned names the same request, and `kernel`
    /// is dropped. `kernel` may be the kernel itself, a `Box` or an `Arc` of
    /// it.
    pub fn request<K>(&self, kernel: K, variant: VariantOf<T>) -> PendingKernel<T>
    where
        K: Kernel + Into<Arc<KernelOf<T>>>,
    {
        let (slot, _) = self.want(kernel, variant, true);
        PendingKernel::new(self.clone(), slot)
    }
}

impl<T: CompilationTarget> PendingKernel<T> {
    pub(super) fn new(cache: KernelCache<T>, slot: Arc<Slot<T>>) -> Self {
        Self { cache, slot }
    }

    /// The kernel and variant asked for.
    pub fn id(&self) -> &ArtifactId<VariantOf<T>> {
        &self.slot.id
    }

    /// Whether the kernel is built and loaded; builds nothing.
    pub fn is_built(&self) -> bool {
        self.slot.loaded.get().is_some()
    }

    /// The cache the kernel was asked of.
    pub fn cache(&self) -> &KernelCache<T> {
        &self.cache
    }

    /// The loaded kernel, to launch on `device`. When it is not built yet,
    /// waits for the batch in flight, if any, and builds every outstanding
    /// request of the cache with it in one batch when that batch did not
    /// settle it.
    ///
    /// # Errors
    ///
    /// [`CacheError::WrongDevice`] when `device` is not the cache's, before
    /// anything is built. [`CacheError::Kernel`] with this kernel's own
    /// failure, whichever other kernels of its batch failed (K3). The
    /// request stays wanted: the next build, or the next resolve, tries it
    /// again.
    #[inline]
    pub fn resolve(&self, device: DeviceId) -> Result<&T::Loaded, CacheError> {
        self.cache.check_device(device)?;
        if let Some(loaded) = self.slot.loaded.get() {
            return Ok(loaded);
        }
        // A request stays wanted until it loads: when no batch has answered
        // for it since this moment, it is waiting, and the next batch takes
        // it.
        let attempts_seen = self.slot.failed_attempts();
        Ok(self.cache.resolve_slot(&self.slot, attempts_seen)?)
    }

    pub(super) fn slot(&self) -> &Arc<Slot<T>> {
        &self.slot
    }
}

impl<T: CompilationTarget> Clone for PendingKernel<T> {
    fn clone(&self) -> Self {
        Self {
            cache: self.cache.clone(),
            slot: self.slot.clone(),
        }
    }
}

impl<T: CompilationTarget> fmt::Debug for PendingKernel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingKernel")
            .field("id", &self.slot.id)
            .field("built", &self.is_built())
            .finish_non_exhaustive()
    }
}
