//! A target with no device and no compiler behind it, whose every behaviour
//! can be chosen: the subject of the loader's own tests, and a way to try
//! kiln without a GPU.
//!
//! Each [`FakeKernel`] carries what it should do — compile, fail, panic,
//! sleep, share its source with other kernels, be refused by the device —
//! and the [`FakeCompiler`] counts what it lowered and finalized, and on
//! which threads, so tests can prove what the loader did rather than infer
//! it from timings.
//!
//! The fake target keeps its artifacts in a [`MemoryStore`] of its own, or
//! — through [`FakeTarget::on_store`] — in any real [`ArtifactStore`], so
//! that tests of a store can run the loader over it from several processes. A compiler
//! made with [`FakeCompiler::logging_compiles_to`] appends one line per
//! compile to a file, which is how such tests count compiles across
//! processes.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::compiler::{ArtifactCompiler, Finalized, ProcessCompiler, WorkerRecipe};
use crate::diagnostic::{CompileFailure, Diagnostic};
use crate::id::{ArtifactId, KernelId};
use crate::kernel::Kernel;
use crate::store::{
    ArtifactStore, Claim, ClaimWait, Claims, Explanation, Generation, Groups, KeyComponents,
    KeyedCompiler, Lookup, MemoryStore, Put, Records, StoreKey, StoreOutcome, StoreParts,
    StoreStatistics,
};

