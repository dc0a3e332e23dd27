//! An index over a cache by the caller's own keys, and
//! [`KernelCache::keyed`], which makes one.

use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use rustc_hash::FxHashMap;

use super::cache::KernelCache;
use super::pending::PendingKernel;
use super::slot::Slot;
use crate::error::CacheError;
use crate::id::DeviceId;
use crate::kernel::Kernel;
use crate::target::{CompilationTarget, KernelOf, VariantOf};

/// A [`KernelCache`] indexed by the caller's own compact keys (K5): a shape
/// tuple, an autotune candidate number, an enum of operations.
///
/// A hit is one lookup of the key: no kernel description is made and no
/// kernel id is hashed. The factory that makes the kernel runs only on a
/// miss. A kernel that failed is not kept in the index, so the next lookup
/// of its key runs the factory again.
///
/// Cloning is cheap, and clones share the index. Equal keys must always
/// describe the same kernel and variant: on a hit the factory is not run,
/// so nothing would notice that it changed.
///
/// ```
/// use kiln_engine::fake::{FakeKernel, FakeTarget};
/// use kiln_engine::{DeviceId, KernelCache};
///
/// let device = DeviceId::new("fake", 0);
/// let cache = KernelCache::new(device, FakeTarget::storeless());
/// let by_shape = cache.keyed::<(u32, u32)>();
/// let first = by_shape
///     .get_or_insert_with(device, (64, 64), |&(rows, _)| (FakeKernel::new(rows), ()))
///     .expect("fake kernels compile");
/// let again = by_shape
///     .get_or_insert_with(device, (64, 64), |_| -> (FakeKernel, ()) {
///         unreachable!("a hit runs no factory")
///     })
///     .expect("a hit");
/// assert!(std::sync::Arc::ptr_eq(&first, &again));
/// ```
pub struct KeyedCache<T: CompilationTarget, K> {
    cache: KernelCache<T>,
    index: Arc<RwLock<FxHashMap<K, Arc<Slot<T>>>>>,
}

impl<T: CompilationTarget> KernelCache<T> {
    /// An empty index over this cache by the caller's own keys (K5).
    pub fn keyed<K>(&self) -> KeyedCache<T, K> {
        KeyedCache::new(self.clone())
    }
}

impl<T: CompilationTarget, K> KeyedCache<T, K> {
    fn new(cache: KernelCache<T>) -> Self {
        Self {
            cache,
            index: Arc::new(RwLock::new(FxHashMap::default())),
        }
    }

    /// The cache behind the index.
    pub fn cache(&self) -> &KernelCache<T> {
        &self.cache
    }
}

impl<T: CompilationTarget, K: Eq + Hash> KeyedCache<T, K> {
    /// The pending kernel for `key`, requesting the kernel `factory` makes
    /// on a miss; compiles nothing (K1).
    ///
    /// The factory runs with no lock held. Two threads that miss the same
    /// key at once may both run it; they describe the same kernel, so it is
    /// requested once.
    pub fn request_or_insert_with<N, F>(&self, key: K, factory: F) -> PendingKernel<T>
    where
        F: FnOnce(&K) -> (N, VariantOf<T>),
        N: Kernel + Into<Arc<KernelOf<T>>>,
    {
        if let Some(slot) = self.indexed(&key) {
            return PendingKernel::new(self.cache.clone(), slot);
        }
        let (kernel, variant) = factory(&key);
        let pending = self.cache.request(kernel, variant);
        self.write().insert(key, pending.slot().clone());
        pending
    }

    /// The loaded kernel for `key`, to launch on `device`: on a miss, the
    /// kernel `factory` makes, built at once with every outstanding request
    /// of the cache, as [`KernelCache::get`] does.
    ///
    /// # Errors
    ///
    /// [`CacheError::WrongDevice`] when `device` is not the cache's, hit or
    /// miss; [`CacheError::Kernel`] when the kernel fails, which leaves the
    /// key out of the index.
    pub fn get_or_insert_with<N, F>(
        &self,
        device: DeviceId,
        key: K,
        factory: F,
    ) -> Result<T::Loaded, CacheError>
    where
        F: FnOnce(&K) -> (N, VariantOf<T>),
        N: Kernel + Into<Arc<KernelOf<T>>>,
    {
        self.cache.check_device(device)?;
        let indexed = {
            let index = self.read();
            match index.get(&key) {
                Some(slot) => match slot.loaded.get() {
                    Some(loaded) => return Ok(loaded.clone()),
                    None => Some(slot.clone()),
                },
                None => None,
            }
        };
        if let Some(slot) = indexed {
            if slot.has_failed() {
                self.forget(&key, &slot);
            } else {
                // Indexed by a request and not built yet: wanted until it
                // loads, so a batch that does not load it puts it back.
                let attempts_seen = slot.failed_attempts();
                return match self.cache.resolve_slot(&slot, attempts_seen) {
                    Ok(loaded) => Ok(loaded.clone()),
                    Err(error) => {
                        self.forget(&key, &slot);
                        Err(error.into())
                    }
                };
            }
        }
        let (kernel, variant) = factory(&key);
        let (slot, attempts_seen) = self.cache.want(kernel, variant, false);
        let loaded = match slot.loaded.get() {
            Some(loaded) => loaded.clone(),
            None => self.cache.resolve_slot(&slot, attempts_seen)?.clone(),
        };
        self.write().insert(key, slot);
        Ok(loaded)
    }

    /// How many keys the index holds.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether the index holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The request indexed under `key`, unless its latest attempt failed:
    /// failed requests are not indexed (K5).
    fn indexed(&self, key: &K) -> Option<Arc<Slot<T>>> {
        let slot = self.read().get(key).cloned()?;
        if slot.has_failed() {
            self.forget(key, &slot);
            return None;
        }
        Some(slot)
    }

    /// Removes `key`, if it still names `slot`.
    fn forget(&self, key: &K, slot: &Arc<Slot<T>>) {
        let mut index = self.write();
        if index
            .get(key)
            .is_some_and(|indexed| Arc::ptr_eq(indexed, slot))
        {
            index.remove(key);
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, FxHashMap<K, Arc<Slot<T>>>> {
        // Factories run outside the index lock; only the keys' own hashing
        // and comparison run under it, and a panic there leaves whole values.
        self.index.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, FxHashMap<K, Arc<Slot<T>>>> {
        self.index.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T: CompilationTarget, K> Clone for KeyedCache<T, K> {
    fn clone(&self) -> Self {
        Self {
            cache: self.cache.clone(),
            index: self.index.clone(),
        }
    }
}

impl<T: CompilationTarget, K> fmt::Debug for KeyedCache<T, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCache")
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}
