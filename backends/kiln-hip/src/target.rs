//! The two HIP targets: one that loads on an AMD GPU, and one that stops
//! after compiling and describes what it would load.
//!
//! Both are storeless until given a store (`with_store`): then they read
//! every kernel the store holds instead of compiling it, and store what
//! they compile.

use std::sync::Arc;

use kiln_core::{ArtifactId, ArtifactStore, CompilationTarget, DeviceRefusal, KernelId};

use crate::code_object;
use crate::compiler::{HipArtifact, HipCompiler};
use crate::device::{HipDevice, HipFunction};
use crate::error::{Error, Result};
use crate::isa::GfxArch;
use crate::options::HipVariant;

fn refusal(error: Error) -> DeviceRefusal {
    let code = match &error {
        Error::Hip { code, .. } | Error::NoDevice { code, .. } => Some(i64::from(*code)),
        _ => None,
    };
    DeviceRefusal {
        message: error.to_string(),
        code,
    }
}

/// An AMD GPU behind hipRTC: kernels compile to code objects for the
/// device's architecture and load with `hipModuleLoadData`.
///
/// Storeless as made; [`with_store`](Self::with_store) puts it on a store
/// (kiln-store's `DiskStore`, or any other [`ArtifactStore`]) keyed by the
/// device's architecture, see [`HipArtifactKey::for_store`].
///
/// **Not yet run on AMD hardware**: see the crate documentation.
///
/// ```no_run
/// use std::sync::Arc;
///
/// use kiln_hip::{HipDevice, HipTarget};
/// use kiln_store::DiskStore;
///
/// // The store the KILN_CACHE_* variables describe; none under
/// // KILN_CACHE_DISABLE=1, and the target is storeless.
/// let store = DiskStore::open_from_env()?;
/// let target = HipTarget::new(HipDevice::open(0)?)?
///     .with_optional_store(store.map(|store| Arc::new(store) as _));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// [`HipArtifactKey::for_store`]: crate::HipArtifactKey::for_store
#[derive(Debug)]
pub struct HipTarget {
    compiler: HipCompiler,
    device: HipDevice,
    store: Option<Arc<dyn ArtifactStore>>,
}

impl HipTarget {
    /// A target on `device`, with the process's hipRTC.
    ///
    /// # Errors
    ///
    /// hipRTC or comgr is missing ([`Error::LibraryMissing`]).
    pub fn new(device: HipDevice) -> Result<Self> {
        Ok(Self::with_compiler(HipCompiler::new()?, device))
    }

    /// A target on `device` with `compiler`.
    pub fn with_compiler(compiler: HipCompiler, device: HipDevice) -> Self {
        Self {
            compiler: compiler.keyed_for(device.arch().clone()),
            device,
            store: None,
        }
    }

    /// The same target on `store`: its loader reads kernels the store holds
    /// instead of compiling them, and stores what it compiles. Kernels
    /// asked for under a variant of another architecture than the device's
    /// compile without the store ([`keeps`](CompilationTarget::keeps)).
    pub fn with_store(mut self, store: Arc<dyn ArtifactStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// The same target on `store` when there is one, storeless otherwise:
    /// for a store that may be disabled, such as
    /// `kiln_store::DiskStore::open_from_env()`'s under
    /// `KILN_CACHE_DISABLE=1`.
    pub fn with_optional_store(self, store: Option<Arc<dyn ArtifactStore>>) -> Self {
        match store {
            Some(store) => self.with_store(store),
            None => self,
        }
    }

    /// Puts the target on `store` in place of the one it has, as opening
    /// another root does: its loader drops every kernel it loaded and loads
    /// them again from `store` (L10), binding it when it is next used
    /// (through [`KernelLoader::target_mut`](kiln_core::KernelLoader::target_mut)).
    ///
    /// Returns `false`, changing nothing, on a storeless target: whether a
    /// target has a store never changes.
    #[must_use = "a storeless target does not switch"]
    pub fn switch_store(&mut self, store: Arc<dyn ArtifactStore>) -> bool {
        match &mut self.store {
            Some(current) => {
                *current = store;
                true
            }
            None => false,
        }
    }

    /// The variant the device runs: its architecture.
    pub fn variant(&self) -> HipVariant {
        HipVariant::new(self.device.arch().clone())
    }

    /// The device.
    pub fn device(&self) -> &HipDevice {
        &self.device
    }
}

impl CompilationTarget for HipTarget {
    type Compiler = HipCompiler;
    type Loaded = HipFunction;

    fn compiler(&self) -> &HipCompiler {
        &self.compiler
    }

    fn store(&self) -> Option<&Arc<dyn ArtifactStore>> {
        self.store.as_ref()
    }

    /// Every key of the store names the device's architecture (P1): a
    /// kernel of another would be filed under components that misname it.
    fn keeps(&self, variant: &HipVariant) -> bool {
        variant.arch == *self.device.arch()
    }

    fn load(
        &mut self,
        _id: &ArtifactId<HipVariant>,
        artifact: &HipArtifact,
    ) -> Result<HipFunction, DeviceRefusal> {
        if artifact.arch.processor() != self.device.arch().processor() {
            return Err(refusal(Error::ArchitectureMismatch {
                artifact: artifact.arch.to_string(),
                device: self.device.arch().to_string(),
            }));
        }
        let module = self
            .device
            .load_module(&artifact.code_object)
            .map_err(refusal)?;
        module.function(&artifact.symbol).map_err(refusal)
    }
}

/// What the compile-only target loads: a description of the artifact a
/// device would have loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledKernel {
    /// The kernel.
    pub kernel: KernelId,
    /// The architecture it was compiled for.
    pub arch: GfxArch,
    /// The symbol a device would launch.
    pub symbol: String,
    /// The code object's size in bytes.
    pub code_object_bytes: usize,
    /// The code object's ELF flags, which encode processor and features.
    pub elf_flags: u32,
    /// Every kernel the code object holds.
    pub kernels: Vec<String>,
}

