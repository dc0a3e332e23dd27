//! A CUDA device and the little memory a launch needs: buffers of plain
//! numbers, copied whole to and from the host.
//!
//! kiln is not a tensor library: this is enough to launch a kernel and read
//! its result, nothing more. Programs with their own memory management keep
//! it: a cudarc program passes its `CudaSlice`s to cudarc's own launch
//! builder with the kernel's [`function`](crate::LoadedKernel::function), and
//! any other passes raw device pointers to
//! [`KernelArgument::pointer`](crate::KernelArgument).
//!
//! Buffer copies wait for the whole context, every stream included: a
//! kernel launched on a stream of the program's own (cudarc's streams are
//! non-blocking, unordered with the legacy default stream the driver's
//! synchronous copies use) has finished before a copy reads or overwrites
//! its memory, and a copy has landed before it returns.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::result as driver;
use cudarc::driver::sys::{self, CUdevice_attribute, CUresult};
use cudarc::driver::{CudaContext, DriverError};
use kiln_cxx::DeviceAddress;
pub use kiln_cxx::DeviceScalar;

use crate::architecture::Architecture;
use crate::error::{Error, driver_message};
use crate::library;

/// One GPU, through its primary context: cheap to clone, and the context is
/// released when the last clone (and every module and buffer on it) drops.
#[derive(Clone)]
pub struct CudaDevice {
    context: Arc<CudaContext>,
    /// Read by reference by the target's device step.
    pub(crate) architecture: Architecture,
    name: String,
}

impl CudaDevice {
    /// The GPU numbered `ordinal` (0 is the first).
    ///
    /// # Errors
    ///
    /// [`Error::LibraryMissing`] when the driver is not installed,
    /// [`Error::NoDevice`] when it has no GPU (or not that many), and
    /// [`Error::Driver`] when a driver call fails.
    pub fn open(ordinal: usize) -> Result<Self, Error> {
        library::driver()?;
        driver::init().map_err(|error| match error.0 {
            CUresult::CUDA_ERROR_NO_DEVICE => Error::NoDevice {
                detail: format!("the driver found no GPU ({})", driver_message(error)),
            },
            _ => Error::driver("cuInit", error),
        })?;
        let count = CudaContext::device_count()
            .map_err(|error| Error::driver("cuDeviceGetCount", error))?;
        if usize::try_from(count).map_or(true, |count| ordinal >= count) {
            return Err(Error::NoDevice {
                detail: format!("there is no GPU number {ordinal}: the driver has {count}"),
            });
        }
        let context = CudaContext::new(ordinal)
            .map_err(|error| Error::driver("cuDevicePrimaryCtxRetain", error))?;
        Self::from_context(context)
    }

    /// The architecture of GPU `ordinal`, asked of the driver without
    /// making a context (`cuInit`, `cuDeviceGet`, `cuDeviceGetAttribute`):
    /// what a caller needs to read its kernels from the store while the
    /// context is made. `None` when the driver is missing or cannot say.
    pub fn architecture_of(ordinal: usize) -> Option<Architecture> {
        library::driver().ok()?;
        driver::init().ok()?;
        let device = driver::device::get(i32::try_from(ordinal).ok()?).ok()?;
        let attribute = |which| {
            // SAFETY: `device` is the handle the initialized driver just
            // gave for `ordinal`; the attribute is a plain integer the
            // driver writes.
            unsafe { driver::device::get_attribute(device, which) }
                .ok()
                .and_then(|value| u32::try_from(value).ok())
        };
        Some(Architecture::new(
            attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ))
    }

    /// The GPU of a cudarc context the program already has: kiln loads its
    /// modules on that context, so cudarc launches them on the program's
    /// own streams (rule B5).
    ///
    /// The context is kept (an `Arc` clone) as long as the device, its
    /// buffers and every kernel loaded on it.
    ///
    /// ```no_run
    /// use kiln_cuda::CudaDevice;
    /// use kiln_cuda::cudarc::driver::CudaContext;
    ///
    /// let context = CudaContext::new(0)?;
    /// let device = CudaDevice::from_context(context.clone())?;
    /// assert_eq!(device.ordinal(), context.ordinal());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Driver`] when the driver cannot say what the device is.
    pub fn from_context(context: Arc<CudaContext>) -> Result<Self, Error> {
        let major = context
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
            .map_err(|error| Error::driver("cuDeviceGetAttribute", error))?;
        let minor = context
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
            .map_err(|error| Error::driver("cuDeviceGetAttribute", error))?;
        let name = context
            .name()
            .map_err(|error| Error::driver("cuDeviceGetName", error))?;
        Ok(Self {
            context,
            architecture: Architecture::new(
                u32::try_from(major).unwrap_or(0),
                u32::try_from(minor).unwrap_or(0),
            ),
            name,
        })
    }

