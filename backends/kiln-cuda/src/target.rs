//! The CUDA target: NVRTC in front of one GPU, or of no GPU at all.

use std::time::Duration;

use kiln_core::{ArtifactId, CompilationTarget, DeviceRefusal, Lookup, Miss, StoreOutcome};

use crate::architecture::Architecture;
use crate::compiler::{CudaArtifact, CudaCompiler, CudaVariant};
use crate::device::CudaDevice;
use crate::error::Error;
use crate::module::{self, LoadedKernel};

/// Where a target's kernels go.
#[derive(Debug)]
enum Destination {
    /// No device: artifacts are described, checked as a device of this
    /// architecture would check them.
    CompileOnly(Architecture),
    /// A GPU.
    Device(CudaDevice),
}

/// NVRTC in front of a GPU (or of none, to compile without one), for a
/// [`KernelLoader`](kiln_core::KernelLoader).
///
/// The target keeps nothing beyond the process yet (`persists() == false`):
/// every artifact's key is ready for the store in
/// [`CudaCompiler::key_components`].
///
/// ```no_run
/// use kiln_core::{ArtifactId, Kernel, KernelId, KernelLoader};
/// use kiln_cuda::{CudaKernel, CudaTarget, KernelArgument, LaunchConfig};
///
/// let target = CudaTarget::on_device(0)?;
/// let variant = target.variant();
/// let device = target.device().expect("a device target has a device").clone();
/// let mut loader = KernelLoader::new(target);
///
/// let fill = CudaKernel::builder(KernelId::named("example.fill"), "fill").source(
///     r#"extern "C" __global__ void fill(float* y, float value, int n) {
///            int i = blockIdx.x * blockDim.x + threadIdx.x;
///            if (i < n) y[i] = value;
///        }"#,
/// );
/// let id = ArtifactId::new(fill.id(), variant);
/// let kernel = loader.load(&fill, &id)?;
///
/// let output = device.alloc::<f32>(1000)?;
/// // SAFETY: the arguments match `fill`'s parameters and `output` holds
/// // the 1000 elements the launch writes.
/// unsafe {
///     kernel.launch(
///         LaunchConfig::for_elements(1000, 256),
///         &[(&output).into(), 2.5f32.into(), 1000i32.into()],
///     )?;
/// }
/// assert!(output.to_vec()?.iter().all(|&value| value == 2.5));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct CudaTarget {
    compiler: CudaCompiler,
    destination: Destination,
}

impl CudaTarget {
    /// A target on GPU `ordinal`, compiling for its exact architecture.
    ///
    /// # Errors
    ///
    /// The driver or NVRTC is missing, or there is no such GPU.
    pub fn on_device(ordinal: usize) -> Result<Self, Error> {
        let device = CudaDevice::open(ordinal)?;
        Ok(Self {
            compiler: CudaCompiler::new()?,
            destination: Destination::Device(device),
        })
    }

    /// A target with no device, compiling for `architecture`: `load`
    /// describes each artifact instead of loading it, and refuses what a
    /// device of that architecture would refuse.
    ///
    /// # Errors
    ///
    /// NVRTC is missing.
    pub fn compile_only(architecture: Architecture) -> Result<Self, Error> {
        Ok(Self {
            compiler: CudaCompiler::new()?,
            destination: Destination::CompileOnly(architecture),
        })
    }

    /// The architecture kernels are compiled for.
    pub fn architecture(&self) -> Architecture {
        match &self.destination {
            Destination::CompileOnly(architecture) => *architecture,
            Destination::Device(device) => device.architecture(),
        }
    }

    /// The variant every kernel of this target is compiled under.
    pub fn variant(&self) -> CudaVariant {
        CudaVariant {
            architecture: self.architecture(),
        }
    }

    /// The GPU, unless the target is compile-only.
    pub fn device(&self) -> Option<&CudaDevice> {
        match &self.destination {
            Destination::CompileOnly(_) => None,
            Destination::Device(device) => Some(device),
        }
    }

    /// Whether the target has no device.
    pub fn is_compile_only(&self) -> bool {
        self.device().is_none()
    }
}

impl CompilationTarget for CudaTarget {
    type Compiler = CudaCompiler;
    type Loaded = LoadedKernel;

    fn compiler(&self) -> &CudaCompiler {
        &self.compiler
    }

    fn persists(&self) -> bool {
        false
    }

    fn lookup(&mut self, _id: &ArtifactId<CudaVariant>) -> Lookup<CudaArtifact> {
        Lookup::Miss(Miss::Absent)
    }

    fn lookup_source(
        &mut self,
        _id: &ArtifactId<CudaVariant>,
        _source: &str,
    ) -> Lookup<CudaArtifact> {
        Lookup::Miss(Miss::Absent)
    }

    fn store(
        &mut self,
        _id: &ArtifactId<CudaVariant>,
        _artifact: &CudaArtifact,
        _source: Option<&str>,
        _work: Duration,
    ) -> StoreOutcome {
        StoreOutcome::Skipped
    }

    fn load(
        &mut self,
        _id: &ArtifactId<CudaVariant>,
        artifact: &CudaArtifact,
    ) -> Result<LoadedKernel, DeviceRefusal> {
        match &self.destination {
            Destination::CompileOnly(architecture) => module::describe(*architecture, artifact),
            Destination::Device(device) => module::load_on_device(device, artifact),
        }
    }
}
