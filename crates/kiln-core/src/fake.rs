//! A target with no device and no compiler behind it, whose every behaviour
//! can be chosen: the subject of the loader's own tests, and a way to try
//! kiln without a GPU.
//!
//! Each [`FakeKernel`] carries what it should do — compile, fail, panic,
//! sleep, share its source with other kernels, be refused by the device —
//! and the [`FakeCompiler`] counts what it lowered and finalized, and on
//! which threads, so tests can prove what the loader did rather than infer
//! it from timings.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::diagnostic::{CompileFailure, Diagnostic};
use crate::error::DeviceRefusal;
use crate::id::{ArtifactId, KernelId};
use crate::kernel::Kernel;
use crate::target::{ArtifactCompiler, CompilationTarget, Finalized, Lookup, Miss, StoreOutcome};

/// What a [`FakeKernel`] does on its way to the device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FakeBehaviour {
    /// Its generator returns an error.
    pub fails_to_lower: bool,
    /// Its generator panics.
    pub panics_in_lower: bool,
    /// The compiler reports three errors, the first at 2:7.
    pub fails_to_finalize: bool,
    /// The compiler reports a configuration mistake, with a hint.
    pub misconfigured: bool,
    /// The compiler panics.
    pub panics_in_finalize: bool,
    /// The compiler takes this long.
    pub finalize_time: Duration,
    /// The lowered text, when several kernels should share it.
    pub source: Option<String>,
    /// Lowering yields no text to share artifacts by.
    pub without_source: bool,
    /// The device refuses the artifact.
    pub refused: bool,
}

/// A kernel of the fake target, identified by its number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeKernel {
    /// Its number; the id is made of it alone, so kernels with the same
    /// number and other behaviours are the same kernel (a retry).
    pub number: u32,
    /// What it does.
    pub behaviour: FakeBehaviour,
}

impl FakeKernel {
    /// A kernel that compiles and loads, with source text of its own.
    pub fn new(number: u32) -> Self {
        Self {
            number,
            behaviour: FakeBehaviour::default(),
        }
    }

    /// Fails to finalize with a cascade of three located errors.
    pub fn failing(mut self) -> Self {
        self.behaviour.fails_to_finalize = true;
        self
    }

    /// Fails to finalize because of a configuration mistake.
    pub fn misconfigured(mut self) -> Self {
        self.behaviour.misconfigured = true;
        self
    }

    /// Fails in its generator.
    pub fn failing_to_lower(mut self) -> Self {
        self.behaviour.fails_to_lower = true;
        self
    }

    /// Panics in its generator.
    pub fn panicking_in_lower(mut self) -> Self {
        self.behaviour.panics_in_lower = true;
        self
    }

    /// Panics in the compiler.
    pub fn panicking(mut self) -> Self {
        self.behaviour.panics_in_finalize = true;
        self
    }

    /// Takes `time` to finalize.
    pub fn sleeping(mut self, time: Duration) -> Self {
        self.behaviour.finalize_time = time;
        self
    }

    /// Lowers to `source`, the same text as every kernel given it.
    pub fn sharing_source(mut self, source: impl Into<String>) -> Self {
        self.behaviour.source = Some(source.into());
        self
    }

    /// Lowers to nothing an artifact can be shared by.
    pub fn without_source(mut self) -> Self {
        self.behaviour.without_source = true;
        self
    }

    /// Is refused by the device.
    pub fn refused(mut self) -> Self {
        self.behaviour.refused = true;
        self
    }

    /// Its id under the fake target's only variant.
    pub fn artifact_id(&self) -> ArtifactId<()> {
        ArtifactId::new(self.id(), ())
    }
}

impl Kernel for FakeKernel {
    fn id(&self) -> KernelId {
        KernelId::named("kiln.fake").parameter(&self.number).build()
    }
}

/// What the fake compiler lowers to.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FakeLowered {
    /// The kernel's number.
    pub number: u32,
    /// The text, unless the kernel has none.
    pub source: Option<String>,
    /// What finalizing it does.
    pub behaviour: FakeBehaviour,
}

/// What the fake compiler finalizes to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FakeArtifact {
    /// The text it was compiled from.
    pub text: String,
    /// The device refuses it.
    pub refused: bool,
}

/// A kernel loaded on the fake device.
#[derive(Debug, PartialEq, Eq)]
pub struct FakeModule {
    /// The kernel it was loaded for.
    pub kernel: KernelId,
    /// The text its artifact was compiled from.
    pub text: String,
}

/// The fake compiler, counting its work.
#[derive(Debug, Default)]
pub struct FakeCompiler {
    lowered: AtomicUsize,
    finalized: AtomicUsize,
    running: AtomicUsize,
    most_running: AtomicUsize,
    threads: Mutex<FakeThreads>,
}

