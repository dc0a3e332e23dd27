//! AMD GPUs through the HIP runtime: devices, loaded modules, kernels and
//! device memory, each released when dropped.
//!
//! **None of this has run on AMD hardware.** It is written against the
//! ROCm headers and tested only where no GPU exists: there the runtime
//! fails to start, and every entry point returns [`Error::NoDevice`] rather
//! than panicking.

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use crate::code_object::{self, CodeObjectInfo};
use crate::error::{Error, Result};
use crate::isa::GfxArch;
use crate::launch::{KernelScalar, LaunchArguments, LaunchConfig};
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
    ordinal: i32,
    arch: GfxArch,
}

impl HipDevice {
    /// How many AMD GPUs the runtime sees.
    ///
    /// # Errors
    ///
    /// [`Error::LibraryMissing`] without the runtime; [`Error::NoDevice`]
    /// when it does not start or sees none.
    pub fn count() -> Result<i32> {
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
    /// [`with_arch`](Self::with_arch)).
    pub fn open(ordinal: i32) -> Result<Self> {
        let runtime = Self::start(ordinal)?;
        let properties = result::device_properties(&runtime, ordinal)?;
        let arch =
            arch_in_properties(&properties).ok_or(Error::UnknownDeviceArchitecture { ordinal })?;
        Ok(Self::made(runtime, ordinal, arch))
    }

    /// Device `ordinal`, compiling for `arch`.
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open), less the architecture.
    pub fn with_arch(ordinal: i32, arch: GfxArch) -> Result<Self> {
        let runtime = Self::start(ordinal)?;
        Ok(Self::made(runtime, ordinal, arch))
    }

    fn start(ordinal: i32) -> Result<Arc<HipLibrary>> {
        let runtime = started_runtime()?;
        let count = result::device_count(&runtime)?;
        if !(0..count).contains(&ordinal) {
            return Err(Error::DeviceOutOfRange { ordinal, count });
        }
        result::set_device(&runtime, ordinal)?;
        Ok(runtime)
    }

    fn made(runtime: Arc<HipLibrary>, ordinal: i32, arch: GfxArch) -> Self {
        Self {
            inner: Arc::new(DeviceInner {
                runtime,
                ordinal,
                arch,
            }),
        }
    }

    /// The runtime's number for it.
    pub fn ordinal(&self) -> i32 {
        self.inner.ordinal
    }

    /// The architecture kernels are compiled for.
    pub fn arch(&self) -> &GfxArch {
        &self.inner.arch
    }

    /// Makes it the calling thread's current device.
    ///
    /// # Errors
    ///
    /// The runtime's status.
    pub fn make_current(&self) -> Result<()> {
        result::set_device(&self.inner.runtime, self.inner.ordinal)
    }

    /// Waits for everything launched on it.
    ///
    /// # Errors
    ///
    /// The runtime's status, which reports a kernel that failed.
    pub fn synchronize(&self) -> Result<()> {
        self.make_current()?;
        result::synchronize(&self.inner.runtime)
    }

    /// Loads a code object.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidCodeObject`] for bytes that are not a whole code
    /// object (they never reach the driver), or the driver's refusal.
    pub fn load_module(&self, code_object: &[u8]) -> Result<Arc<HipModule>> {
        let info = code_object::inspect(code_object)?;
        self.make_current()?;
        // SAFETY: `inspect` found every header, segment and section inside
        // `code_object`, so the driver reads nothing past it.
        let raw = unsafe { result::module_load_data(&self.inner.runtime, code_object)? };
        Ok(Arc::new(HipModule {
            device: self.clone(),
            raw,
            info,
        }))
    }

    /// Device memory holding a copy of `values`.
    ///
    /// # Errors
    ///
    /// The runtime's status.
    pub fn copy_to_device<T: KernelScalar>(&self, values: &[T]) -> Result<DeviceBuffer<T>> {
        let buffer = self.allocate::<T>(values.len())?;
        // SAFETY: `KernelScalar` types are plain numbers without padding, so
        // their memory is `size_of_val` initialized bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), size_of_val(values))
        };
        // SAFETY: the buffer holds exactly `bytes.len()` bytes.
        unsafe { result::copy_to_device(&self.inner.runtime, buffer.pointer, bytes)? };
        Ok(buffer)
    }

    /// Device memory for `len` values, uninitialized.
    ///
    /// # Errors
    ///
    /// The runtime's status.
    pub fn allocate<T: KernelScalar>(&self, len: usize) -> Result<DeviceBuffer<T>> {
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
}

impl fmt::Debug for HipDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipDevice")
            .field("ordinal", &self.inner.ordinal)
            .field("arch", &self.inner.arch)
            .finish()
    }
}

/// The architecture named in a raw `hipDeviceProp_t`.
///
/// The structure's layout differs between ROCm releases, and kiln-hip has
/// no device to check offsets on, so rather than trust one offset it takes
/// the first NUL-delimited string that is a gfx architecture name:
/// `gcnArchName` (`gfx90a:sramecc+:xnack-`) is the only field that holds one.
fn arch_in_properties(properties: &[u8]) -> Option<GfxArch> {
    properties
        .split(|&byte| byte == 0)
        .filter(|field| field.starts_with(b"gfx"))
        .filter_map(|field| std::str::from_utf8(field).ok())
        .find_map(|name| GfxArch::new(name).ok())
}

