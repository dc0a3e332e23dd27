//! `kiln warm DIR`: compile every kernel in a folder into the store, one
//! batch per backend, for every backend this machine has.
//!
//! Kernels are found and specialized as [`crate::manifest`] says. Each
//! backend runs on its device when there is one, and compile-only when
//! there is not: naga alone for wgpu (no Vulkan adapter or loader), NVRTC
//! for CUDA (sm_90 by default), hipRTC for HIP (gfx90a by default).
//! `--cuda-arch` and `--hip-arch` take lists: one batch per architecture,
//! on the device when it is of that architecture. `--backend` chooses the
//! backends. A backend whose compiler is missing is listed with the
//! reason, and fails the run (exit code 4) when `--require` names it. A
//! second run finds everything in the store.
//!
//! A run fails only for its kernels: a kernel file that cannot be read or
//! parsed fails alone, and a store that cannot take a write (disk full,
//! quota, read-only, file size limit) is reported once per cause and
//! counted, while the kernels still compile (P5). A store folder that is
//! read-only and empty makes the run storeless, with one warning.

use std::collections::HashSet;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::Args;
use clap::builder::PossibleValuesParser;
use kiln_cuda::{Architecture, CudaKernel, CudaOptions, CudaTarget};
use kiln_engine::store::ArtifactStore;
use kiln_engine::{
    ArtifactId, CompilationTarget, Kernel, KernelId, KernelLoader, KernelOf, LoaderConfig,
    Reported, VariantOf,
};
use kiln_hip::{HipKernel, HipOptions, HipTarget};
use kiln_store::DiskStore;
use kiln_wgpu::{WgpuDevice, WgpuTarget, WgpuVariant, WgslKernel};
use serde::Serialize;

use super::Output;
use crate::console::{self, errln, outln};
use crate::exit::{self, Exit};
use crate::format::seconds;
use crate::manifest::{self, KernelFile, Language, Specialization};
use crate::table::Table;

/// `kiln warm DIR`.
#[derive(Debug, Args)]
pub struct Arguments {
    /// The folder of kernels: `*.wgsl`, `*.cu`, `*.hip`, each with a
    /// `// kiln entry: ...` header, and `*.spv` SPIR-V modules with theirs
    /// in `NAME.spv.kiln`.
    pub folder: PathBuf,
    /// The backends to run, comma-separated (wgpu, cuda, hip); default:
    /// every backend the folder has kernels for.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "BACKEND,...",
        value_parser = PossibleValuesParser::new(crate::backend::BACKENDS)
    )]
    pub backend: Vec<String>,
    /// The CUDA architectures to compile for, comma-separated
    /// (`sm_80,sm_90`): one batch each, loaded on the NVIDIA GPU when it is
    /// of that architecture, compiled only otherwise. Default: the GPU's,
    /// else sm_90.
    #[arg(long, value_delimiter = ',', value_name = "sm_XX,...")]
    pub cuda_arch: Vec<String>,
    /// The AMD architectures to compile for, comma-separated
    /// (`gfx90a,gfx942`): one batch each, as for --cuda-arch. Default: the
    /// AMD GPU's, else gfx90a.
    #[arg(long, value_delimiter = ',', value_name = "gfxXXX,...")]
    pub hip_arch: Vec<String>,
    /// Backends that must run: one of them unavailable (its compiler
    /// missing) fails the run with exit code 4 instead of a note.
    /// Comma-separated; a backend without kernels in the folder is not
    /// run and so never unavailable.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "BACKEND,...",
        value_parser = PossibleValuesParser::new(crate::backend::BACKENDS)
    )]
    pub require: Vec<String>,
    /// Compile again the kernels whose failure the store remembers,
    /// instead of reporting the remembered failure without compiling; each
    /// one that compiles is forgotten. `kiln forget KERNEL` forgets one
    /// without compiling.
    #[arg(long)]
    pub retry_failed: bool,
    /// A shared remote tier behind the store: `redis://HOST:PORT` or
    /// `redis+cluster://HOST:PORT,...`; default: `KILN_REMOTE_URL`, if set.
    /// Needs keys (`kiln keygen --help`): without them the run
    /// stops before compiling anything.
    #[arg(long, value_name = "URL")]
    pub remote: Option<String>,
    /// An include folder for the CUDA and HIP kernels (repeatable),
    /// searched after the including file's folder and its header's
    /// `// kiln include:` folders, before the CUDA toolkit's. kiln reads
    /// every header itself and keys its text.
    #[arg(long = "include", value_name = "DIR")]
    pub include: Vec<PathBuf>,
}

