//! Tuning (T1–T5): choosing the fastest of several candidate kernels by
//! measuring them on the device, once per device anywhere.
//!
//! [`KernelLoader::tune`] compiles every candidate in one batch (L4, on the
//! workers), measures each loaded candidate on the device one after
//! another (the caller's probe, or kiln's device timing through the
//! target's [`TimedTarget`]), and returns the winner. Its answer — the
//! winner, every measurement, the method — is kept in the loader's store as
//! a named blob (`answer`), so the next process on a device with the same
//! identity, on this machine or any machine sharing a remote tier, gets the
//! winner with one lookup of the answer and one of the winner's artifact:
//! no compile of the losers and no measurement.
//!
//! A candidate that fails to compile, is refused by the device or fails to
//! launch drops out alone; a measurement that fails (the device's clock)
//! is reported and not kept. Tuners of one key in several processes take
//! a claim on it (P12): one measures, the others wait for its answer. One
//! process never measures two candidates on one device at once
//! (`measure`'s device lock).
//!
//! A storeless loader tunes the same way and keeps no answer.

mod answer;
mod claim;
mod measure;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

pub use answer::{
    ANSWER_BLOB_KIND, CandidateOutcome, CandidateResult, Method, TuneKey, TuningAnswer,
};
pub use measure::Measure;

use crate::error::KernelError;
use crate::id::ArtifactId;
use crate::kernel::Kernel;
use crate::loader::{BorrowedKernel, KernelLoader};
use crate::statistics::Registration;
use crate::store::{ArtifactStore, BlobKey, KeyedCompiler, Lookup, StoreKey, StoreOutcome};
use crate::target::{CompilationTarget, KernelOf, VariantOf};
use crate::timing::{DeviceTimer, TimedTarget, TimingError};

/// One candidate of a tuning: a kernel and the variant it is built under.
pub struct Candidate<T: CompilationTarget> {
    /// The kernel.
    pub kernel: Box<KernelOf<T>>,
    /// Its variant.
    pub variant: VariantOf<T>,
}

impl<T: CompilationTarget> Candidate<T> {
    /// `kernel` under `variant`.
    pub fn new(kernel: Box<KernelOf<T>>, variant: VariantOf<T>) -> Self {
        Self { kernel, variant }
    }

    /// Its artifact id.
    pub fn id(&self) -> ArtifactId<VariantOf<T>> {
        ArtifactId::new(self.kernel.id(), self.variant.clone())
    }
}

/// Where a tuning's answer came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// This call measured the candidates.
    Measured,
    /// The store held the answer: nothing was compiled but the winner (if
    /// it was not loaded) and nothing was measured.
    Stored,
    /// Another process was measuring the same key; this call waited for
    /// its answer and measured nothing.
    Waited,
}

/// What a tuning returns: the winner, loaded, and the answer it won by.
#[derive(Debug, Clone)]
pub struct Tuned<L> {
    /// The index of the winner among the candidates given.
    pub winner: usize,
    /// The winner, loaded.
    pub loaded: L,
    /// Every candidate's measurement or failure, and the method.
    pub answer: TuningAnswer,
    /// Whether it was measured here or found.
    pub origin: Origin,
}

/// Why a tuning has no winner.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TuneError {
    /// No candidate was given.
    #[error("nothing to tune: give at least one candidate")]
    NoCandidates,
    /// Every candidate failed to compile or to run; nothing was kept, so
    /// the next tuning measures again. The answer says why each failed.
    #[error("no candidate of {} worked: {}", .0.key, first_failure(.0))]
    NothingWorked(Box<TuningAnswer>),
    /// The device could not time its work: the measurement is reported and
    /// not kept.
    #[error("measuring on the device failed: {0}")]
    Measurement(TimingError),
}

fn first_failure(answer: &TuningAnswer) -> String {
    answer
        .candidates
        .iter()
        .find_map(|candidate| match &candidate.outcome {
            CandidateOutcome::FailedToCompile { message }
            | CandidateOutcome::FailedToRun { message } => {
                Some(format!("{}: {message}", candidate.kernel))
            }
            CandidateOutcome::Measured { .. } => None,
        })
        .unwrap_or_else(|| "every candidate failed".to_owned())
}

