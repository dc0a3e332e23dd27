//! The persistent store seen from the core: what an artifact's key is made
//! of, the object-safe [`ArtifactStore`] trait a store implements, and
//! [`BoundStore`], the glue a backend's [`CompilationTarget`] delegates its
//! `lookup`, `lookup_source` and `store` to.
//!
//! # Keys (P1)
//!
//! Every key carries each component that changes an artifact's bytes, in the
//! clear, so that a record can be checked against the key it was asked for
//! and a miss can name what changed (P9):
//!
//! - the store format version ([`STORE_FORMAT`]),
//! - what the compiler names once for all its artifacts
//!   ([`KeyComponents`]: backend, compiler identity and version,
//!   architecture, options), from [`KeyedCompiler::key_components`],
//! - the variant the artifact is compiled under,
//! - the entry point, when the compiler is given one apart from the source,
//! - the subject: the kernel (its id, for lookups before lowering) or the
//!   BLAKE3 digest of the lowered source (for lookups after it, P7).
//!
//! A key's [`digest`](StoreKey::digest) is a BLAKE3 hash of all of that, so
//! two processes with the same inputs compute the same key, and any changed
//! component gives another.
//!
//! # Where it runs
//!
//! Nothing here is on the hot path: the loader touches a store only in a
//! batch. The one thing it reads on every launch is the store's
//! [`Generation`], a shared atomic that a [`BoundStore`] keeps a handle to,
//! so [`CompilationTarget::generation`] stays one atomic load.
//!
//! [`CompilationTarget`]: crate::CompilationTarget
//! [`CompilationTarget::generation`]: crate::CompilationTarget::generation

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::id::ArtifactId;
use crate::target::{ArtifactCompiler, Lookup, Miss, StoreOutcome};

/// The version of the store's key and record format. Part of every key: a
/// change of format makes every earlier entry a miss instead of a misread.
pub const STORE_FORMAT: u32 = 1;

/// What every artifact of one compiler shares in its key (P1).
///
/// Each field is text that a person can read in `kiln ls` and in a miss's
/// explanation; two compilers that could produce different bytes must differ
/// in at least one field.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KeyComponents {
    /// The backend: `cuda`, `hip`, `wgpu`.
    pub backend: String,
    /// The compiler's identity and version: `nvrtc 12.4`, `hiprtc 6.1`,
    /// `naga 24 / driver 550.54`.
    pub compiler: String,
    /// The architecture compiled for: `sm_90`, `gfx942`, an adapter name.
    pub architecture: String,
    /// The compile options, in a canonical order.
    pub options: String,
}

impl KeyComponents {
    /// Components from their four parts.
    pub fn new(
        backend: impl Into<String>,
        compiler: impl Into<String>,
        architecture: impl Into<String>,
        options: impl Into<String>,
    ) -> Self {
        Self {
            backend: backend.into(),
            compiler: compiler.into(),
            architecture: architecture.into(),
            options: options.into(),
        }
    }
}

impl fmt::Display for KeyComponents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} / {} / {}",
            self.backend, self.compiler, self.architecture
        )?;
        if !self.options.is_empty() {
            write!(f, " / {}", self.options)?;
        }
        Ok(())
    }
}

/// One component of a key, to say which one differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum KeyComponent {
    /// [`STORE_FORMAT`].
    Format,
    /// [`KeyComponents::backend`].
    Backend,
    /// [`KeyComponents::compiler`].
    Compiler,
    /// [`KeyComponents::architecture`].
    Architecture,
    /// [`KeyComponents::options`].
    Options,
    /// [`StoreKey::variant`].
    Variant,
    /// [`StoreKey::entry_point`].
    EntryPoint,
    /// The kernel of [`KeySubject::Kernel`].
    Kernel,
    /// The source of [`KeySubject::Source`].
    Source,
}

impl fmt::Display for KeyComponent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Format => "store format version",
            Self::Backend => "backend",
            Self::Compiler => "compiler",
            Self::Architecture => "architecture",
            Self::Options => "compile options",
            Self::Variant => "variant",
            Self::EntryPoint => "entry point",
            Self::Kernel => "kernel",
            Self::Source => "source",
        })
    }
}

/// What a key is about: a kernel, looked up before lowering, or the text it
/// lowered to, looked up after.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum KeySubject {
    /// A kernel by its id.
    Kernel {
        /// [`KernelId::name`](crate::KernelId::name).
        name: String,
        /// [`KernelId::digest`](crate::KernelId::digest).
        digest: u128,
    },
    /// Lowered source text by its BLAKE3 digest.
    Source {
        /// The digest of the text.
        digest: [u8; 32],
    },
}

