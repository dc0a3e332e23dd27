//! The child process of kiln's multi-process store tests.
//!
//! ```text
//! kiln-test-worker loads ROOT LOG KEYS LOOKUPS SEED   random loads of shared kernels
//! kiln-test-worker publish-loop ROOT SEED             publishes until killed
//! kiln-test-worker copy-loop ROOT SEED                puts batches of copies until killed
//! kiln-test-worker fsize-limited ROOT KERNELS         loads with every write refused
//! kiln-test-worker read-loop ROOT KEYS MILLIS         reads while another process evicts
//! kiln-test-worker batch ROOT LOG MILLIS FIRST LAST     one batch of kernels FIRST..LAST (down when FIRST > LAST)
//! ```
//!
//! Each mode but `publish-loop` prints one [`WorkerReport`] as JSON. The
//! `batch` mode's store takes `KILN_CACHE_LEASE` and
//! `KILN_CACHE_LOCK_TIMEOUT` from the environment, as `kiln warm` does.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kiln_engine::fake::{FakeCompiler, FakeKernel, FakeTarget};
use kiln_engine::{
    ArtifactStore, ArtifactStoreExt, KernelLoader, LoaderConfig, Lookup, Miss, Origin, Put,
};
use kiln_store::{DiskStore, StoreConfig};
use kiln_tests::{
    WorkerReport, fake_key, fake_text, is_whole_pattern, open_store, pattern, shared_store,
};