mod device;
mod device_step;
pub use device::{FAKE_BACKEND, FakeDevice, FakeTimer};
pub use device_step::FakeDeviceStep;

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
    /// The compiler aborts the whole process, as hipRTC does on a target
    /// its comgr lacks. Only for a compiler in worker processes (see
    /// [`FakeCompiler::in_worker_processes`]): on threads it takes the
    /// loader's own process down.
    pub aborts_in_finalize: bool,
    /// The cost it claims ([`Kernel::cost_hint`]), in place of its
    /// finalize time: a hint that misleads, for tests of what a batch
    /// learns from its store's records.
    pub cost_hint: Option<u64>,
    /// The compiler writes a temporary file before it finalizes, as
    /// hipRTC does, and notes its path beside its compile log
    /// ([`FakeCompiler::read_temporary_files`]).
    pub writes_temporary_file: bool,
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

    /// Claims `cost` as its [`Kernel::cost_hint`], whatever it takes.
    pub fn hinting(mut self, cost: u64) -> Self {
        self.behaviour.cost_hint = Some(cost);
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

    /// Has the compiler write a temporary file first, as hipRTC does.
    pub fn writing_a_temporary_file(mut self) -> Self {
        self.behaviour.writes_temporary_file = true;
        self
    }

    /// Aborts the process that finalizes it (SIGABRT): a compiler crash,
    /// for a compiler in worker processes.
    pub fn aborting(mut self) -> Self {
        self.behaviour.aborts_in_finalize = true;
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

    /// Its finalize time, in microseconds: the fake compiler knows it.
    fn cost_hint(&self) -> u64 {
        self.behaviour.cost_hint.unwrap_or_else(|| {
            u64::try_from(self.behaviour.finalize_time.as_micros()).unwrap_or(u64::MAX)
        })
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
    /// Described by a compile-only target rather than loaded: its launches
    /// do nothing (L11).
    pub described: bool,
    /// The number of the device it was loaded on ([`FakeDevice::number`]):
    /// a module of one device is never another's.
    pub device: u32,
}

impl FakeModule {
    /// Launches the kernel: on the fake device, counts the launch in
    /// `launches`; described by a compile-only target, does nothing and
    /// succeeds, as every launch of a compile-only process does (L11).
    pub fn launch(&self, launches: &AtomicUsize) {
        if !self.described {
            launches.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The fake compiler, counting its work.
#[derive(Debug)]
pub struct FakeCompiler {
    lowered: AtomicUsize,
    finalized: AtomicUsize,
    running: AtomicUsize,
    most_running: AtomicUsize,
    threads: Mutex<FakeThreads>,
    key_components: KeyComponents,
    compile_log: Option<PathBuf>,
    in_worker_processes: bool,
}

impl Default for FakeCompiler {
    fn default() -> Self {
        Self {
            lowered: AtomicUsize::new(0),
            finalized: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            most_running: AtomicUsize::new(0),
            threads: Mutex::default(),
            key_components: Self::default_key_components(),
            compile_log: None,
            in_worker_processes: false,
        }
    }
}

#[derive(Debug, Default)]
struct FakeThreads {
    lowered_on: HashMap<u32, ThreadId>,
    finalized_on: HashMap<u32, ThreadId>,
    finalized_sources: Vec<String>,
}

impl FakeCompiler {
    /// The key components of a default fake compiler: backend `fake`,
    /// compiler `kiln-fake 1`, architecture `fake_1`, no options.
    pub fn default_key_components() -> KeyComponents {
        KeyComponents::new("fake", "kiln-fake 1", "fake_1", "")
    }

    /// The same compiler, naming other key components: another compiler
    /// version, architecture or options, as far as a store can tell.
    pub fn with_key_components(mut self, components: KeyComponents) -> Self {
        self.key_components = components;
        self
    }

    /// The same compiler, appending a line `"<process id> <kernel number>"`
    /// to `path` for every kernel it finalizes, so that tests can count the
    /// compiles of several processes.
    pub fn logging_compiles_to(mut self, path: impl Into<PathBuf>) -> Self {
        self.compile_log = Some(path.into());
        self
    }

    /// The same compiler, finalizing in worker processes when the program
    /// provides them (see [`crate::worker`]), as the CUDA and HIP compilers
    /// do. Its counts then see only what ran in this process: lowering, and
    /// the finalizes of a loader on threads. The default compiler finalizes
    /// on threads.
    pub fn in_worker_processes(mut self) -> Self {
        self.in_worker_processes = true;
        self
    }

    /// The compiles logged in `path` by [`logging_compiles_to`]: the process
    /// id and kernel number of each, in the order they were appended.
    ///
    /// # Errors
    ///
    /// The log could not be read.
    ///
    /// [`logging_compiles_to`]: Self::logging_compiles_to
    pub fn read_compile_log(path: &Path) -> std::io::Result<Vec<(u32, u32)>> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(error) => return Err(error),
        };
        Ok(text
            .lines()
            .filter_map(|line| {
                let (process, number) = line.split_once(' ')?;
                Some((process.parse().ok()?, number.parse().ok()?))
            })
            .collect())
    }

    /// The temporary files the compiler logging to `log` wrote, in the
    /// order it wrote them ([`FakeKernel::writing_a_temporary_file`]).
    pub fn read_temporary_files(log: &Path) -> Vec<PathBuf> {
        std::fs::read_to_string(log.with_extension("temporary"))
            .map(|text| text.lines().map(PathBuf::from).collect())
            .unwrap_or_default()
    }

    /// Writes a temporary file where this process keeps them, and notes
    /// its path beside the compile log.
    fn write_temporary_file(&self, number: u32) {
        let path =
            std::env::temp_dir().join(format!("kiln-fake-{}-{number}.tmp", std::process::id()));
        let written = std::fs::write(&path, b"a compiler's temporary file");
        let noted = self.compile_log.as_ref().map(|log| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log.with_extension("temporary"))
                .and_then(|mut file| file.write_all(format!("{}\n", path.display()).as_bytes()))
        });
        if let Err(error) = written.and(noted.unwrap_or(Ok(()))) {
            log::warn!("fake compiler: cannot write {}: {error}", path.display());
        }
    }

    fn log_compile(&self, number: u32) {
        let Some(path) = &self.compile_log else {
            return;
        };
        // One write of one short line to a file opened for appending: lines
        // of several processes interleave whole.
        let line = format!("{} {number}\n", std::process::id());
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut file| file.write_all(line.as_bytes()));
        if let Err(error) = written {
            log::warn!("fake compiler: cannot log to {}: {error}", path.display());
        }
    }

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
        self.log_compile(lowered.number);
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
        if behaviour.writes_temporary_file {
            self.write_temporary_file(lowered.number);
        }
        if !behaviour.finalize_time.is_zero() {
            std::thread::sleep(behaviour.finalize_time);
        }
        if behaviour.panics_in_finalize {
            panic!("fake compiler crashed on kernel {}", lowered.number);
        }
        if behaviour.aborts_in_finalize {
            eprintln!(
                "fake compiler: aborting process {} on kernel {}, as asked",
                std::process::id(),
                lowered.number
            );
            std::process::abort();
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

    fn worker_recipe(&self) -> Option<WorkerRecipe> {
        self.in_worker_processes.then(|| WorkerRecipe::of(self))
    }
}

/// What a worker process rebuilds a [`FakeCompiler`] from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FakeRecipe {
    /// The key components it names.
    pub key_components: KeyComponents,
    /// Where it logs its compiles.
    pub compile_log: Option<PathBuf>,
}

