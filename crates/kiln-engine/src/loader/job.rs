//! One kernel on its way through a batch: its steps, the collector it
//! settles to, and the containment of a panic in any step.

pub(super) mod ahead;
mod wait;

use std::panic::AssertUnwindSafe;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use super::finalize::{Finalize, Finalizer};
use super::queue::Request;
use crate::compiler::ArtifactCompiler;
use crate::diagnostic::{CompileFailure, Diagnostic};
use crate::error::{Failure, KernelError, Stage};
use crate::id::ArtifactId;
use crate::panic::panic_message;
use crate::statistics::{KernelOutcome, LoaderStatistics, Registration, Settled};
use crate::store::{BoundStore, ClaimGuard, Claimed, Lookup, Recipe, RememberedFailure};
use crate::target::{
    ArtifactOf, CompilationTarget, DeviceStep, KernelOf, LoweredOf, MadeOf, VariantOf,
};
use crate::worker::Blame;

/// How far a kernel got through its batch.
pub(super) enum Step<T: CompilationTarget> {
    /// The store held nothing under its id.
    Missing,
    /// Missing, and another holder compiles it: asked again after the
    /// batch compiled what it claimed (P12).
    Elsewhere,
    /// Lowered, with the text it can share an artifact by.
    Lowered {
        lowered: LoweredOf<T>,
        source: Option<String>,
    },
    /// Same source as the batch's kernel at `leader`, whose artifact it takes.
    Waiting {
        leader: usize,
        source: String,
    },
    /// An artifact to load, and where it came from: the store under its
    /// id, a kernel with the same source, or a compile.
    Ready {
        artifact: ArtifactOf<T>,
        origin: KernelOutcome,
        source: Option<String>,
    },
    Failed(KernelError),
    /// Loaded (or failed) and reported: its outcome is the batch's.
    Done,
}

/// What a batch's workers share while they compile one round of it.
pub(super) struct Round<'r, T: CompilationTarget> {
    pub(super) finalizer: &'r Finalizer<'r, T>,
    /// The batch's store; `None` compiles every kernel on its own.
    pub(super) store: Option<&'r BoundStore<T::Compiler>>,
    /// The kernel leading each lowered source of the batch (L5c).
    pub(super) groups: &'r Mutex<SourceGroups<T>>,
    /// Whether remembered failures are compiled again (P11).
    pub(super) retry_failed: bool,
    /// The target's device step, when the workers make device objects
    /// (F9); `None` when its driver needs one thread.
    pub(super) device: Option<&'r T::Device>,
}

/// The kernel of the batch leading each lowered text, by variant.
pub(super) type SourceGroups<T> = FxHashMap<(VariantOf<T>, String), usize>;

/// What a batch gives back for one kernel.
pub(super) type JobOutcome<T> = (
    ArtifactId<VariantOf<T>>,
    Result<<T as CompilationTarget>::Loaded, KernelError>,
);

/// Where a kernel stands with the collector it registered with.
pub(super) enum Count {
    Uncounted,
    Registered(Registration),
    Settled(Settled),
}

/// One kernel on its way through a batch.
pub(super) struct Job<'k, T: CompilationTarget> {
    /// Its place in the batch, where its outcome goes.
    pub(super) index: usize,
    pub(super) id: ArtifactId<VariantOf<T>>,
    kernel: &'k KernelOf<T>,
    pub(super) step: Step<T>,
    pub(super) count: Count,
    /// Whether its target's store keeps it: one it does not keep bypasses
    /// the store (no lookup, claim or put).
    pub(super) kept: bool,
    /// Whether this batch asked to compile it (P4): a worker claims the key
    /// just before compiling it, unless the batch already did.
    claimed: bool,
    /// The right to compile it, held from its claim until its artifact is
    /// published or it fails, whatever the rest of the batch does (P4).
    pub(super) claim: Option<ClaimGuard>,
    /// What a worker found in the store, counted on the loader's thread:
    /// the bytes read and the compile time they saved, and whether it was a
    /// hit under the kernel's own id.
    found: Option<(u64, Duration, bool)>,
    /// Whether a worker found its key missing and claimed it to compile.
    missed: bool,
    /// Whether it leads a group of kernels with its source (L5c): its
    /// outcome is kept for the members.
    pub(super) leads: bool,
    /// What the store remembered of its failed compiles when its compile
    /// began (P11).
    pub(super) memory: Option<RememberedFailure>,
    /// Whether it failed by the store's memory, without compiling.
    pub(super) remembered: bool,
    /// Whether its compile lost its worker process (a crash or a hang),
    /// and whose doing that was (P11).
    pub(super) lost: Option<Blame>,
    /// Whether its failure is its source group leader's, not its own.
    pub(super) inherited: bool,
    /// Lower + finalize time: its work, as its record and the loader's
    /// statistics count it (the device step is not in it).
    pub(super) compile_work: Duration,
    /// Its device object, made on a worker as soon as its artifact was
    /// ready (F9), or the device's refusal: what the loader's thread
    /// publishes.
    pub(super) made: Option<Result<MadeOf<T>, KernelError>>,
    /// Warnings and remarks of its successful finalize.
    pub(super) diagnostics: Vec<Diagnostic>,
    /// What it was finalized from, kept after its artifact in the store
    /// (`kiln verify --recompile`).
    pub(super) recipe: Option<Recipe>,
    /// Its lowered form and the store's answer for its source, when the
    /// round lowered it ahead ([`ahead`]).
    pub(super) ahead: Option<ahead::Ahead<T>>,
    /// The store's answer for its source, asked with the round's others.
    source_found: Option<Lookup<ArtifactOf<T>>>,
}

