//! A C++ backend as a whole, for the code that builds kernels and targets
//! of either one without naming it (`kiln warm`): [`CxxBackend`], which
//! kiln-cuda and kiln-hip each implement once, and [`CxxKernelBuilder`],
//! their kernel builders' methods as a trait.
//!
//! Nothing here is a second way to build a kernel: the builder methods are
//! the ones a program calls ([`kernel_methods!`](crate::kernel_methods)
//! writes the impl as calls of them), so a kernel built through the trait
//! has the id the same builder calls give in a program.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use kiln_engine::{ArtifactCompiler, ArtifactStore, CompilationTarget, Kernel, VariantOf};

/// A kernel builder of a C++ backend (`CudaKernelBuilder`,
/// `HipKernelBuilder`): each method is the builder's inherent method of
/// the same name.
pub trait CxxKernelBuilder: Sized {
    /// The kernel it builds.
    type Kernel;
    /// The backend's compile options.
    type Options;

    /// Adds another entry point of the same source (B6).
    #[must_use]
    fn entry(self, entry: &str) -> Self;
    /// Compiles with `options`.
    #[must_use]
    fn options(self, options: Self::Options) -> Self;
    /// The folder of the file the source was read from.
    #[must_use]
    fn source_folder(self, folder: PathBuf) -> Self;
    /// Adds an include folder.
    #[must_use]
    fn include_folder(self, folder: PathBuf) -> Self;
    /// The kernel's tree, which quoted includes may reach.
    #[must_use]
    fn include_tree(self, folder: PathBuf) -> Self;
    /// Lets includes reach files outside the tree and include folders.
    #[must_use]
    fn includes_outside_tree(self, allowed: bool) -> Self;
    /// kiln's stand-ins for the standard headers on or off.
    #[must_use]
    fn standard_headers(self, on: bool) -> Self;
    /// Shares include resolutions with the kernels built with `cache`.
    #[must_use]
    fn include_cache(self, cache: &crate::IncludeCache) -> Self;
    /// Finishes the kernel with a fixed source, whose text joins its id
    /// and whose includes kiln resolves (P13): the builder's
    /// `shared_source` (its `source` without a copy of the text).
    fn source(self, source: Arc<str>) -> Self::Kernel;
    /// Finishes a kernel that fails to lower with `reason`, compiling
    /// nothing and never remembered as failed (P11): its setup failed, not
    /// its source.
    fn failing(self, reason: String) -> Self::Kernel;
}

/// A C++ backend: its kernels, options and targets, for code that works
/// with either one (`kiln warm` builds a folder's CUDA and HIP modules
/// through it, with the builder calls a program makes).
pub trait CxxBackend: 'static {
    /// Its name in store keys and on the command line: `cuda`, `hip`.
    const NAME: &'static str;
    /// The architecture compiled for when none is asked and there is no
    /// device: `sm_90`, `gfx90a`.
    const DEFAULT_ARCHITECTURE: &'static str;

    /// What its kernels are compiled for.
    type Architecture: Clone + PartialEq + fmt::Display;
    /// Its compile options.
    type Options: Clone + Default;
    /// Its kernel.
    type Kernel: Kernel + Clone;
    /// Its kernel builder.
    type Builder: CxxKernelBuilder<Kernel = Self::Kernel, Options = Self::Options>;
    /// Its target.
    type Target: CompilationTarget<Compiler: ArtifactCompiler<Kernel = Self::Kernel>>;
    /// Why a target could not be made.
    type Error: fmt::Display;

    /// The architecture `text` names, or why it names none.
    ///
    /// # Errors
    ///
    /// `text` names no architecture of this backend.
    fn architecture(text: &str) -> Result<Self::Architecture, String>;

    /// A target on GPU `ordinal`.
    ///
    /// # Errors
    ///
    /// The compiler or the driver is missing, or there is no such GPU.
    fn on_device(ordinal: usize) -> Result<Self::Target, Self::Error>;

    /// The architecture of GPU `ordinal`, asked of the driver without
    /// making a context, so that a caller can read the store for it while
    /// the context is made; `None` when the driver is missing, has no such
    /// GPU or cannot say (then only [`on_device`](Self::on_device) tells).
    fn device_architecture(ordinal: usize) -> Option<Self::Architecture> {
        let _ = ordinal;
        None
    }

    /// A target without a device, compiling for `architecture`.
    ///
    /// # Errors
    ///
    /// The compiler is missing.
    fn compile_only(architecture: Self::Architecture) -> Result<Self::Target, Self::Error>;

    /// The architecture `target` compiles for.
    fn architecture_of(target: &Self::Target) -> Self::Architecture;

    /// Where `target`'s kernels go, in words: the device, or the
    /// compile-only target with its compiler's version.
    fn describe(target: &Self::Target) -> String;

    /// `target` on `store`, or on none at all (not even the default one).
    fn with_store(target: Self::Target, store: Option<Arc<dyn ArtifactStore>>) -> Self::Target;

    /// The variant `target` compiles every kernel under.
    fn variant(target: &Self::Target) -> VariantOf<Self::Target>;

    /// The toolkit's include folders angle includes fall back to, when the
    /// backend has them.
    fn toolkit_folders() -> Vec<PathBuf> {
        Vec::new()
    }

    /// A builder of the module of the kernel file `file` (its path under
    /// the folder warmed) launching `entry`: the backend kernel's `of_file`.
    fn of_file(file: &str, entry: &str) -> Self::Builder;

    /// `options` with the macro `name` defined as `value`.
    #[must_use]
    fn define(options: Self::Options, name: &str, value: &str) -> Self::Options;
}
