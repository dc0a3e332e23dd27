//! Loaders as the backends' tests make them: a fixed number of workers,
//! whatever the machine has, so that a batch runs alike everywhere.

use std::num::NonZeroUsize;

use kiln_engine::{CompilationTarget, KernelLoader, LoaderConfig};

/// A loader on `target` with `workers` workers (at least one), and every
/// other setting the default.
pub fn loader<T: CompilationTarget>(target: T, workers: usize) -> KernelLoader<T> {
    KernelLoader::with_config(
        target,
        LoaderConfig {
            parallelism: NonZeroUsize::new(workers).unwrap_or(NonZeroUsize::MIN),
            ..LoaderConfig::default()
        },
    )
}