impl<'k, T: CompilationTarget> Job<'k, T> {
    pub(super) fn new(index: usize, request: Request<'k, T>) -> Self {
        Self {
            index,
            kept: true,
            claimed: false,
            claim: None,
            found: None,
            missed: false,
            leads: false,
            memory: None,
            remembered: false,
            lost: None,
            inherited: false,
            recipe: None,
            ahead: None,
            source_found: None,
            id: request.id,
            kernel: request.kernel,
            step: Step::Missing,
            count: match request.registration {
                Some(registration) => Count::Registered(registration),
                None => Count::Uncounted,
            },
            compile_work: Duration::ZERO,
            made: None,
            diagnostics: Vec::new(),
        }
    }

    /// Its kernel's [`cost_hint`](crate::Kernel::cost_hint).
    pub(super) fn cost_hint(&self) -> u64 {
        crate::kernel::Kernel::cost_hint(self.kernel)
    }

    pub(super) fn is_missing(&self) -> bool {
        matches!(self.step, Step::Missing)
    }

    pub(super) fn is_elsewhere(&self) -> bool {
        matches!(self.step, Step::Elsewhere)
    }

    pub(super) fn is_settled(&self) -> bool {
        matches!(self.step, Step::Ready { .. } | Step::Failed(_))
    }

    /// Settles the kernel in its collector once its outcome is known (S1,
    /// S2): compiled, taken, or failed. A kernel still on its way settles
    /// nothing yet, and one settles only once.
    pub(super) fn settle(&mut self) {
        let outcome = match &self.step {
            Step::Ready { origin, .. } => *origin,
            Step::Failed(_) => KernelOutcome::Failed,
            Step::Missing
            | Step::Elsewhere
            | Step::Lowered { .. }
            | Step::Waiting { .. }
            | Step::Done => return,
        };
        self.count = match std::mem::replace(&mut self.count, Count::Uncounted) {
            Count::Registered(registration) => Count::Settled(registration.settle(outcome)),
            count => count,
        };
    }

    /// Whether the batch asks the store for the kernel: it has a store
    /// that keeps it. One it does not ask is compiled here with no claim,
    /// counted as a miss now.
    pub(super) fn asks_store(
        &mut self,
        target: &T,
        store: Option<&BoundStore<T::Compiler>>,
        statistics: &mut LoaderStatistics,
    ) -> bool {
        if store.is_some() && kept(target, &self.id) {
            return true;
        }
        self.kept = false;
        self.claimed = true;
        statistics.misses += 1;
        false
    }

    /// Takes what the batch's lookup found for the kernel, taking no claim:
    /// a miss is claimed by the worker about to compile it (P4, P12).
    pub(super) fn looked_up(
        &mut self,
        target: &mut T,
        found: Lookup<ArtifactOf<T>>,
        statistics: &mut LoaderStatistics,
    ) {
        if matches!(found, Lookup::Hit { .. }) {
            self.take(target, found, statistics);
        }
    }

