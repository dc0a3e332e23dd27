//! `kiln warm DIR`: compile every kernel in a folder into the store, one
//! batch per backend, for every backend this machine has.
//!
//! Kernels are found and specialized as [`crate::manifest`] says. Each
//! backend runs on its device when there is one, and compile-only when
//! there is not: naga alone for wgpu (no Vulkan adapter or loader), NVRTC
//! for CUDA (for `--cuda-arch`, the H200's sm_90 by default), hipRTC for HIP
//! (for `--hip-arch`, gfx90a by default). A backend whose compiler is
//! missing is listed with the reason. A second run finds everything in the
//! store.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::Args;
use kiln_core::store::ArtifactStore;
use kiln_core::{
    CompilationTarget, Kernel, KernelId, KernelLoader, KernelOf, KernelOutcome, LoaderConfig,
    VariantOf,
};
use kiln_cuda::{Architecture, CudaKernel, CudaOptions, CudaTarget};
use kiln_hip::{
    GfxArch, HipCompileOnlyTarget, HipDevice, HipKernel, HipOptions, HipSource, HipTarget,
    HipVariant,
};
use kiln_store::DiskStore;
use kiln_wgpu::{WgpuDevice, WgpuTarget, WgpuVariant, WgslKernel};
use serde::Serialize;

use super::Output;
use crate::manifest::{self, KernelFile, Language, Specialization};
use crate::table::Table;

/// `kiln warm DIR`.
#[derive(Debug, Args)]
pub struct Arguments {
    /// The folder of kernels: `*.wgsl`, `*.cu`, `*.hip`, each with a
    /// `// kiln entry: ...` header (see the README).
    pub folder: PathBuf,
    /// The CUDA architecture to compile for when there is no NVIDIA GPU.
    #[arg(long, default_value = "sm_90", value_name = "sm_XX")]
    pub cuda_arch: String,
    /// The AMD architecture to compile for when there is no AMD GPU.
    #[arg(long, default_value = "gfx90a", value_name = "gfxXXX")]
    pub hip_arch: String,
}

/// What one backend did with its kernels.
#[derive(Debug, Serialize)]
struct BackendReport {
    backend: &'static str,
    /// The device, or the compile-only target, it ran on.
    target: String,
    /// Whether kernels were loaded on a device (not compile-only).
    on_device: bool,
    /// Why the backend did not run, when it did not.
    unavailable: Option<String>,
    kernels: usize,
    from_store: usize,
    rekeyed: usize,
    compiled: usize,
    failed: usize,
    workers: usize,
    wall_seconds: f64,
    work_seconds: f64,
    /// How the driver's pipeline cache started (wgpu on a device).
    pipeline_cache: Option<String>,
    failures: Vec<FailureReport>,
}

#[derive(Debug, Serialize)]
struct FailureReport {
    kernel: String,
    /// The failure's first line: the first diagnostic, with its place.
    first_diagnostic: String,
}

/// The whole run, as `--json` prints it.
#[derive(Debug, Serialize)]
struct WarmReport {
    folder: String,
    store: String,
    files: usize,
    backends: Vec<BackendReport>,
}