/// A code object loaded on a device; unloaded when the last
/// [`HipFunction`] of it drops.
pub struct HipModule {
    device: HipDevice,
    raw: sys::hipModule_t,
    info: CodeObjectInfo,
}

// SAFETY: a module handle names a process-wide driver object; the HIP
// runtime is thread-safe and accepts it from any thread.
unsafe impl Send for HipModule {}
// SAFETY: as for `Send`: nothing in `HipModule` is mutated after loading.
unsafe impl Sync for HipModule {}

impl HipModule {
    /// The kernels the code object holds.
    pub fn kernels(&self) -> &[String] {
        &self.info.kernels
    }

    /// The kernel `symbol`.
    ///
    /// # Errors
    ///
    /// [`Error::KernelMissing`] when the code object has no such kernel, or
    /// the driver's refusal.
    pub fn function(self: &Arc<Self>, symbol: &str) -> Result<HipFunction> {
        if !self.info.has_kernel(symbol) {
            return Err(Error::KernelMissing {
                symbol: symbol.to_owned(),
                kernels: self.info.kernels.clone(),
            });
        }
        let name = result::c_string(symbol, || format!("the symbol {symbol:?}"))?;
        // SAFETY: the module is loaded for as long as `self` lives.
        let raw =
            unsafe { result::module_get_function(&self.device.inner.runtime, self.raw, &name)? };
        Ok(HipFunction {
            module: Arc::clone(self),
            raw,
        })
    }
}

impl Drop for HipModule {
    fn drop(&mut self) {
        // SAFETY: every function of the module holds an `Arc` of it, so none
        // is left when it drops.
        if let Err(error) = unsafe { result::module_unload(&self.device.inner.runtime, self.raw) } {
            log::warn!("could not unload a HIP module: {error}");
        }
    }
}

impl fmt::Debug for HipModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipModule")
            .field("device", &self.device)
            .field("kernels", &self.info.kernels)
            .finish()
    }
}

/// A kernel of a loaded module, ready to launch. Cloning is one `Arc`
/// clone: this is what a loader hands out on every launch.
#[derive(Clone)]
pub struct HipFunction {
    module: Arc<HipModule>,
    raw: sys::hipFunction_t,
}

// SAFETY: a function handle names a driver object that lives as long as its
// module, which `module` keeps; the runtime accepts it from any thread.
unsafe impl Send for HipFunction {}
// SAFETY: as for `Send`: the handle is never mutated.
unsafe impl Sync for HipFunction {}

impl HipFunction {
    /// The module it belongs to.
    pub fn module(&self) -> &Arc<HipModule> {
        &self.module
    }

    /// Launches it on the device's default stream.
    ///
    /// # Safety
    ///
    /// `arguments` must match the kernel's parameters one for one, in
    /// order and type, and every buffer must be large enough for what the
    /// kernel reads and writes at this launch size: the driver cannot check
    /// either.
    ///
    /// # Errors
    ///
    /// The runtime refused the launch.
    pub unsafe fn launch(
        &self,
        config: &LaunchConfig,
        arguments: &mut LaunchArguments,
    ) -> Result<()> {
        let device = &self.module.device;
        device.make_current()?;
        let mut pointers = arguments.pointers();
        // SAFETY: the caller vouches for the arguments; the function's module
        // is loaded on the current device.
        unsafe {
            result::launch_kernel(
                &device.inner.runtime,
                self.raw,
                config.grid,
                config.block,
                config.shared_memory_bytes,
                &mut pointers,
            )
        }
    }
}

impl fmt::Debug for HipFunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipFunction")
            .field("device", &self.module.device.inner.ordinal)
            .field("raw", &self.raw)
            .finish()
    }
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

impl<T: KernelScalar> DeviceBuffer<T> {
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

    /// Copies the values back to the host.
    ///
    /// # Errors
    ///
    /// The runtime's status, which also reports a kernel that failed.
    pub fn copy_to_host(&self) -> Result<Vec<T>> {
        self.device.make_current()?;
        let mut values = vec![T::default(); self.len];
        // SAFETY: `KernelScalar` types are plain numbers for which any bytes
        // are a value, so the vector can be written as bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(
                values.as_mut_ptr().cast::<u8>(),
                size_of_val(values.as_slice()),
            )
        };
        // SAFETY: the buffer holds exactly `bytes.len()` bytes.
        unsafe { result::copy_to_host(&self.device.inner.runtime, bytes, self.pointer)? };
        Ok(values)
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
            arch_in_properties(&properties).map(|arch| arch.to_string()),
            Some("gfx90a:sramecc+:xnack-".to_owned())
        );
        assert_eq!(arch_in_properties(&[0u8; 64]), None);
    }
}
