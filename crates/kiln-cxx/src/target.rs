//! What the targets of the C++ backends hold alike: where their kernels go
//! (a device, or none for a compile-only target), the device step that
//! makes each artifact a loaded kernel there on the batch's workers (F9,
//! [`CxxDeviceStep`]), and the target's store.
//!
//! Each backend says what its device does with an artifact by
//! implementing [`CxxDevice`] for its device type; its target holds the
//! fields `compiler`, `step` (an `Arc` of this step) and `store` (a
//! [`TargetStore`](kiln_engine::TargetStore)), and the store's setters and
//! the [`CompilationTarget`](kiln_engine::CompilationTarget) impl both
//! backends' targets share are written once, by
//! [`cxx_target!`](crate::cxx_target), so that they stay the backend's
//! own inherent methods and impl.

use std::fmt;
use std::sync::Arc;

use kiln_engine::{ArtifactCompiler, ArtifactId, DeviceRefusal, DeviceStep};

/// A GPU of a C++ backend, as its target's device step uses it: a device
/// loads an artifact, and a target without one describes the artifact as
/// a device of its architecture would load it.
pub trait CxxDevice: fmt::Debug + Send + Sync + Sized + 'static {
    /// The backend's compiler, whose artifacts the device loads.
    type Compiler: ArtifactCompiler;
    /// What the backend's kernels are compiled for.
    type Architecture: fmt::Debug + PartialEq + Send + Sync;
    /// A loaded (or described) kernel.
    type Loaded: Send;

    /// The architecture the device's kernels are compiled for.
    fn compiles_for(&self) -> &Self::Architecture;

    /// Loads `artifact` on this device, from the calling thread (any of the
    /// batch's workers).
    ///
    /// # Errors
    ///
    /// The device or its driver refused the artifact.
    fn load(
        &self,
        artifact: &<Self::Compiler as ArtifactCompiler>::Artifact,
    ) -> Result<Self::Loaded, DeviceRefusal>;

    /// Describes `artifact` without a device, refusing what a device of
    /// `architecture` would refuse: a compile-only target's load.
    ///
    /// # Errors
    ///
    /// A device of `architecture` would refuse the artifact.
    fn describe(
        architecture: &Self::Architecture,
        artifact: &<Self::Compiler as ArtifactCompiler>::Artifact,
    ) -> Result<Self::Loaded, DeviceRefusal>;
}

/// Where a target's kernels go.
#[derive(Debug)]
enum Destination<D: CxxDevice> {
    /// No device: artifacts are checked as a device of this architecture
    /// would check them, and described.
    CompileOnly(D::Architecture),
    /// A GPU.
    Device(D),
}

/// A C++ backend's device step (F9): each artifact is loaded on the
/// batch's worker that has it, several at once, on the target's device
/// ([`CxxDevice::load`], which makes the device current on the calling
/// thread first), or described by a compile-only target
/// ([`CxxDevice::describe`]).
#[derive(Debug)]
pub struct CxxDeviceStep<D: CxxDevice> {
    destination: Destination<D>,
}

impl<D: CxxDevice> CxxDeviceStep<D> {
    /// The step of a target on `device`.
    pub fn on(device: D) -> Arc<Self> {
        Arc::new(Self {
            destination: Destination::Device(device),
        })
    }

    /// The step of a target without a device, compiling for
    /// `architecture`.
    pub fn compile_only(architecture: D::Architecture) -> Arc<Self> {
        Arc::new(Self {
            destination: Destination::CompileOnly(architecture),
        })
    }

    /// The device, unless the target is compile-only.
    pub fn device(&self) -> Option<&D> {
        match &self.destination {
            Destination::CompileOnly(_) => None,
            Destination::Device(device) => Some(device),
        }
    }

    /// The architecture kernels are compiled for: the device's, or the
    /// compile-only target's.
    pub fn architecture(&self) -> &D::Architecture {
        match &self.destination {
            Destination::CompileOnly(architecture) => architecture,
            Destination::Device(device) => device.compiles_for(),
        }
    }
}

impl<D: CxxDevice> DeviceStep<D::Compiler> for CxxDeviceStep<D> {
    type Made = D::Loaded;

    /// A module load takes the driver's lock: on an H100, 64 GEMM modules
    /// loaded in 2.0 ms on one thread, 2.4 on two, 2.6 on four and 3.3 on
    /// sixteen (`warm_run`'s device-step rows), so a warm start loads them
    /// on one.
    fn spreads(&self) -> bool {
        false
    }

    fn make(
        &self,
        _id: &ArtifactId<<D::Compiler as ArtifactCompiler>::Variant>,
        artifact: &<D::Compiler as ArtifactCompiler>::Artifact,
    ) -> Result<D::Loaded, DeviceRefusal> {
        match &self.destination {
            Destination::CompileOnly(architecture) => D::describe(architecture, artifact),
            Destination::Device(device) => device.load(artifact),
        }
    }
}

