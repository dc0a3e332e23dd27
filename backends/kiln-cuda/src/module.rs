//! Loaded kernels: an artifact made a driver module and function handle,
//! or, on a compile-only target, described without a device.
//!
//! The driver is given the cubin first. When it refuses it (a driver that
//! does not know the architecture, a damaged image), it is given the PTX,
//! which it compiles for its own device; only when both are refused is the
//! kernel refused (L9).
//!
//! A module is loaded through cudarc's safe layer
//! ([`CudaContext::load_module`]), so a loaded kernel is a cudarc
//! [`CudaModule`] and [`CudaFunction`] on the device's context: a cudarc
//! program launches it with its own launch builder on its own streams (B5),
//! and cudarc unloads the module, on the context that loaded it, when the
//! last clone of the module (the kernel's, or one the program took) drops.
//!
//! [`CudaDevice`]'s [`CxxDevice`] impl here is what the target's device
//! step calls, on the batch's workers (F9).

use std::fmt;
use std::sync::Arc;

use cudarc::driver::PushKernelArg;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream, DriverError};
use cudarc::nvrtc::Ptx;
use kiln_engine::{ArtifactReport, DeviceRefusal, Reported, ResourceUsage};

use crate::architecture::Architecture;
use crate::compiler::{CudaArtifact, CudaCompiler};
use crate::device::CudaDevice;
use crate::error::{Error, driver_message};
use kiln_cxx::{CxxDevice, EntrySymbols, KernelArgument, LaunchConfig};

/// Which of an artifact's images a kernel was loaded from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LoadedImage {
    /// The cubin for the device's architecture: no compile at load.
    Cubin,
    /// The PTX, compiled by the driver because it refused the cubin.
    Ptx,
    /// Nothing was loaded: a compile-only target described the artifact.
    Described,
}

/// A kernel ready to launch: cheap to clone (an `Arc`), and its module is
/// unloaded, on the context that owns it, when the last clone of the kernel
/// and of its cudarc [`module`](Self::module) and
/// [`function`](Self::function) drops.
///
/// Launch it with cudarc on a stream of the program's own:
///
/// ```no_run
/// use kiln_engine::{ArtifactId, Kernel, KernelId, KernelLoader};
/// use kiln_cuda::cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
/// use kiln_cuda::{CudaKernel, CudaTarget};
///
/// let context = CudaContext::new(0)?;
/// let stream = context.new_stream()?;
/// let mut loader = KernelLoader::new(CudaTarget::from_context(context)?);
/// let scale = CudaKernel::builder(KernelId::named("example.scale"), "scale").source(
///     r#"extern "C" __global__ void scale(float* y, float factor, int n) {
///            int i = blockIdx.x * blockDim.x + threadIdx.x;
///            if (i < n) y[i] *= factor;
///        }"#,
/// );
/// let id = ArtifactId::new(scale.id(), loader.target().variant());
/// let kernel = loader.load(&scale, &id)?;
///
/// let mut values = stream.clone_htod(&[1.0f32, 2.0, 3.0])?;
/// let (factor, n) = (2.0f32, 3i32);
/// let mut launch = stream.launch_builder(kernel.function()?);
/// launch.arg(&mut values).arg(&factor).arg(&n);
/// // SAFETY: the arguments match scale(float*, float, int) and `values`
/// // holds the 3 floats the launch touches.
/// unsafe { launch.launch(LaunchConfig::for_num_elems(3)) }?;
/// assert_eq!(stream.clone_dtoh(&values)?, [2.0, 4.0, 6.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct LoadedKernel(Arc<Loaded>);

struct Loaded {
    /// The entry points' symbols (B6).
    entries: EntrySymbols,
    architecture: Architecture,
    image: LoadedImage,
    cubin_bytes: usize,
    ptx_bytes: usize,
    /// Why the cubin was not used, when the PTX was.
    cubin_refusal: Option<String>,
    /// The artifact's report, with the driver's largest block on a device.
    report: ArtifactReport,
    module: Option<DeviceModule>,
}

/// A cudarc module on the device's context and the entry point's function
/// in it. cudarc unloads the module, binding the context it was loaded on,
/// when its last `Arc` (this one, the function's, and any the program
/// cloned) drops.
/// A kernel argument as cudarc's launch takes it: a pointer to the value's
/// bytes, which a [`KernelArgument`] holds from the start of its 8-aligned
/// slot.
#[repr(transparent)]
struct Parameter(KernelArgument);

