//! The store of a persisting HIP target: kiln-core's [`BoundStore`] on the
//! target's compiler, holding the artifacts of one architecture.

use std::sync::Arc;
use std::time::Duration;

use kiln_core::{ArtifactId, ArtifactStore, BoundStore, Lookup, Miss, StoreOutcome};

use crate::compiler::{HipArtifact, HipCompiler};
use crate::isa::GfxArch;
use crate::options::HipVariant;

/// A store bound to a target's compiler and architecture.
///
/// Every key it makes names the architecture (P1). A kernel asked for under
/// a variant of another architecture would be filed under components that
/// misname it — in `kiln ls`, in a bundle exported for this architecture —
/// so it compiles and loads without the store instead.
#[derive(Debug)]
pub(crate) struct TargetStore {
    bound: BoundStore<HipCompiler>,
    arch: GfxArch,
}

impl TargetStore {
    /// `store` bound to `compiler`'s keys for `arch`.
    pub(crate) fn new(
        store: Arc<dyn ArtifactStore>,
        compiler: &HipCompiler,
        arch: GfxArch,
    ) -> Self {
        let keyed = compiler.clone().keyed_for(arch.clone());
        Self {
            bound: BoundStore::new(store, &keyed),
            arch,
        }
    }

    /// The binding.
    pub(crate) fn bound(&self) -> &BoundStore<HipCompiler> {
        &self.bound
    }

    /// The architecture its artifacts are for.
    pub(crate) fn arch(&self) -> &GfxArch {
        &self.arch
    }

    /// The store's generation: one atomic load.
    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.bound.generation()
    }

    /// Whether artifacts of `id` belong in this store.
    fn keeps(&self, id: &ArtifactId<HipVariant>) -> bool {
        let keeps = id.variant.arch == self.arch;
        if !keeps {
            log::debug!(
                "{} is asked for {}, not the store's {}: it bypasses the store",
                id.kernel,
                id.variant.arch,
                self.arch
            );
        }
        keeps
    }

    pub(crate) fn lookup(
        &mut self,
        compiler: &HipCompiler,
        id: &ArtifactId<HipVariant>,
    ) -> Lookup<HipArtifact> {
        if !self.keeps(id) {
            return Lookup::Miss(Miss::Absent);
        }
        self.bound.lookup(compiler, id)
    }

    pub(crate) fn lookup_source(
        &mut self,
        compiler: &HipCompiler,
        id: &ArtifactId<HipVariant>,
        source: &str,
    ) -> Lookup<HipArtifact> {
        if !self.keeps(id) {
            return Lookup::Miss(Miss::Absent);
        }
        self.bound.lookup_source(compiler, id, source)
    }

    pub(crate) fn put(
        &mut self,
        compiler: &HipCompiler,
        id: &ArtifactId<HipVariant>,
        artifact: &HipArtifact,
        source: Option<&str>,
        work: Duration,
    ) -> StoreOutcome {
        if !self.keeps(id) {
            return StoreOutcome::Skipped;
        }
        self.bound.put(compiler, id, artifact, source, work)
    }

    /// Lets go of the claims of kernels the batch did not store, so other
    /// processes waiting on them compile them at once (P4).
    pub(crate) fn release_claims(&mut self) {
        self.bound.release_claims();
    }
}