/// Whether this run retries remembered failures (`--retry-failed`).
static RETRY_FAILED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl Arguments {
    /// Whether `backend` is to run.
    fn wants(&self, backend: &str) -> bool {
        self.backend.is_empty() || self.backend.iter().any(|wanted| wanted == backend)
    }

    /// Checks the architectures and that every required backend is
    /// selected, before anything compiles.
    fn check(&self) -> Result<()> {
        let usage = |message: String| Exit::new(exit::USAGE, message);
        for arch in &self.cuda_arch {
            arch.parse::<Architecture>()
                .map_err(|error| usage(format!("--cuda-arch: {error}")))?;
        }
        for arch in &self.hip_arch {
            kiln_hip::Architecture::new(arch)
                .map_err(|error| usage(format!("--hip-arch: {error}")))?;
        }
        if let Some(left_out) = self.require.iter().find(|backend| !self.wants(backend)) {
            return Err(usage(format!(
                "--require {left_out}: the backend is not among --backend {}; add it there",
                self.backend.join(",")
            ))
            .into());
        }
        Ok(())
    }
}

/// What one backend did with its kernels.
#[derive(Debug, Default, Serialize)]
struct BackendReport {
    backend: &'static str,
    /// The device, or the compile-only target, it ran on.
    target: String,
    /// The architecture compiled for (CUDA, HIP); `None` for wgpu.
    architecture: Option<String>,
    /// Whether kernels were loaded on a device (not compile-only).
    on_device: bool,
    /// Why the backend did not run, when it did not.
    unavailable: Option<String>,
    kernels: usize,
    from_store: u64,
    rekeyed: u64,
    compiled: u64,
    failed: u64,
    /// Artifacts written to the store.
    stored: u64,
    /// Artifacts whose store write failed (each kernel still compiled).
    store_write_failures: u64,
    /// Workers of the batch, when the loader kept its record
    /// (`KILN_RECORD_LIMIT=0` keeps none).
    workers: Option<usize>,
    wall_seconds: f64,
    /// Seconds of lowering and finalizing, summed over workers.
    work_seconds: f64,
    /// How the driver's pipeline cache started (wgpu on a device).
    pipeline_cache: Option<String>,
    /// The CUDA toolkit's include folders angle includes fall back to
    /// (CUDA); empty when none was found.
    toolkit_headers: Vec<String>,
    failures: Vec<FailureReport>,
    /// Kernels that spill registers to memory (D4), compiled or read from
    /// the store alike.
    spilling: Vec<SpillReport>,
}

/// A kernel that spills, and how much (D4).
#[derive(Debug, Serialize)]
struct SpillReport {
    kernel: String,
    /// The spills in a few words: `1756 B stored, 1796 B loaded per
    /// thread`, `3 VGPRs, 0 SGPRs`.
    spills: String,
    /// Registers per thread (HIP: VGPRs), when known.
    registers: Option<u32>,
}

#[derive(Debug, Serialize)]
struct FailureReport {
    kernel: String,
    /// The failure's first line: the first diagnostic, with its place.
    first_diagnostic: String,
    /// Whether the store remembered the failure from an earlier compile
    /// and it was reported without compiling (P11); `false` also when the
    /// loader kept no batch record to say so (`KILN_RECORD_LIMIT=0`).
    remembered: bool,
}

/// A file of the folder that failed or was left alone, and why.
#[derive(Debug, Serialize)]
struct FileReport {
    file: String,
    reason: String,
}

/// What the remote tier did during a run.
#[derive(Debug, Serialize)]
struct RemoteReport {
    /// Where it is, without any password.
    url: String,
    /// Kernels the disk store missed and the remote had (verified).
    hits: u64,
    /// Entries written to the remote.
    written: u64,
    /// Remote writes that failed.
    write_failures: u64,
    /// Remote writes dropped because the queue was full.
    dropped: u64,
    /// Remote entries that did not verify and were not loaded.
    unverified: u64,
    /// Whether every queued write went out before the run ended.
    flushed: bool,
}

/// A cause of failed store writes, reported once per run however many
/// writes it failed.
#[derive(Debug, Serialize)]
struct WriteFailureReport {
    cause: String,
    detail: String,
    count: u64,
}

/// The whole run, as `--json` prints it.
#[derive(Debug, Serialize)]
struct WarmReport {
    folder: String,
    /// The store's folder; `None` when the run had no store.
    store: Option<String>,
    /// Why the run had no store, when it had none.
    storeless: Option<String>,
    /// Whether the store could only be read: it served hits and stored
    /// nothing.
    store_read_only: bool,
    /// Writes not attempted because the store is read-only.
    store_writes_skipped: u64,
    files: usize,
    /// Kernel files that could not be read or parsed: each failed alone.
    failed_files: Vec<FileReport>,
    /// Entries left alone: links, FIFOs, device nodes.
    skipped: Vec<FileReport>,
    backends: Vec<BackendReport>,
    /// Why store writes failed, one entry per cause.
    store_write_failures: Vec<WriteFailureReport>,
    /// The shared remote tier, when the run had one (P10).
    remote: Option<RemoteReport>,
}

