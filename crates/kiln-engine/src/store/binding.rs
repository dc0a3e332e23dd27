//! A store bound to one compiler: [`BoundStore`], through which a
//! [`KernelLoader`](crate::KernelLoader) does every lookup, claim and put
//! of its target's store.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use super::claim::{Claim, ClaimGuard, ClaimWait};
use super::failure::RememberedFailure;
use super::generation::Generation;
use super::key::{KeyComponents, KeyedCompiler, StoreKey};
use super::recipe::{Recipe, decode_value, encode_value};
use super::{ArtifactStore, Explanation, Lookup, Miss, Origin, Put, StoreOutcome};
use crate::encoding;
use crate::id::ArtifactId;

/// What claiming a missing kernel got (P4, P12).
#[derive(Debug)]
pub enum Claimed<A> {
    /// Another process published it meanwhile: the hit to load.
    Published(Lookup<A>),
    /// This caller compiles it. Others wait for its artifact while the
    /// claim is held: until it is given to [`BoundStore::put`], which
    /// releases it once the artifact is published, or dropped, for a kernel
    /// that failed. `None` when the store does not coordinate compiles.
    Mine(Option<ClaimGuard>),
    /// Another holder compiles it now: ask again later with
    /// [`BoundStore::take_published`].
    Elsewhere,
}

/// A `dyn` [`ArtifactStore`] bound to one compiler: its keys and its
/// artifact type. A loader binds its target's
/// [`store`](crate::CompilationTarget::store) once and does every store
/// call of its batches through the binding, from its own thread and its
/// workers; targets keep none.
///
/// # Single flight (P4)
///
/// [`lookup`](Self::lookup) takes no lock. A kernel it misses is
/// [`claim`](Self::claim)ed without waiting, by the worker about to compile
/// it, so that other processes asking for it wait for this one's artifact
/// instead of compiling it too. The claim is a value ([`ClaimGuard`]) held
/// with the kernel it is for: [`put`](Self::put) takes it and releases it
/// once the artifact is published, and a kernel that fails drops it. A
/// kernel another holds is [`Claimed::Elsewhere`]: the loader compiles what
/// it claimed, then asks again ([`take_published`](Self::take_published))
/// until the holder publishes it, releases it, or its lease runs out (P12).
/// Nothing waits while holding a claim, so two processes never wait on
/// each other.
///
/// # The end of a batch (P6)
///
/// [`batch_finished`](Self::batch_finished) also tells the store the batch
/// is over ([`Groups::batch_finished`](super::Groups::batch_finished)),
/// where a store with a size limit brings itself within it.
///
/// ```
/// use std::sync::Arc;
///
/// use kiln_engine::fake::{FakeCompiler, FakeKernel};
/// use kiln_engine::store::{ArtifactStore, BoundStore, Claimed, Lookup};
/// # fn with(store: Arc<dyn ArtifactStore>) {
/// let compiler = FakeCompiler::default();
/// let bound = BoundStore::new(store, &compiler);
/// let id = FakeKernel::new(1).artifact_id();
/// if let Lookup::Miss(_) = bound.lookup(&compiler, &id) {
///     match bound.claim(&compiler, &id) {
///         // Another process stored it meanwhile.
///         Claimed::Published(hit) => {}
///         // Compile it, then `bound.put(.., claim)` publishes it and
///         // releases the claim.
///         Claimed::Mine(claim) => {}
///         // Another process compiles it: ask again after compiling the rest.
///         Claimed::Elsewhere => {}
///     }
/// }
/// bound.batch_finished();
/// # }
/// ```
pub struct BoundStore<C: KeyedCompiler> {
    store: Arc<dyn ArtifactStore>,
    generation: Generation,
    components: KeyComponents,
    compiler: PhantomData<fn() -> C>,
}

