//! The one `kiln warm` path of the C++ backends (CUDA, HIP): a module per
//! file and specialization holding every entry (B6), its includes read by
//! kiln (P13), its header's options and defines; on the device when there
//! is one of the architecture asked for, else compile-only. What differs
//! between them is the [`Cxx`] each backend's file implements.

use std::fmt::Display;
use std::path::PathBuf;
use std::sync::Arc;

use kiln_engine::store::ArtifactStore;
use kiln_engine::{
    CompilationTarget, CompileFailure, KernelIdBuilder, KernelOf, Reported, VariantOf,
};

use super::Job;
use super::batch::{self, BackendReport, Placed};
use crate::manifest::KernelFile;

/// What a C++ backend gives the shared path.
pub trait Cxx {
    /// The backend's name.
    const NAME: &'static str;
    /// The architecture compiled for when none is asked and there is no
    /// device.
    const DEFAULT_ARCHITECTURE: &'static str;

    type Architecture: Clone + PartialEq + Display;
    type Target: CompilationTarget<Loaded: Reported>;
    type Options: Clone;
    /// The builder of one module.
    type Builder;

    /// The architecture `text` names.
    fn architecture(text: &str) -> Result<Self::Architecture, String>;
    /// The first device, and its architecture.
    fn on_device() -> Result<(Self::Target, Self::Architecture), String>;
    /// The device in words.
    fn describe_device(target: &Self::Target) -> String;
    /// A compile-only target for `architecture`, described in words.
    fn compile_only(architecture: Self::Architecture) -> Result<(Self::Target, String), String>;
    /// `target` on `store`, or on none at all (not even a default store).
    fn with_store(target: Self::Target, store: Option<Arc<dyn ArtifactStore>>) -> Self::Target;
    /// The variant `target` compiles to.
    fn variant(target: &Self::Target) -> VariantOf<Self::Target>;
    /// The toolkit's include folders angle includes fall back to.
    fn toolkit() -> Vec<PathBuf> {
        Vec::new()
    }
    /// Sets an include search up for the backend's compiler: its toolkit,
    /// its own headers and its stand-ins.
    fn prepare(search: &mut kiln_cxx::IncludeSearch);
    /// The options a file's `// kiln options:` lines give.
    fn options(lines: &[String]) -> Result<Self::Options, String>;
    /// `options` with the macro `name` defined as `value`.
    fn define(options: Self::Options, name: &str, value: &str) -> Self::Options;
    /// A module of `first`, under `id`, for the program `name`.
    fn builder(id: KernelIdBuilder, first: &str, name: &str) -> Self::Builder;
    /// `builder` with one more entry.
    fn entry(builder: Self::Builder, entry: &str) -> Self::Builder;
    /// `builder` compiled with `options`.
    fn with_options(builder: Self::Builder, options: Self::Options) -> Self::Builder;
    /// `builder` with `header` to include.
    fn with_header(builder: Self::Builder, header: &kiln_cxx::Header) -> Self::Builder;
    /// The module, its text given by `source`.
    fn finish(builder: Self::Builder, source: Source) -> KernelOf<Self::Target>;
}

/// What a module compiles: the file's text, or why it fails without
/// compiling (its setup failed: never remembered, P11, so fixing it
/// compiles at once).
#[derive(Clone)]
pub struct Source(Result<Arc<str>, String>);

impl Source {
    /// The text, as a generator answers.
    pub fn text(&self) -> Result<String, CompileFailure> {
        match &self.0 {
            Ok(text) => Ok(text.to_string()),
            Err(reason) => Err(CompileFailure::message(reason.clone()).not_the_kernels()),
        }
    }
}

/// What a file needs beyond its text, once per file and backend: the
/// headers its includes reach (P13) and its options; or why the file's
/// kernels fail without compiling.
type Prepared<O> = Result<(Vec<kiln_cxx::Header>, O), String>;