/// Compiles every kernel of the folder into the store at `dir` (else the
/// configured one).
pub fn run(dir: Option<&Path>, arguments: &Arguments, output: &Output) -> Result<()> {
    arguments.check()?;
    RETRY_FAILED.store(arguments.retry_failed, std::sync::atomic::Ordering::Relaxed);
    let found = manifest::find(&arguments.folder)?;
    if found.files.is_empty() && found.failed.is_empty() {
        bail!(
            "no kernels in {}: kiln warm compiles *.wgsl, *.spv, *.cu and *.hip files",
            arguments.folder.display()
        );
    }
    let store = super::open_store_to_fill(dir)?;
    // A store found read-only says so itself, through the logger.
    if let Err(reason) = &store {
        errln!("kiln: warning: {reason}; compiling without a store");
    }
    let remote = super::push::open_remote(arguments.remote.as_deref())?;
    let tiered = match (store.as_ref().ok(), remote) {
        (Some(disk), Some(remote)) => Some(Arc::new(kiln_remote::TieredStore::new(
            disk.clone(),
            remote,
        ))),
        (None, Some(_)) => {
            errln!("kiln: warning: no local store, so the remote tier is not used this run");
            None
        }
        (_, None) => None,
    };
    let shared: Option<Arc<dyn ArtifactStore>> = match &tiered {
        Some(tiered) => Some(Arc::clone(tiered) as Arc<dyn ArtifactStore>),
        None => store
            .as_ref()
            .ok()
            .map(|store| Arc::new(store.clone()) as Arc<dyn ArtifactStore>),
    };
    let files = &found.files;
    let of = |language: Language| -> Vec<&KernelFile> {
        files
            .iter()
            .filter(|file| file.language == language)
            .collect()
    };
    // WGSL and SPIR-V share wgpu's batch, target and pipeline cache.
    let wgsl: Vec<&KernelFile> = files
        .iter()
        .filter(|file| file.language.has_override_ids())
        .collect();
    let (cu, hip) = (of(Language::Cuda), of(Language::Hip));
    // A `.cu` file is CUDA's unless its header says otherwise, and HIP's
    // only when asked: CUDA-only code (inline PTX, cooperative groups)
    // must not fail a folder of CUDA kernels.
    let declares = |file: &KernelFile, backend: &str| {
        file.backends
            .as_ref()
            .map(|backends| backends.iter().any(|named| named == backend))
    };
    let hip_asked = arguments.backend.iter().any(|backend| backend == "hip");
    let cuda: Vec<&KernelFile> = cu
        .iter()
        .copied()
        .filter(|file| declares(file, "cuda").unwrap_or(true))
        .collect();
    let hip_from_cu = cu
        .iter()
        .copied()
        .filter(|file| hip_asked || declares(file, "hip").unwrap_or(false));
    // Each architecture asked for is a batch of its own; none asked is
    // the device's, else the default.
    let architectures = |asked: &[String]| -> Vec<Option<String>> {
        if asked.is_empty() {
            vec![None]
        } else {
            asked.iter().cloned().map(Some).collect()
        }
    };
    let mut backends = Vec::new();
    if !wgsl.is_empty() && arguments.wants("wgpu") {
        backends.push(warm_wgpu(&wgsl, shared.as_ref()));
    }
    if !cuda.is_empty() && arguments.wants("cuda") {
        for arch in architectures(&arguments.cuda_arch) {
            backends.push(warm_cuda(
                &cuda,
                shared.as_ref(),
                arch.as_deref(),
                &arguments.include,
            ));
        }
    }
    let for_hip: Vec<&KernelFile> = hip_from_cu.chain(hip.iter().copied()).collect();
    if !for_hip.is_empty() && arguments.wants("hip") {
        for arch in architectures(&arguments.hip_arch) {
            backends.push(warm_hip(
                &for_hip,
                shared.as_ref(),
                arch.as_deref(),
                &arguments.include,
            ));
        }
    }
    let notes = |unusable: &[manifest::Unusable]| -> Vec<FileReport> {
        unusable
            .iter()
            .map(|entry| FileReport {
                file: entry.name.clone(),
                reason: entry.reason.clone(),
            })
            .collect()
    };
    // The remote writes queued during the run go out before it ends.
    let remote = tiered.map(|tiered| {
        let flushed = tiered.flush(std::time::Duration::from_secs(60));
        let statistics = tiered.tiered_statistics();
        RemoteReport {
            url: tiered.remote().config().url_for_display(),
            hits: statistics.remote_hits,
            written: statistics.remote_writes,
            write_failures: statistics.remote_write_failures,
            dropped: statistics.queue_dropped,
            unverified: statistics.remote.unverified,
            flushed,
        }
    });
    let report = WarmReport {
        remote,
        folder: arguments.folder.display().to_string(),
        store: store
            .as_ref()
            .ok()
            .map(|store| store.root().display().to_string()),
        storeless: store.as_ref().err().cloned(),
        store_read_only: store.as_ref().is_ok_and(DiskStore::is_read_only),
        store_writes_skipped: store
            .as_ref()
            .map_or(0, |store| store.statistics().writes_skipped),
        files: files.len() + found.failed.len(),
        failed_files: notes(&found.failed),
        skipped: notes(&found.skipped),
        store_write_failures: store.as_ref().map(write_failures).unwrap_or_default(),
        backends,
    };
    // A failed store write was said once per cause on standard error by
    // the store itself, through the logger; the table counts them per
    // backend.
    output.print(&report, || print_report(&report))?;
    let missing: Vec<String> = report
        .backends
        .iter()
        .filter(|backend| arguments.require.iter().any(|name| name == backend.backend))
        .filter_map(|backend| {
            let reason = backend.unavailable.as_ref()?;
            Some(format!("{}: {}", backend.backend, short(reason)))
        })
        .collect();
    if !missing.is_empty() {
        return Err(Exit::new(
            exit::REQUIRED_UNAVAILABLE,
            format!(
                "a required backend is unavailable: {}; install its compiler, or leave it \
                 out of --require",
                missing.join("; ")
            ),
        )
        .reported()
        .into());
    }
    let failed: u64 = report.backends.iter().map(|backend| backend.failed).sum();
    let message = match (failed, report.failed_files.len()) {
        (0, 0) => return Ok(()),
        (kernels, 0) => format!("{kernels} kernels failed"),
        (0, files) => format!("{files} kernel files failed"),
        (kernels, files) => format!("{kernels} kernels and {files} kernel files failed"),
    };
    Err(Exit::new(exit::KERNELS_FAILED, message).reported().into())
}