/// Compiles every kernel of the folder into `store`.
pub fn run(store: &DiskStore, arguments: &Arguments, output: &Output) -> Result<()> {
    let files = manifest::find(&arguments.folder)?;
    if files.is_empty() {
        bail!(
            "no kernels in {}: kiln warm compiles *.wgsl, *.cu and *.hip files",
            arguments.folder.display()
        );
    }
    let shared: Arc<dyn ArtifactStore> = Arc::new(store.clone());
    let of = |language: Language| -> Vec<&KernelFile> {
        files
            .iter()
            .filter(|file| file.language == language)
            .collect()
    };
    let (wgsl, cuda, hip) = (of(Language::Wgsl), of(Language::Cuda), of(Language::Hip));
    let mut backends = Vec::new();
    if !wgsl.is_empty() {
        backends.push(warm_wgpu(&wgsl, &shared));
    }
    if !cuda.is_empty() {
        backends.push(warm_cuda(&cuda, &shared, &arguments.cuda_arch));
    }
    let for_hip: Vec<&KernelFile> = cuda.iter().chain(&hip).copied().collect();
    if !for_hip.is_empty() {
        backends.push(warm_hip(&for_hip, &shared, &arguments.hip_arch));
    }
    let report = WarmReport {
        folder: arguments.folder.display().to_string(),
        store: store.root().display().to_string(),
        files: files.len(),
        backends,
    };
    output.print(&report, || print_report(&report))?;
    let failed: usize = report.backends.iter().map(|backend| backend.failed).sum();
    if failed > 0 {
        bail!("{failed} kernels failed");
    }
    Ok(())
}

