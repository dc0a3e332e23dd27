//! A store bound to one compiler: [`BoundStore`], the glue a backend's
//! target delegates its store calls to, and the two wrappers a target keeps
//! it in, [`ArchitectureStore`] and [`StoreSlot`].

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use rustc_hash::FxHashMap;

use super::claim::{Claim, ClaimGuard, ClaimWait};
use super::generation::Generation;
use super::key::{KeyComponents, KeyedCompiler, StoreKey};
use super::{ArtifactStore, Explanation, Lookup, Miss, StoreOutcome};
use crate::encoding;
use crate::id::ArtifactId;

/// A `dyn` [`ArtifactStore`] bound to one compiler: its keys, its artifact
/// type, and the claims it holds while compiling. A backend's target keeps
/// one and forwards [`CompilationTarget`]'s store methods to it.
///
/// # Single flight (P4)
///
/// A lookup by id that misses claims the key, so that other processes
/// asking for it wait for this one's artifact instead of compiling it too;
/// storing the artifact releases the claim. A claim is waited for only when
/// this binding holds no other claim — two processes each holding what the
/// other waits for would otherwise stall — so in a batch of several missing
/// kernels the first waits and the rest try once. Claims of kernels that
/// never reach [`put`](Self::put) (their compile failed, the device refused
/// them) are released at the end of the batch
/// ([`batch_finished`](Self::batch_finished)), when the next batch starts
/// looking up, and when the binding drops.
///
/// # The end of a batch (P6)
///
/// [`batch_finished`](Self::batch_finished) also tells the store the batch
/// is over ([`ArtifactStore::batch_finished`]), where a store with a size
/// limit brings itself within it: every backend whose target forwards its
/// [`CompilationTarget::batch_finished`](crate::CompilationTarget::batch_finished) here gets that.
///
/// ```
/// use std::sync::Arc;
///
/// use kiln_core::fake::{FakeCompiler, FakeKernel};
/// use kiln_core::store::{ArtifactStore, BoundStore};
/// # fn with(store: Arc<dyn ArtifactStore>) {
/// let compiler = FakeCompiler::default();
/// let mut bound = BoundStore::new(store, &compiler);
/// let id = FakeKernel::new(1).artifact_id();
/// let found = bound.lookup(&compiler, &id);
/// # }
/// ```
///
/// [`CompilationTarget`]: crate::CompilationTarget
pub struct BoundStore<C: KeyedCompiler> {
    store: Arc<dyn ArtifactStore>,
    generation: Generation,
    components: KeyComponents,
    claims: FxHashMap<ArtifactId<C::Variant>, ClaimGuard>,
    /// Whether the latest call was a lookup by id. The loader looks every
    /// kernel of a batch up first, so a lookup after anything else starts a
    /// new batch, and the claims the last one left are of kernels that
    /// failed.
    looking_up: bool,
    compiler: PhantomData<fn() -> C>,
}