/// Why the store's writes failed during the run, one entry per cause.
fn write_failures(store: &DiskStore) -> Vec<WriteFailureReport> {
    store
        .write_failures()
        .into_iter()
        .map(|failure| WriteFailureReport {
            cause: failure.cause.to_string(),
            detail: failure.detail,
            count: failure.count,
        })
        .collect()
}

fn print_report(report: &WarmReport) {
    let kernels: usize = report.backends.iter().map(|backend| backend.kernels).sum();
    let store = match (&report.store, &report.storeless) {
        (Some(root), _) => format!("store {root}"),
        (None, Some(reason)) => format!("no store: {reason}"),
        (None, None) => "no store".to_owned(),
    };
    outln!(
        "{} files, {kernels} kernels in {}; {store}",
        report.files,
        report.folder
    );
    if let Some(remote) = &report.remote {
        outln!(
            "remote tier {}: {} hits, {} written, {} write failures, {} dropped, {} entries \
             that did not verify{}",
            remote.url,
            remote.hits,
            remote.written,
            remote.write_failures,
            remote.dropped,
            remote.unverified,
            if remote.flushed {
                ""
            } else {
                "; some writes were still queued at the end"
            }
        );
    }
    let mut table = Table::new(&[
        "BACKEND",
        "TARGET",
        "KERNELS>",
        "FROM STORE>",
        "REKEYED>",
        "COMPILED>",
        "FAILED>",
        "NOT STORED>",
        "WALL>",
        "SUMMED WORK>",
    ]);
    for backend in &report.backends {
        if let Some(reason) = &backend.unavailable {
            let mut row = vec![
                backend.backend.to_owned(),
                format!("unavailable: {}", short(reason)),
                backend.kernels.to_string(),
            ];
            row.resize(10, "-".into());
            table.row(row);
            continue;
        }
        let work = seconds(backend.work_seconds);
        table.row(vec![
            backend.backend.to_owned(),
            backend.target.clone(),
            backend.kernels.to_string(),
            backend.from_store.to_string(),
            backend.rekeyed.to_string(),
            backend.compiled.to_string(),
            backend.failed.to_string(),
            backend.store_write_failures.to_string(),
            seconds(backend.wall_seconds),
            match backend.workers {
                Some(workers) => {
                    format!(
                        "{work} on {workers} worker{}",
                        if workers == 1 { "" } else { "s" }
                    )
                }
                None => work,
            },
        ]);
    }
    table.print();
    for backend in &report.backends {
        if let Some(reason) = backend
            .unavailable
            .as_ref()
            .filter(|reason| short(reason) != **reason)
        {
            outln!("{} unavailable: {reason}", backend.backend);
        }
        if let Some(cache) = &backend.pipeline_cache {
            outln!("{} pipeline cache: {cache}", backend.backend);
        }
        if backend.backend == "cuda" && backend.unavailable.is_none() {
            if backend.toolkit_headers.is_empty() {
                outln!(
                    "cuda toolkit headers: none found (set KILN_CUDA_INCLUDE to the folder \
                     holding cuda_runtime.h)"
                );
            } else {
                outln!(
                    "cuda toolkit headers: {}",
                    backend.toolkit_headers.join(", ")
                );
            }
        }
        for failure in &backend.failures {
            outln!(
                "{} failed{}: {}: {}",
                backend.backend,
                if failure.remembered {
                    " (remembered from an earlier compile, not compiled again; --retry-failed \
                     compiles it, kiln forget forgets it)"
                } else {
                    ""
                },
                failure.kernel,
                failure.first_diagnostic
            );
        }
        for spill in &backend.spilling {
            outln!(
                "{} spills: {}: {}{}",
                backend.backend,
                spill.kernel,
                spill.spills,
                spill
                    .registers
                    .map_or_else(String::new, |registers| format!(" ({registers} registers)"))
            );
        }
    }
    for file in &report.failed_files {
        outln!("failed: {}: {}", file.file, file.reason);
    }
    for file in &report.skipped {
        outln!("skipped: {}: {}", file.file, file.reason);
    }
}