    /// Asks again for a kernel another holder compiles (P12): `true` when
    /// it is settled, taken from the store or claimed to compile here.
    pub(super) fn take_published(
        &mut self,
        target: &mut T,
        store: &BoundStore<T::Compiler>,
        statistics: &mut LoaderStatistics,
    ) -> bool {
        match store.take_published(target.compiler(), &self.id) {
            Claimed::Published(found) => {
                self.step = Step::Missing;
                self.take(target, found, statistics);
                true
            }
            Claimed::Mine(claim) => {
                self.step = Step::Missing;
                self.claimed = true;
                self.claim = claim;
                statistics.misses += 1;
                true
            }
            Claimed::Elsewhere => false,
        }
    }

    /// Takes `found`, a hit of its key another holder published while
    /// this batch waited (P12).
    pub(super) fn take_hit(
        &mut self,
        target: &mut T,
        found: Lookup<ArtifactOf<T>>,
        statistics: &mut LoaderStatistics,
    ) {
        self.step = Step::Missing;
        self.take(target, found, statistics);
    }

    /// Gives up waiting for another holder: compiles it here too (a
    /// duplicate compile, never a wrong artifact).
    pub(super) fn compile_anyway(&mut self, statistics: &mut LoaderStatistics) {
        self.step = Step::Missing;
        self.claimed = true;
        statistics.misses += 1;
    }

    /// What a worker does for a missing kernel, in one go on one worker
    /// (L5): claims its key (P4, P12), lowers it, asks the batch and the
    /// store for its source (L5c), and finalizes it. A kernel another
    /// holder compiles is left [`Step::Elsewhere`]; one with the source of
    /// another kernel of the batch waits for that kernel's artifact.
    /// Whether the store answered its lowered text ahead of its compile
    /// with an artifact (P7): it compiles nothing.
    pub(super) fn found_by_text(&self) -> bool {
        self.ahead
            .as_ref()
            .is_some_and(|ahead| matches!(ahead.found, Some(Lookup::Hit { .. })))
    }

    pub(super) fn compile(&mut self, round: &Round<'_, T>) {
        if !self.is_missing() {
            return;
        }
        let compiler = round.finalizer.compiler;
        // Found by its text ahead (P7): nothing compiles, so there is no
        // compile for other processes to wait for, and no claim to take.
        let found_by_text = self.found_by_text();
        if let (Some(_), false, true) = (round.store, self.claimed, found_by_text) {
            self.claimed = true;
            self.missed = true;
        }
        if let (Some(store), false) = (round.store, self.claimed) {
            self.claimed = true;
            match store.claim(compiler, &self.id) {
                Claimed::Published(Lookup::Hit {
                    artifact,
                    bytes,
                    work,
                }) => {
                    self.found = Some((bytes, work, true));
                    self.step = Step::Ready {
                        artifact,
                        origin: KernelOutcome::FromStore,
                        source: None,
                    };
                    return;
                }
                Claimed::Published(Lookup::Miss(_)) | Claimed::Mine(None) => self.missed = true,
                Claimed::Mine(claim) => {
                    self.missed = true;
                    self.claim = claim;
                }
                Claimed::Elsewhere => {
                    self.claimed = false;
                    self.step = Step::Elsewhere;
                    return;
                }
            }
        }
        // P11: a kernel whose failure the store remembers fails again at
        // once, unless the batch retries failures. One found by its text
        // has an artifact: there is no failure to look for.
        if let (Some(store), true, false) = (round.store, self.kept, found_by_text) {
            self.memory = store.remembered_failure(compiler, &self.id);
            if !round.retry_failed
                && let Some(error) = self
                    .memory
                    .as_ref()
                    .and_then(|memory| memory.error_for(&self.id.kernel))
            {
                self.remembered = true;
                self.step = Step::Failed(error);
                return;
            }
        }
        self.lower(compiler);
        if let (
            Some(store),
            Step::Lowered {
                source: Some(source),
                ..
            },
        ) = (round.store, &self.step)
        {
            // Grouped by variant too: one text under two architectures is
            // two artifacts.
            let group = (self.id.variant.clone(), source.clone());
            let leader = *round
                .groups
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .entry(group)
                .or_insert(self.index);
            if leader != self.index {
                self.keep_recipe(round.finalizer.keep_recipes);
                self.wait_for(leader);
                return;
            }
            self.leads = true;
            if self.kept {
                self.reuse_stored_source(compiler, store, round.finalizer.keep_recipes);
            }
        }
        if matches!(self.step, Step::Lowered { .. }) {
            self.finalize(round.finalizer);
        }
    }