impl<T: TimedTarget> KernelLoader<T> {
    /// The fastest of `candidates` on this loader's device, loaded (T1).
    ///
    /// With a store that holds the answer for `key`, these candidates (by
    /// their artifact keys: kernel, variant, compiler and options) and this
    /// device's identity (driver included), the winner is loaded from it:
    /// two lookups, no other compile, no measurement (T2). Otherwise every
    /// candidate is compiled in one batch, with the queue, and each that
    /// loaded is measured by `measure`, one at a time; the answer is kept
    /// for the next process. A tuner of the same key in another process
    /// measures once for both: this one waits for its answer (T4).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use kiln_engine::KernelLoader;
    /// use kiln_engine::fake::{FakeKernel, FakeTarget};
    /// use kiln_engine::tune::{Candidate, Measure, Origin, TuneKey};
    ///
    /// let target = FakeTarget::persisting();
    /// let device = target.device().clone();
    /// let mut loader = KernelLoader::new(target);
    /// let candidates: Vec<_> = (1..=4)
    ///     .map(|number| Candidate::new(Box::new(FakeKernel::new(number)), ()))
    ///     .collect();
    /// // Candidate 3 runs fastest on the fake device.
    /// let mut launch = |module: &std::sync::Arc<kiln_engine::fake::FakeModule>| {
    ///     let fast = module.text.ends_with('3');
    ///     device.run(Duration::from_micros(if fast { 5 } else { 50 }));
    ///     Ok(())
    /// };
    /// let measure = Measure::Timed { launch: &mut launch, warm_up: 1, runs: 5 };
    /// let tuned = loader.tune(&TuneKey::new("example"), &candidates, measure)?;
    /// assert_eq!((tuned.winner, tuned.origin), (2, Origin::Measured));
    /// # Ok::<(), kiln_engine::tune::TuneError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// No candidate was given or worked, or the device's clock failed; no
    /// answer is kept then.
    pub fn tune(
        &mut self,
        key: &TuneKey,
        candidates: &[Candidate<T>],
        mut measure: Measure<'_, T::Loaded>,
    ) -> Result<Tuned<T::Loaded>, TuneError> {
        if candidates.is_empty() {
            return Err(TuneError::NoCandidates);
        }
        let ids: Vec<_> = candidates.iter().map(Candidate::id).collect();
        let device = self.target().device_identity();
        let artifact_keys = self.artifact_keys(&ids);
        let name = answer::answer_blob_key(key, &device, &artifact_keys);
        let store = self.bound_store().map(|bound| Arc::clone(bound.store()));

        let mut _claim = None;
        if let Some(store) = &store {
            if let Some(tuned) = self.stored(store, &name, candidates, &ids, &artifact_keys) {
                return Ok(tuned);
            }
            let claimed = claim::claim_or_wait(store.as_ref(), &name, &device, || {
                stored_answer(store.as_ref(), &name, &artifact_keys)
            });
            match claimed {
                claim::Claimed::Answered(answer) => {
                    if let Some(tuned) = self.load_winner(answer, candidates, &ids, Origin::Waited)
                    {
                        return Ok(tuned);
                    }
                }
                claim::Claimed::Mine(guard) => _claim = guard,
            }
        }

        let loaded = self.compile_candidates(candidates, &ids);
        let lock = measure::device_lock(&device);
        let _measuring = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut timer = match &measure {
            Measure::Timed { .. } => Some(self.target().timer().map_err(TuneError::Measurement)?),
            Measure::Probe(_) | Measure::TimedWith { .. } => None,
        };
        let mut results = Vec::with_capacity(candidates.len());
        for (index, outcome) in loaded.iter().enumerate() {
            let outcome = match outcome {
                Ok(module) => measure
                    .measure(
                        module,
                        timer.as_mut().map(|timer| timer as &mut dyn DeviceTimer),
                    )
                    .map_err(TuneError::Measurement)?,
                Err(error) => CandidateOutcome::FailedToCompile {
                    message: error.to_string(),
                },
            };
            results.push(CandidateResult {
                kernel: ids[index].kernel.to_string(),
                artifact_key: artifact_keys[index].digest(),
                outcome,
            });
        }
        let answer = TuningAnswer::new(key.clone(), device, measure.method(), results);
        let Some(winner) = answer.winner else {
            return Err(TuneError::NothingWorked(Box::new(answer)));
        };
        if let Some(store) = &store {
            keep(store.as_ref(), &name, &answer);
        }
        // The losers were loaded to be measured, not asked for by the
        // program: the next process's profile loads the winner alone (L12).
        for (index, id) in ids.iter().enumerate() {
            if index != winner && *id != ids[winner] {
                self.not_asked(id);
            }
        }
        let loaded = loaded[winner]
            .clone()
            .expect("the winner was measured, so it loaded");
        Ok(Tuned {
            winner,
            loaded,
            answer,
            origin: Origin::Measured,
        })
    }