fn print_report(report: &WarmReport) {
    let kernels: usize = report.backends.iter().map(|backend| backend.kernels).sum();
    println!(
        "{} files, {kernels} kernels in {}; store {}",
        report.files, report.folder, report.store
    );
    let mut table = Table::new(&[
        "BACKEND",
        "TARGET",
        "KERNELS>",
        "FROM STORE>",
        "REKEYED>",
        "COMPILED>",
        "FAILED>",
        "WALL>",
        "SUMMED WORK>",
    ]);
    for backend in &report.backends {
        if let Some(reason) = &backend.unavailable {
            table.row(vec![
                backend.backend.to_owned(),
                format!("unavailable: {}", short(reason)),
                backend.kernels.to_string(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ]);
            continue;
        }
        table.row(vec![
            backend.backend.to_owned(),
            backend.target.clone(),
            backend.kernels.to_string(),
            backend.from_store.to_string(),
            backend.rekeyed.to_string(),
            backend.compiled.to_string(),
            backend.failed.to_string(),
            seconds(backend.wall_seconds),
            format!(
                "{} on {} worker{}",
                seconds(backend.work_seconds),
                backend.workers,
                if backend.workers == 1 { "" } else { "s" }
            ),
        ]);
    }
    table.print();
    for backend in &report.backends {
        if let Some(reason) = backend
            .unavailable
            .as_ref()
            .filter(|reason| short(reason) != **reason)
        {
            println!("{} unavailable: {reason}", backend.backend);
        }
        if let Some(cache) = &backend.pipeline_cache {
            println!("{} pipeline cache: {cache}", backend.backend);
        }
        for failure in &backend.failures {
            println!(
                "{} failed: {}: {}",
                backend.backend, failure.kernel, failure.first_diagnostic
            );
        }
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

fn seconds(value: f64) -> String {
    if value < 1.0 {
        format!("{:.0} ms", value * 1e3)
    } else {
        format!("{value:.2} s")
    }
}

/// A report of a backend that could not run.
fn unavailable(backend: &'static str, kernels: usize, reason: String) -> BackendReport {
    BackendReport {
        backend,
        target: String::new(),
        on_device: false,
        unavailable: Some(reason),
        kernels,
        from_store: 0,
        rekeyed: 0,
        compiled: 0,
        failed: 0,
        workers: 0,
        wall_seconds: 0.0,
        work_seconds: 0.0,
        pipeline_cache: None,
        failures: Vec::new(),
    }
}

/// A kernel to warm: its label and the kernel.
type Labelled<K> = (String, Box<K>);

/// Every kernel of `files`, made by `make(file, specialization, counter)`.
fn kernels_of<K>(
    files: &[&KernelFile],
    mut make: impl FnMut(&KernelFile, &Specialization) -> K,
) -> Vec<Labelled<K>> {
    files
        .iter()
        .flat_map(|file| {
            file.specializations
                .iter()
                .map(|specialization| {
                    (
                        file.label(specialization),
                        Box::new(make(file, specialization)),
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The id every backend's kernel of `file` and `specialization` starts from:
/// the file's name, the specialization and the text.
fn base_id(file: &KernelFile, specialization: &Specialization) -> kiln_core::KernelIdBuilder {
    KernelId::named(format!("warm/{}", file.name))
        .parameter(&specialization.to_string())
        .bytes(file.text.as_bytes())
}

/// Enqueues every kernel on a loader over `target`, compiles them in one
/// batch with a progress bar, and reports.
fn warm_batch<T>(
    backend: &'static str,
    description: String,
    on_device: bool,
    target: T,
    variant: &VariantOf<T>,
    kernels: Vec<Labelled<KernelOf<T>>>,
    generated: &Arc<AtomicUsize>,
) -> (BackendReport, T)
where
    T: CompilationTarget,
    KernelOf<T>: Sized,
{
    let mut loader = KernelLoader::with_config(target, LoaderConfig::from_env_or_default());
    let mut labels: HashMap<KernelId, String> = HashMap::new();
    let count = kernels.len();
    for (label, kernel) in kernels {
        labels.insert(kernel.id(), label);
        loader.enqueue(kernel, variant.clone());
    }
    let bar = Bar::start(backend, count, Arc::clone(generated));
    let started = Instant::now();
    loader.compile_queued();
    let wall = started.elapsed();
    drop(bar);
    let mut report = BackendReport {
        backend,
        target: description,
        on_device,
        unavailable: None,
        kernels: count,
        from_store: 0,
        rekeyed: 0,
        compiled: 0,
        failed: 0,
        workers: 0,
        wall_seconds: wall.as_secs_f64(),
        work_seconds: 0.0,
        pipeline_cache: None,
        failures: Vec::new(),
    };
    if let Some(batch) = loader.records().back() {
        report.from_store = batch.count(KernelOutcome::FromStore);
        report.rekeyed = batch.count(KernelOutcome::Rekeyed);
        report.compiled = batch.count(KernelOutcome::Compiled);
        report.failed = batch.count(KernelOutcome::Failed) + batch.count(KernelOutcome::Refused);
        report.workers = batch.workers;
        report.work_seconds = batch.summed_work().as_secs_f64();
        for record in &batch.records {
            if let Some(error) = &record.error {
                report.failures.push(FailureReport {
                    kernel: labels
                        .get(&record.kernel)
                        .cloned()
                        .unwrap_or_else(|| record.kernel.to_string()),
                    first_diagnostic: error.lines().next().unwrap_or_default().to_owned(),
                });
            }
        }
    }
    (report, loader.into_target())
}

fn warm_wgpu(files: &[&KernelFile], store: &Arc<dyn ArtifactStore>) -> BackendReport {
    let generated = Arc::new(AtomicUsize::new(0));
    let kernels = kernels_of(files, |file, specialization| {
        let mut builder = WgslKernel::builder(base_id(file, specialization), file.entry.clone())
            .label(file.name.clone());
        for (name, value) in &specialization.0 {
            // A value that is not a number is passed as NaN: naga then
            // refuses it for this kernel alone, naming the constant.
            builder = builder.constant(name.clone(), value.parse().unwrap_or(f64::NAN));
        }
        let text = file.text.clone();
        let counter = Arc::clone(&generated);
        builder.generator(move || {
            counter.fetch_add(1, Ordering::Relaxed);
            Ok(text.clone())
        })
    });
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
    let target = target.with_store(Arc::clone(store));
    let (mut report, target) = warm_batch(
        "wgpu",
        description,
        on_device,
        target,
        &WgpuVariant,
        kernels,
        &generated,
    );
    if on_device {
        report.pipeline_cache = Some(target.pipeline_cache_state().to_string());
    }
    report
}

fn warm_cuda(files: &[&KernelFile], store: &Arc<dyn ArtifactStore>, arch: &str) -> BackendReport {
    let count = files.iter().map(|file| file.specializations.len()).sum();
    let (target, description, on_device) = match CudaTarget::on_device(0) {
        Ok(target) => {
            let name = target
                .device()
                .map(|device| device.name().to_owned())
                .unwrap_or_default();
            let description = format!("{name} {}", target.architecture());
            (target, description, true)
        }
        Err(device_error) => {
            let architecture: Architecture = match arch.parse() {
                Ok(architecture) => architecture,
                Err(error) => return unavailable("cuda", count, error.to_string()),
            };
            match CudaTarget::compile_only(architecture) {
                Ok(target) => {
                    log::info!("cuda: {device_error}; compiling only");
                    let description = format!(
                        "compile-only: {architecture}, nvrtc {}",
                        target.compiler().version()
                    );
                    (target, description, false)
                }
                Err(error) => return unavailable("cuda", count, error.to_string()),
            }
        }
    };
    let generated = Arc::new(AtomicUsize::new(0));
    let kernels = kernels_of(files, |file, specialization| {
        let mut options = CudaOptions::default();
        for (name, value) in &specialization.0 {
            options = options.define(name.clone(), value.clone());
        }
        let text = file.text.clone();
        let counter = Arc::clone(&generated);
        CudaKernel::builder(base_id(file, specialization), file.entry.clone())
            .program_name(file.name.clone())
            .options(options)
            .generator(move |_architecture| {
                counter.fetch_add(1, Ordering::Relaxed);
                Ok(text.clone())
            })
    });
    let target = target.with_store(Arc::clone(store));
    let variant = target.variant();
    warm_batch(
        "cuda",
        description,
        on_device,
        target,
        &variant,
        kernels,
        &generated,
    )
    .0
}

fn warm_hip(files: &[&KernelFile], store: &Arc<dyn ArtifactStore>, arch: &str) -> BackendReport {
    let count = files.iter().map(|file| file.specializations.len()).sum();
    let generated = Arc::new(AtomicUsize::new(0));
    let kernels = kernels_of(files, |file, specialization| {
        let mut options = HipOptions::default();
        for (name, value) in &specialization.0 {
            options = options.define(name.clone(), value.clone());
        }
        let text = file.text.clone();
        let counter = Arc::clone(&generated);
        HipKernel::new(
            base_id(file, specialization).build(),
            file.entry.clone(),
            HipSource::generated(move |_variant| {
                counter.fetch_add(1, Ordering::Relaxed);
                Ok(text.clone())
            }),
        )
        .with_options(options)
    });
    if let Some(target) = HipDevice::open(0)
        .ok()
        .and_then(|device| HipTarget::new(device).ok())
    {
        let description = format!("AMD GPU {}", target.variant().arch);
        let target = target.with_store(Arc::clone(store));
        let variant = target.variant();
        return warm_batch(
            "hip",
            description,
            true,
            target,
            &variant,
            kernels,
            &generated,
        )
        .0;
    }
    let arch = match GfxArch::new(arch) {
        Ok(arch) => arch,
        Err(error) => return unavailable("hip", count, error.to_string()),
    };
    let target = match HipCompileOnlyTarget::open() {
        Ok(target) => target,
        Err(error) => return unavailable("hip", count, error.to_string()),
    };
    let description = format!(
        "compile-only: {arch}, hiprtc {}",
        target.compiler().identity().hiprtc_version
    );
    let target = target.with_store(Arc::clone(store), arch.clone());
    warm_batch(
        "hip",
        description,
        false,
        target,
        &HipVariant::new(arch),
        kernels,
        &generated,
    )
    .0
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
    fn start(label: &'static str, total: usize, done: Arc<AtomicUsize>) -> Self {
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
                    eprint!(
                        "\r\x1b[2Kwarm {label}: [{}{}] {done}/{total} compiling",
                        "#".repeat(filled),
                        "-".repeat(width - filled)
                    );
                    let _ = std::io::stderr().flush();
                    drawn = true;
                }
                if drawn {
                    eprint!("\r\x1b[2K");
                    let _ = std::io::stderr().flush();
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