    /// The cudarc context kernels are loaded on: the one given to
    /// [`from_context`](Self::from_context), or the device's primary
    /// context. Make streams on it with
    /// [`CudaContext::new_stream`](cudarc::driver::CudaContext::new_stream).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.context
    }

    /// The device's architecture: what its cubins are built for.
    pub fn architecture(&self) -> Architecture {
        self.architecture
    }

    /// The device's name (`NVIDIA H200`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device's ordinal.
    pub fn ordinal(&self) -> usize {
        self.context.ordinal()
    }

    /// Waits for everything launched on the device's context, on every
    /// stream.
    ///
    /// # Errors
    ///
    /// A launched kernel failed (an illegal address, say), or the driver did.
    pub fn synchronize(&self) -> Result<(), Error> {
        self.context
            .synchronize()
            .map_err(|error| Error::driver("cuCtxSynchronize", error))
    }

    /// A buffer of `len` elements, its contents unset.
    ///
    /// # Errors
    ///
    /// The device is out of memory, or the driver failed.
    pub fn alloc<T: DeviceScalar>(&self, len: usize) -> Result<DeviceBuffer<T>, Error> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| Error::Invalid(format!("{len} elements overflow the address space")))?;
        self.bind()?;
        // SAFETY: the context is bound; the memory is only ever read as `T`,
        // for which every bit pattern is a value (`DeviceScalar`).
        let pointer = unsafe { driver::malloc_sync(bytes.max(1)) }
            .map_err(|error| Error::driver("cuMemAlloc", error))?;
        Ok(DeviceBuffer {
            pointer,
            len,
            device: self.clone(),
            _element: PhantomData,
        })
    }

    /// A buffer holding a copy of `host`.
    ///
    /// # Errors
    ///
    /// As [`alloc`](Self::alloc) and [`DeviceBuffer::copy_from_host`].
    pub fn upload<T: DeviceScalar>(&self, host: &[T]) -> Result<DeviceBuffer<T>, Error> {
        let mut buffer = self.alloc(host.len())?;
        buffer.copy_from_host(host)?;
        Ok(buffer)
    }

    /// Makes the device's context the calling thread's, as every driver call
    /// on it needs.
    pub(crate) fn bind(&self) -> Result<(), Error> {
        self.context
            .bind_to_thread()
            .map_err(|error| Error::driver("cuCtxSetCurrent", error))
    }
}

impl fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaDevice")
            .field("ordinal", &self.ordinal())
            .field("name", &self.name)
            .field("architecture", &self.architecture)
            .finish()
    }
}

/// Device memory holding `len` values of `T`, freed (on its own context)
/// when dropped.
pub struct DeviceBuffer<T: DeviceScalar> {
    pointer: sys::CUdeviceptr,
    len: usize,
    device: CudaDevice,
    _element: PhantomData<T>,
}

impl<T: DeviceScalar> DeviceBuffer<T> {
    /// How many elements it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device address, as a kernel receives it.
    pub fn device_pointer(&self) -> u64 {
        self.pointer
    }

    /// The device it lives on.
    pub fn device(&self) -> &CudaDevice {
        &self.device
    }

    /// Overwrites the whole buffer with `host`, after the work launched
    /// before it on any stream of the context has finished, and waits for
    /// the copy to land.
    ///
    /// # Errors
    ///
    /// `host` has another length, a launched kernel failed, or the driver
    /// did.
    pub fn copy_from_host(&mut self, host: &[T]) -> Result<(), Error> {
        self.check_len(host.len())?;
        self.device.synchronize()?;
        self.device.bind()?;
        // SAFETY: the context is bound and the buffer holds exactly
        // `host.len()` elements of `T`, allocated by `alloc`.
        unsafe { driver::memcpy_htod_sync(self.pointer, host) }
            .map_err(|error| Error::driver("cuMemcpyHtoD", error))?;
        // A copy from pageable memory may return before its DMA lands; a
        // kernel on a non-blocking stream would not wait for it.
        self.device.synchronize()
    }

    /// Copies the whole buffer into `host`, after the work launched before
    /// it on any stream of the context has finished.
    ///
    /// # Errors
    ///
    /// `host` has another length, a launched kernel failed, or the driver
    /// did.
    pub fn copy_to_host(&self, host: &mut [T]) -> Result<(), Error> {
        self.check_len(host.len())?;
        self.device.synchronize()?;
        self.device.bind()?;
        // SAFETY: the context is bound, the buffer holds exactly `host.len()`
        // elements, and any bit pattern is a valid `T` (`DeviceScalar`).
        unsafe { driver::memcpy_dtoh_sync(host, self.pointer) }
            .map_err(|error| Error::driver("cuMemcpyDtoH", error))
    }

    /// The buffer's contents.
    ///
    /// # Errors
    ///
    /// As [`copy_to_host`](Self::copy_to_host).
    pub fn to_vec(&self) -> Result<Vec<T>, Error> {
        let mut host = vec![T::zero(); self.len];
        self.copy_to_host(&mut host)?;
        Ok(host)
    }

    fn check_len(&self, host_len: usize) -> Result<(), Error> {
        if host_len == self.len {
            Ok(())
        } else {
            Err(Error::Invalid(format!(
                "the host slice has {host_len} elements and the device buffer {}",
                self.len
            )))
        }
    }
}

impl<T: DeviceScalar> DeviceAddress for DeviceBuffer<T> {
    fn device_address(&self) -> u64 {
        self.pointer
    }
}

impl<T: DeviceScalar> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        // Kernels still using the memory may run on a non-blocking stream,
        // which the free itself does not wait for.
        let freed = self
            .device
            .synchronize()
            .and_then(|()| self.device.bind())
            .and_then(|()| {
                // SAFETY: the pointer came from `malloc_sync` on this context and
                // is freed once, here, after every kernel launched on the context
                // has finished.
                unsafe { driver::free_sync(self.pointer) }
                    .map_err(|error: DriverError| Error::driver("cuMemFree", error))
            });
        if let Err(error) = freed {
            log::warn!("a device buffer was not freed: {error}");
        }
    }
}

impl<T: DeviceScalar> fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("pointer", &format_args!("{:#x}", self.pointer))
            .field("len", &self.len)
            .field("element", &std::any::type_name::<T>())
            .finish()
    }
}
