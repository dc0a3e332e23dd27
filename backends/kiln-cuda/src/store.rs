//! The store of a persisting [`CudaTarget`](crate::CudaTarget): kiln-core's
//! [`ArchitectureStore`] on the target's compiler, holding the artifacts of
//! the target's architecture.

use std::sync::Arc;

use kiln_core::{ArchitectureStore, ArtifactStore, BoundStore};

use crate::architecture::Architecture;
use crate::compiler::{CudaCompiler, CudaVariant};

/// A store bound to a target's compiler and architecture.
pub(crate) type TargetStore = ArchitectureStore<CudaCompiler, Architecture>;

/// `store` bound to `compiler`, whose keys name `architecture`.
pub(crate) fn target_store(
    store: Arc<dyn ArtifactStore>,
    compiler: &CudaCompiler,
    architecture: Architecture,
) -> TargetStore {
    ArchitectureStore::new(
        BoundStore::new(store, compiler),
        architecture,
        architecture_of,
    )
}

fn architecture_of(variant: &CudaVariant) -> &Architecture {
    &variant.architecture
}
