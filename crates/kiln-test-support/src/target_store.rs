//! What holds of a backend's target and its store whatever the backend,
//! written once for the backends' store tests: a store's keys name one
//! architecture, so a kernel asked for another compiles without it (P1);
//! a target made without a store keeps nothing and never gains one (L5a,
//! L10). The backends are passed in as their targets, loaders and
//! closures: this crate names none of them.

use std::sync::Arc;

use kiln_engine::{
    ArtifactId, ArtifactStore, BoundStore, CompilationTarget, KernelLoader, KernelOf,
    KernelOutcome, VariantOf,
};

/// `target`'s store bound to its compiler's keys, as its loader binds it.
pub fn bound_store<T: CompilationTarget>(target: &T) -> Option<BoundStore<T::Compiler>> {
    target
        .store()
        .map(|store| BoundStore::new(Arc::clone(store), &**target.compiler()))
}

/// Checks that `kernel`, asked as `id` (for an architecture the store's
/// keys do not name), compiles without the store in two rounds, each on a
/// loader of its own (`loader(round)`, on a target of the store: a new one
/// in the second round, as a second process has): compiled, never read
/// from the store, and not stored. `loads` says what must load.
pub fn assert_another_architecture_compiles_without_the_store<T>(
    mut loader: impl FnMut(usize) -> KernelLoader<T>,
    kernel: &KernelOf<T>,
    id: &ArtifactId<VariantOf<T>>,
    loads: &str,
) where
    T: CompilationTarget,
    KernelOf<T>: Sized,
{
    for round in 0..2 {
        let mut on_store = loader(round);
        on_store.load(kernel, id).expect(loads);
        let batch = &on_store.records()[0];
        assert_eq!(
            batch.count(KernelOutcome::Compiled),
            1,
            "round {round}: compiled, never read from the store"
        );
        assert!(!batch.stored, "round {round}: and not stored");
    }
}

/// Checks that `target`, made without a store, has none and no binding,
/// does not switch to `store` (`switch_store` is the backend's
/// `switch_store`), and that its loader (`loader(target)`) binds none and
/// loads `kernel` (asked as `id`) storing nothing.
pub fn assert_a_storeless_target_keeps_nothing<T>(
    mut target: T,
    store: Arc<dyn ArtifactStore>,
    switch_store: impl FnOnce(&mut T, Arc<dyn ArtifactStore>) -> bool,
    loader: impl FnOnce(T) -> KernelLoader<T>,
    kernel: &KernelOf<T>,
    id: &ArtifactId<VariantOf<T>>,
) where
    T: CompilationTarget,
    KernelOf<T>: Sized,
{
    assert!(target.store().is_none());
    assert!(bound_store(&target).is_none());
    assert!(
        !switch_store(&mut target, store),
        "a storeless target does not switch"
    );
    assert!(
        target.store().is_none(),
        "whether a target has a store never changes"
    );
    let mut storeless = loader(target);
    assert!(
        storeless.bound_store().is_none(),
        "the loader binds no store"
    );
    storeless.load(kernel, id).expect("the kernel loads");
    assert!(!storeless.records()[0].stored);
    assert_eq!(storeless.statistics().stored, 0);
}