fn main() -> Result<()> {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let words: Vec<&str> = arguments.iter().map(String::as_str).collect();
    let report = match words.as_slice() {
        ["loads", root, log, keys, lookups, seed] => loads(
            root.into(),
            log.into(),
            keys.parse()?,
            lookups.parse()?,
            seed.parse()?,
        ),
        ["publish-loop", root, seed] => publish_loop(root.into(), seed.parse()?),
        ["copy-loop", root, seed] => copy_loop(root.into(), seed.parse()?),
        ["fsize-limited", root, kernels] => fsize_limited(root.into(), kernels.parse()?),
        ["read-loop", root, keys, millis] => read_loop(root.into(), keys.parse()?, millis.parse()?),
        ["batch", root, log, millis, first, last] => batch(
            root.into(),
            log.into(),
            millis.parse()?,
            first.parse()?,
            last.parse()?,
        ),
        _ => bail!("unknown worker arguments: {arguments:?}"),
    }?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// A small generator, seeded per process, so that runs differ between
/// processes and repeat between runs.
struct Random(u64);

impl Random {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

fn config() -> LoaderConfig {
    LoaderConfig {
        parallelism: std::num::NonZeroUsize::MIN,
        // Each loader stands in for a process of its own on the store: no
        // warm-start profile loads ahead of what the tests count (L12).
        profile: false,
        ..LoaderConfig::default()
    }
}

/// `lookups` loads of random kernels among `keys`, each through a fresh
/// loader, so every one asks the store; the compiler logs its compiles.
fn loads(root: PathBuf, log: PathBuf, keys: u32, lookups: u64, seed: u64) -> Result<WorkerReport> {
    let store = shared_store(&root);
    let mut random = Random::new(seed);
    let mut report = WorkerReport::default();
    for _ in 0..lookups {
        let number = u32::try_from(random.below(u64::from(keys)))?;
        let compiler = FakeCompiler::default().logging_compiles_to(&log);
        let target = FakeTarget::on_store(store.clone()).with_compiler(compiler);
        let mut loader = KernelLoader::with_config(target, config());
        let kernel = FakeKernel::new(number).sleeping(Duration::from_millis(5));
        report.loads += 1;
        match loader.load(&kernel, &kernel.artifact_id()) {
            Ok(module) if module.text == fake_text(number) => report.loaded += 1,
            Ok(_) => report.wrong += 1,
            Err(_) => report.failed += 1,
        }
    }
    Ok(report)
}

/// One batch of kernels `first..=last` (in that order, down when `first`
/// is the larger), each compiling for `millis`, then a load of each.
fn batch(root: PathBuf, log: PathBuf, millis: u64, first: u32, last: u32) -> Result<WorkerReport> {
    let store = store_with_claims_from_env(&root)?;
    let numbers: Vec<u32> = if first <= last {
        (first..=last).collect()
    } else {
        (last..=first).rev().collect()
    };
    let compiler = FakeCompiler::default().logging_compiles_to(&log);
    let target = FakeTarget::on_store(store).with_compiler(compiler);
    let mut loader = KernelLoader::with_config(target, config());
    let kernels: Vec<FakeKernel> = numbers
        .iter()
        .map(|number| FakeKernel::new(*number).sleeping(Duration::from_millis(millis)))
        .collect();
    for kernel in &kernels {
        loader.enqueue(Box::new(kernel.clone()), ());
    }
    loader.compile_queued();
    let mut report = WorkerReport::default();
    for (kernel, number) in kernels.iter().zip(&numbers) {
        report.loads += 1;
        match loader.load(kernel, &kernel.artifact_id()) {
            Ok(module) if module.text == fake_text(*number) => report.loaded += 1,
            Ok(_) => report.wrong += 1,
            Err(_) => report.failed += 1,
        }
    }
    Ok(report)
}

/// The store at `root` with the lease and the lock timeout the environment
/// sets; nothing else of the environment, so a variable of the machine
/// running the tests cannot change what they prove.
fn store_with_claims_from_env(root: &Path) -> Result<Arc<dyn ArtifactStore>> {
    let root = root.display().to_string();
    let config = StoreConfig::with_overrides(|name| match name {
        "KILN_CACHE_DIR" => Some(root.clone()),
        "KILN_CACHE_LEASE" | "KILN_CACHE_LOCK_TIMEOUT" => std::env::var(name).ok(),
        _ => None,
    })?
    .context("the store is enabled")?;
    Ok(Arc::new(DiskStore::open(StoreConfig {
        collects_automatically: false,
        ..config
    })?))
}

/// Publishes whole patterns of random sizes under 40 keys, replacing each
/// other, until killed.
fn publish_loop(root: PathBuf, seed: u64) -> Result<WorkerReport> {
    let store = open_store(&root);
    let mut random = Random::new(seed ^ u64::from(std::process::id()));
    for round in 0u32.. {
        let number = u32::try_from(random.below(40))?;
        let length = 1024 + usize::try_from(random.below(63 * 1024))?;
        let bytes = pattern(number, round, length);
        store.put(&fake_key(number), None, &bytes, Duration::from_millis(1));
    }
    unreachable!("the loop runs until the process is killed")
}

/// Puts batches of 16 copies at once (`put_many`, as a remote tier's
/// write-back does) until killed.
fn copy_loop(root: PathBuf, seed: u64) -> Result<WorkerReport> {
    let store = open_store(&root);
    let mut random = Random::new(seed ^ u64::from(std::process::id()));
    for round in 0u32.. {
        let entries: Vec<_> = (0..16)
            .map(|_| {
                let number = u32::try_from(random.below(40)).expect("below 40");
                let length = 1024 + usize::try_from(random.below(63 * 1024)).expect("small");
                (fake_key(number), pattern(number, round, length))
            })
            .collect();
        let copies: Vec<Put<'_>> = entries
            .iter()
            .map(|(key, bytes)| Put {
                key,
                bytes,
                work: Duration::from_millis(1),
                origin: Origin::Copied,
            })
            .collect();
        store.put_many(&copies);
    }
    unreachable!("the loop runs until the process is killed")
}

/// Loads `kernels` kernels with a file size limit of zero: every write to
/// the store fails with EFBIG, and every kernel must still load.
fn fsize_limited(root: PathBuf, kernels: u32) -> Result<WorkerReport> {
    // SAFETY: ignoring SIGXFSZ only turns the signal a write past the limit
    // would raise into the EFBIG error the store handles.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    let limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: `limit` is a valid rlimit that outlives the call.
    if unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &limit) } != 0 {
        return Err(std::io::Error::last_os_error()).context("setting RLIMIT_FSIZE");
    }
    let store = open_store(&root);
    let shared: std::sync::Arc<dyn ArtifactStore> = std::sync::Arc::new(store.clone());
    let mut loader = KernelLoader::with_config(FakeTarget::on_store(shared), config());
    let mut report = WorkerReport::default();
    for number in 0..kernels {
        let kernel = FakeKernel::new(number);
        report.loads += 1;
        match loader.load(&kernel, &kernel.artifact_id()) {
            Ok(module) if module.text == fake_text(number) => report.loaded += 1,
            Ok(_) => report.wrong += 1,
            Err(_) => report.failed += 1,
        }
    }
    report.put_failures = store.statistics().put_failures;
    report.store_errors = loader.statistics().store_errors;
    Ok(report)
}

/// Looks up keys `0..keys` round and round for `millis`, checking that
/// every hit is a whole pattern of its own key.
fn read_loop(root: PathBuf, keys: u32, millis: u64) -> Result<WorkerReport> {
    let store = open_store(&root);
    let until = Instant::now() + Duration::from_millis(millis);
    let mut report = WorkerReport::default();
    let mut number = 0;
    while Instant::now() < until {
        report.loads += 1;
        match store.lookup(&fake_key(number)) {
            Lookup::Hit { artifact, .. } => {
                let own = artifact.get(..4) == Some(&number.to_le_bytes()[..]);
                if own && is_whole_pattern(&artifact) {
                    report.hits += 1;
                } else {
                    report.wrong += 1;
                }
            }
            Lookup::Miss(Miss::Absent) => report.absent += 1,
            Lookup::Miss(miss) => {
                eprintln!("reader: key {number}: {miss}");
                report.bad_misses += 1;
            }
        }
        number = (number + 1) % keys;
    }
    Ok(report)
}
