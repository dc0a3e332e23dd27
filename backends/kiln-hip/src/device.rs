//! AMD GPUs through the HIP runtime: devices and device memory, released
//! when dropped. Loaded kernels are in [`crate::module`].
//!
//! kiln is not a tensor library: this is enough to launch a kernel and read
//! its result, nothing more. Programs with their own memory management pass
//! raw device pointers to [`KernelArgument::pointer`](crate::KernelArgument).
//!
//! **None of this has run on AMD hardware.** It is written against the
//! ROCm headers and tested only where no GPU exists: there the runtime
//! fails to start, and every entry point returns [`Error::NoDevice`] rather
//! than panicking.

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use kiln_cxx::DeviceAddress;
pub use kiln_cxx::DeviceScalar;

use crate::architecture::Architecture;
use crate::error::{Error, Result};
use crate::result;
use crate::sys::{self, HipLibrary};

/// The process's HIP runtime library, once opened.
static RUNTIME: Mutex<Option<Arc<HipLibrary>>> = Mutex::new(None);

fn runtime() -> Result<Arc<HipLibrary>> {
    let mut runtime = RUNTIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(runtime) = &*runtime {
        return Ok(Arc::clone(runtime));
    }
    let opened = Arc::new(HipLibrary::open()?);
    log::debug!("the HIP runtime is {}", opened.path.display());
    *runtime = Some(Arc::clone(&opened));
    Ok(opened)
}

/// The runtime, started.
fn started_runtime() -> Result<Arc<HipLibrary>> {
    let runtime = runtime()?;
    result::init(&runtime)?;
    Ok(runtime)
}

/// One AMD GPU. Cloning shares it.
#[derive(Clone)]
pub struct HipDevice {
    inner: Arc<DeviceInner>,
}

struct DeviceInner {
    runtime: Arc<HipLibrary>,
    ordinal: usize,
    /// The ordinal as the runtime's calls take it, converted (checked) once
    /// when the device is opened.
    native_ordinal: i32,
    architecture: Architecture,
}

impl HipDevice {
    /// How many AMD GPUs the runtime sees.
    ///
    /// # Errors
    ///
    /// [`Error::LibraryMissing`] without the runtime; [`Error::NoDevice`]
    /// when it does not start or sees none.
    pub fn count() -> Result<usize> {
        let runtime = started_runtime()?;
        result::device_count(&runtime)
    }

    /// Device `ordinal`, compiling for the architecture it reports.
    ///
    /// # Errors
    ///
    /// [`Error::LibraryMissing`] without the runtime; [`Error::NoDevice`]
    /// when it does not start or sees no device;
    /// [`Error::DeviceOutOfRange`]; [`Error::UnknownDeviceArchitecture`]
    /// when its properties name none (give it with
    /// [`with_architecture`](Self::with_architecture)).
    pub fn open(ordinal: usize) -> Result<Self> {
        let (runtime, native_ordinal) = Self::start(ordinal)?;
        let properties = result::device_properties(&runtime, native_ordinal)?;
        let architecture = architecture_in_properties(&properties)
            .ok_or(Error::UnknownDeviceArchitecture { ordinal })?;
        Ok(Self::made(runtime, ordinal, native_ordinal, architecture))
    }

