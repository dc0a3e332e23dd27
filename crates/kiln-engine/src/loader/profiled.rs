//! The loader's side of warm-start profiles (L12): the profiled kernels the
//! store held, loaded on the device at the loader's first access other than
//! a hot launch, all together, and waiting beside the loaded map until the
//! program asks for each; the kernels the run loaded, noted for the next
//! profile.
//!
//! The profiled kernels wait beside the loaded map rather than in it so
//! that the hot path stays what it is (L2) and a kernel the program never
//! asks for this run still ages: the first launch of a profiled kernel
//! takes the cold path once, where one hash lookup moves it into the
//! loaded map and notes it as asked for.

use rustc_hash::FxHashMap;

use super::{KernelLoader, generation_of};
use crate::id::ArtifactId;
use crate::profile::{Profiler, Program};
use crate::target::{CompilationTarget, VariantOf};

/// A loader's warm-start profile: the run's profiler and the profiled
/// kernels loaded and not asked for yet.
pub(super) struct ProfileState<T: CompilationTarget> {
    profiler: Profiler<T::Compiler>,
    ready: FxHashMap<ArtifactId<VariantOf<T>>, T::Loaded>,
    /// The store generation `ready` was loaded under (L10).
    generation: u64,
}

impl<T: CompilationTarget> KernelLoader<T>
where
    T::Compiler: 'static,
{
    /// The same loader keeping a warm-start profile of `program` in its
    /// store (L12): it starts now reading the kernels the program's last
    /// process loaded and looking them up in the store, in the background;
    /// the loader's first access other than a hot launch loads every one the
    /// store held onto the device, so the program's first launch of each
    /// is one lookup. When the loader is dropped (or at
    /// [`save_profile`](Self::save_profile)) it writes what this run loaded
    /// as the next profile. A storeless loader keeps no profile.
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
        if let Some(bound) = &self.store {
            let profiler = Profiler::start(
                program.name(),
                std::sync::Arc::clone(bound.store()),
                std::sync::Arc::clone(self.target.compiler()),
            );
            self.profile = Some(ProfileState {
                profiler,
                ready: FxHashMap::default(),
                generation: generation_of(&self.store),
            });
        }
        self
    }
}

impl<T: CompilationTarget> KernelLoader<T> {
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
        self.profile
            .as_ref()
            .map_or(0, |profile| profile.ready.len())
    }

    /// Loads the profile's kernels the store held, once, all together.
    pub(super) fn take_in_profile(&mut self) {
        let Some(profile) = &mut self.profile else {
            return;
        };
        if !profile.profiler.is_pending() {
            return;
        }
        let found = profile.profiler.take();
        if found.is_empty() {
            return;
        }
        profile.generation = generation_of(&self.store);
        self.target.batch_started();
        for (id, artifact, bytes) in found {
            if self.loaded.entries.contains_key(&id) || !self.target.keeps(&id.variant) {
                continue;
            }
            self.target.found(&id, &artifact);
            match self.target.load(&id, &artifact) {
                Ok(loaded) => {
                    self.statistics.hits += 1;
                    self.statistics.bytes_read += bytes;
                    profile.ready.insert(id, loaded);
                }
                Err(refusal) => log::debug!("a profiled kernel {id} was refused: {refusal}"),
            }
        }
        self.target.batch_finished();
    }

    /// Moves `id` from the profiled kernels into the loaded map, when it is
    /// one: the program asked for it.
    pub(super) fn promote_profiled(&mut self, id: &ArtifactId<VariantOf<T>>) {
        let Some(profile) = &mut self.profile else {
            return;
        };
        if profile.generation != generation_of(&self.store) {
            // The store switched: what was loaded from the old one goes.
            profile.ready.clear();
            return;
        }
        if let Some(loaded) = profile.ready.remove(id) {
            profile.profiler.note(id);
            self.loaded.insert(id.clone(), loaded, &self.store);
        }
    }

    /// `id` was loaded by a batch: it joins the next profile.
    pub(super) fn note_loaded(&mut self, id: &ArtifactId<VariantOf<T>>) {
        if let Some(profile) = &mut self.profile {
            profile.profiler.note(id);
        }
    }
}
