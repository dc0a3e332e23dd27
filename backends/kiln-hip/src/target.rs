//! The HIP target: hipRTC in front of one AMD GPU, or of no GPU at all,
//! and optionally a store in front of hipRTC.

use std::sync::Arc;

use kiln_cxx::CxxDeviceStep;
use kiln_engine::TargetStore;

use crate::architecture::Architecture;
use crate::compiler::HipCompiler;
use crate::device::HipDevice;
use crate::error::{Error, Result};
use crate::module::LoadedKernel;
use crate::options::HipVariant;

/// hipRTC in front of an AMD GPU (or of none, to compile without one), for
/// a [`KernelLoader`](kiln_engine::KernelLoader), and optionally a store in
/// front of hipRTC.
///
/// # Constructors
///
/// | target | how |
/// |---|---|
/// | AMD GPU `ordinal` | [`HipTarget::on_device`]`(ordinal)?` |
/// | a device opened by hand (an architecture given) | [`HipTarget::on`]`(device)?` |
/// | no GPU, for an architecture | [`HipTarget::compile_only`]`(architecture)?` |
/// | either, on the process's default store | as made: see below |
/// | either, storeless | `.`[`without_store`](Self::without_store)`()` |
/// | either, on a store | `.`[`with_store`](Self::with_store)`(store)` |
/// | either, on a store unless it is disabled | `.`[`with_optional_store`](Self::with_optional_store)`(store)` |
///
/// In compile-only mode (`KILN_MODE=compile-only` and `KILN_HIP_ARCH`, or
/// a [`ProcessModeOverride`](kiln_engine::mode::ProcessModeOverride)),
/// `on_device` and `on` make the compile-only target of the mode's
/// architecture and open no device or runtime (L11).
///
/// A target is made on the process's default store
/// ([`kiln_engine::store::default_store`]): in a program on the `kiln`
/// facade, the `KILN_CACHE_*` store (with the fleet tier behind it when
/// `KILN_REMOTE_URL` and its keys are set), opened at its loader's first
/// batch; none under `KILN_CACHE_DISABLE=1`, nor in a program on this crate
/// alone, which installs no default store.
///
/// A storeless target keeps artifacts as long as its loader. A target on a
/// store — kiln-store's `DiskStore` or any other [`ArtifactStore`](kiln_engine::ArtifactStore) — reads
/// every kernel the store holds instead of compiling it and stores every
/// kernel it compiles, under keys that name the target's architecture (see
/// [`HipKey::for_store`]).
///
/// A device target loads code objects with `hipModuleLoadData` and refuses
/// one built for another processor. A compile-only target checks every code
/// object as a device would (whole, holding the entry point's kernel) and
/// describes it; it takes code objects of any architecture, so that one
/// batch can compile for several AMD GPUs (only its own architecture's go
/// to its store, see [`keeps`](kiln_engine::CompilationTarget::keeps)).
///
/// **The device half has not yet run on AMD hardware**: see the crate
/// documentation.
///
/// [`HipKey::for_store`]: crate::HipKey::for_store
///
/// # Example
///
/// On the disk store the `KILN_CACHE_*` variables describe (none under
/// `KILN_CACHE_DISABLE=1`):
///
/// ```no_run
/// use std::sync::Arc;
///
/// use kiln_hip::HipTarget;
/// use kiln_store::DiskStore;
///
/// let store = DiskStore::open_from_env()?;
/// let target = HipTarget::on_device(0)?
///     .with_optional_store(store.map(|store| Arc::new(store) as _));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Compiling ahead of time for a GPU this machine lacks, into a store in a
/// folder of one's own (what `kiln warm` does):
///
/// ```no_run
/// use std::sync::Arc;
///
/// use kiln_engine::{ArtifactId, Kernel, KernelId, KernelLoader};
/// use kiln_hip::{Architecture, HipKernel, HipTarget};
/// use kiln_store::{DiskStore, StoreConfig};
///
/// let store = DiskStore::open(StoreConfig::at("/var/cache/kiln"))?;
/// let target = HipTarget::compile_only(Architecture::new("gfx90a")?)?.with_store(Arc::new(store));
/// let variant = target.variant();
/// let mut loader = KernelLoader::new(target);
/// let kernel = HipKernel::builder(KernelId::named("scale"), "scale")
///     .source(r#"extern "C" __global__ void scale(float* x) { x[threadIdx.x] *= 2.0f; }"#);
/// // Compiled and stored, or read from the store when it holds it.
/// loader.load(&kernel, &ArtifactId::new(kernel.id(), variant))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct HipTarget {
    compiler: Arc<HipCompiler>,
    /// Where kernels go, shared with the batch's workers.
    step: Arc<HipDeviceStep>,
    store: TargetStore,
}

impl HipTarget {
    /// A target on AMD GPU `ordinal`, compiling for the architecture it
    /// reports.
    ///
    /// # Errors
    ///
    /// The runtime, hipRTC or comgr is missing ([`Error::LibraryMissing`]),
    /// there is no such GPU ([`Error::NoDevice`],
    /// [`Error::DeviceOutOfRange`]), or its architecture cannot be read
    /// ([`Error::UnknownDeviceArchitecture`]: open it with
    /// [`HipDevice::with_architecture`] and use [`on`](Self::on)).
    pub fn on_device(ordinal: usize) -> Result<Self> {
        if let Some(plan) = kiln_engine::mode::compile_only() {
            return Self::for_compile_only_mode(&plan);
        }
        Self::on(HipDevice::open(ordinal)?)
    }

