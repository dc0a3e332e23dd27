//! What the HIP tests share: hipRTC or a printed skip, throw-away folders
//! and disk stores in them.

#![allow(
    dead_code,
    reason = "each test binary uses its own part of the support"
)]

use std::path::Path;
use std::sync::Arc;

use kiln_engine::ArtifactStore;
use kiln_engine::conformance::skip;
use kiln_hip::{Architecture, HipCompiler, HipTarget};
use kiln_store::{DiskStore, StoreConfig};

/// The real hipRTC, or `None` after printing why `test` skips (a failure
/// instead when `KILN_REQUIRE_DEVICE=1`).
pub fn compiler(test: &str) -> Option<HipCompiler> {
    match HipCompiler::new() {
        Ok(compiler) => Some(compiler),
        Err(error) => {
            skip(test, &error.to_string());
            None
        }
    }
}

/// A processor `compiler`'s comgr does not list: gfx1100, which ROCm 5.2
/// lacks; a later ROCm has it, and then a name no release has stands in.
pub fn unsupported_processor(compiler: &HipCompiler) -> &'static str {
    ["gfx1100", "gfx1fff"]
        .into_iter()
        .find(|arch| {
            !compiler
                .supported_targets()
                .has_processor(&Architecture::new(arch).expect("valid"))
        })
        .expect("no comgr lists gfx1fff")
}

/// A storeless compile-only target for `architecture`, compiling with
/// `compiler`.
pub fn compile_only(compiler: &HipCompiler, architecture: &str) -> HipTarget {
    HipTarget::compile_only(Architecture::new(architecture).expect("a valid architecture name"))
        .expect("hipRTC opened for the compiler opens for the target")
        .with_compiler(compiler.clone())
}

/// A loader on `target` with two workers, whatever the machine has.
pub fn loader(target: HipTarget) -> kiln_engine::KernelLoader<HipTarget> {
    kiln_test_support::loader(target, 2)
}

/// The disk store at `root`, as a target takes it: durable, as users have
/// it, and evicting only when asked.
pub fn disk_store(root: &Path) -> Arc<dyn ArtifactStore> {
    Arc::new(DiskStore::open(StoreConfig::evicting_only_when_asked(root)).expect("the store opens"))
}

/// Fresh disk stores, each in a root of its own inside one scratch folder.
pub type StoreRoots = kiln_test_support::StoreRoots<Arc<dyn ArtifactStore>>;

/// Roots inside a new scratch folder named after `test`, each store opened
/// as [`disk_store`] opens it.
pub fn store_roots(test: &str) -> StoreRoots {
    StoreRoots::new(test, disk_store)
}
