//! A round's lowered sources asked for at once (P7, P10): the missing
//! kernels of a round are lowered first, on the workers, and the store is
//! asked for all their sources in one lookup of many keys (one round trip
//! to a remote store) instead of one per kernel on its worker. Each
//! kernel's compile then starts from its lowered form and the answer found
//! for it.

use crate::pool::WorkerPool;
use crate::store::{BoundStore, Lookup};
use crate::target::{ArtifactOf, CompilationTarget, LoweredOf};

use super::{Job, Round, Step};

/// A kernel lowered ahead of its compile, and what the store held for its
/// source.
pub(in crate::loader) struct Ahead<T: CompilationTarget> {
    lowered: LoweredOf<T>,
    source: Option<String>,
    pub(in crate::loader) found: Option<Lookup<ArtifactOf<T>>>,
}

impl<T: CompilationTarget> Ahead<T> {
    /// Its lowered form and source, for the kernel's compile.
    pub(in crate::loader) fn into_lowered(self) -> (Step<T>, Option<Lookup<ArtifactOf<T>>>) {
        (
            Step::Lowered {
                lowered: self.lowered,
                source: self.source,
            },
            self.found,
        )
    }
}

/// Lowers the round's missing kernels the store keeps on `workers` of
/// `pool`, then asks `store` for their sources in one lookup. A kernel
/// whose lowering yields no source compiles on, on the worker that lowered
/// it, without waiting for the rest (L5). A round of one kernel, or a
/// kernel that fails to lower (it is lowered again, and fails, in its
/// compile), goes as it would without.
pub(in crate::loader) fn look_up_sources<T: CompilationTarget>(
    pool: &WorkerPool,
    jobs: &mut [&mut Job<'_, T>],
    workers: usize,
    round: &Round<'_, T>,
    store: &BoundStore<T::Compiler>,
) {
    let compiler = round.finalizer.compiler;
    // An answer of an earlier round is stale: asked again, or by the
    // kernel's worker.
    for job in jobs.iter_mut() {
        if let Some(ahead) = job.ahead.as_mut() {
            ahead.found = None;
        }
    }
    let lowering: Vec<&mut Job<'_, T>> = jobs
        .iter_mut()
        .filter(|job| job.is_missing() && job.kept)
        .map(|job| &mut **job)
        .collect();
    if lowering.len() < 2 {
        return;
    }
    pool.run(
        lowering,
        workers,
        |job| job.lower_ahead(round),
        |_| Vec::new(),
    );
    let asking: Vec<usize> = jobs
        .iter()
        .enumerate()
        .filter(|(_, job)| {
            job.ahead
                .as_ref()
                .is_some_and(|ahead| ahead.source.is_some())
        })
        .map(|(place, _)| place)
        .collect();
    if asking.is_empty() {
        return;
    }
    let wanted: Vec<_> = asking
        .iter()
        .map(|place| {
            let job = &jobs[*place];
            let source = job
                .ahead
                .as_ref()
                .and_then(|ahead| ahead.source.as_deref())
                .expect("asked only for kernels with a source");
            (&job.id, source)
        })
        .collect();
    let found = store.lookup_sources(compiler, &wanted);
    for (place, found) in asking.into_iter().zip(found) {
        if let Some(ahead) = jobs[place].ahead.as_mut() {
            ahead.found = Some(found);
        }
    }
}

impl<T: CompilationTarget> Job<'_, T> {
    /// Lowers the kernel ahead of its compile and keeps the lowered form
    /// for it, or compiles it at once when it has no source; a kernel that
    /// fails to lower is left as it was.
    fn lower_ahead(&mut self, round: &Round<'_, T>) {
        if !self.is_missing() || self.ahead.is_some() {
            return;
        }
        let work = self.compile_work;
        self.lower(round.finalizer.compiler);
        match std::mem::replace(&mut self.step, Step::Missing) {
            Step::Lowered { lowered, source } => {
                let sourceless = source.is_none();
                self.ahead = Some(Ahead {
                    lowered,
                    source,
                    found: None,
                });
                if sourceless {
                    // Nothing to ask the store for it: finalized here, now.
                    self.compile(round);
                }
            }
            // Lowered again, and timed again, in its compile.
            _ => self.compile_work = work,
        }
    }
}
