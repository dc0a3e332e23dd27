//! Where a batch finalizes: the compiler in this process, or its worker
//! processes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::compiler::Finalized;
use crate::diagnostic::CompileFailure;
use crate::error::{Failure, KernelError, Stage};
use crate::id::ArtifactId;
use crate::store::Recipe;
use crate::target::{ArtifactOf, CompilationTarget, LoweredOf, VariantOf};
use crate::worker::{self, Blame, Outcome, ProcessPool, WorkerLost};

/// Where a batch finalizes: the compiler in this process, or its worker
/// processes.
pub(super) struct Finalizer<'p, T: CompilationTarget> {
    pub(super) compiler: &'p T::Compiler,
    pub(super) processes: Option<&'p ProcessPool>,
    /// Whether any kernel of the batch was finalized in a worker process.
    pub(super) used_processes: &'p AtomicBool,
    /// Whether the batch keeps what each kernel was finalized from after
    /// its artifact in the store.
    pub(super) keep_recipes: bool,
}

/// Where a kernel was finalized: the answer of
/// [`Finalizer::in_process_or_worker`].
pub(super) enum Finalize<T: CompilationTarget> {
    /// In a worker process.
    InWorker {
        /// Its artifact, or its failure.
        result: Result<Finalized<ArtifactOf<T>>, KernelError>,
        /// The worker's own measure of the compile, when it answered.
        work: Option<Duration>,
        /// Whose doing it was, when the worker was lost (it crashed or was
        /// killed at the timeout, P11).
        lost: Option<Blame>,
    },
    /// Not in a worker process: to finalize here, from what it was given.
    Here(LoweredOf<T>),
}

impl<T: CompilationTarget> Finalizer<'_, T> {
    /// Finalizes `lowered` in a worker process, or gives it back to be
    /// finalized here: no worker processes, or none could start.
    pub(super) fn in_process_or_worker(
        &self,
        id: &ArtifactId<VariantOf<T>>,
        lowered: LoweredOf<T>,
        encoded: Option<Recipe>,
    ) -> Finalize<T> {
        let Some(pool) = self.processes else {
            return Finalize::Here(lowered);
        };
        let Some(Recipe {
            id: id_bytes,
            lowered: lowered_bytes,
        }) = encoded
        else {
            log::warn!("{id} does not serialize for a worker process; finalizing it here");
            return Finalize::Here(lowered);
        };
        let kernel_error = |failure: Failure| KernelError {
            kernel: id.kernel.clone(),
            stage: Stage::Finalize,
            failure,
        };
        match pool.finalize(id_bytes, lowered_bytes) {
            Ok((outcome, work)) => {
                self.used_processes.store(true, Ordering::Relaxed);
                let result = match outcome {
                    Outcome::Built {
                        artifact,
                        diagnostics,
                    } => match worker::decode::<ArtifactOf<T>>(&artifact) {
                        Ok(artifact) => Ok(Finalized {
                            artifact,
                            diagnostics,
                        }),
                        Err(error) => Err(kernel_error(Failure::Compile(Box::new(
                            CompileFailure::message(format!(
                                "the artifact a worker process built does not decode: {error}"
                            )),
                        )))),
                    },
                    Outcome::Failed(failure) => {
                        Err(kernel_error(Failure::Compile(Box::new(failure))))
                    }
                    Outcome::Panicked(message) => Err(kernel_error(Failure::Panicked { message })),
                };
                Finalize::InWorker {
                    result,
                    work: Some(work),
                    lost: None,
                }
            }
            Err(WorkerLost::Lost { message, blame }) => {
                self.used_processes.store(true, Ordering::Relaxed);
                Finalize::InWorker {
                    result: Err(kernel_error(Failure::Compile(Box::new(
                        CompileFailure::message(message),
                    )))),
                    work: None,
                    lost: Some(blame),
                }
            }
            Err(WorkerLost::Unavailable) => Finalize::Here(lowered),
        }
    }
}
