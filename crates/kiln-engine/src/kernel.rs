//! What a kernel is to the loader.

use crate::id::KernelId;

/// Something a backend can compile: it knows its [`KernelId`] without
/// generating code, and its backend's compiler knows how to lower it.
///
/// # Contract
///
/// - `id` is cheap (no code generation) and stable: two kernels with the same
///   id generate the same source for the same variant, in every process.
/// - Two kernels that generate different source have different ids.
pub trait Kernel: Send + Sync {
    /// The kernel's identity.
    fn id(&self) -> KernelId;

    /// How costly the kernel is to compile, relative to the other kernels
    /// of its backend: the size of its source, say. A batch hands its
    /// kernels to the workers costliest first, so that the longest
    /// compiles do not start last and leave the other workers idle at the
    /// end of the batch. Cheap to compute (no code generation); the
    /// default, `0`, keeps the order the kernels were asked in.
    fn cost_hint(&self) -> u64 {
        0
    }
}

impl<K: Kernel + ?Sized> Kernel for Box<K> {
    fn id(&self) -> KernelId {
        (**self).id()
    }

    fn cost_hint(&self) -> u64 {
        (**self).cost_hint()
    }
}

impl<K: Kernel + ?Sized> Kernel for std::sync::Arc<K> {
    fn id(&self) -> KernelId {
        (**self).id()
    }

    fn cost_hint(&self) -> u64 {
        (**self).cost_hint()
    }
}
