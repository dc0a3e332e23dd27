//! The loader's side of warm-start profiles (L12): the profiled kernels the
//! store held, loaded on the device at the loader's first access other than
//! a hot launch, all together, straight into the loaded map; the kernels the
//! run asked for, noted for the next profile.
//!
//! A profiled kernel enters the loaded map marked as not asked for yet, so
//! that its first launch is the hot path's one lookup (F8) and a kernel the
//! program never asks for this run still ages. The mark is the slot's own:
//! the hot path reads it and, on a profiled kernel's first launch only,
//! clears it and sets that kernel's flag in the profiler (a load and a
//! branch taken once per profiled kernel, no lock, no allocation).

use std::sync::Arc;
use std::time::Duration;

use rustc_hash::FxHashSet;

use super::KernelLoader;
use super::history::StoredBatch;
use super::job::{contained, refused};
use crate::config::WorkerMode;
use crate::error::{KernelError, Stage};
use crate::id::ArtifactId;
use crate::profile::{Profiler, Program};
use crate::statistics::{BatchRecord, KernelOutcome, KernelRecord};
use crate::target::{ArtifactOf, CompilationTarget, DeviceStep, MadeOf, VariantOf};

/// A loader's warm-start profile: the run's profiler.
pub(super) struct ProfileState<T: CompilationTarget> {
    profiler: Profiler<T::Compiler>,
}

impl<T: CompilationTarget> KernelLoader<T> {
    /// The same loader keeping a warm-start profile of `program` in its
    /// store (L12), in place of the profile it keeps by default (its
    /// executable's, see [`LoaderConfig::profile`](crate::LoaderConfig::profile)):
    /// it starts now reading the kernels the program's last process loaded
    /// and looking them up in the store, in the background; the loader's
    /// first access other than a hot launch loads every one the store held
    /// onto the device, so the program's first launch of each is one
    /// lookup. When the loader is dropped (or at
    /// [`save_profile`](Self::save_profile)) it writes what this run asked
    /// for as the next profile. A storeless loader keeps no profile.
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// use kiln_engine::fake::{FakeKernel, FakeTarget};
    /// use kiln_engine::profile::Program;
    /// use kiln_engine::{ArtifactStore, KernelLoader, MemoryStore};
    ///
    /// let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    /// let kernels: Vec<FakeKernel> = (0..4).map(FakeKernel::new).collect();
    /// {
    ///     let mut first = KernelLoader::new(FakeTarget::on_store(Arc::clone(&store)))
    ///         .with_profile(Program::named("example"));
    ///     for kernel in &kernels {
    ///         first.load(kernel, &kernel.artifact_id()).expect("loads");
    ///     }
    /// } // The first run's profile is written here.
    /// let mut next = KernelLoader::new(FakeTarget::on_store(store))
    ///     .with_profile(Program::named("example"));
    /// next.load(&kernels[0], &kernels[0].artifact_id()).expect("loads");
    /// assert_eq!(next.target().loaded(), 4, "every profiled kernel is on the device");
    /// assert!(next.records().is_empty(), "and no batch ran");
    /// ```
    #[must_use = "the loader with its profile is returned, not changed in place"]
    pub fn with_profile(mut self, program: Program) -> Self {
        self.drop_profile();
        self.profile = self.start_profile(&program);
        self
    }

    /// The same loader keeping no warm-start profile: it reads none and
    /// writes none, as under `KILN_PROFILE=0`. For a loader whose kernels
    /// are not a program's (a build tool's, a test's stand-in for another
    /// process).
    #[must_use = "the loader without a profile is returned, not changed in place"]
    pub fn without_profile(mut self) -> Self {
        self.drop_profile();
        self
    }

    /// Whether the loader keeps a warm-start profile.
    pub fn keeps_profile(&self) -> bool {
        self.profile.is_some()
    }

    /// A profile of `program` on the loader's store, when it has one.
    pub(super) fn start_profile(&self, program: &Program) -> Option<ProfileState<T>> {
        let bound = self.store.as_ref()?;
        Some(ProfileState {
            profiler: Profiler::start(
                program.name(),
                Arc::clone(bound.store()),
                Arc::clone(self.target.compiler()),
            ),
        })
    }

