//! Loaded kernels: an artifact made a driver module and function handle,
//! or, on a compile-only target, described without a device.
//!
//! The driver is given the cubin first. When it refuses it (a driver that
//! does not know the architecture, a damaged image), it is given the PTX,
//! which it compiles for its own device; only when both are refused is the
//! kernel refused (L9).

use std::ffi::CString;
use std::fmt;
use std::sync::Arc;

use cudarc::driver::result as driver;
use cudarc::driver::sys::{CUfunction, CUmodule};
use kiln_core::DeviceRefusal;

use crate::architecture::Architecture;
use crate::compiler::CudaArtifact;
use crate::device::CudaDevice;
use crate::error::{Error, driver_message};
use kiln_cxx::{KernelArgument, LaunchConfig};

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
/// unloaded, on the context that owns it, when the last clone drops.
#[derive(Clone)]
pub struct LoadedKernel(Arc<Loaded>);

struct Loaded {
    lowered_name: String,
    architecture: Architecture,
    image: LoadedImage,
    cubin_bytes: usize,
    ptx_bytes: usize,
    /// Why the cubin was not used, when the PTX was.
    cubin_refusal: Option<String>,
    module: Option<DeviceModule>,
}

/// A driver module and the function in it, unloaded on drop.
struct DeviceModule {
    device: CudaDevice,
    module: CUmodule,
    function: CUfunction,
}

// SAFETY: driver handles belong to the process, not to a thread; every use
// (launch, unload) first binds the context that owns them.
unsafe impl Send for DeviceModule {}
// SAFETY: as for `Send`: the handles are only passed to the driver, which
// is thread-safe, never dereferenced here.
unsafe impl Sync for DeviceModule {}

impl Drop for DeviceModule {
    fn drop(&mut self) {
        let unloaded = self.device.bind().and_then(|()| {
            // SAFETY: the module was loaded by `load_on_device` on this
            // context and is unloaded once, here, when no clone of the kernel
            // holding its function is left.
            unsafe { driver::module::unload(self.module) }
                .map_err(|error| Error::driver("cuModuleUnload", error))
        });
        if let Err(error) = unloaded {
            log::warn!("a CUDA module was not unloaded: {error}");
        }
    }
}

impl LoadedKernel {
    /// The entry point's symbol.
    pub fn lowered_name(&self) -> &str {
        &self.0.lowered_name
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

    /// The device it is loaded on; `None` for a compile-only target's.
    pub fn device(&self) -> Option<&CudaDevice> {
        self.0.module.as_ref().map(|module| &module.device)
    }

    /// Launches the kernel on the device's default stream; it runs after
    /// the work launched before it, and copies wait for it.
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
    /// [`Error::CompileOnly`] for a kernel without a device, or the driver's
    /// refusal of the launch (a block too large, too much shared memory).
    pub unsafe fn launch(
        &self,
        config: LaunchConfig,
        arguments: &[KernelArgument],
    ) -> Result<(), Error> {
        let Some(module) = &self.0.module else {
            return Err(Error::CompileOnly {
                entry: self.0.lowered_name.clone(),
            });
        };
        module.device.bind()?;
        kiln_cxx::launch::with_parameters(arguments, |parameters| {
            // SAFETY: the function belongs to a live module on the bound
            // context; `parameters` point into `arguments`, which outlive the
            // call (the driver copies the values at launch and never writes
            // through them); the caller vouches that they match the kernel's
            // parameters and memory.
            unsafe {
                driver::launch_kernel(
                    module.function,
                    config.grid,
                    config.block,
                    config.shared_memory_bytes,
                    std::ptr::null_mut(),
                    parameters,
                )
            }
        })
        .map_err(|error| Error::driver("cuLaunchKernel", error))
    }
}

impl fmt::Debug for LoadedKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedKernel")
            .field("lowered_name", &self.0.lowered_name)
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
    device
        .bind()
        .map_err(|error| DeviceRefusal::new(error.to_string()))?;
    let (module, image, cubin_refusal) = match load_cubin(&artifact.cubin) {
        Ok(module) => (module, LoadedImage::Cubin, None),
        Err(cubin_refusal) => match load_ptx(&artifact.ptx) {
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
    // A module that yields no function is unloaded by this guard on return.
    let mut loaded = DeviceModule {
        device: device.clone(),
        module,
        function: std::ptr::null_mut(),
    };
    let name = CString::new(artifact.lowered_name.as_str())
        .map_err(|_| DeviceRefusal::new("the entry point's name holds a NUL byte"))?;
    // SAFETY: the module was just loaded on the bound context.
    loaded.function =
        unsafe { driver::module::get_function(module, name) }.map_err(|error| DeviceRefusal {
            message: format!(
                "the module has no function `{}`: {}",
                artifact.lowered_name,
                driver_message(error)
            ),
            code: Some(error.0 as i64),
        })?;
    Ok(LoadedKernel(Arc::new(Loaded {
        lowered_name: artifact.lowered_name.clone(),
        architecture: artifact.architecture,
        image,
        cubin_bytes: artifact.cubin.len(),
        ptx_bytes: artifact.ptx.len(),
        cubin_refusal,
        module: Some(loaded),
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
        lowered_name: artifact.lowered_name.clone(),
        architecture: artifact.architecture,
        image: LoadedImage::Described,
        cubin_bytes: artifact.cubin.len(),
        ptx_bytes: artifact.ptx.len(),
        cubin_refusal: None,
        module: None,
    })))
}

fn load_cubin(cubin: &[u8]) -> Result<CUmodule, String> {
    check_cubin(cubin)?;
    // The driver reads the image through the sizes in its own header, with
    // no length from the caller: `check_cubin` proved every table it
    // describes lies inside `cubin`.
    // SAFETY: the context is bound (by `load_on_device`) and the image is a
    // bounds-checked ELF file that outlives the call.
    unsafe { driver::module::load_data(cubin.as_ptr().cast()) }.map_err(driver_message)
}

fn load_ptx(ptx: &str) -> Result<CUmodule, (String, Option<i64>)> {
    if ptx.is_empty() {
        return Err(("the artifact has no PTX".into(), None));
    }
    let text = CString::new(ptx).map_err(|_| ("the PTX holds a NUL byte".to_owned(), None))?;
    // SAFETY: the context is bound and the PTX is a NUL-terminated string
    // that outlives the call, which is the form the driver reads PTX in.
    unsafe { driver::module::load_data(text.as_ptr().cast()) }
        .map_err(|error| (driver_message(error), Some(error.0 as i64)))
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