impl<C: KeyedCompiler> BoundStore<C> {
    /// Binds `store` to `compiler`'s keys.
    pub fn new(store: Arc<dyn ArtifactStore>, compiler: &C) -> Self {
        Self {
            generation: store.generation(),
            store,
            components: compiler.key_components(),
            claims: FxHashMap::default(),
            looking_up: false,
            compiler: PhantomData,
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn ArtifactStore> {
        &self.store
    }

    /// The components of every key this binding makes.
    pub fn components(&self) -> &KeyComponents {
        &self.components
    }

    /// The store's generation: one atomic load.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.current()
    }

    /// The key `id` is stored under.
    pub fn artifact_key(&self, compiler: &C, id: &ArtifactId<C::Variant>) -> StoreKey {
        StoreKey::for_artifact(&self.components, id, compiler.entry_point(id))
    }

    /// The key lowered `source` of `id` is stored under.
    pub fn source_key(&self, compiler: &C, id: &ArtifactId<C::Variant>, source: &str) -> StoreKey {
        StoreKey::for_source(&self.components, id, compiler.entry_point(id), source)
    }

    /// The artifact stored for `id`. A miss claims the key, waiting for
    /// another process compiling it and reading its artifact when it can.
    pub fn lookup(&mut self, compiler: &C, id: &ArtifactId<C::Variant>) -> Lookup<C::Artifact> {
        if !self.looking_up {
            self.drop_claims();
            self.looking_up = true;
        }
        self.claims.remove(id);
        let key = self.artifact_key(compiler, id);
        let found = self.decoded(&key);
        if matches!(found, Lookup::Hit { .. }) {
            return found;
        }
        let wait = if self.claims.is_empty() {
            ClaimWait::Patiently
        } else {
            ClaimWait::Once
        };
        match self.store.claim(&key, wait) {
            Claim::Held(guard) => {
                // Whoever held the claim before may have published it.
                let again = self.decoded(&key);
                if matches!(again, Lookup::Hit { .. }) {
                    return again;
                }
                self.claims.insert(id.clone(), guard);
                again
            }
            Claim::Busy | Claim::Uncoordinated => found,
        }
    }

    /// The artifact stored for lowered `source` of `id`'s variant.
    pub fn lookup_source(
        &mut self,
        compiler: &C,
        id: &ArtifactId<C::Variant>,
        source: &str,
    ) -> Lookup<C::Artifact> {
        self.looking_up = false;
        let key = self.source_key(compiler, id, source);
        self.decoded(&key)
    }

    /// Stores `artifact` under `id` and, when given, `source`, then releases
    /// the claim on `id`.
    pub fn put(
        &mut self,
        compiler: &C,
        id: &ArtifactId<C::Variant>,
        artifact: &C::Artifact,
        source: Option<&str>,
        work: Duration,
    ) -> StoreOutcome {
        self.looking_up = false;
        let outcome = match encoding::encode(artifact) {
            Ok(bytes) => {
                let key = self.artifact_key(compiler, id);
                let source_key = source.map(|source| self.source_key(compiler, id, source));
                self.store.put(&key, source_key.as_ref(), &bytes, work)
            }
            Err(error) => StoreOutcome::Failed {
                detail: format!("the artifact does not serialize: {error}"),
            },
        };
        // Released after publishing, so a waiter reads the artifact.
        self.claims.remove(id);
        outcome
    }

    /// Why `id` is or is not in the store (P9).
    pub fn explain(&self, compiler: &C, id: &ArtifactId<C::Variant>) -> Explanation {
        self.store.explain(&self.artifact_key(compiler, id))
    }

    /// Ends a batch: releases every claim held, as their kernels will not
    /// be stored (P4), and tells the store, which may evict to hold its
    /// limits ([`ArtifactStore::batch_finished`], P6). What a target's
    /// [`CompilationTarget::batch_finished`](crate::CompilationTarget::batch_finished)
    /// calls.
    pub fn batch_finished(&mut self) {
        self.drop_claims();
        self.store.batch_finished();
    }

    /// [`batch_finished`](Self::batch_finished), by the name targets
    /// written before the store's batch-end call use.
    pub fn release_claims(&mut self) {
        self.batch_finished();
    }

    fn drop_claims(&mut self) {
        if !self.claims.is_empty() {
            log::debug!("releasing {} claims of unstored kernels", self.claims.len());
            self.claims.clear();
        }
    }

    /// How many claims this binding holds.
    pub fn claims_held(&self) -> usize {
        self.claims.len()
    }

    fn decoded(&self, key: &StoreKey) -> Lookup<C::Artifact> {
        match self.store.lookup(key) {
            Lookup::Hit {
                artifact,
                bytes,
                work,
            } => match encoding::decode(&artifact) {
                Ok((decoded, read)) if read == artifact.len() => Lookup::Hit {
                    artifact: decoded,
                    bytes,
                    work,
                },
                Ok(_) => self.undecodable(key, "bytes left over".into()),
                Err(error) => self.undecodable(key, error.to_string()),
            },
            Lookup::Miss(miss) => Lookup::Miss(miss),
        }
    }

    fn undecodable(&self, key: &StoreKey, detail: String) -> Lookup<C::Artifact> {
        // Verified bytes that are not this compiler's artifact: the artifact
        // type changed without the compiler identity changing.
        self.store.remove(key);
        Lookup::Miss(Miss::Corrupt {
            detail: format!("the stored bytes are not this compiler's artifact: {detail}"),
        })
    }
}

impl<C: KeyedCompiler> fmt::Debug for BoundStore<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoundStore")
            .field("store", &self.store)
            .field("components", &self.components)
            .field("claims", &self.claims.len())
            .finish_non_exhaustive()
    }
}

/// A [`BoundStore`] that holds the artifacts of one architecture only.
///
/// Every key a target's store makes names the target's architecture (P1).
/// A kernel asked for under a variant of another architecture would be
/// filed under components that misname it — in `kiln ls`, in a bundle
/// exported for this architecture — so it bypasses the store instead: its
/// lookups miss and its artifact is not stored.
#[derive(Debug)]
pub struct ArchitectureStore<C: KeyedCompiler, A> {
    bound: BoundStore<C>,
    architecture: A,
    /// The architecture a variant compiles for.
    architecture_of: fn(&C::Variant) -> &A,
}

impl<C: KeyedCompiler, A: PartialEq + fmt::Display> ArchitectureStore<C, A> {
    /// `bound`, keeping the artifacts whose variant's architecture, as
    /// `architecture_of` reads it, is `architecture`.
    pub fn new(
        bound: BoundStore<C>,
        architecture: A,
        architecture_of: fn(&C::Variant) -> &A,
    ) -> Self {
        Self {
            bound,
            architecture,
            architecture_of,
        }
    }

