//! Loaders as the backends' tests make them: a fixed number of workers,
//! whatever the machine has, so that a batch runs alike everywhere.

use std::num::NonZeroUsize;

use kiln_engine::{CompilationTarget, KernelLoader, LoaderConfig};

/// A loader on `target` with `workers` workers (at least one), no
/// warm-start profile (a second loader on a store stands in for the next
/// process: nothing loads ahead of what the tests count), and every other
/// setting the default.
pub fn loader<T: CompilationTarget>(target: T, workers: usize) -> KernelLoader<T> {
    KernelLoader::with_config(
        target,
        LoaderConfig {
            parallelism: NonZeroUsize::new(workers).unwrap_or(NonZeroUsize::MIN),
            profile: false,
            ..LoaderConfig::default()
        },
    )
}