/// The full key of one stored artifact: every component that changes its
/// bytes (P1).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StoreKey {
    /// [`STORE_FORMAT`] when the key was made.
    pub format: u32,
    /// What the compiler shares with all its artifacts.
    pub components: KeyComponents,
    /// The variant, serialized: what identifies it.
    pub variant: Vec<u8>,
    /// The variant as a person reads it (its `Debug` form).
    pub variant_text: String,
    /// The entry point, when the compiler takes it apart from the source.
    pub entry_point: Option<String>,
    /// The kernel or the source.
    pub subject: KeySubject,
}

/// A key component that differs between two keys, with both values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Difference {
    /// Which component.
    pub component: KeyComponent,
    /// Its value in the key the store holds.
    pub stored: String,
    /// Its value in the key asked for.
    pub asked: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} changed: {:?} -> {:?}",
            self.component, self.stored, self.asked
        )
    }
}

impl StoreKey {
    /// The key of `id` as compiled by a compiler with `components`.
    pub fn for_artifact<V: Serialize + fmt::Debug>(
        components: &KeyComponents,
        id: &ArtifactId<V>,
        entry_point: Option<String>,
    ) -> Self {
        Self::new(
            components,
            &id.variant,
            entry_point,
            KeySubject::Kernel {
                name: id.kernel.name().to_owned(),
                digest: id.kernel.digest(),
            },
        )
    }

    /// The key of lowered `source` compiled under `id`'s variant by a
    /// compiler with `components`, whatever kernel it came from.
    pub fn for_source<V: Serialize + fmt::Debug>(
        components: &KeyComponents,
        id: &ArtifactId<V>,
        entry_point: Option<String>,
        source: &str,
    ) -> Self {
        Self::new(
            components,
            &id.variant,
            entry_point,
            KeySubject::Source {
                digest: *blake3::hash(source.as_bytes()).as_bytes(),
            },
        )
    }

    fn new<V: Serialize + fmt::Debug>(
        components: &KeyComponents,
        variant: &V,
        entry_point: Option<String>,
        subject: KeySubject,
    ) -> Self {
        Self {
            format: STORE_FORMAT,
            components: components.clone(),
            variant: encode(variant).unwrap_or_else(|error| {
                // A variant serde cannot write still needs a key; its text is
                // the best stand-in, and it stays distinct per value.
                log::warn!("variant {variant:?} does not serialize ({error}); keyed by its text");
                format!("{variant:?}").into_bytes()
            }),
            variant_text: format!("{variant:?}"),
            entry_point,
            subject,
        }
    }

    /// Whether this key is of lowered source rather than of a kernel.
    pub fn is_source(&self) -> bool {
        matches!(self.subject, KeySubject::Source { .. })
    }

    /// The kernel this key is of, as `(name, digest)`, if it is of a kernel.
    pub fn kernel(&self) -> Option<(&str, u128)> {
        match &self.subject {
            KeySubject::Kernel { name, digest } => Some((name, *digest)),
            KeySubject::Source { .. } => None,
        }
    }

    /// The BLAKE3 digest of every component: the name the key is stored
    /// under, the same in every process.
    pub fn digest(&self) -> [u8; 32] {
        let mut hasher = blake3::Hasher::new_derive_key("kiln store key");
        hasher.update(&encode(self).expect("a key is plain data and always serializes"));
        *hasher.finalize().as_bytes()
    }