// SAFETY: `Parameter` is `KernelArgument`, whose layout is its value's
// bytes from the start of an 8-aligned slot (`repr(C, align(8))`): a
// pointer to it is a pointer to the value, as the driver reads a kernel's
// parameters.
unsafe impl cudarc::driver::DeviceRepr for Parameter {}

struct DeviceModule {
    device: CudaDevice,
    module: Arc<CudaModule>,
    function: CudaFunction,
}

impl LoadedKernel {
    /// The entry point's symbol.
    pub fn lowered_name(&self) -> &str {
        self.0.entries.first()
    }

    /// The architecture the artifact was built for.
    pub fn architecture(&self) -> Architecture {
        self.0.architecture
    }

    /// Which image was loaded.
    pub fn image(&self) -> LoadedImage {
        self.0.image
    }

    /// The sizes of the artifact's cubin and PTX, in bytes.
    pub fn artifact_bytes(&self) -> (usize, usize) {
        (self.0.cubin_bytes, self.0.ptx_bytes)
    }

    /// Why the driver did not take the cubin, when it loaded the PTX.
    pub fn cubin_refusal(&self) -> Option<&str> {
        self.0.cubin_refusal.as_deref()
    }

    /// What the kernel uses (D4): registers, spills, shared, local and
    /// constant memory as ptxas reported them, the same for a kernel read
    /// from a store as for one compiled here; on a device, the largest
    /// block is the driver's.
    pub fn resources(&self) -> &ResourceUsage {
        &self.0.report.resources
    }

    /// The device it is loaded on; `None` for a compile-only target's.
    pub fn device(&self) -> Option<&CudaDevice> {
        self.0.module.as_ref().map(|module| &module.device)
    }

    /// The cudarc function of the entry point, for cudarc's own
    /// [`launch_builder`](cudarc::driver::CudaStream::launch_builder) on a
    /// stream of the program's (see the example on [`LoadedKernel`]). A
    /// clone of it keeps the module loaded after the kernel is dropped.
    ///
    /// # Errors
    ///
    /// [`Error::CompileOnly`] for a kernel of a compile-only target, which
    /// has no device.
    pub fn function(&self) -> Result<&CudaFunction, Error> {
        self.on_device().map(|module| &module.function)
    }

    /// The symbol of the module's entry point `expression` (B6): the
    /// first entry's or another's, as the kernel named them; `None` for a
    /// name that is no entry of the kernel.
    pub fn lowered_name_of(&self, expression: &str) -> Option<&str> {
        self.0.entries.symbol_of(expression)
    }