/// The start of a long reason, for a table cell: up to where it starts
/// listing what was tried.
fn short(reason: &str) -> String {
    let cut = [": looked for", ";"]
        .iter()
        .filter_map(|marker| reason.find(marker))
        .min()
        .unwrap_or(reason.len());
    let mut text: String = reason[..cut].chars().take(72).collect();
    if text.len() < reason.len() {
        text.push_str(" (below)");
    }
    text
}

/// A report of a backend that could not run for `architecture`.
fn unavailable(
    backend: &'static str,
    architecture: Option<&str>,
    kernels: usize,
    reason: String,
) -> BackendReport {
    BackendReport {
        backend,
        architecture: architecture.map(str::to_owned),
        unavailable: Some(reason),
        kernels,
        ..BackendReport::default()
    }
}

/// A kernel to warm: its label and the kernel.
type Labelled<K> = (String, Box<K>);

/// Every kernel of `files`: one per entry and specialization, made by
/// `make(index of the file, file, entry, specialization)`.
fn kernels_of<K>(
    files: &[&KernelFile],
    mut make: impl FnMut(usize, &KernelFile, &str, &Specialization) -> K,
) -> Vec<Labelled<K>> {
    let mut kernels = Vec::new();
    for (index, file) in files.iter().enumerate() {
        for entry in &file.entries {
            for specialization in &file.specializations {
                kernels.push((
                    file.label(entry, specialization),
                    Box::new(make(index, file, entry, specialization)),
                ));
            }
        }
    }
    kernels
}

/// Every module of `files`: one per specialization holding every entry of
/// its file (B6), made by `make(index of the file, file, specialization)`.
fn modules_of<K>(
    files: &[&KernelFile],
    mut make: impl FnMut(usize, &KernelFile, &Specialization) -> K,
) -> Vec<Labelled<K>> {
    let mut kernels = Vec::new();
    for (index, file) in files.iter().enumerate() {
        for specialization in &file.specializations {
            kernels.push((
                file.module_label(specialization),
                Box::new(make(index, file, specialization)),
            ));
        }
    }
    kernels
}

/// The id every backend's kernel of `file`, `entry` (several, separated by
/// commas, for a module of them) and `specialization` starts from: the
/// file's name (for `kiln ls` and `kiln forget`, with the entries after a
/// `:` when the file has several), the specialization, the entry and the
/// file's whole text (a `.spv` file's module), which is what is compiled
/// (P14): a `.spv.kiln` sidecar joins only through the entry and the
/// specialization. A renamed file's kernels miss by id, and find their
/// artifacts by the text compiled, which names no file (rekeyed, not
/// compiled); so does a program compiling the same text.
fn base_id(
    file: &KernelFile,
    entry: &str,
    specialization: &Specialization,
) -> kiln_engine::KernelIdBuilder {
    let name = if file.entries.len() > 1 {
        format!("warm/{}:{entry}", file.name)
    } else {
        format!("warm/{}", file.name)
    };
    KernelId::named(name)
        .parameter(&specialization.to_string())
        .parameter(entry)
        .bytes(file.compiled())
}

/// What a C++ file needs beyond its text, once per file and backend: the
/// headers its includes reach (P13) and its options; or why the file's
/// kernels fail without compiling.
type Prepared<O> = Result<(Vec<kiln_cxx::Header>, O), String>;

/// The include search of `file`: its folder, its header's folders, then
/// `--include`'s, then `toolkit`.
fn search_of(
    file: &KernelFile,
    include: &[PathBuf],
    toolkit: Vec<PathBuf>,
) -> kiln_cxx::IncludeSearch {
    kiln_cxx::IncludeSearch {
        source_folder: Some(file.folder.clone()),
        folders: file.includes.iter().chain(include).cloned().collect(),
        toolkit,
        compiler_folders: Vec::new(),
    }
}

/// A kernel's generator that fails without compiling, with `reason`: the
/// setup's failure, never remembered (P11), so fixing it compiles at once.
fn failing<A>(
    reason: String,
) -> impl Fn(A) -> Result<String, kiln_engine::CompileFailure> + Send + Sync + 'static {
    move |_architecture| Err(kiln_engine::CompileFailure::message(reason.clone()).not_the_kernels())
}