    /// The target every device constructor makes in compile-only mode
    /// (L11): no device, no runtime, the architecture the mode names.
    fn for_compile_only_mode(plan: &kiln_engine::mode::CompileOnly) -> Result<Self> {
        let named = plan.hip().ok_or(Error::NoCompileOnlyArchitecture {
            variable: kiln_engine::mode::HIP_ARCH_VARIABLE,
        })?;
        Self::compile_only(Architecture::new(named.trim())?)
    }

    /// A target on `device`, opened by hand.
    ///
    /// # Errors
    ///
    /// hipRTC or comgr is missing ([`Error::LibraryMissing`]).
    pub fn on(device: HipDevice) -> Result<Self> {
        if let Some(plan) = kiln_engine::mode::compile_only() {
            return Self::for_compile_only_mode(&plan);
        }
        Ok(Self {
            compiler: Arc::new(HipCompiler::new()?.keyed_for(device.architecture().clone())),
            step: CxxDeviceStep::on(device),
            store: TargetStore::default(),
        })
    }

    /// A target with no device, compiling for `architecture`: `load`
    /// checks each code object as a device would and describes it instead
    /// of loading it.
    ///
    /// # Errors
    ///
    /// hipRTC or comgr is missing ([`Error::LibraryMissing`]).
    pub fn compile_only(architecture: Architecture) -> Result<Self> {
        Ok(Self {
            compiler: Arc::new(HipCompiler::new()?.keyed_for(architecture.clone())),
            step: CxxDeviceStep::compile_only(architecture),
            store: TargetStore::default(),
        })
    }

    /// The same target compiling with `compiler`, whose store keys it
    /// names after the target's architecture: for a compiler made apart,
    /// such as the crash tests' one without the target check.
    #[must_use = "the target with its compiler is returned, not changed in place"]
    pub fn with_compiler(mut self, compiler: HipCompiler) -> Self {
        self.compiler = Arc::new(compiler.keyed_for(self.architecture().clone()));
        self
    }

    /// The architecture kernels are compiled for, and its store's keys
    /// name.
    pub fn architecture(&self) -> &Architecture {
        self.step.architecture()
    }

    /// The variant every kernel of this target is compiled under.
    pub fn variant(&self) -> HipVariant {
        HipVariant::new(self.architecture().clone())
    }
}

kiln_cxx::cxx_target!(
    HipTarget,
    HipCompiler,
    LoadedKernel,
    HipDevice,
    crate::HipKey::BACKEND
);

/// The HIP target's device step (F9): each code object is loaded on the
/// batch's worker that has its artifact, several at once. The load makes
/// the device current on the calling thread (`hipSetDevice`) before
/// `hipModuleLoadData`, so any thread may load onto the device.
pub type HipDeviceStep = CxxDeviceStep<HipDevice>;

/// The HIP backend as a whole, for code that builds the kernels and
/// targets of either C++ backend without naming it (`kiln warm`).
#[derive(Debug, Clone, Copy)]
pub struct Hip;

impl kiln_cxx::CxxBackend for Hip {
    const NAME: &'static str = crate::HipKey::BACKEND;
    const DEFAULT_ARCHITECTURE: &'static str = "gfx90a";
    type Architecture = Architecture;
    type Options = crate::HipOptions;
    type Kernel = crate::HipKernel;
    type Builder = crate::HipKernelBuilder;
    type Target = HipTarget;
    type Error = Error;

    fn architecture(text: &str) -> std::result::Result<Architecture, String> {
        Architecture::new(text).map_err(|error| error.to_string())
    }

    fn on_device(ordinal: usize) -> Result<HipTarget> {
        HipTarget::on_device(ordinal)
    }

    fn compile_only(architecture: Architecture) -> Result<HipTarget> {
        HipTarget::compile_only(architecture)
    }

    fn architecture_of(target: &HipTarget) -> Architecture {
        target.architecture().clone()
    }

    fn describe(target: &HipTarget) -> String {
        if target.is_compile_only() {
            format!(
                "compile-only: {}, hiprtc {}",
                target.architecture(),
                target.compiler.identity().hiprtc_version
            )
        } else {
            format!("AMD GPU {}", target.architecture())
        }
    }

    fn with_store(
        target: HipTarget,
        store: Option<Arc<dyn kiln_engine::ArtifactStore>>,
    ) -> HipTarget {
        match store {
            Some(store) => target.with_optional_store(Some(store)),
            None => target.without_store(),
        }
    }

    fn variant(target: &HipTarget) -> HipVariant {
        target.variant()
    }

    fn of_file(file: &str, entry: &str) -> crate::HipKernelBuilder {
        crate::HipKernel::of_file(file, entry)
    }

    fn define(options: crate::HipOptions, name: &str, value: &str) -> crate::HipOptions {
        options.define(name, value)
    }
}