    /// Counts on the loader's thread what a worker found (S4), and tells
    /// the target of a hit (its [`found`](CompilationTarget::found) hook).
    pub(super) fn account(&mut self, target: &mut T, statistics: &mut LoaderStatistics) {
        if std::mem::take(&mut self.missed) {
            statistics.misses += 1;
        }
        if let Some((bytes, work, by_id)) = self.found.take() {
            statistics.bytes_read += bytes;
            statistics.saved_seconds += work.as_secs_f64();
            if by_id {
                statistics.hits += 1;
                if let Step::Ready { artifact, .. } = &self.step {
                    target.found(&self.id, artifact);
                }
            }
        }
        self.settle();
    }

    fn take(
        &mut self,
        target: &mut T,
        found: Lookup<ArtifactOf<T>>,
        statistics: &mut LoaderStatistics,
    ) {
        match found {
            Lookup::Hit {
                artifact,
                bytes,
                work,
            } => {
                target.found(&self.id, &artifact);
                statistics.hits += 1;
                statistics.bytes_read += bytes;
                statistics.saved_seconds += work.as_secs_f64();
                self.step = Step::Ready {
                    artifact,
                    origin: KernelOutcome::FromStore,
                    source: None,
                };
                self.settle();
            }
            Lookup::Miss(miss) => {
                log::trace!("{} is not in the store: {miss:?}", self.id);
            }
        }
    }

    pub(super) fn lower(&mut self, compiler: &T::Compiler) {
        if let Some(ahead) = self.ahead.take() {
            (self.step, self.source_found) = ahead.into_lowered();
            return;
        }
        let started = Instant::now();
        let (kernel, id) = (self.kernel, &self.id);
        self.step = match contained(Stage::Lower, id, || compiler.lower(kernel, id)) {
            Ok(lowered) => Step::Lowered {
                source: <T::Compiler as ArtifactCompiler>::source(&lowered).map(str::to_owned),
                lowered,
            },
            Err(error) => Step::Failed(error),
        };
        self.compile_work += started.elapsed();
    }

    pub(super) fn finalize(&mut self, finalizer: &Finalizer<'_, T>) {
        let Step::Lowered { lowered, source } = std::mem::replace(&mut self.step, Step::Missing)
        else {
            unreachable!("only a lowered kernel is finalized");
        };
        let started = Instant::now();
        let id = &self.id;
        // Encoded once: for the store, after the artifact, and for a
        // worker process, which takes the same bytes.
        let encoded = (finalizer.keep_recipes && self.kept || finalizer.processes.is_some())
            .then(|| Recipe::of(id, &lowered))
            .flatten();
        self.recipe = encoded
            .clone()
            .filter(|_| finalizer.keep_recipes && self.kept);
        let (result, remote_work, lost) = match finalizer.in_process_or_worker(id, lowered, encoded)
        {
            Finalize::InWorker { result, work, lost } => (result, work, lost),
            Finalize::Here(lowered) => (
                contained(Stage::Finalize, id, || {
                    finalizer.compiler.finalize(id, lowered)
                }),
                None,
                None,
            ),
        };
        self.lost = lost;
        self.step = match result {
            Ok(finalized) => {
                self.diagnostics = finalized.diagnostics;
                Step::Ready {
                    artifact: finalized.artifact,
                    origin: KernelOutcome::Compiled,
                    source,
                }
            }
            Err(error) => Step::Failed(error),
        };
        // A worker's own measure of its compile leaves out the pipes.
        self.compile_work += remote_work.unwrap_or_else(|| started.elapsed());
    }

    pub(super) fn wait_for(&mut self, leader: usize) {
        let Step::Lowered {
            source: Some(source),
            ..
        } = std::mem::replace(&mut self.step, Step::Missing)
        else {
            unreachable!("only a lowered kernel with source waits");
        };
        self.step = Step::Waiting { leader, source };
    }

    /// Keeps the recipe of a lowered kernel that takes another's artifact
    /// (found by its source, or its group leader's), so that what it
    /// publishes under its own id is what compiling it would have stored:
    /// the same bytes, and finalizable again.
    fn keep_recipe(&mut self, keep_recipes: bool) {
        if let (true, true, Step::Lowered { lowered, .. }) = (keep_recipes, self.kept, &self.step) {
            self.recipe = Recipe::of(&self.id, lowered);
        }
    }