    /// Drops the profile without writing it, and the marks it left on the
    /// loaded map.
    fn drop_profile(&mut self) {
        if let Some(mut profile) = self.profile.take() {
            profile.profiler.discard();
            for slot in self.loaded.entries.values_mut() {
                slot.unasked = None;
            }
        }
    }

    /// Writes the warm-start profile now instead of when the loader is
    /// dropped: for a program that is never dropped, or wants its profile
    /// kept at a point of its choosing. A profile is written once a run:
    /// later calls, and the drop, write nothing. Without a profile it does
    /// nothing.
    pub fn save_profile(&mut self) {
        if let Some(profile) = &mut self.profile {
            profile.profiler.save();
        }
    }

    /// How many profiled kernels are loaded on the device and not asked for
    /// yet.
    pub fn profiled_waiting(&self) -> usize {
        self.loaded
            .entries
            .values()
            .filter(|slot| slot.unasked.is_some())
            .count()
    }

    /// Loads the profile's kernels the store held, once, all together,
    /// into the loaded map, each marked as not asked for yet. Their device
    /// objects are made on the pool's threads, side by side, as a batch's
    /// store hits are (F9), and published here; a driver that needs one
    /// thread, or makes them one at a time, has this thread make them.
    pub(super) fn take_in_profile(&mut self) {
        let Some(profile) = &mut self.profile else {
            return;
        };
        if !profile.profiler.is_pending() {
            return;
        }
        self.loaded.reset_if_switched(&self.store);
        let started = std::time::Instant::now();
        let device = Arc::clone(self.target.device_step());
        // As a warm batch's (F11): a driver that makes device objects one
        // at a time makes them sooner on this thread than spread, each as
        // soon as the profile's thread hands its artifact over.
        let on_workers = device.on_workers() && device.spreads();
        let mut begun = false;
        let mut seen = FxHashSet::default();
        let mut kernels: Vec<Profiled<T>> = Vec::new();
        let (target, loaded) = (&mut self.target, &self.loaded);
        profile.profiler.take_each(|id, artifact, bytes| {
            if loaded.entries.contains_key(&id)
                || !target.keeps(&id.variant)
                || !seen.insert(id.clone())
            {
                return;
            }
            if !begun {
                target.batch_started();
                begun = true;
            }
            target.found(&id, &artifact);
            let mut kernel = Profiled {
                id,
                artifact,
                bytes,
                made: None,
            };
            if !on_workers {
                kernel.make(&*device);
            }
            kernels.push(kernel);
        });
        if kernels.is_empty() {
            if begun {
                self.target.batch_finished();
            }
            return;
        }
        let workers = if on_workers {
            self.pool.workers_for(kernels.len())
        } else {
            1
        };
        let mut records: Vec<KernelRecord> = Vec::with_capacity(kernels.len());
        let (target, loaded, statistics) =
            (&mut self.target, &mut self.loaded, &mut self.statistics);
        self.pool.run_with(
            kernels.iter_mut().collect(),
            workers,
            on_workers,
            |kernel| {
                if on_workers {
                    kernel.make(&*device);
                }
            },
            |kernel| {
                kernel.make(&*device);
                let (id, artifact) = (&kernel.id, &kernel.artifact);
                let published = kernel
                    .made
                    .take()
                    .expect("made just above, or on a worker")
                    .and_then(|made| {
                        contained(Stage::Load, id, || {
                            target
                                .publish(id, artifact, made)
                                .map_err(|refusal| refused(id, refusal))
                        })
                    });
                let (outcome, error) = match published {
                    Ok(published) => {
                        statistics.hits += 1;
                        statistics.profile_hits += 1;
                        statistics.bytes_read += kernel.bytes;
                        let index = profile.profiler.watch(id.clone());
                        loaded.insert_profiled(id.clone(), published, index);
                        (KernelOutcome::FromStore, None)
                    }
                    Err(error) => {
                        log::debug!("a profiled kernel was refused: {error}");
                        (KernelOutcome::Refused, Some(error.to_string()))
                    }
                };
                records.push(KernelRecord {
                    kernel: id.kernel.clone(),
                    outcome,
                    work: Duration::ZERO,
                    stored: false,
                    diagnostics: Vec::new(),
                    error,
                    remembered: false,
                });
                Vec::new()
            },
        );
        self.target.batch_finished();
        self.record_profile_load(records, workers, started.elapsed());
    }