impl<C: KeyedCompiler> BoundStore<C> {
    /// Binds `store` to `compiler`'s keys.
    pub fn new(store: Arc<dyn ArtifactStore>, compiler: &C) -> Self {
        Self {
            generation: store.generation(),
            store,
            components: compiler.key_components(),
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

    /// The artifact stored for `id`. Takes no lock: a miss the caller will
    /// compile is [`claim`](Self::claim)ed next.
    pub fn lookup(&self, compiler: &C, id: &ArtifactId<C::Variant>) -> Lookup<C::Artifact> {
        self.decoded(&self.artifact_key(compiler, id))
    }

    /// What [`lookup`](Self::lookup) answers for each of `ids`, in their
    /// order, asked of the store at once ([`lookup_each`](Self::lookup_each)
    /// gathered).
    pub fn lookup_many(
        &self,
        compiler: &C,
        ids: &[&ArtifactId<C::Variant>],
    ) -> Vec<Lookup<C::Artifact>> {
        let mut answers: Vec<Option<Lookup<C::Artifact>>> = ids.iter().map(|_| None).collect();
        self.lookup_each(compiler, ids, &mut |at, found| answers[at] = Some(found));
        answers
            .into_iter()
            .map(|answer| answer.unwrap_or(Lookup::Miss(Miss::Absent)))
            .collect()
    }

    /// What [`lookup_many`](Self::lookup_many) answers, handed to `found`
    /// with each id's place in `ids` as soon as the store has it
    /// ([`ArtifactStore::lookup_each`]), decoded on the caller's thread.
    pub fn lookup_each(
        &self,
        compiler: &C,
        ids: &[&ArtifactId<C::Variant>],
        found: &mut dyn FnMut(usize, Lookup<C::Artifact>),
    ) {
        let keys: Vec<StoreKey> = ids
            .iter()
            .map(|id| self.artifact_key(compiler, id))
            .collect();
        // A batch that asks again waits for others: what it wrote is made
        // durable first (the store's group commit), a step's end.
        self.store.parts().commit_group();
        // Each artifact decoded on the thread that read it (F11): the
        // caller's thread, which loads, only takes it.
        let shape = |at: usize, lookup: Lookup<Vec<u8>>| -> super::Shaped {
            Box::new(self.decode(&keys[at], lookup))
        };
        self.store
            .lookup_each_shaped(&keys, &shape, &mut |at, shaped| {
                match shaped.downcast::<Lookup<C::Artifact>>() {
                    Ok(decoded) => found(at, *decoded),
                    // Only this function's `shape` makes what it is handed.
                    Err(_) => found(
                        at,
                        Lookup::Miss(Miss::Unreadable {
                            detail: "the store answered in another shape than asked".into(),
                        }),
                    ),
                }
            });
    }

    /// Claims the right to compile `id` (P4, P12) after its lookup missed,
    /// without waiting: a worker claims the key it is about to compile, and
    /// a key another holds is left for later
    /// ([`take_published`](Self::take_published)).
    pub fn claim(&self, compiler: &C, id: &ArtifactId<C::Variant>) -> Claimed<C::Artifact> {
        let key = self.artifact_key(compiler, id);
        match self.store.parts().claim(&key, ClaimWait::Once) {
            Claim::Held(guard) => match self.decoded(&key) {
                // The holder before published it meanwhile.
                hit @ Lookup::Hit { .. } => Claimed::Published(hit),
                Lookup::Miss(_) => Claimed::Mine(Some(guard)),
            },
            Claim::Uncoordinated => Claimed::Mine(None),
            Claim::Busy => Claimed::Elsewhere,
        }
    }

    /// Asks again for `id`, which another holds: its artifact once
    /// published, the claim once its holder released it unpublished or its
    /// lease ran out, or [`Claimed::Elsewhere`] while it is still held
    /// (P12).
    pub fn take_published(
        &self,
        compiler: &C,
        id: &ArtifactId<C::Variant>,
    ) -> Claimed<C::Artifact> {
        self.store.parts().commit_group();
        match self.lookup(compiler, id) {
            hit @ Lookup::Hit { .. } => Claimed::Published(hit),
            Lookup::Miss(_) => self.claim(compiler, id),
        }
    }

    /// How long a batch waits for keys others hold before compiling them
    /// too ([`Claims::claim_timeout`](super::Claims::claim_timeout)).
    pub fn claim_timeout(&self) -> Duration {
        self.store.parts().claim_timeout()
    }

    /// The artifact stored for lowered `source` of `id`'s variant.
    pub fn lookup_source(
        &self,
        compiler: &C,
        id: &ArtifactId<C::Variant>,
        source: &str,
    ) -> Lookup<C::Artifact> {
        self.decoded(&self.source_key(compiler, id, source))
    }

    /// The artifacts stored for each lowered source of `wanted` (an id and
    /// its text): one lookup of many keys, a remote store's one round trip.
    pub fn lookup_sources(
        &self,
        compiler: &C,
        wanted: &[(&ArtifactId<C::Variant>, &str)],
    ) -> Vec<Lookup<C::Artifact>> {
        let keys: Vec<StoreKey> = wanted
            .iter()
            .map(|(id, source)| self.source_key(compiler, id, source))
            .collect();
        let found = self.store.lookup_many(&keys);
        debug_assert_eq!(found.len(), keys.len(), "one answer per key");
        keys.iter()
            .zip(found)
            .map(|(key, lookup)| self.decode(key, lookup))
            .collect()
    }

    /// Stores `artifact` under `id` and, when given, `source`, with the
    /// `recipe` it was finalized from after it when there is one (so `kiln
    /// verify --recompile` can finalize it again), then releases `claim`,
    /// the claim on `id` (P4): a waiter reads the artifact.
    #[allow(
        clippy::too_many_arguments,
        reason = "each is a part of one put, named at the call"
    )]
    pub fn put(
        &self,
        compiler: &C,
        id: &ArtifactId<C::Variant>,
        artifact: &C::Artifact,
        recipe: Option<&Recipe>,
        source: Option<&str>,
        rekeyed: bool,
        work: Duration,
        claim: Option<ClaimGuard>,
    ) -> StoreOutcome {
        let outcome = match encode_value(artifact, recipe) {
            Ok(bytes) => {
                let key = self.artifact_key(compiler, id);
                let source_key = source.map(|source| self.source_key(compiler, id, source));
                let origin = match (&source_key, rekeyed) {
                    (Some(source_key), true) => Origin::Rekeyed { source_key },
                    (source_key, _) => Origin::Compiled {
                        source_key: source_key.as_ref(),
                    },
                };
                super::one(self.store.put_many(&[Put {
                    key: &key,
                    bytes: &bytes,
                    work,
                    origin,
                }]))
            }
            Err(error) => StoreOutcome::Failed {
                detail: format!("the artifact does not serialize: {error}"),
            },
        };
        // Released after publishing, so a waiter reads the artifact.
        drop(claim);
        outcome
    }

