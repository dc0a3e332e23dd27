//! What a launch needs besides the kernel: its shape and its arguments.

use std::ffi::c_void;

use crate::device::{DeviceBuffer, DeviceScalar};

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
    /// use kiln_cuda::LaunchConfig;
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

/// One kernel argument: a device pointer or a plain number, held by value
/// until the launch copies it.
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

    /// The address of `buffer`, for a `T*` parameter.
    pub fn buffer<T: DeviceScalar>(buffer: &DeviceBuffer<T>) -> Self {
        Self::pointer(buffer.device_pointer())
    }

    /// A raw device address, for memory kiln did not allocate.
    pub fn pointer(address: u64) -> Self {
        Self::scalar(address)
    }

    /// Where the driver reads the value from. The driver's parameter array
    /// is of mutable pointers, but it only reads through them.
    pub(crate) fn as_parameter(&self) -> *mut c_void {
        self.bytes.as_ptr().cast_mut().cast()
    }
}

impl<T: DeviceScalar> From<T> for KernelArgument {
    fn from(value: T) -> Self {
        Self::scalar(value)
    }
}

impl<T: DeviceScalar> From<&DeviceBuffer<T>> for KernelArgument {
    fn from(buffer: &DeviceBuffer<T>) -> Self {
        Self::buffer(buffer)
    }
}

impl<T: DeviceScalar> From<&mut DeviceBuffer<T>> for KernelArgument {
    fn from(buffer: &mut DeviceBuffer<T>) -> Self {
        Self::buffer(buffer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_argument_is_stored_as_its_own_bytes() {
        let arguments = [
            KernelArgument::scalar(1.5f32),
            KernelArgument::scalar(-3i64),
            KernelArgument::pointer(0x1000),
        ];
        let pointers: Vec<*mut c_void> =
            arguments.iter().map(KernelArgument::as_parameter).collect();
        assert_eq!(pointers.len(), 3);
        // SAFETY: each pointer points at the value pushed, of that type.
        unsafe {
            assert_eq!(pointers[0].cast::<f32>().read(), 1.5);
            assert_eq!(pointers[1].cast::<i64>().read(), -3);
            assert_eq!(pointers[2].cast::<u64>().read(), 0x1000);
        }
    }

    #[test]
    fn a_launch_covers_every_element() {
        assert_eq!(LaunchConfig::for_elements(0, 256).grid, (1, 1, 1));
        assert_eq!(LaunchConfig::for_elements(256, 256).grid, (1, 1, 1));
        assert_eq!(LaunchConfig::for_elements(257, 256).grid, (2, 1, 1));
    }
}
