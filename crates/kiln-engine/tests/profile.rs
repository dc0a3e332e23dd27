//! Warm-start profiles on the fake target (L12): a program's next process
//! loads every kernel its last one loaded before it asks for any, counted
//! by the fake device and compiler, never timed.

use std::sync::Arc;

use kiln_engine::fake::{FakeKernel, FakeTarget};
use kiln_engine::profile::{PROFILE_MAX_AGE, Program, profile_blob_key};
use kiln_engine::store::{Groups, KeyedCompiler, Lookup, Records};
use kiln_engine::{ArtifactStore, CompilationTarget, KernelLoader, LoaderConfig, MemoryStore};

fn loader(store: &Arc<dyn ArtifactStore>, program: &str) -> KernelLoader<FakeTarget> {
    KernelLoader::with_config(
        FakeTarget::on_store(Arc::clone(store)),
        LoaderConfig::default(),
    )
    .with_profile(Program::named(program))
}

/// One run of the program: queues kernels `numbers` and launches each.
fn run(store: &Arc<dyn ArtifactStore>, program: &str, numbers: std::ops::Range<u32>) {
    let mut loader = loader(store, program);
    for number in numbers.clone() {
        loader.enqueue(Box::new(FakeKernel::new(number)), ());
    }
    for number in numbers {
        let kernel = FakeKernel::new(number);
        loader.load(&kernel, &kernel.artifact_id()).expect("loads");
    }
}

/// How many kernels a new run of `program` finds on its device at its first
/// access, before it asks for any but kernel 0.
fn loaded_at_start(store: &Arc<dyn ArtifactStore>, program: &str) -> usize {
    let mut loader = loader(store, program);
    let kernel = FakeKernel::new(0);
    loader.load(&kernel, &kernel.artifact_id()).expect("loads");
    loader.target().loaded()
}

#[test]
fn l12_a_profiled_programs_second_start_loads_every_profiled_kernel_before_it_asks() {
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    run(&store, "server", 0..10);

    let mut next = loader(&store, "server");
    let first = FakeKernel::new(0);
    next.load(&first, &first.artifact_id()).expect("loads");
    assert_eq!(
        next.target().loaded(),
        10,
        "every profiled kernel, at the first launch"
    );
    assert_eq!(next.profiled_waiting(), 9, "nine not asked for yet");
    assert_eq!(
        next.target().fake_compiler().lowered(),
        0,
        "nothing compiled"
    );
    assert!(next.records().is_empty(), "no batch ran");
    for number in 1..10 {
        let kernel = FakeKernel::new(number);
        next.load(&kernel, &kernel.artifact_id()).expect("loads");
    }
    assert_eq!(next.profiled_waiting(), 0);
    assert_eq!(next.target().loaded(), 10, "each loaded on the device once");
    assert!(next.records().is_empty(), "each first launch was a lookup");
    assert_eq!(next.statistics().hits, 10);
}

#[test]
fn l12_another_program_has_a_profile_of_its_own() {
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    run(&store, "server", 0..10);
    assert_eq!(loaded_at_start(&store, "trainer"), 1, "only what it asked");
    let storeless = KernelLoader::new(FakeTarget::storeless()).with_profile(Program::executable());
    assert_eq!(
        storeless.profiled_waiting(),
        0,
        "a storeless loader keeps no profile"
    );
}

#[test]
fn l12_kernels_no_longer_asked_for_age_out() {
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    run(&store, "server", 0..6);
    // From now on the program asks for 0..3 only: 3..6 stay a while, loaded
    // at each start, and leave the profile when they grow too old.
    for _ in 0..PROFILE_MAX_AGE {
        run(&store, "server", 0..3);
    }
    assert_eq!(loaded_at_start(&store, "server"), 6, "not old enough yet");
    assert_eq!(loaded_at_start(&store, "server"), 3, "aged out");
}

#[test]
fn l12_a_profiled_kernel_the_store_lost_compiles_when_the_program_asks() {
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    run(&store, "server", 0..4);
    let mut target = FakeTarget::on_store(Arc::clone(&store));
    target.forget_id(&FakeKernel::new(3).artifact_id());
    let mut next = KernelLoader::with_config(target, LoaderConfig::default())
        .with_profile(Program::named("server"));
    let lost = FakeKernel::new(3);
    next.load(&lost, &lost.artifact_id()).expect("compiles");
    assert_eq!(
        next.target().fake_compiler().finalized(),
        0,
        "found by its source"
    );
    assert_eq!(next.records().len(), 1, "the lost one took a batch");
    assert_eq!(next.target().loaded(), 4);
}