    /// The put of a kernel that took the artifact of another kernel with
    /// the same text (`source`), encoded now and held with its `claim`
    /// until [`put_rekeyed_many`](Self::put_rekeyed_many) writes it with
    /// the others of its round.
    #[allow(
        clippy::too_many_arguments,
        reason = "each is a part of one put, named at the call"
    )]
    pub fn rekeyed(
        &self,
        compiler: &C,
        id: &ArtifactId<C::Variant>,
        artifact: &C::Artifact,
        recipe: Option<&Recipe>,
        source: &str,
        work: Duration,
        claim: Option<ClaimGuard>,
    ) -> PendingRekey {
        PendingRekey {
            key: self.artifact_key(compiler, id),
            source_key: self.source_key(compiler, id, source),
            bytes: encode_value(artifact, recipe)
                .map_err(|error| format!("the artifact does not serialize: {error}")),
            work,
            claim,
        }
    }

    /// Stores each of `pending` under its kernel's own key, all in one
    /// put ([`ArtifactStore::put_many`], each [`Origin::Rekeyed`]: a few
    /// syncs for the round, not a few per kernel), then releases their claims (P4): a
    /// waiter reads the artifact. Answers each in their order.
    pub fn put_rekeyed_many(&self, pending: Vec<PendingRekey>) -> Vec<StoreOutcome> {
        let puts: Vec<Put<'_>> = pending
            .iter()
            .filter_map(|pending| {
                let bytes = pending.bytes.as_ref().ok()?;
                Some(Put {
                    key: &pending.key,
                    bytes,
                    work: pending.work,
                    origin: Origin::Rekeyed {
                        source_key: &pending.source_key,
                    },
                })
            })
            .collect();
        let mut stored = if puts.is_empty() {
            Vec::new()
        } else {
            self.store.put_many(&puts)
        }
        .into_iter();
        debug_assert_eq!(stored.len(), puts.len(), "one answer per put");
        drop(puts);
        pending
            .into_iter()
            .map(|pending| {
                let outcome = match &pending.bytes {
                    Ok(_) => stored.next().unwrap_or_else(|| StoreOutcome::Failed {
                        detail: "the store gave no answer for this put".to_owned(),
                    }),
                    Err(detail) => StoreOutcome::Failed {
                        detail: detail.clone(),
                    },
                };
                // Released after publishing, so a waiter reads the artifact.
                drop(pending.claim);
                outcome
            })
            .collect()
    }

    /// What the store remembers of `id`'s failed compiles (P11), if
    /// anything; a memory that does not decode is none.
    pub fn remembered_failure(
        &self,
        compiler: &C,
        id: &ArtifactId<C::Variant>,
    ) -> Option<RememberedFailure> {
        let key = RememberedFailure::blob_key(&self.artifact_key(compiler, id));
        match self.store.parts().lookup_blob(&key) {
            Lookup::Hit { artifact, .. } => {
                match encoding::decode::<RememberedFailure>(&artifact) {
                    Ok((memory, read)) if read == artifact.len() && !memory.is_empty() => {
                        Some(memory)
                    }
                    Ok(_) => None,
                    Err(error) => {
                        log::debug!("a failure memory of {id} does not decode: {error}");
                        None
                    }
                }
            }
            Lookup::Miss(_) => None,
        }
    }

    /// Remembers `memory` of `id`'s failed compiles (P11), in place of
    /// what was remembered; [`RememberedFailure::forgotten`] forgets.
    pub fn remember_failure(
        &self,
        compiler: &C,
        id: &ArtifactId<C::Variant>,
        memory: &RememberedFailure,
    ) -> StoreOutcome {
        let key = RememberedFailure::blob_key(&self.artifact_key(compiler, id));
        match encoding::encode(memory) {
            Ok(bytes) => self.store.parts().put_blob(&key, &bytes),
            Err(error) => StoreOutcome::Failed {
                detail: format!("the failure does not serialize: {error}"),
            },
        }
    }

    /// Why `id` is or is not in the store (P9).
    pub fn explain(&self, compiler: &C, id: &ArtifactId<C::Variant>) -> Explanation {
        self.store.parts().explain(&self.artifact_key(compiler, id))
    }

    /// Opens a group commit on the calling thread
    /// ([`Groups::begin_group`](super::Groups::begin_group)): the batch's
    /// writes are made durable together when it waits for others or ends.
    pub fn begin_group(&self) {
        self.store.parts().begin_group();
    }

    /// Ends a batch: tells the store, which may evict to hold its limits
    /// ([`Groups::batch_finished`](super::Groups::batch_finished), P6), and
    /// makes the batch's writes durable together
    /// ([`Groups::commit_group`](super::Groups::commit_group)). Every claim
    /// of the batch went with its kernel.
    pub fn batch_finished(&self) {
        let parts = self.store.parts();
        parts.batch_finished();
        parts.commit_group();
    }

    /// Who holds the claim of `id` ([`Claims::holder`](super::Claims::holder)).
    pub fn holder(&self, compiler: &C, id: &ArtifactId<C::Variant>) -> Option<String> {
        self.store.parts().holder(&self.artifact_key(compiler, id))
    }

    /// Hands the store the encoded record of the batch that ended
    /// ([`Records::keep_batch`](super::Records::keep_batch)).
    pub fn keep_batch(&self, record: &[u8]) {
        self.store.parts().keep_batch(record);
    }

    fn decoded(&self, key: &StoreKey) -> Lookup<C::Artifact> {
        self.decode(key, self.store.lookup(key))
    }

    fn decode(&self, key: &StoreKey, found: Lookup<Vec<u8>>) -> Lookup<C::Artifact> {
        match found {
            Lookup::Hit {
                artifact,
                bytes,
                work,
            } => match decode_value::<C::Artifact>(&artifact) {
                Ok(value) => Lookup::Hit {
                    artifact: value.artifact,
                    bytes,
                    work,
                },
                Err(detail) => self.undecodable(key, detail),
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

/// A rekeyed kernel's put, encoded and waiting for
/// [`BoundStore::put_rekeyed_many`] with its claim (P4).
#[derive(Debug)]
pub struct PendingRekey {
    key: StoreKey,
    source_key: StoreKey,
    bytes: Result<Vec<u8>, String>,
    work: Duration,
    claim: Option<ClaimGuard>,
}

impl<C: KeyedCompiler> fmt::Debug for BoundStore<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoundStore")
            .field("store", &self.store)
            .field("components", &self.components)
            .finish_non_exhaustive()
    }
}