#[derive(Debug, Default)]
struct FakeThreads {
    lowered_on: HashMap<u32, ThreadId>,
    finalized_on: HashMap<u32, ThreadId>,
    finalized_sources: Vec<String>,
}

impl FakeCompiler {
    /// How many kernels it lowered.
    pub fn lowered(&self) -> usize {
        self.lowered.load(Ordering::SeqCst)
    }

    /// How many kernels it finalized (or tried to).
    pub fn finalized(&self) -> usize {
        self.finalized.load(Ordering::SeqCst)
    }

    /// The most lower or finalize steps that ran at the same moment.
    pub fn most_at_once(&self) -> usize {
        self.most_running.load(Ordering::SeqCst)
    }

    /// The thread that lowered kernel `number` last.
    pub fn lowered_on(&self, number: u32) -> Option<ThreadId> {
        self.lock().lowered_on.get(&number).copied()
    }

    /// The thread that finalized kernel `number` last.
    pub fn finalized_on(&self, number: u32) -> Option<ThreadId> {
        self.lock().finalized_on.get(&number).copied()
    }

    /// How many distinct threads lowered or finalized.
    pub fn threads_used(&self) -> usize {
        let threads = self.lock();
        let mut all: Vec<ThreadId> = threads
            .lowered_on
            .values()
            .chain(threads.finalized_on.values())
            .copied()
            .collect();
        all.sort_by_key(|thread| format!("{thread:?}"));
        all.dedup();
        all.len()
    }

    /// How many times `source` was finalized.
    pub fn finalized_source(&self, source: &str) -> usize {
        self.lock()
            .finalized_sources
            .iter()
            .filter(|finalized| *finalized == source)
            .count()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeThreads> {
        self.threads
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts one step as running until the returned guard drops.
    fn running(&self) -> RunningStep<'_> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_running.fetch_max(now, Ordering::SeqCst);
        RunningStep(self)
    }
}

struct RunningStep<'a>(&'a FakeCompiler);

impl Drop for RunningStep<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ArtifactCompiler for FakeCompiler {
    type Kernel = FakeKernel;
    type Variant = ();
    type Lowered = FakeLowered;
    type Artifact = FakeArtifact;

    fn lower(
        &self,
        kernel: &FakeKernel,
        _id: &ArtifactId<()>,
    ) -> Result<FakeLowered, CompileFailure> {
        let _running = self.running();
        self.lowered.fetch_add(1, Ordering::SeqCst);
        self.lock()
            .lowered_on
            .insert(kernel.number, std::thread::current().id());
        let behaviour = &kernel.behaviour;
        if behaviour.panics_in_lower {
            panic!("fake generator {} panicked", kernel.number);
        }
        if behaviour.fails_to_lower {
            return Err(CompileFailure::message(format!(
                "fake generator {} refused its parameters",
                kernel.number
            )));
        }
        let source = (!behaviour.without_source).then(|| {
            behaviour
                .source
                .clone()
                .unwrap_or_else(|| format!("fake kernel {}", kernel.number))
        });
        Ok(FakeLowered {
            number: kernel.number,
            source,
            behaviour: behaviour.clone(),
        })
    }

    fn source(lowered: &FakeLowered) -> Option<&str> {
        lowered.source.as_deref()
    }

    fn finalize(
        &self,
        _id: &ArtifactId<()>,
        lowered: FakeLowered,
    ) -> Result<Finalized<FakeArtifact>, CompileFailure> {
        let _running = self.running();
        self.finalized.fetch_add(1, Ordering::SeqCst);
        let text = lowered
            .source
            .unwrap_or_else(|| format!("fake kernel {} without source", lowered.number));
        {
            let mut threads = self.lock();
            threads
                .finalized_on
                .insert(lowered.number, std::thread::current().id());
            threads.finalized_sources.push(text.clone());
        }
        let behaviour = lowered.behaviour;
        if !behaviour.finalize_time.is_zero() {
            std::thread::sleep(behaviour.finalize_time);
        }
        if behaviour.panics_in_finalize {
            panic!("fake compiler crashed on kernel {}", lowered.number);
        }
        if behaviour.misconfigured {
            return Err(CompileFailure::message("unknown architecture fake_0")
                .with_hint("choose an architecture the fake compiler lists: fake_1"));
        }
        if behaviour.fails_to_finalize {
            return Err(CompileFailure::new(vec![
                Diagnostic::warning("unused parameter").at(1, Some(1)),
                Diagnostic::error("unexpected token").at(2, Some(7)),
                Diagnostic::error("undeclared name").at(3, Some(1)),
                Diagnostic::error("undeclared name").at(4, Some(1)),
            ])
            .with_log("2:7: error: unexpected token\n3:1: error: undeclared name\n4:1: error: undeclared name"));
        }
        Ok(Finalized {
            artifact: FakeArtifact {
                text,
                refused: behaviour.refused,
            },
            diagnostics: vec![Diagnostic::warning("fake remark: 0 registers spilled")],
        })
    }
}

