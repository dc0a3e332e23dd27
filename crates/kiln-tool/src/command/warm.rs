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

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use clap::Args;
use clap::builder::PossibleValuesParser;
use kiln_engine::store::ArtifactStore;
use kiln_store::DiskStore;
use serde::Serialize;

use crate::backend::{self, BackendReport, Job, wgpu_early};
use crate::console::errln;
use crate::exit::{self, Exit};
use crate::format::count;
use crate::manifest::{self, KernelFile};
use crate::output::Output;
use crate::progress::Shown;

mod print;
mod profile;

/// `kiln warm DIR`.
#[derive(Debug, Args)]
pub struct Arguments {
    /// The folder of kernels: `*.wgsl`, `*.cu`, `*.hip`, each with a
    /// `// kiln entry: ...` header, and `*.spv` SPIR-V modules with theirs
    /// in `NAME.spv.kiln`.
    #[arg(required_unless_present = "profile", conflicts_with = "profile")]
    pub folder: Option<PathBuf>,
    /// Prebuild what the warm-start profiles of PROGRAM (`kiln profiles`
    /// lists them) say it loaded last time, for this machine's compilers,
    /// instead of a folder: each kernel the store holds for them already,
    /// or holds another compiler's artifact of with its recipe. The report
    /// names every kernel that could not be prebuilt, and why.
    #[arg(long, value_name = "PROGRAM")]
    pub profile: Option<String>,
    /// The backends to run, comma-separated (wgpu, cuda, hip); default:
    /// every backend the folder has kernels for.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "BACKEND,...",
        value_parser = PossibleValuesParser::new(backend::names())
    )]
    pub backend: Vec<String>,
    #[command(flatten)]
    pub architectures: backend::Architectures,
    /// Backends that must run: one of them unavailable (its compiler
    /// missing) fails the run with exit code 4 instead of a note.
    /// Comma-separated; a backend without kernels in the folder is not
    /// run and so never unavailable.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "BACKEND,...",
        value_parser = PossibleValuesParser::new(backend::names())
    )]
    pub require: Vec<String>,
    /// Compile again the kernels whose failure the store remembers,
    /// instead of reporting the remembered failure without compiling; each
    /// one that compiles is forgotten. `kiln forget KERNEL` forgets one
    /// without compiling.
    #[arg(
        long,
        env = "KILN_RETRY_FAILED",
        hide_env_values = true,
        value_parser = switch
    )]
    pub retry_failed: bool,
    #[command(flatten)]
    pub remote: crate::remote::RemoteUrl,
    /// An include folder for the CUDA and HIP kernels (repeatable),
    /// searched after the including file's folder and its header's
    /// `// kiln include:` folders, before the CUDA toolkit's. kiln reads
    /// every header itself and keys its text.
    #[arg(long = "include", value_name = "DIR")]
    pub include: Vec<PathBuf>,
    /// Let the CUDA and HIP kernels' includes reach files outside the
    /// folder warmed and the include folders (refused by default, unread).
    #[arg(long)]
    pub allow_outside_includes: bool,
    /// Let --backend override a file's `// kiln backends:` line, which
    /// otherwise wins.
    #[arg(long)]
    pub force: bool,
    /// How each batch's progress shows on standard error: `auto`, a bar
    /// with the kernels done, their rate and the time left, on a terminal
    /// only; `plain`, a line each time the count of kernels done changes
    /// (for logs); `never`.
    #[arg(long, value_enum, default_value_t, value_name = "WHEN")]
    pub progress: Shown,
}

impl Arguments {
    /// Whether `backend` is to run.
    fn wants(&self, backend: &str) -> bool {
        self.backend.is_empty() || self.backend.iter().any(|wanted| wanted == backend)
    }

