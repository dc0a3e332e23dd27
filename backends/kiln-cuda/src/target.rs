//! The CUDA target: NVRTC in front of one GPU, or of no GPU at all, and
//! optionally a store in front of NVRTC.

use std::sync::Arc;

use cudarc::driver::CudaContext;
use kiln_cxx::CxxDeviceStep;
use kiln_engine::TargetStore;

use crate::architecture::Architecture;
use crate::compiler::{CudaCompiler, CudaVariant};
use crate::device::CudaDevice;
use crate::error::Error;
use crate::module::LoadedKernel;

/// NVRTC in front of a GPU (or of none, to compile without one), for a
/// [`KernelLoader`](kiln_engine::KernelLoader), and optionally a store in
/// front of NVRTC.
///
/// # Constructors
///
/// | target | how |
/// |---|---|
/// | GPU `ordinal` | [`CudaTarget::on_device`]`(ordinal)?` |
/// | the GPU of a cudarc context the program has | [`CudaTarget::from_context`]`(context)?` |
/// | no GPU, for an architecture | [`CudaTarget::compile_only`]`(architecture)?` |
/// | either, on the process's default store | as made: see below |
/// | either, storeless | `.`[`without_store`](Self::without_store)`()` |
/// | either, on a store | `.`[`with_store`](Self::with_store)`(store)` |
/// | either, on a store unless it is disabled | `.`[`with_optional_store`](Self::with_optional_store)`(store)` |
///
/// In compile-only mode (`KILN_MODE=compile-only` and `KILN_CUDA_ARCH`, or
/// a [`ProcessModeOverride`](kiln_engine::mode::ProcessModeOverride)),
/// `on_device` and `from_context` make the compile-only target of the
/// mode's architecture and open no device or driver (L11).
///
/// A target is made on the process's default store
/// ([`kiln_engine::store::default_store`]): in a program on the `kiln`
/// facade, the `KILN_CACHE_*` store (with the fleet tier behind it when
/// `KILN_REMOTE_URL` and its keys are set), opened at its loader's first
/// batch; none under `KILN_CACHE_DISABLE=1`, nor in a program on this crate
/// alone, which installs no default store.
///
/// A storeless target keeps artifacts as long as its loader
/// (`store() == None`). A target on a store — kiln-store's `DiskStore`
/// or any other [`ArtifactStore`](kiln_engine::ArtifactStore) — reads every kernel the store holds
/// instead of compiling it, stores every kernel it compiles, and shares
/// artifacts between kernels whose lowered text is identical (L5). Its keys
/// are described at [`CudaKey::for_store`].
///
/// [`CudaKey::for_store`]: crate::CudaKey::for_store
///
/// # Example
///
/// ```no_run
/// use kiln_engine::{ArtifactId, Kernel, KernelId, KernelLoader};
/// use kiln_cuda::{CudaKernel, CudaTarget, KernelArgument, LaunchConfig};
///
/// let target = CudaTarget::on_device(0)?;
/// let variant = target.variant();
/// let device = target.device().expect("a device target has a device").clone();
/// let stream = device.context().new_stream()?;
/// let mut loader = KernelLoader::new(target);
///
/// let fill = CudaKernel::builder(KernelId::named("example.fill"), "fill").source(
///     r#"extern "C" __global__ void fill(float* y, float value, int n) {
///            int i = blockIdx.x * blockDim.x + threadIdx.x;
///            if (i < n) y[i] = value;
///        }"#,
/// );
/// let id = ArtifactId::new(fill.id(), variant);
/// let kernel = loader.load(&fill, &id)?;
///
/// let output = device.alloc::<f32>(1000)?;
/// // SAFETY: the arguments match `fill`'s parameters and `output` holds
/// // the 1000 elements the launch writes.
/// unsafe {
///     kernel.launch(
///         &stream,
///         LaunchConfig::for_elements(1000, 256),
///         &[(&output).into(), 2.5f32.into(), 1000i32.into()],
///     )?;
/// }
/// assert!(output.to_vec()?.iter().all(|&value| value == 2.5));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// On the disk store the `KILN_CACHE_*` variables describe (none under
/// `KILN_CACHE_DISABLE=1`), so that what one process compiled, the next
/// loads from the store:
///
/// ```no_run
/// use std::sync::Arc;
///
/// use kiln_cuda::CudaTarget;
/// use kiln_store::DiskStore;
///
/// let store = DiskStore::open_from_env()?;
/// let target = CudaTarget::on_device(0)?
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
/// use kiln_cuda::{Architecture, CudaTarget};
/// use kiln_store::{DiskStore, StoreConfig};
///
/// let store = DiskStore::open(StoreConfig::at("/var/cache/kiln"))?;
/// let target = CudaTarget::compile_only(Architecture::new(9, 0))?.with_store(Arc::new(store));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct CudaTarget {
    compiler: Arc<CudaCompiler>,
    /// Where kernels go, shared with the batch's workers.
    step: Arc<CudaDeviceStep>,
    store: TargetStore,
}