/// Writes, inside a backend's crate, what its target shares with the other
/// C++ backend's: `cxx_target!(Target, Compiler, Loaded, Device, BACKEND)`
/// writes the store's setters, [`device`](CxxDeviceStep::device) and
/// `is_compile_only` as inherent methods of `Target`, and its
/// [`CompilationTarget`](kiln_engine::CompilationTarget) impl, whose
/// kernels are `Compiler`'s, loaded as `Loaded` on a `Device`, device
/// `BACKEND:ORDINAL` of the machine
/// ([`device_id`](kiln_engine::CompilationTarget::device_id)).
///
/// `Target` has the fields `compiler: Arc<Compiler>`,
/// `step: Arc<CxxDeviceStep<Device>>` and `store: TargetStore`, and its
/// compiler's variant a field `architecture`, of the device's
/// [`Architecture`](CxxDevice::Architecture); `Device` has a method
/// `ordinal(&self) -> usize`, and `BACKEND` is a `&'static str`.
#[macro_export]
macro_rules! cxx_target {
    ($target:ty, $compiler:ty, $loaded:ty, $device:ty, $backend:expr $(,)?) => {
        impl $target {
            /// The same target on `store`: its loader reads kernels the
            /// store holds instead of compiling them, and stores what it
            /// compiles. Kernels asked for under a variant of another
            /// architecture than the target's go without the store
            /// ([`keeps`](kiln_engine::CompilationTarget::keeps)).
            #[must_use = "the target with its store is returned, not changed in place"]
            pub fn with_store(
                mut self,
                store: ::std::sync::Arc<dyn ::kiln_engine::ArtifactStore>,
            ) -> Self {
                self.store.set(store);
                self
            }

            /// The same target without a store, not even the default one:
            /// its loader keeps its artifacts as long as itself.
            #[must_use = "the target without its store is returned, not changed in place"]
            pub fn without_store(mut self) -> Self {
                self.store.clear();
                self
            }

            /// The same target on `store` when there is one, as it is
            /// otherwise (see
            /// [`TargetStore::set_optional`](kiln_engine::TargetStore::set_optional)).
            #[must_use = "the target with its store is returned, not changed in place"]
            pub fn with_optional_store(
                mut self,
                store: Option<::std::sync::Arc<dyn ::kiln_engine::ArtifactStore>>,
            ) -> Self {
                self.store.set_optional(store);
                self
            }

            /// Puts the target on `store` in place of the one it has (see
            /// [`TargetStore::switch`](kiln_engine::TargetStore::switch)):
            /// its loader drops every kernel it loaded and loads them again
            /// from `store` (L10), binding it when it is next used (through
            /// [`KernelLoader::target_mut`](kiln_engine::KernelLoader::target_mut)).
            /// Returns `false`, changing nothing, on a storeless target.
            #[must_use = "a storeless target does not switch"]
            pub fn switch_store(
                &mut self,
                store: ::std::sync::Arc<dyn ::kiln_engine::ArtifactStore>,
            ) -> bool {
                self.store.switch(store)
            }

            /// The GPU, unless the target is compile-only.
            pub fn device(&self) -> Option<&$device> {
                self.step.device()
            }

            /// Whether the target has no device.
            pub fn is_compile_only(&self) -> bool {
                self.device().is_none()
            }
        }

        impl ::kiln_engine::CompilationTarget for $target {
            type Compiler = $compiler;
            type Loaded = $loaded;
            type Device = $crate::CxxDeviceStep<$device>;

            fn compiler(&self) -> &::std::sync::Arc<$compiler> {
                &self.compiler
            }

            fn store(&self) -> Option<&::std::sync::Arc<dyn ::kiln_engine::ArtifactStore>> {
                self.store.get()
            }

            /// Every key of the store names the target's architecture (P1):
            /// a kernel of another would be filed under components that
            /// misname it.
            fn keeps(&self, variant: &::kiln_engine::VariantOf<Self>) -> bool {
                variant.architecture == *self.step.architecture()
            }

            fn device_step(&self) -> &::std::sync::Arc<$crate::CxxDeviceStep<$device>> {
                &self.step
            }

            /// The GPU's ordinal, unless the target is compile-only.
            fn device_id(&self) -> Option<::kiln_engine::DeviceId> {
                self.step.device().map(|device| {
                    let ordinal = u64::try_from(device.ordinal()).unwrap_or(u64::MAX);
                    ::kiln_engine::DeviceId::new($backend, ordinal)
                })
            }

            fn publish(
                &mut self,
                _id: &::kiln_engine::ArtifactId<::kiln_engine::VariantOf<Self>>,
                _artifact: &::kiln_engine::ArtifactOf<Self>,
                made: $loaded,
            ) -> Result<$loaded, ::kiln_engine::DeviceRefusal> {
                Ok(made)
            }
        }
    };
}
