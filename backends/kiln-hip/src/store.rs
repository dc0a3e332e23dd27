//! The store of a persisting HIP target: kiln-core's [`ArchitectureStore`]
//! on the target's compiler, holding the artifacts of one architecture.

use std::sync::Arc;

use kiln_core::{ArchitectureStore, ArtifactStore, BoundStore};

use crate::compiler::HipCompiler;
use crate::isa::GfxArch;
use crate::options::HipVariant;

/// A store bound to a target's compiler and one architecture.
pub(crate) type TargetStore = ArchitectureStore<HipCompiler, GfxArch>;

/// `store` bound to `compiler`'s keys for `arch`.
pub(crate) fn target_store(
    store: Arc<dyn ArtifactStore>,
    compiler: &HipCompiler,
    arch: GfxArch,
) -> TargetStore {
    let keyed = compiler.clone().keyed_for(arch.clone());
    ArchitectureStore::new(BoundStore::new(store, &keyed), arch, arch_of)
}

fn arch_of(variant: &HipVariant) -> &GfxArch {
    &variant.arch
}