/// An in-memory store for the fake target.
#[derive(Debug, Default)]
struct FakeStore {
    by_id: HashMap<ArtifactId<()>, FakeArtifact>,
    by_source: HashMap<String, FakeArtifact>,
}

/// The fake device and, when it persists, an in-memory store in front of it.
#[derive(Debug)]
pub struct FakeTarget {
    compiler: FakeCompiler,
    store: Option<FakeStore>,
    generation: Arc<AtomicU64>,
    failing_writes: bool,
    loaded: usize,
    stored: usize,
}

impl FakeTarget {
    /// A target that keeps nothing beyond the process.
    pub fn storeless() -> Self {
        Self {
            compiler: FakeCompiler::default(),
            store: None,
            generation: Arc::new(AtomicU64::new(0)),
            failing_writes: false,
            loaded: 0,
            stored: 0,
        }
    }

    /// A target with an (in-memory) store.
    pub fn persisting() -> Self {
        Self {
            store: Some(FakeStore::default()),
            ..Self::storeless()
        }
    }

    /// The same target, whose store writes fail.
    pub fn with_failing_writes(mut self) -> Self {
        self.failing_writes = true;
        self
    }

    /// The compiler, with its counts.
    pub fn fake_compiler(&self) -> &FakeCompiler {
        &self.compiler
    }

    /// How many artifacts the device loaded.
    pub fn loaded(&self) -> usize {
        self.loaded
    }

    /// How many artifacts were stored.
    pub fn stored(&self) -> usize {
        self.stored
    }

    /// Whether the store holds something for `id`.
    pub fn holds(&self, id: &ArtifactId<()>) -> bool {
        self.store
            .as_ref()
            .is_some_and(|store| store.by_id.contains_key(id))
    }

    /// Switches to a new, empty store, as opening another root would.
    pub fn switch_store(&mut self) {
        if let Some(store) = &mut self.store {
            *store = FakeStore::default();
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Forgets one kernel's entry by id, keeping its source entry, as a
    /// rebuilt program with new ids would find the store.
    pub fn forget_id(&mut self, id: &ArtifactId<()>) {
        if let Some(store) = &mut self.store {
            store.by_id.remove(id);
        }
    }
}

impl CompilationTarget for FakeTarget {
    type Compiler = FakeCompiler;
    type Loaded = Arc<FakeModule>;

    fn compiler(&self) -> &FakeCompiler {
        &self.compiler
    }

    fn persists(&self) -> bool {
        self.store.is_some()
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    fn lookup(&mut self, id: &ArtifactId<()>) -> Lookup<FakeArtifact> {
        match self.store.as_ref().and_then(|store| store.by_id.get(id)) {
            Some(artifact) => Lookup::Hit {
                bytes: artifact.text.len() as u64,
                artifact: artifact.clone(),
                work: Duration::from_millis(1),
            },
            None => Lookup::Miss(Miss::Absent),
        }
    }

    fn lookup_source(&mut self, _id: &ArtifactId<()>, source: &str) -> Lookup<FakeArtifact> {
        match self
            .store
            .as_ref()
            .and_then(|store| store.by_source.get(source))
        {
            Some(artifact) => Lookup::Hit {
                bytes: artifact.text.len() as u64,
                artifact: artifact.clone(),
                work: Duration::from_millis(1),
            },
            None => Lookup::Miss(Miss::Absent),
        }
    }

    fn store(
        &mut self,
        id: &ArtifactId<()>,
        artifact: &FakeArtifact,
        source: Option<&str>,
        _work: Duration,
    ) -> StoreOutcome {
        let Some(store) = &mut self.store else {
            return StoreOutcome::Skipped;
        };
        if self.failing_writes {
            return StoreOutcome::Failed {
                detail: "fake store: no space left on device".into(),
            };
        }
        store.by_id.insert(id.clone(), artifact.clone());
        if let Some(source) = source {
            store.by_source.insert(source.to_owned(), artifact.clone());
        }
        self.stored += 1;
        StoreOutcome::Stored {
            bytes: artifact.text.len() as u64,
        }
    }

    fn load(
        &mut self,
        id: &ArtifactId<()>,
        artifact: &FakeArtifact,
    ) -> Result<Arc<FakeModule>, DeviceRefusal> {
        if artifact.refused {
            return Err(DeviceRefusal {
                message: format!("fake device: invalid image for {}", id.kernel),
                code: Some(200),
            });
        }
        self.loaded += 1;
        Ok(Arc::new(FakeModule {
            kernel: id.kernel.clone(),
            text: artifact.text.clone(),
        }))
    }
}