#[test]
fn l12_a_profile_is_written_once_a_run() {
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    {
        let mut first = loader(&store, "server");
        for number in 0..2 {
            let kernel = FakeKernel::new(number);
            first.load(&kernel, &kernel.artifact_id()).expect("loads");
        }
        first.save_profile();
        for number in 2..5 {
            let kernel = FakeKernel::new(number);
            first.load(&kernel, &kernel.artifact_id()).expect("loads");
        }
    } // The drop writes nothing more.
    assert_eq!(loaded_at_start(&store, "server"), 2);
}

#[test]
fn l12_a_profiled_kernel_launched_only_through_the_hot_path_stays_young() {
    // The first ask of a profiled kernel is a hot launch: the slot's own
    // mark tells the profile it was asked for, so it never ages while
    // launched, and one never launched ages out as before.
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    run(&store, "server", 0..6);
    for _ in 0..=PROFILE_MAX_AGE {
        let mut next = loader(&store, "server");
        for number in 0..3 {
            let kernel = FakeKernel::new(number);
            next.load(&kernel, &kernel.artifact_id()).expect("loads");
        }
        assert!(next.records().is_empty(), "every launch found its kernel");
    }
    assert_eq!(loaded_at_start(&store, "server"), 3, "3..6 aged out");
}

/// A loader on `store` with the configuration's default profile, the
/// executable's.
fn default_loader(store: &Arc<dyn ArtifactStore>, profile: bool) -> KernelLoader<FakeTarget> {
    KernelLoader::with_config(
        FakeTarget::on_store(Arc::clone(store)),
        LoaderConfig {
            profile,
            ..LoaderConfig::default()
        },
    )
}

/// Whether `store` holds a profile of this executable for the fake target.
fn holds_default_profile(store: &Arc<dyn ArtifactStore>) -> bool {
    let components = FakeTarget::storeless().compiler().key_components();
    let name = profile_blob_key(Program::executable().name(), &components);
    matches!(store.parts().lookup_blob(&name), Lookup::Hit { .. })
}

#[test]
fn l12_a_loader_with_a_store_keeps_its_executables_profile_by_default() {
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    {
        let mut first = KernelLoader::new(FakeTarget::on_store(Arc::clone(&store)));
        assert!(first.keeps_profile(), "on by default with a store");
        for number in 0..5 {
            let kernel = FakeKernel::new(number);
            first.load(&kernel, &kernel.artifact_id()).expect("loads");
        }
    }
    assert!(holds_default_profile(&store), "named after the executable");
    let mut next = default_loader(&store, true);
    let kernel = FakeKernel::new(0);
    next.load(&kernel, &kernel.artifact_id()).expect("loads");
    assert_eq!(next.target().loaded(), 5, "every profiled kernel, ahead");
    assert!(next.records().is_empty());
    assert!(
        !KernelLoader::new(FakeTarget::storeless()).keeps_profile(),
        "a storeless loader keeps none"
    );
}

#[test]
fn l12_a_loader_told_to_keep_no_profile_reads_and_writes_none() {
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    for off in [
        default_loader(&store, false),
        KernelLoader::new(FakeTarget::on_store(Arc::clone(&store))).without_profile(),
    ] {
        let mut off = off;
        assert!(!off.keeps_profile());
        for number in 0..3 {
            let kernel = FakeKernel::new(number);
            off.load(&kernel, &kernel.artifact_id()).expect("loads");
        }
        off.save_profile();
    }
    assert!(!holds_default_profile(&store), "nothing written");

    // A profile there is not read either.
    {
        let mut writer = default_loader(&store, true);
        let kernel = FakeKernel::new(7);
        writer.load(&kernel, &kernel.artifact_id()).expect("loads");
    }
    assert!(holds_default_profile(&store));
    let mut off = default_loader(&store, false);
    let kernel = FakeKernel::new(0);
    off.load(&kernel, &kernel.artifact_id()).expect("loads");
    assert_eq!(off.target().loaded(), 1, "kernel 7 was not loaded ahead");
}