    /// Device `ordinal`, compiling for `architecture`.
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open), less the architecture.
    pub fn with_architecture(ordinal: usize, architecture: Architecture) -> Result<Self> {
        let (runtime, native_ordinal) = Self::start(ordinal)?;
        Ok(Self::made(runtime, ordinal, native_ordinal, architecture))
    }

    /// The started runtime, with `ordinal` made current and converted to
    /// the runtime's `int`.
    fn start(ordinal: usize) -> Result<(Arc<HipLibrary>, i32)> {
        let runtime = started_runtime()?;
        let count = result::device_count(&runtime)?;
        let out_of_range = || Error::DeviceOutOfRange { ordinal, count };
        if ordinal >= count {
            return Err(out_of_range());
        }
        // Below a count the runtime gave as an `int`, so this always fits;
        // checked all the same, as an ordinal past `i32::MAX` is out of
        // range too.
        let native_ordinal = i32::try_from(ordinal).map_err(|_| out_of_range())?;
        result::set_device(&runtime, native_ordinal)?;
        Ok((runtime, native_ordinal))
    }

    fn made(
        runtime: Arc<HipLibrary>,
        ordinal: usize,
        native_ordinal: i32,
        architecture: Architecture,
    ) -> Self {
        Self {
            inner: Arc::new(DeviceInner {
                runtime,
                ordinal,
                native_ordinal,
                architecture,
            }),
        }
    }

    /// The device's ordinal: the runtime's number for it (0 is the first).
    pub fn ordinal(&self) -> usize {
        self.inner.ordinal
    }

    /// The architecture kernels are compiled for.
    pub fn architecture(&self) -> &Architecture {
        &self.inner.architecture
    }

    /// Makes it the calling thread's current device.
    ///
    /// # Errors
    ///
    /// The runtime's status.
    pub fn make_current(&self) -> Result<()> {
        result::set_device(&self.inner.runtime, self.inner.native_ordinal)
    }

    /// Waits for everything launched on it, on every stream.
    ///
    /// # Errors
    ///
    /// The runtime's status, which reports a kernel that failed.
    pub fn synchronize(&self) -> Result<()> {
        self.make_current()?;
        result::synchronize(&self.inner.runtime)
    }

    /// A buffer of `len` values, its contents unset.
    ///
    /// # Errors
    ///
    /// The runtime's status: out of memory, or no device.
    pub fn alloc<T: DeviceScalar>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        self.make_current()?;
        let bytes = len
            .checked_mul(size_of::<T>())
            .expect("a buffer's size fits in usize");
        let pointer = result::malloc(&self.inner.runtime, bytes.max(1))?;
        Ok(DeviceBuffer {
            device: self.clone(),
            pointer,
            len,
            values: PhantomData,
        })
    }

    /// A buffer holding a copy of `host`.
    ///
    /// # Errors
    ///
    /// As [`alloc`](Self::alloc) and [`DeviceBuffer::copy_from_host`].
    pub fn upload<T: DeviceScalar>(&self, host: &[T]) -> Result<DeviceBuffer<T>> {
        let mut buffer = self.alloc(host.len())?;
        buffer.copy_from_host(host)?;
        Ok(buffer)
    }

    /// The runtime the device was opened with.
    pub(crate) fn runtime(&self) -> &HipLibrary {
        &self.inner.runtime
    }
}

impl fmt::Debug for HipDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipDevice")
            .field("ordinal", &self.inner.ordinal)
            .field("architecture", &self.inner.architecture)
            .finish()
    }
}

/// The architecture named in a raw `hipDeviceProp_t`.
///
/// The structure's layout differs between ROCm releases, and kiln-hip has
/// no device to check offsets on, so rather than trust one offset it takes
/// the first NUL-delimited string that is a gfx architecture name:
/// `gcnArchName` (`gfx90a:sramecc+:xnack-`) is the only field that holds one.
fn architecture_in_properties(properties: &[u8]) -> Option<Architecture> {
    properties
        .split(|&byte| byte == 0)
        .filter(|field| field.starts_with(b"gfx"))
        .filter_map(|field| std::str::from_utf8(field).ok())
        .find_map(|name| Architecture::new(name).ok())
}

/// Device memory for `len` values of `T`, freed when dropped.
pub struct DeviceBuffer<T> {
    device: HipDevice,
    pointer: sys::hipDeviceptr_t,
    len: usize,
    values: PhantomData<T>,
}

// SAFETY: device memory belongs to the process, not to a thread.
unsafe impl<T: Send> Send for DeviceBuffer<T> {}
// SAFETY: shared references only read the pointer's value.
unsafe impl<T: Sync> Sync for DeviceBuffer<T> {}

