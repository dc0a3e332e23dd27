//! What a launch needs besides the kernel: its size and its arguments.

use std::ffi::c_void;

use crate::device::{DeviceBuffer, DeviceScalar};

/// A launch's grid, block and dynamic shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in x, y and z.
    pub grid: [u32; 3],
    /// Threads per block in x, y and z.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_memory_bytes: u32,
}

impl LaunchConfig {
    /// One thread per element of `elements`, in blocks of `block_size`
    /// threads along x, without shared memory.
    ///
    /// ```
    /// use kiln_hip::LaunchConfig;
    ///
    /// let config = LaunchConfig::for_elements(1000, 256);
    /// assert_eq!(config.grid, [4, 1, 1]);
    /// assert_eq!(config.block, [256, 1, 1]);
    /// ```
    pub fn for_elements(elements: u32, block_size: u32) -> Self {
        let block_size = block_size.max(1);
        Self {
            grid: [elements.div_ceil(block_size).max(1), 1, 1],
            block: [block_size, 1, 1],
            shared_memory_bytes: 0,
        }
    }

    /// The same launch with `bytes` of dynamic shared memory per block.
    pub fn with_shared_memory(mut self, bytes: u32) -> Self {
        self.shared_memory_bytes = bytes;
        self
    }
}

/// One argument's value, aligned for any scalar kiln passes.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct ArgumentSlot([u8; 16]);

/// A kernel's arguments, in the order of its parameters: device pointers
/// and scalars.
///
/// ```
/// use kiln_hip::LaunchArguments;
///
/// let arguments = LaunchArguments::new().scalar(2.0f32).scalar(1000u32);
/// assert_eq!(arguments.len(), 2);
/// ```
#[derive(Clone, Default)]
pub struct LaunchArguments {
    slots: Vec<ArgumentSlot>,
}

impl LaunchArguments {
    /// No arguments yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `buffer`'s device address, for a pointer parameter.
    pub fn pointer<T: DeviceScalar>(self, buffer: &DeviceBuffer<T>) -> Self {
        self.raw_pointer(buffer.device_pointer())
    }

    /// Adds a device address, for a pointer parameter.
    pub fn raw_pointer(self, pointer: *mut c_void) -> Self {
        self.push(pointer as usize as u64)
    }

    /// Adds a value, for a scalar parameter.
    pub fn scalar<S: DeviceScalar>(self, value: S) -> Self {
        self.push(value)
    }

    /// How many arguments it holds.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    fn push<S: Copy>(mut self, value: S) -> Self {
        const {
            assert!(size_of::<S>() <= size_of::<ArgumentSlot>());
        }
        let mut slot = ArgumentSlot([0; 16]);
        // SAFETY: the slot is aligned to 16 and at least as large as `S`
        // (checked above), and `S` is `Copy`.
        unsafe { slot.0.as_mut_ptr().cast::<S>().write(value) };
        self.slots.push(slot);
        self
    }

    /// One pointer per argument, to its value: what `hipModuleLaunchKernel`
    /// takes. Valid while `self` is neither moved nor changed.
    pub(crate) fn pointers(&mut self) -> Vec<*mut c_void> {
        self.slots
            .iter_mut()
            .map(|slot| slot.0.as_mut_ptr().cast::<c_void>())
            .collect()
    }
}

impl std::fmt::Debug for LaunchArguments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaunchArguments")
            .field("len", &self.slots.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_argument_is_stored_as_its_own_bytes() {
        let mut arguments = LaunchArguments::new()
            .scalar(1.5f32)
            .scalar(-3i64)
            .raw_pointer(0x1000 as *mut c_void);
        let pointers = arguments.pointers();
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
        assert_eq!(LaunchConfig::for_elements(0, 256).grid, [1, 1, 1]);
        assert_eq!(LaunchConfig::for_elements(256, 256).grid, [1, 1, 1]);
        assert_eq!(LaunchConfig::for_elements(257, 256).grid, [2, 1, 1]);
    }
}
