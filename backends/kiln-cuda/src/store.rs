//! The store of a persisting [`CudaTarget`](crate::CudaTarget): kiln-core's
//! [`BoundStore`] on the target's compiler, holding the artifacts of the
//! target's architecture.

use std::sync::Arc;
use std::time::Duration;

use kiln_core::{ArtifactId, ArtifactStore, BoundStore, Lookup, Miss, StoreOutcome};

use crate::architecture::Architecture;
use crate::compiler::{CudaArtifact, CudaCompiler, CudaVariant};

/// A store bound to a target's compiler and architecture.
///
/// Every key it makes names the target's architecture (P1). A kernel asked
/// for under a variant of another architecture would be filed under
/// components that misname it — in `kiln ls`, in a bundle exported for this
/// architecture — so it compiles and loads without the store instead.
#[derive(Debug)]
pub(crate) struct TargetStore {
    bound: BoundStore<CudaCompiler>,
    architecture: Architecture,
}

impl TargetStore {
    /// `store` bound to `compiler`, whose keys name `architecture`.
    pub(crate) fn new(
        store: Arc<dyn ArtifactStore>,
        compiler: &CudaCompiler,
        architecture: Architecture,
    ) -> Self {
        Self {
            bound: BoundStore::new(store, compiler),
            architecture,
        }
    }

    /// The binding.
    pub(crate) fn bound(&self) -> &BoundStore<CudaCompiler> {
        &self.bound
    }

    /// The store's generation: one atomic load.
    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.bound.generation()
    }

    /// Whether artifacts of `id` belong in this store.
    fn keeps(&self, id: &ArtifactId<CudaVariant>) -> bool {
        let keeps = id.variant.architecture == self.architecture;
        if !keeps {
            log::debug!(
                "{} is asked for {}, not the target's {}: it bypasses the store",
                id.kernel,
                id.variant.architecture,
                self.architecture
            );
        }
        keeps
    }

    pub(crate) fn lookup(
        &mut self,
        compiler: &CudaCompiler,
        id: &ArtifactId<CudaVariant>,
    ) -> Lookup<CudaArtifact> {
        if !self.keeps(id) {
            return Lookup::Miss(Miss::Absent);
        }
        self.bound.lookup(compiler, id)
    }

    pub(crate) fn lookup_source(
        &mut self,
        compiler: &CudaCompiler,
        id: &ArtifactId<CudaVariant>,
        source: &str,
    ) -> Lookup<CudaArtifact> {
        if !self.keeps(id) {
            return Lookup::Miss(Miss::Absent);
        }
        self.bound.lookup_source(compiler, id, source)
    }

    pub(crate) fn put(
        &mut self,
        compiler: &CudaCompiler,
        id: &ArtifactId<CudaVariant>,
        artifact: &CudaArtifact,
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