    /// Takes what its source group's leader came to (L5c, L6): the
    /// leader's artifact, rekeyed under this kernel's id, or its failure,
    /// naming this kernel.
    pub(super) fn take_from_leader(&mut self, led: &Result<ArtifactOf<T>, KernelError>) {
        let Step::Waiting { source, .. } = std::mem::replace(&mut self.step, Step::Missing) else {
            unreachable!("only a waiting kernel takes from its leader");
        };
        self.step = match led {
            Ok(artifact) => Step::Ready {
                artifact: artifact.clone(),
                origin: KernelOutcome::Rekeyed,
                source: Some(source),
            },
            Err(error) => {
                self.inherited = true;
                Step::Failed(KernelError {
                    kernel: self.id.kernel.clone(),
                    ..error.clone()
                })
            }
        };
        self.settle();
    }

    /// Takes the artifact stored for the kernel's lowered source, if any
    /// (P7): a kernel with new ids and known text skips the compiler.
    fn reuse_stored_source(
        &mut self,
        compiler: &T::Compiler,
        store: &BoundStore<T::Compiler>,
        keep_recipes: bool,
    ) {
        let Step::Lowered {
            source: Some(source),
            ..
        } = &self.step
        else {
            return;
        };
        let found = match self.source_found.take() {
            Some(found) => found,
            None => store.lookup_source(compiler, &self.id, source),
        };
        if let Lookup::Hit {
            artifact,
            bytes,
            work,
        } = found
        {
            self.found = Some((bytes, work, false));
            self.keep_recipe(keep_recipes);
            let Step::Lowered { source, .. } = std::mem::replace(&mut self.step, Step::Missing)
            else {
                unreachable!("matched as lowered right above");
            };
            self.step = Step::Ready {
                artifact,
                origin: KernelOutcome::Rekeyed,
                source,
            };
        }
    }

    /// Whether its artifact is ready and its device object not yet made.
    pub(super) fn needs_device(&self) -> bool {
        matches!(self.step, Step::Ready { .. }) && self.made.is_none()
    }

    /// Makes its artifact a device object with `device` (F9): on a worker,
    /// as soon as the artifact is ready, for a compiled kernel as for a
    /// store hit. A refusal or a panic fails this kernel alone (L6, L8, L9).
    pub(super) fn make_device(&mut self, device: &T::Device) {
        let Step::Ready { artifact, .. } = &self.step else {
            return;
        };
        if self.made.is_some() {
            return;
        }
        let id = &self.id;
        self.made = Some(contained(Stage::Load, id, || {
            device
                .make(id, artifact)
                .map_err(|refusal| refused(id, refusal))
        }));
    }

    /// What the kernel came to, for the members of its source group: its
    /// artifact, whatever the device made of it (each member makes its own
    /// device object), or its failure.
    pub(super) fn led(&self) -> Result<ArtifactOf<T>, KernelError> {
        match &self.step {
            Step::Ready { artifact, .. } => Ok(artifact.clone()),
            Step::Failed(error) => Err(error.clone()),
            _ => unreachable!("a settled kernel is ready or failed"),
        }
    }
}

/// A device's refusal of `id`'s artifact, as that kernel's error.
pub(super) fn refused<V>(id: &ArtifactId<V>, refusal: crate::error::DeviceRefusal) -> KernelError {
    KernelError {
        kernel: id.kernel.clone(),
        stage: Stage::Load,
        failure: Failure::Refused(refusal),
    }
}

/// Whether `target`'s store keeps `id`'s artifact; one it does not
/// bypasses the store.
fn kept<T: CompilationTarget>(target: &T, id: &ArtifactId<VariantOf<T>>) -> bool {
    let keeps = target.keeps(&id.variant);
    if !keeps {
        log::debug!(
            "{id} is asked for a variant its target's store does not keep: it bypasses the store"
        );
    }
    keeps
}

/// Runs one step of one kernel, a panic in it becoming that kernel's failure
/// with the panic's message (L8): one kernel a generator or compiler cannot
/// handle must not take its whole batch, or the launches waiting on it, down.
pub(super) fn contained<R, E: IntoKernelFailure, V>(
    stage: Stage,
    id: &ArtifactId<V>,
    step: impl FnOnce() -> Result<R, E>,
) -> Result<R, KernelError> {
    match std::panic::catch_unwind(AssertUnwindSafe(step)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(failure)) => Err(failure.into_kernel_error(stage, id)),
        Err(payload) => Err(KernelError {
            kernel: id.kernel.clone(),
            stage,
            failure: Failure::Panicked {
                message: panic_message(payload),
            },
        }),
    }
}

