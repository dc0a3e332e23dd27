//! Which device a cache's kernels live on.

use std::fmt;

/// The device a [`KernelCache`](super::KernelCache) loads its kernels on:
/// the backend's name and the number the backend tells its devices apart
/// by (an ordinal, or a number derived from a bus id or UUID).
///
/// A loaded kernel is a device object: a module loaded on one GPU cannot be
/// launched on another. Every call that hands out a kernel names the device
/// the caller launches on, and a cache refuses any device but its own.
///
/// ```
/// use kiln_core::DeviceId;
///
/// let first = DeviceId::new("cuda", 0);
/// assert_eq!(first.to_string(), "cuda:0");
/// assert_ne!(first, DeviceId::new("cuda", 1));
/// assert_ne!(first, DeviceId::new("hip", 0));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId {
    // The number first: it is what differs between the devices of one
    // backend, so comparing it first settles most comparisons in one step.
    number: u64,
    backend: &'static str,
}

impl DeviceId {
    /// Device `number` of `backend`.
    pub const fn new(backend: &'static str, number: u64) -> Self {
        Self { number, backend }
    }

    /// The backend's name.
    pub const fn backend(&self) -> &'static str {
        self.backend
    }

    /// The number the backend tells its devices apart by.
    pub const fn number(&self) -> u64 {
        self.number
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.backend, self.number)
    }
}

impl fmt::Debug for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceId({self})")
    }
}
