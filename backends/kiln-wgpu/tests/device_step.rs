//! The wgpu device step on the batch's workers (F9), on a real Vulkan
//! device (lavapipe here): the pipelines of a cold batch's compiled kernels,
//! and of a warm batch's store hits, are made on the loader's pool threads,
//! never on the thread that asked, and launch. Every test skips with a
//! printed reason where there is no Vulkan adapter, and fails instead under
//! `KILN_REQUIRE_DEVICE=1`.

mod support;

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use kiln_engine::{
    ArtifactId, ArtifactStore, CompilationTarget, DeviceRefusal, DeviceStep, KernelId,
    KernelLoader, KernelOutcome, LoaderConfig, MemoryStore,
};
use kiln_wgpu::{
    WgpuArtifact, WgpuCompiler, WgpuDeviceStep, WgpuMade, WgpuPipeline, WgpuTarget, WgpuVariant,
};
use support::{bytes_of, floats};

/// Where each pipeline was made: the thread and its name.
type Made = HashMap<KernelId, (ThreadId, Option<String>)>;

/// The wgpu target's own device step, watched: which thread made each
/// pipeline, and how many were being made at once.
struct Watched {
    inner: Arc<WgpuDeviceStep>,
    made: Mutex<Made>,
    running: AtomicUsize,
    most: AtomicUsize,
}

impl DeviceStep<WgpuCompiler> for Watched {
    type Made = WgpuMade;

    fn make(
        &self,
        id: &ArtifactId<WgpuVariant>,
        artifact: &WgpuArtifact,
    ) -> Result<WgpuMade, DeviceRefusal> {
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

/// A wgpu target whose device step is watched; everything else is the
/// target's own.
struct WatchedTarget {
    inner: WgpuTarget,
    step: Arc<Watched>,
}

impl WatchedTarget {
    fn new(inner: WgpuTarget) -> Self {
        let step = Arc::new(Watched {
            inner: Arc::clone(inner.device_step()),
            made: Mutex::new(HashMap::new()),
            running: AtomicUsize::new(0),
            most: AtomicUsize::new(0),
        });
        Self { inner, step }
    }
}

impl CompilationTarget for WatchedTarget {
    type Compiler = WgpuCompiler;
    type Loaded = WgpuPipeline;
    type Device = Watched;

    fn compiler(&self) -> &Arc<WgpuCompiler> {
        self.inner.compiler()
    }

    fn device_step(&self) -> &Arc<Watched> {
        &self.step
    }

    fn store(&self) -> Option<&Arc<dyn ArtifactStore>> {
        self.inner.store()
    }

    fn batch_finished(&mut self) {
        self.inner.batch_finished();
    }

    fn publish(
        &mut self,
        id: &ArtifactId<WgpuVariant>,
        artifact: &WgpuArtifact,
        made: WgpuMade,
    ) -> Result<WgpuPipeline, DeviceRefusal> {
        self.inner.publish(id, artifact, made)
    }
}

fn loader(target: WatchedTarget) -> KernelLoader<WatchedTarget> {
    KernelLoader::with_config(
        target,
        LoaderConfig {
            parallelism: NonZeroUsize::new(2).expect("2 is not zero"),
            // The second loader stands in for the next process's batch: no
            // warm-start profile loads its kernels ahead of it.
            profile: false,
            ..LoaderConfig::default()
        },
    )
}

/// Asserts that every one of `count` distinct kernels had its pipeline made
/// on a thread of the loader's pool, none on this one, and says where.
fn assert_made_on_the_pool(target: &WatchedTarget, count: usize, what: &str) {
    let made = target.step.made.lock().expect("not poisoned").clone();
    assert_eq!(made.len(), count, "{what}: every pipeline was made");
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
    let threads: std::collections::HashSet<_> = made.values().map(|(thread, _)| *thread).collect();
    kiln_test_support::say(&format!(
        "{what}: {count} pipelines made on {} pool threads, at most {} at once",
        threads.len(),
        target.step.most.load(Ordering::SeqCst)
    ));
}

/// Doubles a buffer through `pipeline` (of `support::distinct(index)`),
/// proving a pipeline made on a worker launches.
fn assert_launches(target: &WgpuTarget, pipeline: &WgpuPipeline, index: usize) {
    let device = target.device().expect("a device target");
    let values = [1.0f32, 2.0, 3.0, 4.0];
    let buffer = device
        .storage_buffer("data", &bytes_of(&values))
        .expect("a storage buffer");
    device
        .dispatch(pipeline, &[(0, 0, &buffer)], [1, 1, 1])
        .expect("the dispatch runs");
    let mut read = floats(&device.read(&buffer).expect("the buffer reads back"));
    read.truncate(values.len());
    let expected: Vec<f32> = values
        .iter()
        .map(|value| value * 2.0 + index as f32)
        .collect();
    assert_eq!(read, expected);
}

// F9
#[test]
fn f9_a_cold_batch_makes_its_compiled_kernels_pipelines_on_the_pool_threads() {
    let Some(device) = support::device("F9 cold batch") else {
        return;
    };
    let count = 12;
    let mut loader = loader(WatchedTarget::new(
        WgpuTarget::on_device(device).without_store(),
    ));
    let kernels: Vec<_> = (0..count).map(support::distinct).collect();
    for kernel in &kernels {
        loader.enqueue(Box::new(kernel.clone()), WgpuVariant);
    }
    loader.compile_queued();
    let batch = loader.records().back().expect("one batch").clone();
    assert_eq!(batch.count(KernelOutcome::Compiled), count);
    assert_made_on_the_pool(loader.target(), count, "F9 cold batch");
    assert_eq!(
        loader.target().inner.pipelines_made().0,
        count,
        "every pipeline published to the target"
    );
    let pipeline = loader
        .load(&kernels[3], &support::id_of(&kernels[3]))
        .expect("loaded");
    assert!(pipeline.pipeline().is_some(), "a real pipeline");
    assert_launches(&loader.target().inner, &pipeline, 3);
}

// F9
#[test]
fn f9_a_warm_batch_makes_its_store_hits_pipelines_on_the_pool_threads() {
    let Some(device) = support::device("F9 warm batch") else {
        return;
    };
    let count = 12;
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    let kernels: Vec<_> = (100..100 + count).map(support::distinct).collect();
    {
        let mut first = loader(WatchedTarget::new(
            WgpuTarget::on_device(device.clone()).with_store(Arc::clone(&store)),
        ));
        for kernel in &kernels {
            first.enqueue(Box::new(kernel.clone()), WgpuVariant);
        }
        first.compile_queued();
    }
    let mut second = loader(WatchedTarget::new(
        WgpuTarget::on_device(device).with_store(store),
    ));
    for kernel in &kernels {
        second.enqueue(Box::new(kernel.clone()), WgpuVariant);
    }
    second.compile_queued();
    let batch = second.records().back().expect("one batch").clone();
    assert_eq!(batch.count(KernelOutcome::FromStore), count);
    assert_made_on_the_pool(second.target(), count, "F9 warm batch");
    let pipeline = second
        .load(&kernels[5], &support::id_of(&kernels[5]))
        .expect("loaded");
    assert_launches(&second.target().inner, &pipeline, 105);
}
