//! The shared handle's load with a fallback (R1): a pending kernel not
//! built yet answers its fallback at once, and the requests waiting are
//! built in a background batch (R2), one at a time per cache, on a thread
//! of the cache's, while request threads go on launching.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::cache::KernelCache;
use super::pending::PendingKernel;
use crate::error::{CacheError, FallbackMissing};
use crate::id::DeviceId;
use crate::statistics::Health;
use crate::target::CompilationTarget;

impl<T> PendingKernel<T>
where
    T: CompilationTarget + Send + 'static,
    T::Loaded: Send + Sync,
{
    /// The loaded kernel when it is built, else the built `fallback`: a
    /// resolve that never compiles on the caller's thread.
    ///
    /// A built kernel costs what [`resolve`](Self::resolve) costs it: a
    /// device comparison and one atomic load. One not built yet is left to
    /// a background batch of the cache, with every other request waiting,
    /// and the fallback answers meanwhile; once the batch lands, the next
    /// call answers the kernel. A kernel that fails there keeps its
    /// fallback, its failure logged once.
    ///
    /// ```
    /// use kiln_engine::fake::{FakeKernel, FakeTarget};
    /// use kiln_engine::{DeviceId, KernelCache};
    ///
    /// let device = DeviceId::new("fake", 0);
    /// let cache = KernelCache::new(device, FakeTarget::storeless());
    /// let generic = cache.request(FakeKernel::new(0), ());
    /// generic.resolve(device).expect("built once, before serving");
    /// let special = cache.request(FakeKernel::new(7), ());
    /// let served = special.resolve_or(device, &generic).expect("the fallback is built");
    /// assert!(served.kernel == generic.id().kernel || served.kernel == special.id().kernel);
    /// assert!(cache.wait_for_background(std::time::Duration::from_secs(30)));
    /// let served = special.resolve_or(device, &generic).expect("built");
    /// assert_eq!(served.kernel, special.id().kernel);
    /// ```
    ///
    /// # Errors
    ///
    /// [`CacheError::WrongDevice`] when `device` is not the cache's, or not
    /// the cache of `fallback`, when the fallback would answer;
    /// [`CacheError::FallbackMissing`] at once when neither the kernel nor
    /// the fallback is built.
    #[inline]
    pub fn resolve_or<'a>(
        &'a self,
        device: DeviceId,
        fallback: &'a PendingKernel<T>,
    ) -> Result<&'a T::Loaded, CacheError> {
        self.cache().check_device(device)?;
        if let Some(loaded) = self.slot().loaded.get() {
            return Ok(loaded);
        }
        self.fall_back(device, fallback)
    }

    #[cold]
    #[inline(never)]
    fn fall_back<'a>(
        &'a self,
        device: DeviceId,
        fallback: &'a PendingKernel<T>,
    ) -> Result<&'a T::Loaded, CacheError> {
        // A fallback of another device's cache is that device's kernel
        // (K6): refused before anything is built.
        fallback.cache().check_device(device)?;
        if !self.slot().has_failed() {
            self.cache().build_in_background();
        }
        match fallback.slot().loaded.get() {
            Some(loaded) => {
                self.cache().shared_background().health.fallback_load();
                Ok(loaded)
            }
            None => {
                if !fallback.slot().has_failed() {
                    fallback.cache().build_in_background();
                }
                Err(FallbackMissing {
                    fallback: fallback.id().kernel.clone(),
                }
                .into())
            }
        }
    }
}

impl<T: CompilationTarget> KernelCache<T> {
    /// The loader's health (R3), read without waiting for the batch in
    /// flight: what a readiness probe asks.
    pub fn health(&self) -> Health {
        self.shared_background().health.snapshot()
    }

    /// Whether the cache is warm: no background build runs and no request
    /// waits for a batch, failed ones aside.
    pub fn is_warm(&self) -> bool {
        !self.shared_background().running.load(Ordering::Acquire) && self.waiting_afresh() == 0
    }

    /// Waits, up to `timeout`, until no background build runs and nothing
    /// waits for one; whether that is so.
    pub fn wait_for_background(&self, timeout: std::time::Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            if self.is_warm() {
                return true;
            }
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

impl<T> KernelCache<T>
where
    T: CompilationTarget + Send + 'static,
    T::Loaded: Send + Sync,
{
    /// Starts a background build of every request waiting, unless one
    /// runs: requests made meanwhile wait for the next, which it starts
    /// as it ends.
    pub(super) fn build_in_background(&self) {
        let background = self.shared_background();
        if background.running.swap(true, Ordering::AcqRel) {
            return;
        }
        background
            .health
            .set_compiling(self.waiting_afresh(), Some(Instant::now()));
        let cache = self.clone();
        let started = std::thread::Builder::new()
            .name("kiln-background".into())
            .spawn(move || {
                loop {
                    let failures = cache.build_unwaited();
                    let background = cache.shared_background();
                    background.ended(&failures);
                    background.running.store(false, Ordering::Release);
                    let fresh = cache.waiting_afresh();
                    if fresh == 0 || background.running.swap(true, Ordering::AcqRel) {
                        background.health.set_compiling(0, None);
                        break;
                    }
                    background.health.set_compiling(fresh, Some(Instant::now()));
                }
            });
        if let Err(error) = started {
            background.running.store(false, Ordering::Release);
            background.health.set_compiling(0, None);
            log::warn!("could not start a background build: {error}");
        }
    }
}