impl CudaTarget {
    /// A target on GPU `ordinal`, through its primary context (the one
    /// cudarc's [`CudaContext::new`] retains too), compiling for its exact
    /// architecture.
    ///
    /// # Errors
    ///
    /// The driver or NVRTC is missing, or there is no such GPU.
    pub fn on_device(ordinal: usize) -> Result<Self, Error> {
        if let Some(plan) = kiln_engine::mode::compile_only() {
            return Self::for_compile_only_mode(&plan);
        }
        // NVRTC opens before the context, so that a missing device is
        // still said before a missing NVRTC. No compile worker starts
        // here: a batch starts them once its lookup finds kernels to
        // compile, and a warm start, which compiles nothing, starts none
        // (F11). A program that knows it will compile can start them
        // beside the context with `kiln_engine::worker::start_early`.
        let compiler = CudaCompiler::new();
        log::debug!("NVRTC is open");
        let device = CudaDevice::open(ordinal)?;
        log::debug!("the CUDA context is made");
        Ok(Self::with_compiler_on(device, compiler?))
    }

    /// A target on the GPU of a cudarc context the program already has:
    /// kernels load on `context`, their cudarc
    /// [`function`](LoadedKernel::function)s launch on the program's own
    /// streams of it, and the program's `CudaSlice`s are their arguments
    /// (B5). The target keeps the context alive as long as it and every
    /// kernel it loaded.
    ///
    /// ```no_run
    /// use kiln_cuda::CudaTarget;
    /// use kiln_cuda::cudarc::driver::CudaContext;
    ///
    /// let context = CudaContext::new(0)?;
    /// let stream = context.new_stream()?;
    /// let target = CudaTarget::from_context(context.clone())?;
    /// let device = target.device().expect("a context target has a device");
    /// assert_eq!(device.context().cu_ctx(), stream.context().cu_ctx());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// NVRTC is missing, or the driver cannot say what the device is.
    pub fn from_context(context: Arc<CudaContext>) -> Result<Self, Error> {
        if let Some(plan) = kiln_engine::mode::compile_only() {
            return Self::for_compile_only_mode(&plan);
        }
        Self::on(CudaDevice::from_context(context)?)
    }

    /// The target every device constructor makes in compile-only mode
    /// (L11): no device, no driver, the architecture the mode names.
    fn for_compile_only_mode(plan: &kiln_engine::mode::CompileOnly) -> Result<Self, Error> {
        let named = plan.cuda().ok_or_else(|| {
            Error::Invalid(format!(
                "compile-only mode names no CUDA architecture: set {}=sm_90 (the GPU the \
                 store is for), or name it in the ProcessModeOverride",
                kiln_engine::mode::CUDA_ARCH_VARIABLE
            ))
        })?;
        let architecture = named.parse().map_err(|error| {
            Error::Invalid(format!(
                "{error} (compile-only mode, {})",
                kiln_engine::mode::CUDA_ARCH_VARIABLE
            ))
        })?;
        Self::compile_only(architecture)
    }

    fn on(device: CudaDevice) -> Result<Self, Error> {
        Ok(Self::with_compiler_on(device, CudaCompiler::new()?))
    }

