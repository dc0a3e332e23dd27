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
}

impl<K: Kernel + ?Sized> Kernel for Box<K> {
    fn id(&self) -> KernelId {
        (**self).id()
    }
}

impl<K: Kernel + ?Sized> Kernel for std::sync::Arc<K> {
    fn id(&self) -> KernelId {
        (**self).id()
    }
}