    /// The cudarc function of the module's entry point `expression` (B6),
    /// one of the entries the kernel was built with
    /// ([`CudaKernelBuilder::entry`](crate::CudaKernelBuilder::entry));
    /// the first entry's is [`function`](Self::function)'s.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a name that is no entry of the kernel,
    /// [`Error::CompileOnly`] for a kernel of a compile-only target, and
    /// the driver's error should the module not give the function.
    pub fn function_of(&self, expression: &str) -> Result<CudaFunction, Error> {
        let module = self.on_device()?;
        let Some(symbol) = self.lowered_name_of(expression) else {
            return Err(Error::Invalid(format!(
                "`{expression}` is no other entry point of this kernel; it has {}",
                std::iter::once(self.0.entries.first())
                    .chain(
                        self.0
                            .entries
                            .more()
                            .iter()
                            .map(|(entry, _)| entry.as_str())
                    )
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        module
            .module
            .load_function(symbol)
            .map_err(|error| Error::driver("cuModuleGetFunction", error))
    }

    /// The cudarc module the kernel's function lives in (its globals and
    /// constants are reachable through
    /// [`CudaModule::get_global`](cudarc::driver::CudaModule::get_global)).
    /// A clone of it keeps the module loaded after the kernel is dropped.
    ///
    /// # Errors
    ///
    /// [`Error::CompileOnly`] for a kernel of a compile-only target.
    pub fn module(&self) -> Result<&Arc<CudaModule>, Error> {
        self.on_device().map(|module| &module.module)
    }

    /// Launches the kernel on `stream`, a stream of the kernel's context
    /// (one the program made with
    /// [`CudaContext::new_stream`](cudarc::driver::CudaContext::new_stream),
    /// or the context's [`default_stream`](cudarc::driver::CudaContext::default_stream)
    /// when it means the legacy default stream): it runs after the work
    /// queued on `stream` before it, and what is queued after waits for it.
    /// kiln launches on no stream the caller did not name (B5).
    ///
    /// ```no_run
    /// use kiln_engine::{ArtifactId, Kernel, KernelId, KernelLoader};
    /// use kiln_cuda::{CudaKernel, CudaTarget, KernelArgument, LaunchConfig};
    ///
    /// let target = CudaTarget::on_device(0)?;
    /// let device = target.device().expect("a device target has a device").clone();
    /// let stream = device.context().new_stream()?;
    /// let mut loader = KernelLoader::new(target);
    /// let fill = CudaKernel::builder(KernelId::named("example.fill"), "fill").source(
    ///     r#"extern "C" __global__ void fill(float* y, float value, int n) {
    ///            int i = blockIdx.x * blockDim.x + threadIdx.x;
    ///            if (i < n) y[i] = value;
    ///        }"#,
    /// );
    /// let kernel = loader.load(&fill, &ArtifactId::new(fill.id(), loader.target().variant()))?;
    /// let output = device.alloc::<f32>(1000)?;
    /// // SAFETY: the arguments match `fill`'s parameters and `output`
    /// // holds the 1000 elements the launch writes.
    /// unsafe {
    ///     kernel.launch(
    ///         &stream,
    ///         LaunchConfig::for_elements(1000, 256),
    ///         &[(&output).into(), 2.5f32.into(), 1000i32.into()],
    ///     )?;
    /// }
    /// // A buffer's copy waits for every stream of the context.
    /// assert!(output.to_vec()?.iter().all(|&value| value == 2.5));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Safety
    ///
    /// `arguments` must match the kernel's parameters in number, order and
    /// type, every pointer must be device memory of this device, large enough
    /// for every access the kernel makes with this `config`, and that memory
    /// must stay allocated until the kernel finishes.
    ///
    /// # Errors
    ///
    /// [`Error::CompileOnly`] for a kernel without a device, unless this
    /// thread is in compile-only mode ([`kiln_engine::mode`]), where such a
    /// launch does nothing and succeeds (L11);
    /// [`Error::ForeignStream`] for a stream of another context, or the
    /// driver's refusal of the launch (a block too large, too much shared
    /// memory).
    pub unsafe fn launch(
        &self,
        stream: &CudaStream,
        config: LaunchConfig,
        arguments: &[KernelArgument],
    ) -> Result<(), Error> {
        // L11: decided where the launch is issued, as the mode is the
        // thread's; a kernel with a device launches whatever the mode.
        if self.0.module.is_none() && kiln_engine::mode::is_compile_only() {
            return Ok(());
        }
        let module = self.on_device()?;
        let context = module.device.context();
        if stream.context().cu_ctx() != context.cu_ctx() {
            return Err(Error::ForeignStream {
                entry: self.0.entries.first().to_owned(),
                kernel_ordinal: context.ordinal(),
                stream_ordinal: stream.context().ordinal(),
            });
        }
        let parameters: Vec<Parameter> = arguments.iter().copied().map(Parameter).collect();
        let mut launch = stream.launch_builder(&module.function);
        for parameter in &parameters {
            launch.arg(parameter);
        }
        // SAFETY: the function belongs to a live module of the stream's
        // context (checked above), which cudarc binds to this thread; each
        // parameter is its argument's bytes in an 8-aligned slot the driver
        // copies at launch and never writes through; the caller vouches
        // that the arguments match the kernel's parameters and memory.
        unsafe {
            launch.launch(cudarc::driver::LaunchConfig {
                grid_dim: config.grid,
                block_dim: config.block,
                shared_mem_bytes: config.shared_memory_bytes,
            })
        }
        .map(drop)
        .map_err(|error| Error::driver("cuLaunchKernel", error))
    }

    fn on_device(&self) -> Result<&DeviceModule, Error> {
        self.0.module.as_ref().ok_or_else(|| Error::CompileOnly {
            entry: self.0.entries.first().to_owned(),
        })
    }
}

/// The artifact's report (D4); see [`LoadedKernel::resources`].
impl Reported for LoadedKernel {
    fn report(&self) -> &ArtifactReport {
        &self.0.report
    }
}

impl fmt::Debug for LoadedKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedKernel")
            .field("lowered_name", &self.0.entries.first())
            .field("architecture", &self.0.architecture)
            .field("image", &self.0.image)
            .field("device", &self.device())
            .finish()
    }
}

/// Loads `artifact` on `device`: the cubin, else the PTX, then the entry
/// point's function.
pub(crate) fn load_on_device(
    device: &CudaDevice,
    artifact: &CudaArtifact,
) -> Result<LoadedKernel, DeviceRefusal> {
    let context = device.context();
    let (module, image, cubin_refusal) = match load_cubin(context, &artifact.cubin) {
        Ok(module) => (module, LoadedImage::Cubin, None),
        Err(cubin_refusal) => match load_ptx(context, &artifact.ptx) {
            Ok(module) => {
                log::info!(
                    "the driver refused the cubin of `{}` ({cubin_refusal}); loaded its PTX",
                    artifact.lowered_name
                );
                (module, LoadedImage::Ptx, Some(cubin_refusal))
            }
            Err((ptx_refusal, code)) => {
                return Err(DeviceRefusal {
                    message: format!(
                        "{} ({}) refused the cubin for {}: {cubin_refusal}; and its PTX: {ptx_refusal}",
                        device.name(),
                        device.architecture(),
                        artifact.architecture
                    ),
                    code,
                });
            }
        },
    };
    // cudarc's name conversion panics on a NUL byte: refuse it first. A
    // module that yields no function is unloaded when `module` drops.
    if artifact.lowered_name.contains('\0') {
        return Err(DeviceRefusal::new(
            "the entry point's name holds a NUL byte",
        ));
    }
    let function = module
        .load_function(&artifact.lowered_name)
        .map_err(|error| DeviceRefusal {
            message: format!(
                "the module has no function `{}`: {}",
                artifact.lowered_name,
                driver_message(error)
            ),
            code: Some(error.0 as i64),
        })?;
    // The driver knows the largest block the kernel can run with its
    // registers, launch bounds or not; a driver that does not say leaves
    // what the PTX said.
    let mut report = artifact.report.clone();
    if let Ok(threads) = function.max_threads_per_block()
        && let Ok(threads) = u32::try_from(threads)
    {
        report.resources.max_threads_per_block = Some(threads);
    }
    Ok(LoadedKernel(Arc::new(Loaded {
        entries: EntrySymbols::new(artifact.lowered_name.clone(), artifact.more_entries.clone()),
        architecture: artifact.architecture,
        image,
        cubin_bytes: artifact.cubin.len(),
        ptx_bytes: artifact.ptx.len(),
        cubin_refusal,
        report,
        module: Some(DeviceModule {
            device: device.clone(),
            module,
            function,
        }),
    })))
}

/// Describes `artifact` as a device of `architecture` would load it,
/// refusing what such a device refuses: a cubin for another architecture
/// whose PTX is newer than the device.
pub(crate) fn describe(
    architecture: Architecture,
    artifact: &CudaArtifact,
) -> Result<LoadedKernel, DeviceRefusal> {
    let cubin_refusal = if let Err(reason) = check_cubin(&artifact.cubin) {
        Some(reason)
    } else if !architecture.runs_cubin_of(artifact.architecture) {
        Some(format!(
            "a device of {architecture} does not run a cubin for {}",
            artifact.architecture
        ))
    } else {
        None
    };
    if let Some(cubin_refusal) = cubin_refusal
        && (artifact.ptx.is_empty() || !architecture.runs_ptx_of(artifact.architecture))
    {
        return Err(DeviceRefusal::new(format!(
            "{cubin_refusal}, nor PTX written for {} (compile-only target for {architecture})",
            artifact.architecture
        )));
    }
    Ok(LoadedKernel(Arc::new(Loaded {
        entries: EntrySymbols::new(artifact.lowered_name.clone(), artifact.more_entries.clone()),
        architecture: artifact.architecture,
        image: LoadedImage::Described,
        cubin_bytes: artifact.cubin.len(),
        ptx_bytes: artifact.ptx.len(),
        cubin_refusal: None,
        report: artifact.report.clone(),
        module: None,
    })))
}

/// A GPU loads the cubin of an artifact, else its PTX (L9); a compile-only
/// target describes it as a GPU of its architecture would load it.
impl CxxDevice for CudaDevice {
    type Compiler = CudaCompiler;
    type Architecture = Architecture;
    type Loaded = LoadedKernel;

    fn compiles_for(&self) -> &Architecture {
        &self.architecture
    }

    fn load(&self, artifact: &CudaArtifact) -> Result<LoadedKernel, DeviceRefusal> {
        load_on_device(self, artifact)
    }

    fn describe(
        architecture: &Architecture,
        artifact: &CudaArtifact,
    ) -> Result<LoadedKernel, DeviceRefusal> {
        describe(*architecture, artifact)
    }
}

fn load_cubin(context: &Arc<CudaContext>, cubin: &[u8]) -> Result<Arc<CudaModule>, String> {
    check_cubin(cubin)?;
    // The driver reads the image through the sizes in its own header, with
    // no length from the caller: `check_cubin` proved every table it
    // describes lies inside `cubin`. cudarc binds the context and hands the
    // bytes to `cuModuleLoadData`.
    context
        .load_module(Ptx::from_binary(cubin.to_vec()))
        .map_err(driver_message)
}

fn load_ptx(
    context: &Arc<CudaContext>,
    ptx: &str,
) -> Result<Arc<CudaModule>, (String, Option<i64>)> {
    if ptx.is_empty() {
        return Err(("the artifact has no PTX".into(), None));
    }
    // The driver reads PTX as a NUL-terminated string, and cudarc's
    // conversion to one panics on a NUL inside: refuse it first.
    if ptx.contains('\0') {
        return Err(("the PTX holds a NUL byte".to_owned(), None));
    }
    context
        .load_module(Ptx::from_src(ptx))
        .map_err(|error: DriverError| (driver_message(error), Some(error.0 as i64)))
}

/// Checks that `cubin` is a 64-bit little-endian ELF file whose program and
/// section tables, and every section with contents, lie inside it. The
/// driver takes no length, so a truncated image would be read past its end.
pub(crate) fn check_cubin(cubin: &[u8]) -> Result<(), String> {
    const HEADER: usize = 64;
    const NO_CONTENTS: u32 = 8; // SHT_NOBITS
    if cubin.len() < HEADER || cubin[..4] != [0x7f, b'E', b'L', b'F'] {
        return Err("the cubin is not an ELF image".into());
    }
    if cubin[4] != 2 || cubin[5] != 1 {
        return Err("the cubin is not a 64-bit little-endian ELF image".into());
    }
    let read_u16 = |at: usize| u16::from_le_bytes([cubin[at], cubin[at + 1]]) as u64;
    let read = |at: u64, width: usize| -> Option<u64> {
        let at = usize::try_from(at).ok()?;
        let bytes = cubin.get(at..at.checked_add(width)?)?;
        let mut value = [0u8; 8];
        value[..width].copy_from_slice(bytes);
        Some(u64::from_le_bytes(value))
    };
    let length = cubin.len() as u64;
    let fits = |offset: u64, size: u64| offset.checked_add(size).is_some_and(|end| end <= length);
    let truncated = || "the cubin is truncated: a table it describes lies past its end".to_owned();

    let program_offset = read(0x20, 8).ok_or_else(truncated)?;
    let section_offset = read(0x28, 8).ok_or_else(truncated)?;
    let (program_size, program_count) = (read_u16(0x36), read_u16(0x38));
    let (section_size, section_count) = (read_u16(0x3a), read_u16(0x3c));
    if !fits(program_offset, program_size * program_count)
        || !fits(section_offset, section_size * section_count)
    {
        return Err(truncated());
    }
    for index in 0..program_count {
        let entry = program_offset + index * program_size;
        let offset = read(entry + 0x08, 8).ok_or_else(truncated)?;
        let size = read(entry + 0x20, 8).ok_or_else(truncated)?;
        if !fits(offset, size) {
            return Err(truncated());
        }
    }
    for index in 0..section_count {
        let entry = section_offset + index * section_size;
        let kind = read(entry + 0x04, 4).ok_or_else(truncated)?;
        let offset = read(entry + 0x18, 8).ok_or_else(truncated)?;
        let size = read(entry + 0x20, 8).ok_or_else(truncated)?;
        if kind != u64::from(NO_CONTENTS) && !fits(offset, size) {
            return Err(truncated());
        }
    }
    Ok(())
}