    /// Says how many kernels the warm-start profile loaded (`KILN_LOG=info`)
    /// and keeps the load's record in the store beside the batches' (`kiln
    /// records`, `kiln stats`), its hits counted as the profile's, and ends
    /// it for the store as a batch is ended. The loader's own records are
    /// of batches, which this is not.
    fn record_profile_load(&mut self, records: Vec<KernelRecord>, workers: usize, wall: Duration) {
        let batch = BatchRecord {
            kernels: records.len(),
            workers,
            mode: WorkerMode::Threads,
            wall,
            stored: false,
            profile_hits: records
                .iter()
                .filter(|record| record.outcome == KernelOutcome::FromStore)
                .count(),
            records,
            background: false,
            health: self.health.snapshot(),
        };
        log::info!(
            "warm-start profile: {} of {} kernels loaded from the store in {:?}",
            batch.profile_hits,
            batch.kernels,
            batch.wall
        );
        if let Some(store) = &self.store {
            if StoredBatch::worth_keeping(&batch)
                && let Some(encoded) = StoredBatch::of(&batch, store.components()).encode()
            {
                store.keep_batch(&encoded);
            }
            // The store's counts of the profile's lookups are merged now, as
            // a batch's are, not only when the store is dropped (which a
            // program that keeps its loader to the end never does).
            store.batch_finished();
        }
    }

    /// `id` was loaded without the program asking for it (a tune's loser):
    /// it is no kernel of the next profile.
    pub(crate) fn not_asked(&mut self, id: &ArtifactId<VariantOf<T>>) {
        if let Some(profile) = &mut self.profile {
            profile.profiler.unnote(id);
        }
        if let Some(slot) = self.loaded.entries.get_mut(id) {
            slot.unasked = None;
        }
    }

    /// Whether every kernel the last run's profile names is loaded (R3):
    /// true without a profile.
    pub(super) fn profile_complete(&self) -> bool {
        let Some(previous) = self
            .profile
            .as_ref()
            .and_then(|profile| profile.profiler.previous())
        else {
            return true;
        };
        previous.kernels.iter().all(|kernel| {
            crate::encoding::decode::<ArtifactId<VariantOf<T>>>(&kernel.id)
                .map_or(true, |(id, _)| self.loaded.entries.contains_key(&id))
        })
    }

    /// `id` was loaded by a batch: it joins the next profile.
    pub(super) fn note_loaded(&mut self, id: &ArtifactId<VariantOf<T>>) {
        if let Some(profile) = &mut self.profile {
            profile.profiler.note(id);
        }
    }
}

/// A profiled kernel the store held, on its way onto the device.
struct Profiled<T: CompilationTarget> {
    id: ArtifactId<VariantOf<T>>,
    artifact: ArtifactOf<T>,
    /// The bytes its lookup read.
    bytes: u64,
    /// Its device object, or why the device would not make it.
    made: Option<Result<MadeOf<T>, KernelError>>,
}

impl<T: CompilationTarget> Profiled<T> {
    /// Makes its device object with `device`, once; a refusal or a panic
    /// is this kernel's alone (L8, L9).
    fn make(&mut self, device: &T::Device) {
        if self.made.is_some() {
            return;
        }
        let (id, artifact) = (&self.id, &self.artifact);
        self.made = Some(contained(Stage::Load, id, || {
            device
                .make(id, artifact)
                .map_err(|refusal| refused(id, refusal))
        }));
    }
}

/// The program asked for the profiled kernel the profiler watches as
/// `index`: taken once per kernel, inlined, since its call would cost a
/// profiled first launch more than its one store (F8).
#[inline]
pub(super) fn asked<T: CompilationTarget>(profile: &mut Option<ProfileState<T>>, index: u32) {
    if let Some(profile) = profile {
        profile.profiler.asked(index);
    }
}