/// Enqueues every kernel `make` makes on a loader over `target`, compiles
/// them in one batch with a progress bar, and reports.
///
/// The counts come from the loader's cumulative statistics and each
/// failure from its kernel's own load (L7), never from the batch records,
/// which the loader may keep none of (`KILN_RECORD_LIMIT=0`): `make` is
/// called twice, once for the kernels to queue and once for the kernels to
/// ask for their outcome.
fn warm_batch<T>(
    backend: &'static str,
    description: String,
    on_device: bool,
    target: T,
    variant: &VariantOf<T>,
    make: impl Fn() -> Vec<Labelled<KernelOf<T>>>,
    generated: &Arc<AtomicUsize>,
) -> (BackendReport, T)
where
    T: CompilationTarget,
    T::Loaded: Reported,
    KernelOf<T>: Sized,
{
    let config = LoaderConfig::from_env_or_default();
    let config = LoaderConfig {
        retry_failed: config.retry_failed
            || RETRY_FAILED.load(std::sync::atomic::Ordering::Relaxed),
        // What a warm builds is no program's run: it keeps no profile.
        profile: false,
        ..config
    };
    let mut loader = KernelLoader::with_config(target, config);
    for (_, kernel) in make() {
        loader.enqueue(kernel, variant.clone());
    }
    // Two identical `specialize` lines make one kernel: the queue holds
    // each once.
    let count = loader.queued_len();
    let bar = Bar::start(backend, count, Arc::clone(generated), loader.progress());
    let started = Instant::now();
    loader.compile_queued();
    let wall = started.elapsed();
    drop(bar);
    let statistics = loader.statistics();
    let remembered: HashSet<KernelId> = loader
        .records()
        .back()
        .map(|batch| {
            batch
                .records
                .iter()
                .filter(|record| record.remembered)
                .map(|record| record.kernel.clone())
                .collect()
        })
        .unwrap_or_default();
    let mut failures = Vec::new();
    let mut spilling = Vec::new();
    let mut asked = HashSet::new();
    for (label, kernel) in make() {
        let id = ArtifactId::new(kernel.id(), variant.clone());
        // A failure is reported once: asking a second time would compile
        // the kernel again.
        if !asked.insert(id.kernel.clone()) {
            continue;
        }
        // A loaded kernel answers from memory; a failed one reports the
        // failure its batch kept, without compiling again.
        match loader.load(&kernel, &id) {
            Ok(loaded) => {
                let resources = &loaded.report().resources;
                if let Some(spills) = resources.spill_summary() {
                    spilling.push(SpillReport {
                        kernel: label,
                        spills,
                        registers: resources.registers,
                    });
                }
            }
            Err(error) => {
                // A quarantine says how to undo it: with this kernel's name.
                let first_diagnostic = error
                    .to_string()
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .replace("`kiln forget KERNEL`", &format!("`kiln forget {label}`"));
                failures.push(FailureReport {
                    remembered: remembered.contains(&id.kernel),
                    kernel: label,
                    first_diagnostic,
                });
            }
        }
    }
    let report = BackendReport {
        backend,
        target: description,
        architecture: None,
        on_device,
        unavailable: None,
        kernels: count,
        from_store: statistics.hits,
        rekeyed: statistics.rekeyed,
        compiled: statistics.compiled,
        failed: statistics.failed + statistics.refused,
        stored: statistics.stored,
        store_write_failures: statistics.store_errors,
        workers: loader.records().back().map(|batch| batch.workers),
        wall_seconds: wall.as_secs_f64(),
        work_seconds: statistics.compile_seconds,
        pipeline_cache: None,
        toolkit_headers: Vec::new(),
        failures,
        spilling,
    };
    (report, loader.into_target())
}

/// The number a `// kiln specialize:` value gives a WGSL `override`: `true`
/// and `false` as 1 and 0, a finite number as itself; `None` for anything
/// else. kiln-wgpu then checks it fits the constant's declared type.
fn constant_value(text: &str) -> Option<f64> {
    match text {
        "true" => Some(1.0),
        "false" => Some(0.0),
        _ => text.parse::<f64>().ok().filter(|number| number.is_finite()),
    }
}

fn warm_wgpu(files: &[&KernelFile], store: Option<&Arc<dyn ArtifactStore>>) -> BackendReport {
    let generated = Arc::new(AtomicUsize::new(0));
    let make = || {
        kernels_of(files, |_, file, entry, specialization| {
            let mut builder = WgslKernel::builder(base_id(file, entry, specialization), entry)
                .label(file.name.clone());
            let mut refused = None;
            for (name, value) in &specialization.0 {
                match constant_value(value) {
                    Some(number) => builder = builder.constant(name.clone(), number),
                    // Never passed on as some number: the kernel fails
                    // alone, naming the constant and what it was given.
                    None => {
                        refused.get_or_insert(format!(
                            "the constant {name}={value} is neither a number nor true or false"
                        ));
                    }
                }
            }
            let counter = Arc::clone(&generated);
            // Counted for the progress bar; a refused constant fails the
            // kernel when it compiles, alone.
            let check = move || {
                counter.fetch_add(1, Ordering::Relaxed);
                match &refused {
                    Some(reason) => Err(kiln_engine::CompileFailure::message(reason.clone())
                        .with_hint("write a number, or true or false for a bool")),
                    None => Ok(()),
                }
            };
            match &file.module {
                Some(module) => {
                    let module = Arc::clone(module);
                    builder.spirv_generator(move || check().map(|()| module.to_vec()))
                }
                None => {
                    let source = Arc::clone(&file.source);
                    builder.generator(move || check().map(|()| source.to_string()))
                }
            }
        })
    };
    let (target, description, on_device) = match WgpuDevice::open() {
        Ok(device) => {
            let description = format!("{} (Vulkan)", device.info().name);
            (WgpuTarget::on_device(device), description, true)
        }
        Err(error) => {
            log::info!("wgpu: {error}; compiling with naga alone");
            (
                WgpuTarget::compile_only(),
                format!(
                    "compile-only: naga {} (no adapter)",
                    kiln_wgpu::NAGA_VERSION
                ),
                false,
            )
        }
    };
    let target = match store {
        Some(store) => target.with_store(Arc::clone(store)),
        None => target,
    };
    let (mut report, target) = warm_batch(
        "wgpu",
        description,
        on_device,
        target,
        &WgpuVariant,
        make,
        &generated,
    );
    if on_device {
        report.pipeline_cache = Some(target.pipeline_cache_state().to_string());
    }
    report
}

