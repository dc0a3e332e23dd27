//! A CUDA device and the little memory a launch needs: buffers of plain
//! numbers, copied whole to and from the host.
//!
//! kiln is not a tensor library: this is enough to launch a kernel and read
//! its result, nothing more. Programs with their own memory management pass
//! raw device pointers to [`KernelArgument::pointer`](crate::KernelArgument).

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
    architecture: Architecture,
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

    /// Waits for everything launched on the device.
    ///
    /// # Errors
    ///
    /// A launched kernel failed (an illegal address, say), or the driver did.
    pub fn synchronize(&self) -> Result<(), Error> {
        self.bind()?;
        driver::ctx::synchronize().map_err(|error| Error::driver("cuCtxSynchronize", error))
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

    /// Overwrites the whole buffer with `host`, waiting for the copy (and
    /// for work launched before it) to finish.
    ///
    /// # Errors
    ///
    /// `host` has another length, or the driver failed.
    pub fn copy_from_host(&mut self, host: &[T]) -> Result<(), Error> {
        self.check_len(host.len())?;
        self.device.bind()?;
        // SAFETY: the context is bound and the buffer holds exactly
        // `host.len()` elements of `T`, allocated by `alloc`.
        unsafe { driver::memcpy_htod_sync(self.pointer, host) }
            .map_err(|error| Error::driver("cuMemcpyHtoD", error))
    }

    /// Copies the whole buffer into `host`, after the work launched before
    /// it has finished.
    ///
    /// # Errors
    ///
    /// `host` has another length, a launched kernel failed, or the driver
    /// did.
    pub fn copy_to_host(&self, host: &mut [T]) -> Result<(), Error> {
        self.check_len(host.len())?;
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
        let freed = self.device.bind().and_then(|()| {
            // SAFETY: the pointer came from `malloc_sync` on this context and
            // is freed once, here; the synchronous free waits for kernels
            // still using it.
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
