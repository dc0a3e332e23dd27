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

impl<T: CompilationTarget> Finalizer<'_, T> {
    /// Finalizes `lowered` in a worker process: its result, the worker's
    /// compile time, and, when the worker was lost (it crashed or was
    /// killed at the timeout), whose doing that was (P11). Gives `lowered` back when it is to be
    /// finalized here: no worker processes, or none could start.
    #[allow(clippy::type_complexity, reason = "a private two-way answer")]
    pub(super) fn in_process_or_worker(
        &self,
        id: &ArtifactId<VariantOf<T>>,
        lowered: LoweredOf<T>,
        encoded: Option<Recipe>,
    ) -> Result<
        (
            Result<Finalized<ArtifactOf<T>>, KernelError>,
            Option<Duration>,
            Option<Blame>,
        ),
        LoweredOf<T>,
    > {
        let Some(pool) = self.processes else {
            return Err(lowered);
        };
        let Some(Recipe {
            id: id_bytes,
            lowered: lowered_bytes,
        }) = encoded
        else {
            log::warn!("{id} does not serialize for a worker process; finalizing it here");
            return Err(lowered);
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
                Ok((result, Some(work), None))
            }
            Err(WorkerLost::Lost { message, blame }) => {
                self.used_processes.store(true, Ordering::Relaxed);
                Ok((
                    Err(kernel_error(Failure::Compile(Box::new(
                        CompileFailure::message(message),
                    )))),
                    None,
                    Some(blame),
                ))
            }
            Err(WorkerLost::Unavailable) => Err(lowered),
        }
    }
}