    /// Checks the architectures and that every required backend is
    /// selected, before anything compiles.
    fn check(&self) -> Result<()> {
        let usage = |message: String| Exit::new(exit::USAGE, message);
        for backend in backend::ALL {
            for arch in backend.asked_architectures(&self.architectures) {
                backend.check_architecture(arch).map_err(|error| {
                    usage(format!(
                        "{}: {error}",
                        backend.architecture_option().unwrap_or("--arch")
                    ))
                })?;
            }
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
    // A target made before its store is given one opens the process's
    // default store first: with `--dir`, that is the store named, so no
    // other store is touched (made, or warned about when it cannot be).
    if let Some(dir) = dir {
        // SAFETY: the command has started no thread yet: nothing reads
        // the environment while it changes.
        unsafe { std::env::set_var("KILN_CACHE_DIR", dir) };
    }
    let folder = match (&arguments.folder, &arguments.profile) {
        (_, Some(program)) => {
            return profile::run(dir, program, arguments.remote.url.as_deref(), output);
        }
        (Some(folder), None) => folder,
        (None, None) => {
            return Err(Exit::new(
                exit::USAGE,
                "give a folder of kernels, or --profile PROGRAM",
            )
            .into());
        }
    };
    let found = manifest::find(folder)?;
    log::debug!("warm: {} kernel files read", found.files.len());
    // When the wgpu backend will run, its device opens beside the store's
    // opening, the workers' start and the backends before it, off the
    // batch's critical path; the guard joins its thread however the run
    // ends. A run without wgpu opens none.
    let _opened =
        wgpu_early::start(arguments.wants("wgpu") && wgpu_takes_any(arguments, &found.files));
    if found.files.is_empty() && found.failed.is_empty() {
        bail!(
            "no kernels in {}: kiln warm compiles *.wgsl, *.spv, *.cu and *.hip files",
            folder.display()
        );
    }
    let store = super::open_store_to_fill(dir)?;
    log::debug!("warm: store opened");
    // A store found read-only says so itself, through the logger.
    if let Err(reason) = &store {
        errln!("kiln: warning: {reason}; compiling without a store");
        // Said once: the process's default store (which a target made
        // before it is given none, or a worker process, would open) is off.
        // The device opening early reads the environment: it finishes first.
        wgpu_early::settle();
        // SAFETY: a store that could not open started no thread, and this
        // command's own thread has finished.
        unsafe { std::env::set_var("KILN_CACHE_DISABLE", "1") };
    }
    // The tiers as a program opens them: one reading of the remote
    // tier's URL and keys, with the disk store this command found.
    let url = arguments.remote.url.as_deref();
    let tiers = match &store {
        Ok(disk) => Some(kiln::Store::tiers(disk.clone(), url)?),
        Err(_) => {
            if kiln::Store::fleet_from_env(url)?.is_some() {
                errln!("kiln: warning: no local store, so the remote tier is not used this run");
            }
            None
        }
    };
    let shared = tiers.as_ref().map(kiln::Tiers::shared);
    let tiered = tiers.as_ref().and_then(kiln::Tiers::fleet);
    let files = &found.files;
    let mut backends = Vec::new();
    for backend in backend::ALL {
        let name = backend.name();
        let asked = arguments.backend.iter().any(|wanted| wanted == name);
        // A file's `backends` line wins over --backend, but for --force.
        let taken: Vec<&KernelFile> = files
            .iter()
            .filter(|file| {
                backend.takes(file, asked && (arguments.force || file.backends.is_none()))
            })
            .collect();
        if taken.is_empty() || !arguments.wants(name) {
            continue;
        }
        // Each architecture asked for is a batch of its own; none asked is
        // the device's, else the default.
        let asked_architectures = backend.asked_architectures(&arguments.architectures);
        let architectures: Vec<Option<&str>> = if asked_architectures.is_empty() {
            vec![None]
        } else {
            asked_architectures
                .iter()
                .map(|arch| Some(arch.as_str()))
                .collect()
        };
        if name == "wgpu" {
            // On an empty store with no remote tier every kernel compiles:
            // the workers start while the device finishes opening.
            let kernels = taken
                .iter()
                .map(|file| file.entries.len() * file.specializations.len().max(1))
                .sum();
            let cold = tiered.is_none()
                && !arguments.retry_failed
                && store
                    .as_ref()
                    .is_ok_and(|store| !store.is_read_only() && store.usage().entries == 0);
            wgpu_early::start_workers(kernels, cold);
        }
        for architecture in architectures {
            backends.push(backend.warm(&Job {
                files: taken.clone(),
                store: shared.clone(),
                architecture,
                include: &arguments.include,
                tree: folder,
                outside_includes: arguments.allow_outside_includes,
                retry_failed: arguments.retry_failed,
                progress: arguments.progress,
            }));
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
        folder: folder.display().to_string(),
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
    output.print(&report, || print::report(&report))?;
    let missing: Vec<String> = report
        .backends
        .iter()
        .filter(|backend| arguments.require.iter().any(|name| name == backend.backend))
        .filter_map(|backend| {
            let reason = backend.unavailable.as_ref()?;
            Some(format!("{}: {}", backend.backend, print::short(reason)))
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
        (kernels, 0) => format!("{} failed", count(kernels, "kernel")),
        (0, files) => format!("{} failed", count(files as u64, "kernel file")),
        (kernels, files) => format!(
            "{} and {} failed",
            count(kernels, "kernel"),
            count(files as u64, "kernel file")
        ),
    };
    Err(Exit::new(exit::KERNELS_FAILED, message).reported().into())
}

/// Whether the wgpu backend takes one of `files`, as the run's loop asks.
fn wgpu_takes_any(arguments: &Arguments, files: &[KernelFile]) -> bool {
    let asked = arguments.backend.iter().any(|wanted| wanted == "wgpu");
    backend::ALL
        .iter()
        .filter(|backend| backend.name() == "wgpu")
        .any(|backend| {
            files.iter().any(|file| {
                backend.takes(file, asked && (arguments.force || file.backends.is_none()))
            })
        })
}

/// `KILN_RETRY_FAILED`'s value (`--retry-failed` alone is `true`), read
/// as a program's loader reads it: `1` or `true` on, `0`, `false` or empty
/// off.
fn switch(value: &str) -> Result<bool, String> {
    match value.trim() {
        "1" | "true" => Ok(true),
        "0" | "false" | "" => Ok(false),
        _ => Err("expected 1, true, 0 or false".to_owned()),
    }
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