    /// The artifact key of each of `ids`, as the store names them (with a
    /// store or without: the answer's name is the same).
    fn artifact_keys(&self, ids: &[ArtifactId<VariantOf<T>>]) -> Vec<StoreKey> {
        let compiler = self.target().compiler();
        let components = compiler.key_components();
        ids.iter()
            .map(|id| StoreKey::for_artifact(&components, id, compiler.entry_point(id)))
            .collect()
    }

    /// The tuning the store answers, when it holds an answer whose winner
    /// loads.
    fn stored(
        &mut self,
        store: &Arc<dyn ArtifactStore>,
        name: &BlobKey,
        candidates: &[Candidate<T>],
        ids: &[ArtifactId<VariantOf<T>>],
        artifact_keys: &[StoreKey],
    ) -> Option<Tuned<T::Loaded>> {
        let answer = stored_answer(store.as_ref(), name, artifact_keys)?;
        self.load_winner(answer, candidates, ids, Origin::Stored)
    }

    /// `answer`'s winner, loaded; `None` when it no longer loads (its
    /// artifact evicted and failing to compile, the device refusing it),
    /// and the candidates are tuned again.
    fn load_winner(
        &mut self,
        answer: TuningAnswer,
        candidates: &[Candidate<T>],
        ids: &[ArtifactId<VariantOf<T>>],
        origin: Origin,
    ) -> Option<Tuned<T::Loaded>> {
        let winner = answer.winner?;
        // A forged or damaged answer may name a candidate that is not
        // there: refused, and the candidates are tuned again.
        if winner >= candidates.len() || winner >= ids.len() {
            log::warn!(
                "the stored tuning answer of {} names candidate {winner} of {}: not one of \
                 them, so it is refused and the candidates are tuned again",
                answer.key,
                candidates.len()
            );
            return None;
        }
        match self.load(&candidates[winner].kernel, &ids[winner]) {
            Ok(loaded) => Some(Tuned {
                winner,
                loaded,
                answer,
                origin,
            }),
            Err(error) => {
                log::warn!(
                    "the stored tuning answer of {} names {}, which no longer loads ({error}): \
                     tuning again",
                    answer.key,
                    ids[winner].kernel
                );
                None
            }
        }
    }

    /// Every candidate, loaded or with its failure, compiled in one batch
    /// with the queue (L4): the candidates not loaded yet are asked of the
    /// batch, each answered with its own outcome.
    fn compile_candidates(
        &mut self,
        candidates: &[Candidate<T>],
        ids: &[ArtifactId<VariantOf<T>>],
    ) -> Vec<Result<T::Loaded, KernelError>> {
        let mut asked: Vec<BorrowedKernel<'_, T>> = Vec::new();
        let mut asked_index = HashMap::new();
        for (candidate, id) in candidates.iter().zip(ids) {
            if self.is_loaded(id) || self.is_queued(id) || asked_index.contains_key(id) {
                continue;
            }
            asked_index.insert(id.clone(), asked.len());
            asked.push((&*candidate.kernel, id.clone(), Registration::register()));
        }
        // The queue compiles in this batch too: a queued candidate is
        // loaded (or failed) when it returns.
        let answers = self.compile_borrowed(asked);
        candidates
            .iter()
            .zip(ids)
            .map(|(candidate, id)| match asked_index.get(id) {
                Some(&index) => answers[index].clone(),
                None => self.load(&candidate.kernel, id),
            })
            .collect()
    }
}

/// The answer `store` holds under `name`, when it is one whole answer for
/// exactly these artifacts (a name is a digest of them, so anything else
/// is damage or another kiln's).
fn stored_answer(
    store: &dyn ArtifactStore,
    name: &BlobKey,
    artifact_keys: &[StoreKey],
) -> Option<TuningAnswer> {
    let Lookup::Hit { artifact, .. } = store.parts().lookup_blob(name) else {
        return None;
    };
    let answer = TuningAnswer::from_bytes(&artifact)?;
    let matches = answer.is_answer()
        && answer.candidates.len() == artifact_keys.len()
        && answer
            .candidates
            .iter()
            .zip(artifact_keys)
            .all(|(candidate, key)| candidate.artifact_key == key.digest());
    matches.then_some(answer)
}

/// Keeps `answer` under `name`; a store that cannot write it says so and
/// the tuning still answers (P5).
fn keep(store: &dyn ArtifactStore, name: &BlobKey, answer: &TuningAnswer) {
    if let StoreOutcome::Failed { detail } = store.parts().put_blob(name, &answer.to_bytes()) {
        log::warn!(
            "could not keep the tuning answer of {}: {detail}; the next process measures again",
            answer.key
        );
    }
}

impl<T: CompilationTarget> fmt::Debug for Candidate<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Candidate")
            .field("kernel", &self.kernel.id())
            .field("variant", &self.variant)
            .finish()
    }
}