/// hipRTC without a device: kernels compile for the variant's architecture,
/// and a load checks the code object as a device would — a whole AMD GPU
/// code object that holds the entry point's kernel — and returns a
/// [`CompiledKernel`] describing it.
///
/// It serves machines with hipRTC and no AMD GPU: ahead-of-time compiles,
/// and kiln's own tests. Storeless as made, it compiles for any variant's
/// architecture; [`with_store`](Self::with_store) puts it on a store for
/// one architecture, the way `kiln warm` fills a store for a GPU it lacks:
///
/// ```no_run
/// use std::sync::Arc;
///
/// use kiln_core::{ArtifactId, Kernel, KernelLoader};
/// use kiln_hip::{GfxArch, HipCompileOnlyTarget, HipKernel, HipVariant};
/// use kiln_store::{DiskStore, StoreConfig};
///
/// let arch = GfxArch::new("gfx90a")?;
/// let store = DiskStore::open(StoreConfig::at("/var/cache/kiln"))?;
/// let target = HipCompileOnlyTarget::open()?.with_store(Arc::new(store), arch.clone());
/// let mut loader = KernelLoader::new(target);
/// let kernel = HipKernel::from_text(
///     "scale",
///     "scale",
///     r#"extern "C" __global__ void scale(float* x) { x[threadIdx.x] *= 2.0f; }"#,
/// );
/// // Compiled and stored, or read from the store when it holds it.
/// loader.load(&kernel, &ArtifactId::new(kernel.id(), HipVariant::new(arch)))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct HipCompileOnlyTarget {
    compiler: HipCompiler,
    /// The store, and the one architecture whose artifacts it keeps.
    store: Option<(Arc<dyn ArtifactStore>, GfxArch)>,
}

impl HipCompileOnlyTarget {
    /// A target compiling with `compiler`.
    pub fn new(compiler: HipCompiler) -> Self {
        Self {
            compiler,
            store: None,
        }
    }

    /// The same target on `store`, for artifacts of `arch`: its loader
    /// reads kernels the store holds instead of compiling them, and stores
    /// what it compiles. Kernels asked for under a variant of another
    /// architecture compile without the store
    /// ([`keeps`](CompilationTarget::keeps)).
    pub fn with_store(mut self, store: Arc<dyn ArtifactStore>, arch: GfxArch) -> Self {
        self.compiler = self.compiler.keyed_for(arch.clone());
        self.store = Some((store, arch));
        self
    }

    /// Puts the target on `store` in place of the one it has, for the same
    /// architecture, as opening another root does: its loader drops every
    /// kernel it loaded and loads them again from `store` (L10), binding it
    /// when it is next used (through
    /// [`KernelLoader::target_mut`](kiln_core::KernelLoader::target_mut)).
    ///
    /// Returns `false`, changing nothing, on a storeless target: whether a
    /// target has a store never changes.
    #[must_use = "a storeless target does not switch"]
    pub fn switch_store(&mut self, store: Arc<dyn ArtifactStore>) -> bool {
        match &mut self.store {
            Some((current, _)) => {
                *current = store;
                true
            }
            None => false,
        }
    }

    /// The architecture its store holds artifacts for, when it has one.
    pub fn stored_arch(&self) -> Option<&GfxArch> {
        self.store.as_ref().map(|(_, arch)| arch)
    }

    /// A target compiling with the process's hipRTC.
    ///
    /// # Errors
    ///
    /// hipRTC or comgr is missing ([`Error::LibraryMissing`]).
    pub fn open() -> Result<Self> {
        Ok(Self::new(HipCompiler::new()?))
    }
}

impl CompilationTarget for HipCompileOnlyTarget {
    type Compiler = HipCompiler;
    type Loaded = Arc<CompiledKernel>;

    fn compiler(&self) -> &HipCompiler {
        &self.compiler
    }

    fn store(&self) -> Option<&Arc<dyn ArtifactStore>> {
        self.store.as_ref().map(|(store, _)| store)
    }

    /// Every key of the store names its architecture (P1): a kernel of
    /// another would be filed under components that misname it.
    fn keeps(&self, variant: &HipVariant) -> bool {
        self.stored_arch().is_none_or(|arch| variant.arch == *arch)
    }

    fn load(
        &mut self,
        id: &ArtifactId<HipVariant>,
        artifact: &HipArtifact,
    ) -> Result<Arc<CompiledKernel>, DeviceRefusal> {
        let info = code_object::inspect(&artifact.code_object).map_err(refusal)?;
        if !info.has_kernel(&artifact.symbol) {
            return Err(refusal(Error::KernelMissing {
                symbol: artifact.symbol.clone(),
                kernels: info.kernels,
            }));
        }
        Ok(Arc::new(CompiledKernel {
            kernel: id.kernel.clone(),
            arch: artifact.arch.clone(),
            symbol: artifact.symbol.clone(),
            code_object_bytes: artifact.code_object.len(),
            elf_flags: info.flags,
            kernels: info.kernels,
        }))
    }
}