#[test]
fn l12_a_profile_given_in_place_of_the_default_one_is_the_only_one_written() {
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    run(&store, "server", 0..3);
    assert!(
        !holds_default_profile(&store),
        "the executable's profile was given up unwritten"
    );
}

/// A memory store that keeps the batch records it is given, as a disk
/// store does, and counts the batches ended on it.
#[derive(Debug, Default)]
struct KeepingStore {
    inner: MemoryStore,
    kept: std::sync::Mutex<Vec<Vec<u8>>>,
    ended: std::sync::atomic::AtomicUsize,
}

impl ArtifactStore for KeepingStore {
    fn lookup(&self, key: &kiln_engine::StoreKey) -> Lookup<Vec<u8>> {
        self.inner.lookup(key)
    }
    fn lookup_many(&self, keys: &[kiln_engine::StoreKey]) -> Vec<Lookup<Vec<u8>>> {
        self.inner.lookup_many(keys)
    }
    fn put_many(&self, puts: &[kiln_engine::Put<'_>]) -> Vec<kiln_engine::StoreOutcome> {
        self.inner.put_many(puts)
    }
    fn remove(&self, key: &kiln_engine::StoreKey) {
        self.inner.remove(key);
    }
    fn generation(&self) -> kiln_engine::Generation {
        self.inner.generation()
    }
    fn statistics(&self) -> kiln_engine::StoreStatistics {
        self.inner.statistics()
    }
    fn parts(&self) -> kiln_engine::StoreParts<'_> {
        kiln_engine::StoreParts {
            claims: Some(&self.inner),
            blobs: Some(&self.inner),
            records: Some(self),
            groups: Some(self),
        }
    }
}

impl Records for KeepingStore {
    fn kept_batches(&self) -> Vec<Vec<u8>> {
        self.kept.lock().expect("not poisoned").clone()
    }
    fn keep_batch(&self, record: &[u8]) {
        self.kept
            .lock()
            .expect("not poisoned")
            .push(record.to_vec());
    }
}

impl Groups for KeepingStore {
    fn batch_finished(&self) {
        self.ended
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

// L12, S4: a profiled start counts the kernels its profile loaded as
// profile hits, in the loader's statistics and in the record of the load it
// keeps in the store, and ends that load for the store as a batch.
#[test]
fn l12_a_profiled_start_counts_its_profile_hits() {
    let keeping = Arc::new(KeepingStore::default());
    let store: Arc<dyn ArtifactStore> = Arc::clone(&keeping) as Arc<dyn ArtifactStore>;
    run(&store, "counted", 0..5);
    let kept_before = keeping.kept_batches().len();
    let ended_before = keeping.ended.load(std::sync::atomic::Ordering::Relaxed);

    let mut next = loader(&store, "counted");
    let kernel = FakeKernel::new(0);
    next.load(&kernel, &kernel.artifact_id()).expect("loads");
    let statistics = next.statistics();
    assert_eq!(statistics.profile_hits, 5, "{statistics:?}");
    assert_eq!(
        statistics.hits, 5,
        "the profile's hits are hits: {statistics:?}"
    );
    assert!(next.records().is_empty(), "no batch ran");
    assert!(
        keeping.ended.load(std::sync::atomic::Ordering::Relaxed) > ended_before,
        "the load was ended for the store"
    );
    let kept = keeping.kept_batches();
    assert_eq!(kept.len(), kept_before + 1, "the load kept one record");
    let record = kiln_engine::StoredBatch::decode(kept.last().expect("one")).expect("decodes");
    assert_eq!(record.batch.profile_hits, 5);
    assert_eq!(record.batch.count(kiln_engine::KernelOutcome::FromStore), 5);
    assert_eq!(record.batch.kernels, 5);
}

/// The `info` lines logged in this test binary.
static LOGGED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Info
    }
    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            LOGGED
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(record.args().to_string());
        }
    }
    fn flush(&self) {}
}

// L12: `KILN_LOG=info` says how many kernels each profile's load loaded.
#[test]
fn l12_a_profiles_load_is_logged_at_info() {
    static CAPTURE: Capture = Capture;
    if log::set_logger(&CAPTURE).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    run(&store, "logged", 0..23);
    assert_eq!(loaded_at_start(&store, "logged"), 23);
    let logged = LOGGED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    assert!(
        logged
            .iter()
            .any(|line| line.starts_with("warm-start profile: 23 of 23 kernels loaded")),
        "{logged:#?}"
    );
}