    fn with_compiler_on(device: CudaDevice, compiler: CudaCompiler) -> Self {
        Self {
            compiler: Arc::new(compiler.keyed_for(device.architecture())),
            step: CxxDeviceStep::on(device),
            store: TargetStore::default(),
        }
    }

    /// A target with no device, compiling for `architecture`: `load`
    /// describes each artifact instead of loading it, and refuses what a
    /// device of that architecture would refuse.
    ///
    /// # Errors
    ///
    /// NVRTC is missing.
    pub fn compile_only(architecture: Architecture) -> Result<Self, Error> {
        Ok(Self {
            compiler: Arc::new(CudaCompiler::new()?.keyed_for(architecture)),
            step: CxxDeviceStep::compile_only(architecture),
            store: TargetStore::default(),
        })
    }

    /// The architecture kernels are compiled for.
    pub fn architecture(&self) -> Architecture {
        *self.step.architecture()
    }

    /// The variant every kernel of this target is compiled under.
    pub fn variant(&self) -> CudaVariant {
        CudaVariant {
            architecture: self.architecture(),
        }
    }
}

kiln_cxx::cxx_target!(
    CudaTarget,
    CudaCompiler,
    LoadedKernel,
    CudaDevice,
    crate::CudaKey::BACKEND
);

/// The CUDA target's device step (F9): each module is loaded on the
/// batch's worker that has its artifact, several at once. cudarc's module
/// load makes the device's context current on the calling thread
/// (`cuCtxSetCurrent`) before `cuModuleLoadData`, so any thread may load
/// into the context, and a module is unloaded on the context that loaded
/// it, whichever thread drops it.
pub type CudaDeviceStep = CxxDeviceStep<CudaDevice>;

/// The CUDA backend as a whole, for code that builds the kernels and
/// targets of either C++ backend without naming it (`kiln warm`).
#[derive(Debug, Clone, Copy)]
pub struct Cuda;

impl kiln_cxx::CxxBackend for Cuda {
    const NAME: &'static str = crate::CudaKey::BACKEND;
    const DEFAULT_ARCHITECTURE: &'static str = "sm_90";
    type Architecture = Architecture;
    type Options = crate::CudaOptions;
    type Kernel = crate::CudaKernel;
    type Builder = crate::CudaKernelBuilder;
    type Target = CudaTarget;
    type Error = Error;

    fn architecture(text: &str) -> Result<Architecture, String> {
        text.parse()
            .map_err(|error: crate::ArchitectureParseError| error.to_string())
    }

    fn on_device(ordinal: usize) -> Result<CudaTarget, Error> {
        CudaTarget::on_device(ordinal)
    }

    fn device_architecture(ordinal: usize) -> Option<Architecture> {
        crate::CudaDevice::architecture_of(ordinal)
    }

    fn compile_only(architecture: Architecture) -> Result<CudaTarget, Error> {
        CudaTarget::compile_only(architecture)
    }

    fn architecture_of(target: &CudaTarget) -> Architecture {
        target.architecture()
    }

    fn describe(target: &CudaTarget) -> String {
        match target.device() {
            Some(device) => format!("{} {}", device.name(), target.architecture()),
            None => format!(
                "compile-only: {}, nvrtc {}",
                target.architecture(),
                kiln_engine::CompilationTarget::compiler(target).version()
            ),
        }
    }

    fn with_store(
        target: CudaTarget,
        store: Option<Arc<dyn kiln_engine::ArtifactStore>>,
    ) -> CudaTarget {
        match store {
            Some(store) => target.with_optional_store(Some(store)),
            None => target.without_store(),
        }
    }

    fn variant(target: &CudaTarget) -> CudaVariant {
        target.variant()
    }

    fn toolkit_folders() -> Vec<std::path::PathBuf> {
        crate::toolkit::include_folders()
    }

    fn of_file(file: &str, entry: &str) -> crate::CudaKernelBuilder {
        crate::CudaKernel::of_file(file, entry)
    }

    fn define(options: crate::CudaOptions, name: &str, value: &str) -> crate::CudaOptions {
        options.define(name, value)
    }
}