/// A C++ kernel's generator: the file's compiled text, whatever the
/// architecture, counting each generation in `generated` for the progress
/// bar.
fn counted_source<A>(
    file: &KernelFile,
    generated: &Arc<AtomicUsize>,
) -> impl Fn(A) -> Result<String, kiln_engine::CompileFailure> + Send + Sync + 'static {
    let source = Arc::clone(&file.source);
    let counter = Arc::clone(generated);
    move |_architecture| {
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(source.to_string())
    }
}

/// Warms `files` for CUDA: on the NVIDIA GPU when there is one of `arch`
/// (of any architecture when `arch` is `None`), else compile-only for
/// `arch` (sm_90 by default).
fn warm_cuda(
    files: &[&KernelFile],
    store: Option<&Arc<dyn ArtifactStore>>,
    arch: Option<&str>,
    include: &[PathBuf],
) -> BackendReport {
    let count = module_count(files);
    let text = arch.unwrap_or("sm_90");
    let architecture: Architecture = match text.parse() {
        Ok(architecture) => architecture,
        Err(error) => return unavailable("cuda", Some(text), count, error.to_string()),
    };
    let device = match CudaTarget::on_device(0) {
        Ok(target) if arch.is_none() || target.architecture() == architecture => Ok(target),
        Ok(target) => Err(format!("the GPU is {}", target.architecture())),
        Err(error) => Err(error.to_string()),
    };
    let (target, description, on_device) = match device {
        Ok(target) => {
            let name = target
                .device()
                .map(|device| device.name().to_owned())
                .unwrap_or_default();
            let description = format!("{name} {}", target.architecture());
            (target, description, true)
        }
        Err(device_error) => match CudaTarget::compile_only(architecture) {
            Ok(target) => {
                log::info!("cuda: {device_error}; compiling only for {architecture}");
                let description = format!(
                    "compile-only: {architecture}, nvrtc {}",
                    target.compiler().version()
                );
                (target, description, false)
            }
            Err(error) => return unavailable("cuda", Some(text), count, error.to_string()),
        },
    };
    let generated = Arc::new(AtomicUsize::new(0));
    let toolkit = kiln_cuda::toolkit::include_folders();
    let prepared: Vec<Prepared<CudaOptions>> = files
        .iter()
        .map(|file| {
            let headers = search_of(file, include, toolkit.clone())
                .resolve(&file.source, &file.name, &[])
                .map_err(|error| error.to_string())?;
            let options = crate::options::cuda(CudaOptions::default(), &file.options)?;
            Ok((headers, options))
        })
        .collect();
    let make = || {
        modules_of(files, |index, file, specialization| {
            // One compile of the file per specialization, one module of
            // every entry (B6).
            let entries = file.entries.join(",");
            let first = file.entries.first().cloned().unwrap_or_default();
            let builder = file.entries.iter().skip(1).fold(
                CudaKernel::builder(base_id(file, &entries, specialization), first)
                    .program_name(file.name.clone()),
                |builder, entry| builder.entry(entry.clone()),
            );
            let (headers, options) = match &prepared[index] {
                Ok(prepared) => prepared,
                Err(reason) => return builder.generator(failing(reason.clone())),
            };
            let mut options = options.clone();
            for (name, value) in &specialization.0 {
                // Only ever a definition: the header's names are
                // identifiers, and a value is the macro's text.
                options = options.define(name.clone(), value.clone());
            }
            headers
                .iter()
                .fold(builder.options(options), |builder, header| {
                    builder.header(header.name.clone(), header.text.clone())
                })
                .generator(counted_source(file, &generated))
        })
    };
    let target = target.with_optional_store(store.cloned());
    let variant = target.variant();
    let architecture = target.architecture().to_string();
    let mut report = warm_batch(
        "cuda",
        description,
        on_device,
        target,
        &variant,
        make,
        &generated,
    )
    .0;
    report.architecture = Some(architecture);
    report.toolkit_headers = toolkit
        .iter()
        .map(|folder| folder.display().to_string())
        .collect();
    report
}

