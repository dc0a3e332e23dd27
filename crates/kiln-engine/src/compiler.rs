//! What turns kernels into artifacts: the [`ArtifactCompiler`] a backend
//! implements, which lowers and finalizes on any thread, and — for a
//! compiler that can finalize in another process — the [`ProcessCompiler`]
//! a worker process rebuilds it as, from its [`WorkerRecipe`].

use std::fmt::Debug;
use std::hash::Hash;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::diagnostic::{CompileFailure, Diagnostic};
use crate::encoding;
use crate::id::ArtifactId;
use crate::kernel::Kernel;

/// Turns kernels into artifacts. Shared by every worker of a batch.
///
/// # Contract
///
/// - `lower` and `finalize` run on worker threads, several at once, and may
///   run in another process: they touch no device and keep no state that a
///   later call depends on.
/// - `lower` is deterministic: the same kernel and variant give the same
///   lowered form and the same [`source`](Self::source) text.
/// - Two lowered forms with the same `source` text and the same variant
///   finalize to interchangeable artifacts: the loader finalizes one and
///   gives the artifact to both.
/// - A panic in either step is caught by the loader and becomes that
///   kernel's failure, but a compiler should report errors as values.
pub trait ArtifactCompiler: Send + Sync + 'static {
    /// The kernels this compiler takes.
    type Kernel: Kernel + ?Sized;
    /// The compile choice an artifact is built under: architecture,
    /// fast-math, and so on. Part of every artifact's key.
    type Variant: Clone + Eq + Hash + Debug + Send + Sync + Serialize + DeserializeOwned + 'static;
    /// What lowering produces, ready to finalize, possibly in another process.
    type Lowered: Send + Serialize + DeserializeOwned;
    /// What finalizing produces: plain data a store can keep and a target can
    /// load.
    type Artifact: Clone + Send + Sync + Serialize + DeserializeOwned;

    /// Generates the backend source of `kernel` for `id`'s variant.
    ///
    /// # Errors
    ///
    /// What the generator reported; a bad kernel fails alone.
    fn lower(
        &self,
        kernel: &Self::Kernel,
        id: &ArtifactId<Self::Variant>,
    ) -> Result<Self::Lowered, CompileFailure>;

    /// The text `lowered` finalizes from, when it has one: kernels whose text
    /// is identical share one artifact. `None` opts the kernel out of
    /// sharing.
    fn source(lowered: &Self::Lowered) -> Option<&str>;

    /// Compiles `lowered` into an artifact, with the warnings and remarks of
    /// a successful compile.
    ///
    /// # Errors
    ///
    /// What the compiler reported, with its diagnostics.
    fn finalize(
        &self,
        id: &ArtifactId<Self::Variant>,
        lowered: Self::Lowered,
    ) -> Result<Finalized<Self::Artifact>, CompileFailure>;

    /// How a worker process rebuilds this compiler, when it can finalize in
    /// one: `Some(`[`WorkerRecipe::of`]`(self))` for a [`ProcessCompiler`].
    /// A loader then finalizes in worker processes (see [`crate::worker`]). The default,
    /// `None`, keeps every compile on the loader's threads.
    fn worker_recipe(&self) -> Option<WorkerRecipe> {
        None
    }
}

/// A finalized artifact and what the compiler said while making it.
#[derive(Debug, Clone)]
pub struct Finalized<A> {
    /// The artifact.
    pub artifact: A,
    /// Warnings and remarks of the successful compile.
    pub diagnostics: Vec<Diagnostic>,
}

impl<A> Finalized<A> {
    /// An artifact the compiler said nothing about.
    pub fn quiet(artifact: A) -> Self {
        Self {
            artifact,
            diagnostics: Vec::new(),
        }
    }
}

/// A compiler that can be rebuilt in a worker process from plain data.
///
/// # Contract
///
/// `from_recipe(compiler.recipe())` finalizes exactly as `compiler` does:
/// same compiler version, same options, so that an artifact built in a
/// worker is interchangeable with one built in the loader's process. A
/// worker that cannot honour that (it finds another compiler version, say)
/// returns an error, and the loader stays on its own threads.
pub trait ProcessCompiler: ArtifactCompiler + Sized + 'static {
    /// The name workers dispatch on: unique among the compilers of a
    /// program, stable across builds (`"kiln-cuda"`).
    const NAME: &'static str;
    /// What a worker rebuilds the compiler from.
    type Recipe: Serialize + DeserializeOwned;

    /// This compiler as a recipe.
    fn recipe(&self) -> Self::Recipe;

    /// The compiler a recipe describes, in the worker.
    ///
    /// # Errors
    ///
    /// The worker cannot build an equal compiler: the library is missing, or
    /// of another version than the recipe names.
    fn from_recipe(recipe: Self::Recipe) -> Result<Self, String>;

    /// Called once in a worker, after [`from_recipe`](Self::from_recipe)
    /// and before the worker says it started: where a compiler pays what
    /// its first compile in a process costs (opening its builtins, building
    /// its internal state), so that a worker started early (F5) pays it
    /// before the first batch instead of inside it. A failure here is no
    /// failure: the first compile pays instead. The default does nothing.
    fn warm_up(&self) {}
}

/// A compiler's name and recipe, encoded: what a loader sends to start a
/// worker. A compiler that can finalize in worker processes returns one from
/// [`ArtifactCompiler::worker_recipe`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerRecipe {
    pub(crate) compiler: &'static str,
    pub(crate) recipe: Vec<u8>,
}

impl WorkerRecipe {
    /// The recipe of `compiler`.
    ///
    /// # Panics
    ///
    /// The recipe does not serialize, which a recipe made of plain data
    /// never fails to.
    pub fn of<C: ProcessCompiler>(compiler: &C) -> Self {
        Self {
            compiler: C::NAME,
            recipe: encoding::encode(&compiler.recipe())
                .expect("a compiler recipe is plain data that serializes"),
        }
    }

    /// The name the worker dispatches on.
    pub fn compiler(&self) -> &'static str {
        self.compiler
    }
}