    /// The binding: components, keys, explanations.
    pub fn bound(&self) -> &BoundStore<C> {
        &self.bound
    }

    /// The architecture whose artifacts it keeps.
    pub fn architecture(&self) -> &A {
        &self.architecture
    }

    /// The store's generation: one atomic load.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.bound.generation()
    }

    /// Whether artifacts of `id` belong in this store.
    fn keeps(&self, id: &ArtifactId<C::Variant>) -> bool {
        let asked = (self.architecture_of)(&id.variant);
        let keeps = *asked == self.architecture;
        if !keeps {
            log::debug!(
                "{} is asked for {asked}, not the store's {}: it bypasses the store",
                id.kernel,
                self.architecture
            );
        }
        keeps
    }

    /// [`BoundStore::lookup`], for the store's architecture only.
    pub fn lookup(&mut self, compiler: &C, id: &ArtifactId<C::Variant>) -> Lookup<C::Artifact> {
        if !self.keeps(id) {
            return Lookup::Miss(Miss::Absent);
        }
        self.bound.lookup(compiler, id)
    }

    /// [`BoundStore::lookup_source`], for the store's architecture only.
    pub fn lookup_source(
        &mut self,
        compiler: &C,
        id: &ArtifactId<C::Variant>,
        source: &str,
    ) -> Lookup<C::Artifact> {
        if !self.keeps(id) {
            return Lookup::Miss(Miss::Absent);
        }
        self.bound.lookup_source(compiler, id, source)
    }

    /// [`BoundStore::put`], for the store's architecture only.
    pub fn put(
        &mut self,
        compiler: &C,
        id: &ArtifactId<C::Variant>,
        artifact: &C::Artifact,
        source: Option<&str>,
        work: Duration,
    ) -> StoreOutcome {
        if !self.keeps(id) {
            return StoreOutcome::Skipped;
        }
        self.bound.put(compiler, id, artifact, source, work)
    }

    /// Ends a batch: [`BoundStore::batch_finished`].
    pub fn batch_finished(&mut self) {
        self.bound.batch_finished();
    }
}

/// Where a target keeps its [`ArchitectureStore`], if it has one: the
/// store half of a [`CompilationTarget`](crate::CompilationTarget) written
/// once, so that a target forwards `lookup`, `lookup_source`, `store`,
/// `generation` and `batch_finished` here whether it persists or not. An
/// empty slot misses every lookup, stores nothing and never changes
/// generation.
#[derive(Debug)]
pub struct StoreSlot<C: KeyedCompiler, A>(Option<ArchitectureStore<C, A>>);

impl<C: KeyedCompiler, A: PartialEq + fmt::Display> StoreSlot<C, A> {
    /// A slot with no store: the target keeps nothing.
    pub fn empty() -> Self {
        Self(None)
    }

    /// Puts `store` in the slot, in place of any store it held.
    pub fn set(&mut self, store: ArchitectureStore<C, A>) {
        self.0 = Some(store);
    }

    /// The store, when there is one.
    pub fn get(&self) -> Option<&ArchitectureStore<C, A>> {
        self.0.as_ref()
    }

    /// Whether the slot holds a store: what the target's `persists` says.
    pub fn is_bound(&self) -> bool {
        self.0.is_some()
    }

    /// The store's generation, 0 without one: one atomic load.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.0.as_ref().map_or(0, ArchitectureStore::generation)
    }

    /// [`ArchitectureStore::lookup`], or a miss without a store.
    pub fn lookup(&mut self, compiler: &C, id: &ArtifactId<C::Variant>) -> Lookup<C::Artifact> {
        match &mut self.0 {
            Some(store) => store.lookup(compiler, id),
            None => Lookup::Miss(Miss::Absent),
        }
    }

    /// [`ArchitectureStore::lookup_source`], or a miss without a store.
    pub fn lookup_source(
        &mut self,
        compiler: &C,
        id: &ArtifactId<C::Variant>,
        source: &str,
    ) -> Lookup<C::Artifact> {
        match &mut self.0 {
            Some(store) => store.lookup_source(compiler, id, source),
            None => Lookup::Miss(Miss::Absent),
        }
    }

    /// [`ArchitectureStore::put`], or nothing without a store.
    pub fn put(
        &mut self,
        compiler: &C,
        id: &ArtifactId<C::Variant>,
        artifact: &C::Artifact,
        source: Option<&str>,
        work: Duration,
    ) -> StoreOutcome {
        match &mut self.0 {
            Some(store) => store.put(compiler, id, artifact, source, work),
            None => StoreOutcome::Skipped,
        }
    }

    /// Ends a batch, when there is a store: lets go of its claims (P4) and
    /// lets the store hold its limits (P6).
    pub fn batch_finished(&mut self) {
        if let Some(store) = &mut self.0 {
            store.batch_finished();
        }
    }
}