impl ProcessCompiler for FakeCompiler {
    const NAME: &'static str = "kiln-fake";
    type Recipe = FakeRecipe;

    fn recipe(&self) -> FakeRecipe {
        FakeRecipe {
            key_components: self.key_components.clone(),
            compile_log: self.compile_log.clone(),
        }
    }

    fn from_recipe(recipe: FakeRecipe) -> Result<Self, String> {
        let compiler = Self::default().with_key_components(recipe.key_components);
        Ok(match recipe.compile_log {
            Some(path) => compiler.logging_compiles_to(path),
            None => compiler,
        })
    }
}

impl KeyedCompiler for FakeCompiler {
    fn key_components(&self) -> KeyComponents {
        self.key_components.clone()
    }
}

/// A store whose every write fails, as a full disk's would: what
/// [`FakeTarget::with_failing_writes`] puts in front of its store. Reads go
/// to the store it wraps.
#[derive(Debug)]
struct FailingWrites(Arc<dyn ArtifactStore>);

impl ArtifactStore for FailingWrites {
    fn lookup(&self, key: &StoreKey) -> Lookup<Vec<u8>> {
        self.0.lookup(key)
    }

    fn lookup_many(&self, keys: &[StoreKey]) -> Vec<Lookup<Vec<u8>>> {
        keys.iter().map(|key| self.0.lookup(key)).collect()
    }

    fn put_many(&self, puts: &[Put<'_>]) -> Vec<StoreOutcome> {
        puts.iter()
            .map(|_| StoreOutcome::Failed {
                detail: "fake store: no space left on device".into(),
            })
            .collect()
    }

    fn remove(&self, key: &StoreKey) {
        self.0.remove(key);
    }

    fn generation(&self) -> Generation {
        self.0.generation()
    }

    fn statistics(&self) -> StoreStatistics {
        self.0.statistics()
    }

    fn parts(&self) -> StoreParts<'_> {
        // Its own store's claims, explanations and batch ends; no blobs.
        StoreParts {
            claims: Some(self),
            blobs: None,
            records: Some(self),
            groups: Some(self),
        }
    }
}

impl Claims for FailingWrites {
    fn claim(&self, key: &StoreKey, wait: ClaimWait) -> Claim {
        self.0.parts().claim(key, wait)
    }

    fn claim_timeout(&self) -> Duration {
        self.0.parts().claim_timeout()
    }
}

impl Records for FailingWrites {
    fn explain(&self, key: &StoreKey) -> Explanation {
        self.0.parts().explain(key)
    }
}

impl Groups for FailingWrites {
    fn batch_finished(&self) {
        self.0.parts().batch_finished();
    }
}

/// The fake device and, when it persists, the store in front of it: a
/// [`MemoryStore`] of its own, or any real [`ArtifactStore`].
#[derive(Debug)]
pub struct FakeTarget {
    compiler: Arc<FakeCompiler>,
    store: Option<Arc<dyn ArtifactStore>>,
    failing_writes: bool,
    loaded: usize,
    compile_only: bool,
    device: FakeDevice,
    device_step: Arc<FakeDeviceStep>,
}