impl<T: DeviceScalar> DeviceBuffer<T> {
    /// How many values it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device address, for a kernel argument.
    pub fn device_pointer(&self) -> *mut c_void {
        self.pointer
    }

    /// The device it lives on.
    pub fn device(&self) -> &HipDevice {
        &self.device
    }

    /// Overwrites the whole buffer with `host`, after the work launched
    /// before it on any stream of the device has finished, and waits for
    /// the copy to land.
    ///
    /// # Errors
    ///
    /// [`Error::HostLength`] when `host` has another length, or the
    /// runtime's status.
    pub fn copy_from_host(&mut self, host: &[T]) -> Result<()> {
        self.check_len(host.len())?;
        // A kernel on a non-blocking stream does not order against the
        // default stream the synchronous copy goes on: wait for all.
        self.device.synchronize()?;
        // SAFETY: `DeviceScalar` types are plain numbers without padding, so
        // their memory is `size_of_val` initialized bytes.
        let bytes =
            unsafe { std::slice::from_raw_parts(host.as_ptr().cast::<u8>(), size_of_val(host)) };
        // SAFETY: the buffer holds exactly `bytes.len()` bytes.
        unsafe { result::copy_to_device(&self.device.inner.runtime, self.pointer, bytes)? };
        // A copy from pageable memory may return before it lands; a kernel
        // on a non-blocking stream would not wait for it.
        self.device.synchronize()
    }

    /// Copies the whole buffer into `host`, after the work launched before
    /// it on any stream of the device has finished.
    ///
    /// # Errors
    ///
    /// [`Error::HostLength`] when `host` has another length, or the
    /// runtime's status, which also reports a kernel that failed.
    pub fn copy_to_host(&self, host: &mut [T]) -> Result<()> {
        self.check_len(host.len())?;
        // As in `copy_from_host`: every stream's work first.
        self.device.synchronize()?;
        // SAFETY: `DeviceScalar` types are plain numbers for which any bytes
        // are a value, so the slice can be written as bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(host.as_mut_ptr().cast::<u8>(), size_of_val(host))
        };
        // SAFETY: the buffer holds exactly `bytes.len()` bytes.
        unsafe { result::copy_to_host(&self.device.inner.runtime, bytes, self.pointer) }
    }

    /// The buffer's contents.
    ///
    /// # Errors
    ///
    /// As [`copy_to_host`](Self::copy_to_host).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut host = vec![T::zero(); self.len];
        self.copy_to_host(&mut host)?;
        Ok(host)
    }

    fn check_len(&self, host: usize) -> Result<()> {
        if host == self.len {
            Ok(())
        } else {
            Err(Error::HostLength {
                host,
                device: self.len,
            })
        }
    }
}

impl<T: DeviceScalar> DeviceAddress for DeviceBuffer<T> {
    fn device_address(&self) -> u64 {
        self.pointer.device_address()
    }
}

impl<T> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `hipMalloc` and is not used after.
        if let Err(error) = unsafe { result::free(&self.device.inner.runtime, self.pointer) } {
            log::warn!("could not free HIP device memory: {error}");
        }
    }
}

impl<T> fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("device", &self.device.inner.ordinal)
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_architecture_is_found_wherever_the_properties_keep_it() {
        let mut properties = vec![0u8; 2048];
        properties[..18].copy_from_slice(b"AMD Instinct MI210");
        let at = 1000;
        let name = b"gfx90a:sramecc+:xnack-";
        properties[at..at + name.len()].copy_from_slice(name);
        assert_eq!(
            architecture_in_properties(&properties).map(|architecture| architecture.to_string()),
            Some("gfx90a:sramecc+:xnack-".to_owned())
        );
        assert_eq!(architecture_in_properties(&[0u8; 64]), None);
    }
}