/// Warms `job` for the C++ backend `B`: on its GPU when there is one of
/// the architecture asked for (of any when none is), else compile-only for
/// it (`B::DEFAULT_ARCHITECTURE` when none is).
pub fn warm<B: Cxx>(job: &Job<'_>) -> BackendReport
where
    KernelOf<B::Target>: Sized,
{
    let count = batch::module_count(&job.files);
    let text = job.architecture.unwrap_or(B::DEFAULT_ARCHITECTURE);
    let unavailable = |reason: String| batch::unavailable(B::NAME, Some(text), count, reason);
    let architecture = match B::architecture(text) {
        Ok(architecture) => architecture,
        Err(error) => return unavailable(error),
    };
    let device = match B::on_device() {
        Ok((target, found)) if job.architecture.is_none() || found == architecture => {
            Ok((target, found))
        }
        Ok((_, found)) => Err(format!("the GPU is {found}")),
        Err(error) => Err(error),
    };
    let (target, architecture, description, on_device) = match device {
        Ok((target, found)) => {
            let description = B::describe_device(&target);
            (target, found, description, true)
        }
        Err(device_error) => match B::compile_only(architecture.clone()) {
            Ok((target, description)) => {
                log::info!(
                    "{}: {device_error}; compiling only for {architecture}",
                    B::NAME
                );
                (target, architecture, description, false)
            }
            Err(error) => return unavailable(error),
        },
    };
    log::debug!("{}: the target is ready", B::NAME);
    let toolkit = B::toolkit();
    let prepared: Vec<Prepared<B::Options>> = job
        .files
        .iter()
        .map(|file| {
            let mut search = search_of(file, job);
            B::prepare(&mut search);
            let headers = search
                .resolve(&file.source, &file.name, &[])
                .map_err(|error| error.to_string())?;
            Ok((headers, B::options(&file.options)?))
        })
        .collect();
    let make = || {
        batch::modules_of(&job.files, |index, file, specialization| {
            // One compile of the file per specialization, one module of
            // every entry (B6).
            let entries = file.entries.join(",");
            let first = file.entries.first().cloned().unwrap_or_default();
            let builder = file.entries.iter().skip(1).fold(
                B::builder(
                    batch::base_id(file, &entries, specialization),
                    &first,
                    &file.name,
                ),
                |builder, entry| B::entry(builder, entry),
            );
            let (headers, options) = match &prepared[index] {
                Ok(prepared) => prepared,
                Err(reason) => return B::finish(builder, Source(Err(reason.clone()))),
            };
            // Only ever a definition: the header's names are identifiers,
            // and a value is the macro's text.
            let options = file
                .defines
                .iter()
                .chain(&specialization.0)
                .fold(options.clone(), |options, (name, value)| {
                    B::define(options, name, value)
                });
            let builder = headers
                .iter()
                .fold(B::with_options(builder, options), B::with_header);
            B::finish(builder, Source(Ok(Arc::clone(&file.source))))
        })
    };
    let target = B::with_store(target, job.store.clone());
    let placed = Placed {
        variant: B::variant(&target),
        target,
        description,
        on_device,
    };
    let mut report = batch::run(B::NAME, placed, job.retry_failed, job.progress, make).0;
    report.architecture = Some(architecture.to_string());
    report.toolkit_headers = toolkit
        .iter()
        .map(|folder| folder.display().to_string())
        .collect();
    report
}

/// The include search of `file`: its folder, its header's folders, then
/// `--include`'s; its tree the folder warmed.
fn search_of(file: &KernelFile, job: &Job<'_>) -> kiln_cxx::IncludeSearch {
    kiln_cxx::IncludeSearch {
        source_folder: Some(file.folder.clone()),
        folders: file.includes.iter().chain(job.include).cloned().collect(),
        stdlib_off: !file.stdlib,
        tree: Some(job.tree.to_path_buf()),
        outside_allowed: job.outside_includes,
        ..kiln_cxx::IncludeSearch::default()
    }
}
