//! The one `kiln warm` path of the C++ backends (CUDA, HIP): a module per
//! file and specialization holding every entry (B6), its includes read by
//! kiln (P13), its header's options and defines; on the device when there
//! is one of the architecture asked for, else compile-only. What differs
//! between them is the [`CxxBackend`] each backend crate implements, and
//! the allow-list of options each backend's file gives.

use std::sync::Arc;

use kiln_cxx::{CxxBackend, CxxKernelBuilder};
use kiln_engine::store::ReadAhead;
use kiln_engine::{ArtifactCompiler, CompilationTarget, Kernel, KernelOf, Reported};

use super::Job;
use super::batch::{self, BackendReport, Placed};

/// The options a file's `// kiln options:` lines give, from the
/// backend's allow-list (`backend/options.rs`).
pub type OptionsOf<B> = fn(&[String]) -> Result<<B as CxxBackend>::Options, String>;

/// Warms `job` for the C++ backend `B`: on its GPU when there is one of
/// the architecture asked for (of any when none is), else compile-only for
/// it (`B::DEFAULT_ARCHITECTURE` when none is). Each module is built as a
/// program builds it from the same file (`B::of_file`, `.source`), so a
/// program doing so finds it by id (L11).
pub fn warm<B: CxxBackend>(job: &Job<'_>, options_of: OptionsOf<B>) -> BackendReport
where
    <B::Target as kiln_engine::CompilationTarget>::Loaded: Reported,
    KernelOf<B::Target>: Sized + Clone + Send,
    B::Architecture: Send,
    B::Options: Sync,
{
    let count = batch::module_count(&job.files);
    let text = job.architecture.unwrap_or(B::DEFAULT_ARCHITECTURE);
    let unavailable = |reason: String| batch::unavailable(B::NAME, Some(text), count, reason);
    let architecture = match B::architecture(text) {
        Ok(architecture) => architecture,
        Err(error) => return unavailable(error),
    };
    // Once per file: a refused option fails the file's modules without
    // compiling (never remembered, P11, so fixing it compiles at once).
    let options: Vec<Result<B::Options, String>> = job
        .files
        .iter()
        .map(|file| options_of(&file.options))
        .collect();
    // A file's specializations share its text and folders: its headers
    // are read and scanned once for all of them (the ids are the same).
    let includes = kiln_cxx::IncludeCache::new();
    let make = || {
        batch::modules_of(&job.files, |index, file, specialization| {
            // One compile of the file per specialization, one module of
            // every entry (B6), built as a program builds it.
            let mut entries = file.entries.iter().map(String::as_str);
            let first = entries.next().unwrap_or_default();
            let builder = entries.fold(B::of_file(&file.name, first), B::Builder::entry);
            let options = match &options[index] {
                Ok(options) => options,
                Err(reason) => return builder.failing(reason.clone()),
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
            // Its includes as a compiler looks for them: beside the file,
            // in its header's folders, then `--include`'s; its tree the
            // folder warmed (P13); read once per file.
            file.includes
                .iter()
                .chain(job.include)
                .fold(
                    builder.options(options).source_folder(file.folder.clone()),
                    |builder, folder| builder.include_folder(folder.clone()),
                )
                .include_tree(job.tree.to_path_buf())
                .includes_outside_tree(job.outside_includes)
                .standard_headers(file.stdlib)
                .include_cache(&includes)
                .source(Arc::clone(&file.source))
        })
    };
    // F5, F11: the architecture is known before the device's context when
    // it is asked for or the driver says it; then the kernels are made
    // and read from the store on a thread of their own while the context
    // is made, and the compile workers started when some are missing.
    let early = if kiln_engine::mode::is_compile_only() {
        None
    } else if job.architecture.is_some() {
        Some(architecture.clone())
    } else {
        B::device_architecture(0)
    };
    let (placed, ahead) = std::thread::scope(|scope| {
        let reading = early
            .clone()
            .zip(job.store.clone())
            .map(|(early, store)| scope.spawn(|| read_ahead::<B>(early, store, make())));
        let device = match B::on_device(0) {
            Ok(target) => {
                let found = B::architecture_of(&target);
                if job.architecture.is_none() || found == architecture {
                    Ok(target)
                } else {
                    Err(format!("the GPU is {found}"))
                }
            }
            Err(error) => Err(error.to_string()),
        };
        let placed = match device {
            Ok(target) => Ok((target, true)),
            Err(device_error) => match B::compile_only(architecture.clone()) {
                Ok(target) => {
                    log::info!(
                        "{}: {device_error}; compiling only for {architecture}",
                        B::NAME
                    );
                    Ok((target, false))
                }
                Err(error) => Err(error.to_string()),
            },
        };
        let ahead = reading.and_then(|reading| reading.join().ok());
        (placed, ahead)
    });
    let (target, on_device) = match placed {
        Ok(placed) => placed,
        Err(reason) => return unavailable(reason),
    };
    let architecture = B::architecture_of(&target);
    let description = B::describe(&target);
    log::debug!("{}: the target is ready", B::NAME);
    let toolkit = B::toolkit_folders();
    // What was read ahead serves the batch when the device is of the
    // architecture read for.
    let (kernels, ahead) = match ahead {
        Some((kernels, ahead)) => {
            let ahead = ahead.filter(|_| early.as_ref() == Some(&B::architecture_of(&target)));
            (Some(kernels), ahead)
        }
        None => (None, None),
    };
    let store = match &ahead {
        Some(ahead) => Some(Arc::clone(ahead) as Arc<dyn kiln_engine::ArtifactStore>),
        None => job.store.clone(),
    };
    let target = B::with_store(target, store);
    let placed = Placed {
        variant: B::variant(&target),
        target,
        description,
        on_device,
    };
    let mut report = batch::run(B::NAME, placed, job.retry_failed, job.progress, || {
        kernels.unwrap_or_else(make)
    })
    .0;
    if let Some(ahead) = ahead {
        log::debug!(
            "{}: {} kernels read ahead were not asked for",
            B::NAME,
            ahead.untaken()
        );
    }
    report.architecture = Some(architecture.to_string());
    report.toolkit_headers = toolkit
        .iter()
        .map(|folder| folder.display().to_string())
        .collect();
    report
}

/// The modules of a batch of backend `B`, each with its label.
type Modules<B> = Vec<batch::Labelled<KernelOf<<B as CxxBackend>::Target>>>;

/// Reads `kernels` of `architecture` from `store` before the device is
/// ready ([`ReadAhead`]) and starts the compile workers for the ones missing;
/// hands the kernels back, with the answers when the compiler opened.
fn read_ahead<B: CxxBackend>(
    architecture: B::Architecture,
    store: Arc<dyn kiln_engine::ArtifactStore>,
    kernels: Modules<B>,
) -> (Modules<B>, Option<Arc<ReadAhead>>) {
    let target = match B::compile_only(architecture) {
        Ok(target) => target,
        Err(error) => {
            log::debug!("{}: nothing read ahead: {error}", B::NAME);
            return (kernels, None);
        }
    };
    let variant = B::variant(&target);
    let ids: Vec<_> = kernels
        .iter()
        .map(|(_, kernel)| kiln_engine::ArtifactId::new(kernel.id(), variant.clone()))
        .collect();
    let ahead = ReadAhead::read_now(store, &**target.compiler(), &ids);
    let missing = ahead.missing();
    log::debug!(
        "{}: {} of {} kernels read ahead of the device",
        B::NAME,
        ids.len() - missing,
        ids.len()
    );
    if missing > 0
        && let Some(recipe) = target.compiler().worker_recipe()
    {
        let parallelism = kiln_engine::LoaderConfig::from_env_or_default().parallelism;
        kiln_engine::worker::start_early(recipe, parallelism.get().min(missing));
    }
    (kernels, Some(ahead))
}