    /// The first component, in the order of [`KeyComponent`], in which `self`
    /// (what the store holds) differs from `asked`.
    pub fn first_difference(&self, asked: &StoreKey) -> Option<Difference> {
        let differs = |component, stored: &dyn fmt::Display, asked: &dyn fmt::Display| {
            Some(Difference {
                component,
                stored: stored.to_string(),
                asked: asked.to_string(),
            })
        };
        let (held, wanted) = (&self.components, &asked.components);
        if self.format != asked.format {
            return differs(KeyComponent::Format, &self.format, &asked.format);
        }
        if held.backend != wanted.backend {
            return differs(KeyComponent::Backend, &held.backend, &wanted.backend);
        }
        if held.compiler != wanted.compiler {
            return differs(KeyComponent::Compiler, &held.compiler, &wanted.compiler);
        }
        if held.architecture != wanted.architecture {
            return differs(
                KeyComponent::Architecture,
                &held.architecture,
                &wanted.architecture,
            );
        }
        if held.options != wanted.options {
            return differs(KeyComponent::Options, &held.options, &wanted.options);
        }
        if self.variant != asked.variant {
            return differs(
                KeyComponent::Variant,
                &self.variant_text,
                &asked.variant_text,
            );
        }
        if self.entry_point != asked.entry_point {
            let text = |entry: &Option<String>| entry.clone().unwrap_or_else(|| "none".into());
            return differs(
                KeyComponent::EntryPoint,
                &text(&self.entry_point),
                &text(&asked.entry_point),
            );
        }
        match (&self.subject, &asked.subject) {
            (a, b) if a == b => None,
            (KeySubject::Source { digest: a }, KeySubject::Source { digest: b }) => {
                differs(KeyComponent::Source, &hex(&a[..8]), &hex(&b[..8]))
            }
            _ => differs(
                KeyComponent::Kernel,
                &self.subject_text(),
                &asked.subject_text(),
            ),
        }
    }

    /// The subject as a person reads it: `name#digest` or `source:digest`.
    pub fn subject_text(&self) -> String {
        match &self.subject {
            KeySubject::Kernel { name, digest } => format!("{name}#{digest:032x}"),
            KeySubject::Source { digest } => format!("source:{}", hex(&digest[..8])),
        }
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use fmt::Write;
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        write!(text, "{byte:02x}").expect("writing to a String cannot fail");
    }
    text
}

/// Serializes `value` in the store's binary encoding.
fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, bincode::error::EncodeError> {
    bincode::serde::encode_to_vec(value, bincode::config::standard())
}

/// Which content a store holds, as a number the loader compares on every
/// launch (L10).
///
/// A handle to one shared atomic: cloning it is how a target keeps reading
/// the store's generation without a call into the store. Values are unique
/// in the process — a new store starts at a number no other store had, and
/// [`advance`](Self::advance) moves to another such number — so switching a
/// target from one store to another always changes what it reads.
#[derive(Debug, Clone)]
pub struct Generation(Arc<AtomicU64>);

/// The next generation value handed out in this process.
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

impl Generation {
    /// A generation no other store of this process has.
    pub fn fresh() -> Self {
        Self(Arc::new(AtomicU64::new(
            NEXT_GENERATION.fetch_add(1, Ordering::Relaxed),
        )))
    }

    /// The current value: one atomic load, no lock, no system call.
    #[inline]
    pub fn current(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Moves to a new value: the content changed.
    pub fn advance(&self) {
        self.0.store(
            NEXT_GENERATION.fetch_add(1, Ordering::Relaxed),
            Ordering::Release,
        );
    }
}

impl Default for Generation {
    fn default() -> Self {
        Self::fresh()
    }
}

/// How long [`ArtifactStore::claim`] may wait for another compiler of the
/// same key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimWait {
    /// Up to the store's lock timeout.
    Patiently,
    /// Not at all: one try. For a caller that already holds other claims,
    /// which must never wait while holding (two processes each holding what
    /// the other waits for would otherwise stall until the timeout).
    Once,
}

/// The right to compile one key, held until dropped (P4).
pub struct ClaimGuard(#[allow(dead_code, reason = "held for its Drop")] Box<dyn Send>);

impl ClaimGuard {
    /// A guard that releases the claim when `release` drops.
    pub fn new(release: impl Send + 'static) -> Self {
        Self(Box::new(release))
    }
}

impl fmt::Debug for ClaimGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClaimGuard")
    }
}

/// What asking to compile a key got.
#[derive(Debug)]
pub enum Claim {
    /// This caller compiles the key; others wait until the guard drops.
    Held(ClaimGuard),
    /// Another holds the key and did not release it in time: compile anyway
    /// (a duplicate compile, never a wrong artifact).
    Busy,
    /// The store does not coordinate compiles.
    Uncoordinated,
}

