//! A backend's target with its device step watched, for the F9 tests of
//! every backend: which thread made each device object (a CUDA or HIP
//! module, a wgpu pipeline) and how many were being made at once. The
//! target is passed in: this crate names no backend.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use kiln_engine::{
    ArtifactId, ArtifactOf, ArtifactStore, CompilationTarget, DeviceRefusal, DeviceStep, KernelId,
    MadeOf, VariantOf,
};

/// Where each device object was made: the thread and its name.
pub type MadeOn = HashMap<KernelId, (ThreadId, Option<String>)>;

/// The device step of `T`, watched: it makes each device object as `T`'s
/// own step does, and notes the thread and how many were being made then.
pub struct WatchedStep<T: CompilationTarget> {
    inner: Arc<T::Device>,
    made: Mutex<MadeOn>,
    running: AtomicUsize,
    most: AtomicUsize,
}

impl<T: CompilationTarget> DeviceStep<T::Compiler> for WatchedStep<T> {
    type Made = MadeOf<T>;

    fn on_workers(&self) -> bool {
        self.inner.on_workers()
    }

    fn make(
        &self,
        id: &ArtifactId<VariantOf<T>>,
        artifact: &ArtifactOf<T>,
    ) -> Result<MadeOf<T>, DeviceRefusal> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        let made = self.inner.make(id, artifact);
        self.running.fetch_sub(1, Ordering::SeqCst);
        let thread = std::thread::current();
        self.made.lock().expect("not poisoned").insert(
            id.kernel.clone(),
            (thread.id(), thread.name().map(str::to_owned)),
        );
        made
    }
}

/// A target whose device step is watched ([`WatchedStep`]); everything
/// else is the target's own.
pub struct Watched<T: CompilationTarget> {
    inner: T,
    step: Arc<WatchedStep<T>>,
}

impl<T: CompilationTarget> Watched<T> {
    /// `inner`, its device step watched from now on.
    pub fn new(inner: T) -> Self {
        let step = Arc::new(WatchedStep {
            inner: Arc::clone(inner.device_step()),
            made: Mutex::new(HashMap::new()),
            running: AtomicUsize::new(0),
            most: AtomicUsize::new(0),
        });
        Self { inner, step }
    }

    /// The target watched.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// Where each device object made so far was made.
    pub fn made_on(&self) -> MadeOn {
        self.step.made.lock().expect("not poisoned").clone()
    }

    /// The most device objects that were being made at once.
    pub fn most_at_once(&self) -> usize {
        self.step.most.load(Ordering::SeqCst)
    }

    /// Asserts that every one of `count` distinct kernels had its device
    /// object (`objects`: "pipelines", "modules") made on a thread of the
    /// loader's pool, none on this one, and says where (F9).
    pub fn assert_made_on_the_pool(&self, count: usize, objects: &str, what: &str) {
        let made = self.made_on();
        assert_eq!(
            made.len(),
            count,
            "{what}: every one of the {objects} was made"
        );
        let caller = std::thread::current().id();
        for (kernel, (thread, name)) in &made {
            assert_ne!(
                *thread, caller,
                "{what}: {kernel} was made on the loader's thread"
            );
            assert!(
                name.as_deref()
                    .is_some_and(|name| name.starts_with("kiln-compile-")),
                "{what}: {kernel} was made on {name:?}, not a thread of the loader's pool"
            );
        }
        let threads: HashSet<_> = made.values().map(|(thread, _)| *thread).collect();
        crate::say(&format!(
            "{what}: {count} {objects} made on {} pool threads, at most {} at once",
            threads.len(),
            self.most_at_once()
        ));
    }
}

// Written in the trait's own terms (`Self`'s variant, artifact and made
// object), which are `T`'s: every call but the device step's goes to `T`.
impl<T: CompilationTarget> CompilationTarget for Watched<T> {
    type Compiler = T::Compiler;
    type Loaded = T::Loaded;
    type Device = WatchedStep<T>;

    fn compiler(&self) -> &Arc<Self::Compiler> {
        self.inner.compiler()
    }

    fn device_step(&self) -> &Arc<Self::Device> {
        &self.step
    }

    fn store(&self) -> Option<&Arc<dyn ArtifactStore>> {
        self.inner.store()
    }

    fn keeps(&self, variant: &VariantOf<Self>) -> bool {
        self.inner.keeps(variant)
    }

    fn batch_started(&mut self) {
        self.inner.batch_started();
    }

    fn found(&mut self, id: &ArtifactId<VariantOf<Self>>, artifact: &ArtifactOf<Self>) {
        self.inner.found(id, artifact);
    }

    fn batch_finished(&mut self) {
        self.inner.batch_finished();
    }

    fn publish(
        &mut self,
        id: &ArtifactId<VariantOf<Self>>,
        artifact: &ArtifactOf<Self>,
        made: MadeOf<Self>,
    ) -> Result<Self::Loaded, DeviceRefusal> {
        self.inner.publish(id, artifact, made)
    }
}
