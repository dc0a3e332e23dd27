//! The batch every backend runs in `kiln warm`, whatever its kernels: the
//! kernels of its files enqueued on one loader, compiled at once with a
//! progress bar, and what came of each, as a [`BackendReport`].

use std::collections::HashSet;
use std::time::Instant;

use kiln_engine::{
    ArtifactId, CompilationTarget, Kernel, KernelId, KernelLoader, KernelOf, LoaderConfig,
    Reported, VariantOf,
};
use serde::Serialize;

use crate::kernel::Specialization;
use crate::manifest::KernelFile;
use crate::progress::{BatchBar, Shown};

/// What one backend did with its kernels.
#[derive(Debug, Default, Serialize)]
pub struct BackendReport {
    pub backend: &'static str,
    /// The device, or the compile-only target, it ran on.
    pub target: String,
    /// The architecture compiled for (CUDA, HIP); `None` for wgpu.
    pub architecture: Option<String>,
    /// Whether kernels were loaded on a device (not compile-only).
    pub on_device: bool,
    /// Why the backend did not run, when it did not.
    pub unavailable: Option<String>,
    pub kernels: usize,
    pub from_store: u64,
    pub rekeyed: u64,
    pub compiled: u64,
    pub failed: u64,
    /// Artifacts written to the store.
    pub stored: u64,
    /// Artifacts whose store write failed (each kernel still compiled).
    pub store_write_failures: u64,
    /// Workers of the batch, when the loader kept its record
    /// (`KILN_RECORD_LIMIT=0` keeps none).
    pub workers: Option<usize>,
    pub wall_seconds: f64,
    /// Seconds of lowering and finalizing, summed over workers.
    pub work_seconds: f64,
    /// How the driver's pipeline cache started (wgpu on a device).
    pub pipeline_cache: Option<String>,
    /// The CUDA toolkit's include folders angle includes fall back to
    /// (CUDA); empty when none was found.
    pub toolkit_headers: Vec<String>,
    pub failures: Vec<FailureReport>,
    /// Kernels that spill registers to memory (D4), compiled or read from
    /// the store alike.
    pub spilling: Vec<SpillReport>,
}

/// A kernel that spills, and how much (D4).
#[derive(Debug, Serialize)]
pub struct SpillReport {
    pub kernel: String,
    /// The spills in a few words: `1756 B stored, 1796 B loaded per
    /// thread`, `3 VGPRs, 0 SGPRs`.
    pub spills: String,
    /// Registers per thread (HIP: VGPRs), when known.
    pub registers: Option<u32>,
}

/// A kernel that failed, and why.
#[derive(Debug, Serialize)]
pub struct FailureReport {
    pub kernel: String,
    /// The failure's first line: the first diagnostic, with its place.
    pub first_diagnostic: String,
    /// Whether the store remembered the failure from an earlier compile
    /// and it was reported without compiling (P11); `false` also when the
    /// loader kept no batch record to say so (`KILN_RECORD_LIMIT=0`).
    pub remembered: bool,
}

/// A report of a backend that could not run for `architecture`.
pub fn unavailable(
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
pub type Labelled<K> = (String, Box<K>);

/// Every kernel of `files`: one per entry and specialization, made by
/// `make(index of the file, file, entry, specialization)`.
pub fn kernels_of<K>(
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
pub fn modules_of<K>(
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

/// How many modules `files` hold: one per specialization.
pub fn module_count(files: &[&KernelFile]) -> usize {
    files.iter().map(|file| file.specializations.len()).sum()
}

/// The id a wgpu kernel of `file`, `entry` and `specialization` starts
/// from: the file's name (for `kiln ls` and `kiln forget`, with the entry
/// after a `:` when the file has several), the specialization, the entry
/// and the file's whole text (a `.spv` file's module), which is what is
/// compiled (P14): a `.spv.kiln` sidecar joins only through the entry and
/// the specialization. A renamed file's kernels miss by id, and find their
/// artifacts by the text compiled, which names no file (rekeyed, not
/// compiled); so does a program compiling the same text under its own
/// kernel names. (A C++ module's id is its backend kernel's `of_file`'s,
/// which a program makes too.)
pub fn base_id(
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

/// Where a backend's batch runs: its target, described, on a device or
/// compile-only.
pub struct Placed<T: CompilationTarget> {
    pub target: T,
    /// The variant its kernels compile to.
    pub variant: VariantOf<T>,
    /// The device, or the compile-only target, in words.
    pub description: String,
    pub on_device: bool,
}

/// Enqueues every kernel `make` makes on a loader over `placed`'s target,
/// compiles them in one batch with a progress bar, and reports.
///
/// The counts come from the loader's cumulative statistics and each
/// failure from its kernel's own load (L7), never from the batch records,
/// which the loader may keep none of (`KILN_RECORD_LIMIT=0`): the kernels
/// `make` makes once are queued (as clones) and then asked for their
/// outcome.
pub fn run<T>(
    backend: &'static str,
    placed: Placed<T>,
    retry_failed: bool,
    progress: Shown,
    make: impl FnOnce() -> Vec<Labelled<KernelOf<T>>>,
) -> (BackendReport, T)
where
    T: CompilationTarget,
    T::Loaded: Reported,
    KernelOf<T>: Sized + Clone,
{
    let Placed {
        target,
        variant,
        description,
        on_device,
    } = placed;
    let config = LoaderConfig::from_env_or_default();
    let config = LoaderConfig {
        retry_failed: config.retry_failed || retry_failed,
        // What a warm builds is no program's run: it keeps no profile.
        profile: false,
        ..config
    };
    let mut loader = KernelLoader::with_config(target, config);
    let kernels = make();
    for (_, kernel) in &kernels {
        loader.enqueue(kernel.clone(), variant.clone());
    }
    // Two identical `specialize` lines make one kernel: the queue holds
    // each once.
    let count = loader.queued_len();
    log::debug!("{backend}: {count} kernels queued");
    let bar = BatchBar::start(backend, count, loader.progress(), progress);
    let started = Instant::now();
    loader.compile_queued();
    let wall = started.elapsed();
    drop(bar);
    log::debug!("{backend}: the batch answered in {wall:?}");
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
    for (label, kernel) in kernels {
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
    log::debug!("{backend}: every kernel's outcome read");
    let report = BackendReport {
        backend,
        target: description,
        architecture: None,
        // KILN_MODE=compile-only makes no device object, even on a device.
        on_device: on_device && !kiln_engine::mode::is_compile_only(),
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
