//! The kernels waiting for the next batch, and the requests a batch is
//! made of.

use rustc_hash::FxHashSet;

use crate::id::ArtifactId;
use crate::statistics::Registration;
use crate::target::{CompilationTarget, KernelOf, VariantOf};

/// The kernels queued and not compiled yet, each once.
pub(super) struct KernelQueue<T: CompilationTarget> {
    pub(super) kernels: Vec<Queued<T>>,
    /// Their ids, so that queuing one more costs a lookup, not a scan.
    ids: FxHashSet<ArtifactId<VariantOf<T>>>,
}

impl<T: CompilationTarget> Default for KernelQueue<T> {
    fn default() -> Self {
        Self {
            kernels: Vec::new(),
            ids: FxHashSet::default(),
        }
    }
}

impl<T: CompilationTarget> KernelQueue<T> {
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.kernels.is_empty()
    }

    pub(super) fn contains(&self, id: &ArtifactId<VariantOf<T>>) -> bool {
        self.ids.contains(id)
    }

    pub(super) fn push(
        &mut self,
        id: ArtifactId<VariantOf<T>>,
        kernel: Box<KernelOf<T>>,
        registration: Option<Registration>,
    ) {
        self.ids.insert(id.clone());
        self.kernels.push(Queued {
            id,
            kernel,
            registration,
        });
    }

    pub(super) fn take(&mut self) -> Vec<Queued<T>> {
        self.ids.clear();
        std::mem::take(&mut self.kernels)
    }
}

/// A queued kernel, with the collector it registered with.
pub(super) struct Queued<T: CompilationTarget> {
    id: ArtifactId<VariantOf<T>>,
    kernel: Box<KernelOf<T>>,
    registration: Option<Registration>,
}

/// The kernel a load asks for, compiled with the queue when it is missing.
pub(super) struct Asked<'k, T: CompilationTarget> {
    pub(super) kernel: &'k KernelOf<T>,
    pub(super) id: &'k ArtifactId<VariantOf<T>>,
}

/// A kernel its caller keeps, asked of
/// [`KernelLoader::compile_borrowed`](super::KernelLoader::compile_borrowed)
/// under its id, with the collector it registered with.
pub(crate) type BorrowedKernel<'k, T> = (
    &'k KernelOf<T>,
    ArtifactId<VariantOf<T>>,
    Option<Registration>,
);

/// One kernel a batch loads, with the collector it registered with.
pub(super) struct Request<'k, T: CompilationTarget> {
    pub(super) id: ArtifactId<VariantOf<T>>,
    pub(super) kernel: &'k KernelOf<T>,
    pub(super) registration: Option<Registration>,
}

/// The requests of every queued kernel but `except`, and, when `except` was
/// queued, the registration it was queued with, so that a kernel both queued
/// and asked for compiles once and counts where it was queued.
pub(super) fn queued_requests<'q, T: CompilationTarget>(
    queued: &'q mut [Queued<T>],
    except: Option<&ArtifactId<VariantOf<T>>>,
) -> (Vec<Request<'q, T>>, Option<Option<Registration>>) {
    let mut requests = Vec::with_capacity(queued.len() + 1);
    let mut excepted_registration = None;
    for entry in queued {
        if except.is_some_and(|except| *except == entry.id) {
            excepted_registration = Some(entry.registration.take());
            continue;
        }
        requests.push(Request {
            id: entry.id.clone(),
            kernel: &*entry.kernel,
            registration: entry.registration.take(),
        });
    }
    (requests, excepted_registration)
}