impl FakeTarget {
    /// A target that keeps nothing beyond the process. In compile-only
    /// mode ([`crate::mode`]), like every target made then, it has no
    /// device: it describes what it would load and its kernels' launches
    /// do nothing (L11).
    pub fn storeless() -> Self {
        let compile_only = crate::mode::is_compile_only();
        Self {
            compiler: Arc::new(FakeCompiler::default()),
            store: None,
            failing_writes: false,
            loaded: 0,
            compile_only,
            device: FakeDevice::default(),
            device_step: Self::new_device_step(compile_only),
        }
    }

    /// Whether the target has no device (made in compile-only mode).
    pub fn is_compile_only(&self) -> bool {
        self.compile_only
    }

    /// The same target on `device`: another identity or driver, as far as
    /// tuning answers can tell (T2), a clock shared with the test, or
    /// another device of the machine ([`FakeDevice::with_number`]), whose
    /// modules say so. The device step's records start afresh.
    pub fn with_device(mut self, device: FakeDevice) -> Self {
        self.device_step = self.device_step.on_device(device.number());
        self.device = device;
        self
    }

    /// The fake device, whose clock a test's launches advance.
    pub fn device(&self) -> &FakeDevice {
        &self.device
    }

    /// A target with a store of its own, in memory.
    pub fn persisting() -> Self {
        Self::on_store(Arc::new(MemoryStore::new()))
    }

    /// A target whose store is `store`: a real store, shared with other
    /// targets and processes.
    pub fn on_store(store: Arc<dyn ArtifactStore>) -> Self {
        Self::storeless().switch_to(store)
    }

    /// The same target with `compiler`, on the same store.
    pub fn with_compiler(mut self, compiler: FakeCompiler) -> Self {
        self.compiler = Arc::new(compiler);
        self
    }

    /// The same target on `store` instead of the one it had: what opening
    /// another root does (L10).
    pub fn switch_to(mut self, store: Arc<dyn ArtifactStore>) -> Self {
        self.set_store(store);
        self
    }

    /// The same target, whose store writes fail.
    pub fn with_failing_writes(mut self) -> Self {
        self.failing_writes = true;
        if let Some(store) = self.store.take() {
            self.set_store(store);
        }
        self
    }

    fn set_store(&mut self, store: Arc<dyn ArtifactStore>) {
        self.store = Some(if self.failing_writes {
            Arc::new(FailingWrites(store))
        } else {
            store
        });
    }

    /// The compiler, with its counts.
    pub fn fake_compiler(&self) -> &FakeCompiler {
        &self.compiler
    }

    /// How many artifacts the device loaded (none on a compile-only
    /// target).
    pub fn loaded(&self) -> usize {
        self.loaded
    }

    /// How many artifacts its store took: the store's count of puts, by
    /// every user of the store.
    pub fn stored(&self) -> usize {
        self.store.as_ref().map_or(0, |store| {
            usize::try_from(store.statistics().puts).unwrap_or(usize::MAX)
        })
    }

    /// The key its store keeps `id` under.
    fn key(&self, id: &ArtifactId<()>) -> StoreKey {
        StoreKey::for_artifact(
            &self.compiler.key_components(),
            id,
            self.compiler.entry_point(id),
        )
    }

    /// Whether the store holds something for `id`.
    pub fn holds(&self, id: &ArtifactId<()>) -> bool {
        self.store
            .as_ref()
            .is_some_and(|store| matches!(store.lookup(&self.key(id)), Lookup::Hit { .. }))
    }

    /// Switches to a new, empty store in memory, as opening another root
    /// would. A storeless target stays storeless.
    pub fn switch_store(&mut self) {
        if self.store.is_some() {
            self.set_store(Arc::new(MemoryStore::new()));
        }
    }

    /// Forgets one kernel's entry by id, keeping its source entry, as a
    /// rebuilt program with new ids would find the store.
    pub fn forget_id(&mut self, id: &ArtifactId<()>) {
        if let Some(store) = &self.store {
            store.remove(&self.key(id));
        }
    }
}