/// How many kernels `files` hold: one per entry and specialization.
fn module_count(files: &[&KernelFile]) -> usize {
    files.iter().map(|file| file.specializations.len()).sum()
}

/// Warms `files` for HIP, as [`warm_cuda`] does for CUDA (gfx90a by
/// default).
fn warm_hip(
    files: &[&KernelFile],
    store: Option<&Arc<dyn ArtifactStore>>,
    arch: Option<&str>,
    include: &[PathBuf],
) -> BackendReport {
    let count = module_count(files);
    let text = arch.unwrap_or("gfx90a");
    let architecture = match kiln_hip::Architecture::new(text) {
        Ok(architecture) => architecture,
        Err(error) => return unavailable("hip", Some(text), count, error.to_string()),
    };
    let device = match HipTarget::on_device(0) {
        Ok(target) if arch.is_none() || *target.architecture() == architecture => Ok(target),
        Ok(target) => Err(format!("the GPU is {}", target.architecture())),
        Err(error) => Err(error.to_string()),
    };
    let (target, description, on_device) = match device {
        Ok(target) => {
            let description = format!("AMD GPU {}", target.architecture());
            (target, description, true)
        }
        Err(device_error) => match HipTarget::compile_only(architecture) {
            Ok(target) => {
                log::info!("hip: {device_error}; compiling only");
                let description = format!(
                    "compile-only: {}, hiprtc {}",
                    target.architecture(),
                    target.compiler().identity().hiprtc_version
                );
                (target, description, false)
            }
            Err(error) => return unavailable("hip", Some(text), count, error.to_string()),
        },
    };
    let generated = Arc::new(AtomicUsize::new(0));
    let prepared: Vec<Prepared<HipOptions>> = files
        .iter()
        .map(|file| {
            let mut search = search_of(file, include, Vec::new());
            // `<hip/hip_runtime.h>` and its kin are hipRTC's own.
            search.compiler_folders = vec!["hip".to_owned()];
            let headers = search
                .resolve(&file.source, &file.name, &[])
                .map_err(|error| error.to_string())?;
            let options = crate::options::hip(HipOptions::default(), &file.options)?;
            Ok((headers, options))
        })
        .collect();
    let make = || {
        modules_of(files, |index, file, specialization| {
            // One compile of the file per specialization, one code object
            // of every entry (B6).
            let entries = file.entries.join(",");
            let first = file.entries.first().cloned().unwrap_or_default();
            let builder = file.entries.iter().skip(1).fold(
                HipKernel::builder(base_id(file, &entries, specialization), first)
                    .program_name(file.name.clone()),
                |builder, entry| builder.entry(entry.clone()),
            );
            let (headers, options) = match &prepared[index] {
                Ok(prepared) => prepared,
                Err(reason) => return builder.generator(failing(reason.clone())),
            };
            let mut options = options.clone();
            for (name, value) in &specialization.0 {
                options = options.define(name.clone(), value.clone());
            }
            headers
                .iter()
                .fold(builder.options(options), |builder, header| {
                    builder.header(header.name.clone(), header.text.clone())
                })
                .generator(counted_source(file, &generated))
        })
    };
    let target = target.with_optional_store(store.cloned());
    let variant = target.variant();
    let architecture = target.architecture().to_string();
    let mut report = warm_batch(
        "hip",
        description,
        on_device,
        target,
        &variant,
        make,
        &generated,
    )
    .0;
    report.architecture = Some(architecture);
    report
}

/// A progress bar on standard error while one backend's batch runs: how
/// many kernels have had their source generated (the compile work
/// started). Drawn only on a terminal, and only once the batch has run for
/// a moment.
struct Bar {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Bar {
    /// A bar of `total` kernels, `done` of them generated so far; while
    /// the batch waits for kernels other processes compile, it names them
    /// from `progress` (P12).
    fn start(
        label: &'static str,
        total: usize,
        done: Arc<AtomicUsize>,
        progress: kiln_engine::BatchProgress,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::io::stderr().is_terminal().then(|| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let started = Instant::now();
                let mut drawn = false;
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    if started.elapsed() < Duration::from_millis(300) {
                        continue;
                    }
                    let done = done.load(Ordering::Relaxed).min(total);
                    let width = 30;
                    let filled = (done * width).checked_div(total).unwrap_or(width);
                    let doing = match progress.waiting() {
                        Some(waiting) => format!("waiting for {waiting}"),
                        None => "compiling".to_owned(),
                    };
                    console::draw_bar(format_args!(
                        "warm {label}: [{}{}] {done}/{total} {doing}",
                        "#".repeat(filled),
                        "-".repeat(width - filled)
                    ));
                    drawn = true;
                }
                if drawn {
                    console::draw_bar(format_args!(""));
                }
            })
        });
        Self { stop, thread }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