/// The error values a step can return, made into that kernel's error.
pub(super) trait IntoKernelFailure {
    fn into_kernel_error<V>(self, stage: Stage, id: &ArtifactId<V>) -> KernelError;
}

impl IntoKernelFailure for CompileFailure {
    fn into_kernel_error<V>(self, stage: Stage, id: &ArtifactId<V>) -> KernelError {
        KernelError {
            kernel: id.kernel.clone(),
            stage,
            failure: Failure::Compile(Box::new(self)),
        }
    }
}

impl IntoKernelFailure for KernelError {
    fn into_kernel_error<V>(self, _stage: Stage, _id: &ArtifactId<V>) -> KernelError {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{load, loader};
    use crate::error::{Failure, Stage};
    use crate::fake::{FakeKernel, FakeTarget};
    use crate::statistics::StatisticsCollector;

    // L6
    #[test]
    fn failing_kernels_of_every_kind_fail_alone() {
        let mut loader = loader(FakeTarget::persisting(), 4);
        let bad = [
            FakeKernel::new(10).failing_to_lower(),
            FakeKernel::new(11).failing(),
            FakeKernel::new(12).panicking_in_lower(),
            FakeKernel::new(13).panicking(),
            FakeKernel::new(14).refused(),
        ];
        for number in 0..4 {
            loader.enqueue(Box::new(FakeKernel::new(number)), ());
        }
        for kernel in &bad {
            loader.enqueue(Box::new(kernel.clone()), ());
        }
        loader.compile_queued();
        for number in 0..4 {
            assert!(loader.is_loaded(&FakeKernel::new(number).artifact_id()));
        }
        let stages: Vec<Stage> = bad
            .iter()
            .map(|kernel| load(&mut loader, kernel).expect_err("fails").stage)
            .collect();
        assert_eq!(
            stages,
            [
                Stage::Lower,
                Stage::Finalize,
                Stage::Lower,
                Stage::Finalize,
                Stage::Load
            ]
        );
        load(&mut loader, &FakeKernel::new(20)).expect("the loader is still usable");
    }

    // L8
    #[test]
    fn a_panic_carries_its_message_and_fails_only_its_kernel() {
        let mut loader = loader(FakeTarget::storeless(), 4);
        loader.enqueue(Box::new(FakeKernel::new(0)), ());
        let error = load(&mut loader, &FakeKernel::new(1).panicking()).expect_err("fails");
        match &error.failure {
            Failure::Panicked { message } => {
                assert_eq!(message, "fake compiler crashed on kernel 1");
            }
            other => panic!("expected a panic, got {other}"),
        }
        assert!(loader.is_loaded(&FakeKernel::new(0).artifact_id()));
    }

    // S2
    #[test]
    fn a_panicking_batch_settles_every_kernel_once() {
        let mut loader = loader(FakeTarget::persisting(), 4);
        let collector = StatisticsCollector::new();
        let _scope = collector.open();
        loader.enqueue(Box::new(FakeKernel::new(0).panicking_in_lower()), ());
        loader.enqueue(Box::new(FakeKernel::new(1).panicking()), ());
        for number in 2..6 {
            loader.enqueue(
                Box::new(FakeKernel::new(number).sharing_source("group")),
                (),
            );
        }
        loader.compile_queued();
        let counts = collector.counts();
        assert_eq!(counts.registered, 6);
        assert_eq!(
            counts.compiled + counts.loaded + counts.failed,
            6,
            "{counts:?}"
        );
        assert_eq!(counts.abandoned, 0);
    }

    // D2
    #[test]
    fn a_compile_error_leads_with_the_first_error_and_counts_the_rest() {
        let mut loader = loader(FakeTarget::storeless(), 1);
        let error = load(&mut loader, &FakeKernel::new(1).failing()).expect_err("fails");
        let message = error.to_string();
        assert!(
            message.ends_with("2:7: error: unexpected token (2 more errors suppressed)"),
            "{message}"
        );
        assert_eq!(
            error
                .compile_failure()
                .expect("a compile failure")
                .diagnostics
                .len(),
            4
        );
    }

    // D2
    #[test]
    fn a_configuration_mistake_says_what_to_change() {
        let mut loader = loader(FakeTarget::storeless(), 1);
        let error = load(&mut loader, &FakeKernel::new(1).misconfigured()).expect_err("fails");
        assert!(
            error
                .to_string()
                .contains("hint: choose an architecture the fake compiler lists"),
            "{error}"
        );
    }
}