/// Why a store holds nothing for a kernel, or what changed (P9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Explanation {
    /// The store never held an entry for this kernel.
    NeverSeen,
    /// The store holds an entry under exactly this key.
    Held {
        /// When it was stored, in seconds since the Unix epoch.
        stored_at: u64,
    },
    /// The entry the store last held for the kernel had another key.
    Changed {
        /// The first component that differs.
        difference: Difference,
        /// When that entry was stored, in seconds since the Unix epoch.
        stored_at: u64,
    },
    /// The store held this very key and no longer does: evicted, or removed
    /// as bad.
    Gone {
        /// When it was stored, in seconds since the Unix epoch.
        stored_at: u64,
    },
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NeverSeen => f.write_str("never seen: the store never held this kernel"),
            Self::Held { .. } => f.write_str("held: the store has this kernel under this key"),
            Self::Changed { difference, .. } => write!(f, "{difference}"),
            Self::Gone { .. } => {
                f.write_str("gone: the store held this key and evicted or removed it")
            }
        }
    }
}

/// A store's counts since it was opened in this process (S4's store side).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreStatistics {
    /// Lookups that returned a verified artifact.
    pub hits: u64,
    /// Lookups that found nothing under the key.
    pub absent: u64,
    /// Lookups that found an entry that failed verification (removed).
    pub corrupt: u64,
    /// Lookups that found a record written for another key (removed).
    pub foreign: u64,
    /// Lookups that could not read the store.
    pub unreadable: u64,
    /// Claims that waited for another compiler of the same key.
    pub claims_waited: u64,
    /// Claims given up after the lock timeout.
    pub claims_timed_out: u64,
    /// Artifacts written.
    pub puts: u64,
    /// Writes that failed; each was counted under its cause and the
    /// kernel still loaded.
    pub put_failures: u64,
    /// Writes not attempted because the store is read-only.
    pub writes_skipped: u64,
    /// Bytes of artifacts read by hits.
    pub bytes_read: u64,
    /// Bytes of artifacts and records written.
    pub bytes_written: u64,
    /// Entries removed by eviction.
    pub evicted: u64,
}

/// Where artifacts outlive the process: the object-safe interface every
/// store (disk, remote, a composition of both) implements.
///
/// The store deals in bytes: [`BoundStore`] serializes a compiler's artifacts
/// and makes its keys.
///
/// # Contract
///
/// - [`lookup`](Self::lookup) takes a key of either subject: a kernel (an
///   artifact key) or lowered source (a source key). It returns
///   [`Lookup::Hit`] only with bytes whose digest and record it verified
///   (P2). Anything that did not verify is a [`Miss`] — `Corrupt` or
///   `ForeignKey` — and is removed; anything it could not read is
///   [`Miss::Unreadable`] (P5). A lookup never fails a launch.
/// - [`put`](Self::put) publishes atomically (P3): a reader sees the whole
///   entry or none of it, even if the writer dies. A failed write is
///   [`StoreOutcome::Failed`], counted, never a panic (P5).
/// - [`claim`](Self::claim) gives one caller among processes the right to
///   compile a key (P4); a claim of a dead process is released by the
///   system, and a waiter gives up after the store's timeout.
/// - [`generation`](Self::generation) returns a handle to the store's one
///   generation: it moves when the store starts holding other content.
/// - [`batch_finished`](Self::batch_finished) is called after the last put
///   of every batch of a loader bound to the store; a store with limits
///   is within them when it returns (P6).
/// - Every method may be called from any thread.
pub trait ArtifactStore: Send + Sync + fmt::Debug {
    /// The verified bytes stored under `key`, or why there are none.
    fn lookup(&self, key: &StoreKey) -> Lookup<Vec<u8>>;

    /// Asks for the right to compile `key`, waiting as `wait` allows for
    /// another process compiling it now.
    fn claim(&self, key: &StoreKey, wait: ClaimWait) -> Claim {
        let _ = (key, wait);
        Claim::Uncoordinated
    }

    /// Publishes `bytes` under `key` and, when given, under `source_key`;
    /// `work` is what compiling them took, returned by later hits.
    fn put(
        &self,
        key: &StoreKey,
        source_key: Option<&StoreKey>,
        bytes: &[u8],
        work: Duration,
    ) -> StoreOutcome;

    /// Removes whatever is stored under `key`: for bytes that verified but
    /// that the caller cannot use.
    fn remove(&self, key: &StoreKey);

    /// A handle to the store's generation.
    fn generation(&self) -> Generation;

    /// Counts since the store was opened.
    fn statistics(&self) -> StoreStatistics;

    /// A batch of a loader bound to the store ended: where a store with a
    /// size limit brings itself within it, so a run that fills the store
    /// ends within its limits (P6). The default does nothing.
    fn batch_finished(&self) {}

    /// Why `key` (a kernel's key) is or is not held (P9).
    fn explain(&self, key: &StoreKey) -> Explanation {
        let _ = key;
        Explanation::NeverSeen
    }
}

