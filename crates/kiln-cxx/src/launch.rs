//! What a launch needs besides the kernel: its shape and its arguments, and
//! the parameter array a launch call takes made from them.

use std::ffi::c_void;

use crate::scalar::DeviceScalar;

/// A launch's shape: blocks in the grid, threads in a block, and bytes of
/// dynamic shared memory per block (`extern __shared__` arrays).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LaunchConfig {
    /// Blocks in x, y and z.
    pub grid: (u32, u32, u32),
    /// Threads per block in x, y and z.
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block, in bytes.
    pub shared_memory_bytes: u32,
}

impl LaunchConfig {
    /// One thread per element of `elements`, in blocks of `block_size`
    /// threads along x.
    ///
    /// ```
    /// use kiln_cxx::LaunchConfig;
    ///
    /// let config = LaunchConfig::for_elements(1000, 256);
    /// assert_eq!(config.grid, (4, 1, 1));
    /// assert_eq!(config.block, (256, 1, 1));
    /// ```
    pub fn for_elements(elements: u32, block_size: u32) -> Self {
        let block_size = block_size.max(1);
        Self {
            grid: (elements.div_ceil(block_size).max(1), 1, 1),
            block: (block_size, 1, 1),
            shared_memory_bytes: 0,
        }
    }

    /// The same shape with `bytes` of dynamic shared memory per block.
    pub fn with_shared_memory(mut self, bytes: u32) -> Self {
        self.shared_memory_bytes = bytes;
        self
    }
}

/// Something that names device memory by its address: a raw address (a
/// CUDA `CUdeviceptr` as `u64`, a HIP `hipDeviceptr_t` as `*mut c_void`)
/// or a backend's device buffer. A `T*` parameter receives the address's
/// 64 bits.
pub trait DeviceAddress {
    /// The device address.
    fn device_address(&self) -> u64;
}

impl DeviceAddress for u64 {
    fn device_address(&self) -> u64 {
        *self
    }
}

impl DeviceAddress for *mut c_void {
    fn device_address(&self) -> u64 {
        // A device address is the pointer's 64 bits.
        *self as usize as u64
    }
}

/// One kernel argument: a device pointer or a plain number, held by value
/// until the launch copies it.
///
/// ```
/// use kiln_cxx::KernelArgument;
///
/// let arguments = [KernelArgument::scalar(2.0f32), 1000u32.into()];
/// assert_eq!(arguments.len(), 2);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(8))]
pub struct KernelArgument {
    // The value's bytes from the start of an 8-aligned slot: the driver
    // reads as many as the kernel's parameter takes.
    bytes: [u8; 8],
}

impl KernelArgument {
    /// A plain number, passed by value.
    pub fn scalar<T: DeviceScalar>(value: T) -> Self {
        Self {
            bytes: value.to_bytes(),
        }
    }

    /// The address of `buffer` (a backend's `DeviceBuffer`), for a `T*`
    /// parameter.
    pub fn buffer<B: DeviceAddress + ?Sized>(buffer: &B) -> Self {
        Self::scalar(buffer.device_address())
    }

    /// A raw device address, for memory kiln did not allocate: a `u64`
    /// (CUDA's `CUdeviceptr`) or a `*mut c_void` (HIP's `hipDeviceptr_t`).
    pub fn pointer(address: impl DeviceAddress) -> Self {
        Self::scalar(address.device_address())
    }

    /// Where the driver reads the value from. The driver's parameter array
    /// is of mutable pointers, but it only reads through them.
    fn as_parameter(&self) -> *mut c_void {
        self.bytes.as_ptr().cast_mut().cast()
    }
}

// One impl per scalar rather than one over every `DeviceScalar`, which
// would overlap the impls for references below in the compiler's eyes.
macro_rules! arguments_from_scalars {
    ($($scalar:ty),*) => {$(
        impl From<$scalar> for KernelArgument {
            fn from(value: $scalar) -> Self {
                Self::scalar(value)
            }
        }
    )*};
}

arguments_from_scalars!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

/// The address of a backend's device buffer (or of any [`DeviceAddress`]),
/// for a `T*` parameter.
impl<B: DeviceAddress + ?Sized> From<&B> for KernelArgument {
    fn from(buffer: &B) -> Self {
        Self::buffer(buffer)
    }
}

/// The address of a backend's device buffer (or of any [`DeviceAddress`]),
/// for a `T*` parameter.
impl<B: DeviceAddress + ?Sized> From<&mut B> for KernelArgument {
    fn from(buffer: &mut B) -> Self {
        Self::buffer(&*buffer)
    }
}

/// Runs `launch` with the parameter array of `arguments`: one pointer per
/// argument, in order, to that argument's bytes, as `cuLaunchKernel` and
/// `hipModuleLaunchKernel` take it. The pointers are valid while
/// `arguments` is, which outlives the call.
///
/// The array lives on the stack for the usual handful of arguments: a
/// launch allocates nothing.
pub fn with_parameters<R>(
    arguments: &[KernelArgument],
    launch: impl FnOnce(&mut [*mut c_void]) -> R,
) -> R {
    const INLINE: usize = 32;
    let mut inline = [std::ptr::null_mut::<c_void>(); INLINE];
    let mut spilled = Vec::new();
    let pointers: &mut [*mut c_void] = if arguments.len() <= INLINE {
        &mut inline[..arguments.len()]
    } else {
        spilled.resize(arguments.len(), std::ptr::null_mut());
        &mut spilled
    };
    for (pointer, argument) in pointers.iter_mut().zip(arguments) {
        *pointer = argument.as_parameter();
    }
    launch(pointers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_argument_is_stored_as_its_own_bytes() {
        let arguments = [
            KernelArgument::scalar(1.5f32),
            KernelArgument::scalar(-3i64),
            KernelArgument::pointer(0x1000u64),
            KernelArgument::pointer(0x2000 as *mut c_void),
        ];
        let pointers: Vec<*mut c_void> =
            arguments.iter().map(KernelArgument::as_parameter).collect();
        assert_eq!(pointers.len(), 4);
        // SAFETY: each pointer points at the value pushed, of that type.
        unsafe {
            assert_eq!(pointers[0].cast::<f32>().read(), 1.5);
            assert_eq!(pointers[1].cast::<i64>().read(), -3);
            assert_eq!(pointers[2].cast::<u64>().read(), 0x1000);
            assert_eq!(pointers[3].cast::<u64>().read(), 0x2000);
        }
    }

    #[test]
    fn the_parameter_array_points_at_each_argument_in_order() {
        for count in [0, 1, 32, 33, 100] {
            let arguments: Vec<KernelArgument> = (0..count as u32).map(Into::into).collect();
            let read = with_parameters(&arguments, |pointers| {
                pointers
                    .iter()
                    // SAFETY: each pointer points at a `u32` argument's bytes.
                    .map(|pointer| unsafe { pointer.cast::<u32>().read() })
                    .collect::<Vec<u32>>()
            });
            assert_eq!(read, (0..count as u32).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_launch_covers_every_element() {
        assert_eq!(LaunchConfig::for_elements(0, 256).grid, (1, 1, 1));
        assert_eq!(LaunchConfig::for_elements(256, 256).grid, (1, 1, 1));
        assert_eq!(LaunchConfig::for_elements(257, 256).grid, (2, 1, 1));
    }
}