/// A compiler whose artifacts can be kept in a store: it names what its keys
/// are made of (P1).
///
/// # Contract
///
/// - [`key_components`](Self::key_components) names everything that changes
///   the bytes of the artifacts this compiler makes beside the kernel, its
///   variant and its source: two compilers that could make different bytes
///   return different components. It is called once, when a target binds to
///   a store.
/// - The artifact type's serialized form is part of the compiler's identity:
///   change [`KeyComponents::compiler`] when it changes.
pub trait KeyedCompiler: ArtifactCompiler {
    /// What every key of this compiler's artifacts shares.
    fn key_components(&self) -> KeyComponents;

    /// The entry point `id` compiles to, when the compiler takes it apart
    /// from the source text (so the same text can make different
    /// artifacts). `None`, the default, when the source names it.
    fn entry_point(&self, id: &ArtifactId<Self::Variant>) -> Option<String> {
        let _ = id;
        None
    }
}

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
        let outcome = match encode(artifact) {
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
            } => match bincode::serde::decode_from_slice(&artifact, bincode::config::standard()) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::KernelId;

    fn components() -> KeyComponents {
        KeyComponents::new("cuda", "nvrtc 12.4", "sm_90", "-O3")
    }

    fn id(number: u32) -> ArtifactId<u8> {
        ArtifactId::new(KernelId::named("saxpy").parameter(&number).build(), 1)
    }

    #[test]
    fn the_same_inputs_give_the_same_key_digest() {
        // P1
        let a = StoreKey::for_artifact(&components(), &id(1), None);
        let b = StoreKey::for_artifact(&components(), &id(1), None);
        assert_eq!(a.digest(), b.digest());
    }

    #[test]
    fn every_changed_component_gives_another_key_and_is_named() {
        // P1, P9
        let base = StoreKey::for_artifact(&components(), &id(1), None);
        let mut changes: Vec<(KeyComponent, StoreKey)> = Vec::new();
        let mut key = base.clone();
        key.format += 1;
        changes.push((KeyComponent::Format, key));
        for (component, edit) in [
            (
                KeyComponent::Backend,
                (|c: &mut KeyComponents| c.backend = "hip".into()) as fn(&mut KeyComponents),
            ),
            (KeyComponent::Compiler, |c| c.compiler = "nvrtc 12.5".into()),
            (KeyComponent::Architecture, |c| {
                c.architecture = "sm_80".into()
            }),
            (KeyComponent::Options, |c| c.options = "-O2".into()),
        ] {
            let mut changed = components();
            edit(&mut changed);
            changes.push((component, StoreKey::for_artifact(&changed, &id(1), None)));
        }
        changes.push((
            KeyComponent::Variant,
            StoreKey::for_artifact(&components(), &ArtifactId::new(id(1).kernel, 2u8), None),
        ));
        changes.push((
            KeyComponent::EntryPoint,
            StoreKey::for_artifact(&components(), &id(1), Some("main".into())),
        ));
        changes.push((
            KeyComponent::Kernel,
            StoreKey::for_artifact(&components(), &id(2), None),
        ));
        for (component, key) in changes {
            assert_ne!(key.digest(), base.digest(), "{component} is in the key");
            let difference = base.first_difference(&key).expect("the keys differ");
            assert_eq!(difference.component, component);
        }
        assert_eq!(base.first_difference(&base), None);
    }

    #[test]
    fn source_keys_differ_by_text_and_not_by_kernel() {
        // P1, P7
        let a = StoreKey::for_source(&components(), &id(1), None, "text");
        let b = StoreKey::for_source(&components(), &id(2), None, "text");
        let c = StoreKey::for_source(&components(), &id(1), None, "other text");
        assert_eq!(a.digest(), b.digest());
        assert_ne!(a.digest(), c.digest());
        assert_eq!(
            a.first_difference(&c).map(|d| d.component),
            Some(KeyComponent::Source)
        );
        assert_ne!(
            a.digest(),
            StoreKey::for_artifact(&components(), &id(1), None).digest()
        );
    }

    #[test]
    fn a_new_store_and_an_advance_give_a_new_generation() {
        // L10
        let first = Generation::fresh();
        let second = Generation::fresh();
        assert_ne!(first.current(), second.current());
        let before = first.current();
        first.clone().advance();
        assert_ne!(first.current(), before);
        assert_ne!(first.current(), second.current());
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
