//! The two HIP targets: one that loads on an AMD GPU, and one that stops
//! after compiling and describes what it would load.
//!
//! Both are storeless for now: artifacts live as long as their loader.

use std::sync::Arc;
use std::time::Duration;

use kiln_core::{
    ArtifactId, CompilationTarget, DeviceRefusal, KernelId, Lookup, Miss, StoreOutcome,
};

use crate::code_object;
use crate::compiler::{HipArtifact, HipCompiler};
use crate::device::{HipDevice, HipFunction};
use crate::error::{Error, Result};
use crate::isa::GfxArch;
use crate::options::HipVariant;

fn refusal(error: Error) -> DeviceRefusal {
    let code = match &error {
        Error::Hip { code, .. } | Error::NoDevice { code, .. } => Some(i64::from(*code)),
        _ => None,
    };
    DeviceRefusal {
        message: error.to_string(),
        code,
    }
}

/// An AMD GPU behind hipRTC: kernels compile to code objects for the
/// device's architecture and load with `hipModuleLoadData`.
///
/// **Not yet run on AMD hardware**: see the crate documentation.
#[derive(Debug)]
pub struct HipTarget {
    compiler: HipCompiler,
    device: HipDevice,
}

impl HipTarget {
    /// A target on `device`, with the process's hipRTC.
    ///
    /// # Errors
    ///
    /// hipRTC or comgr is missing ([`Error::LibraryMissing`]).
    pub fn new(device: HipDevice) -> Result<Self> {
        Ok(Self::with_compiler(HipCompiler::new()?, device))
    }

    /// A target on `device` with `compiler`.
    pub fn with_compiler(compiler: HipCompiler, device: HipDevice) -> Self {
        Self { compiler, device }
    }

    /// The variant the device runs: its architecture.
    pub fn variant(&self) -> HipVariant {
        HipVariant::new(self.device.arch().clone())
    }

    /// The device.
    pub fn device(&self) -> &HipDevice {
        &self.device
    }
}

impl CompilationTarget for HipTarget {
    type Compiler = HipCompiler;
    type Loaded = HipFunction;

    fn compiler(&self) -> &HipCompiler {
        &self.compiler
    }

    fn persists(&self) -> bool {
        false
    }

    fn lookup(&mut self, _id: &ArtifactId<HipVariant>) -> Lookup<HipArtifact> {
        Lookup::Miss(Miss::Absent)
    }

    fn lookup_source(
        &mut self,
        _id: &ArtifactId<HipVariant>,
        _source: &str,
    ) -> Lookup<HipArtifact> {
        Lookup::Miss(Miss::Absent)
    }

    fn store(
        &mut self,
        _id: &ArtifactId<HipVariant>,
        _artifact: &HipArtifact,
        _source: Option<&str>,
        _work: Duration,
    ) -> StoreOutcome {
        StoreOutcome::Skipped
    }

    fn load(
        &mut self,
        _id: &ArtifactId<HipVariant>,
        artifact: &HipArtifact,
    ) -> Result<HipFunction, DeviceRefusal> {
        if artifact.arch.processor() != self.device.arch().processor() {
            return Err(refusal(Error::ArchitectureMismatch {
                artifact: artifact.arch.to_string(),
                device: self.device.arch().to_string(),
            }));
        }
        let module = self
            .device
            .load_module(&artifact.code_object)
            .map_err(refusal)?;
        module.function(&artifact.symbol).map_err(refusal)
    }
}

/// What the compile-only target loads: a description of the artifact a
/// device would have loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledKernel {
    /// The kernel.
    pub kernel: KernelId,
    /// The architecture it was compiled for.
    pub arch: GfxArch,
    /// The symbol a device would launch.
    pub symbol: String,
    /// The code object's size in bytes.
    pub code_object_bytes: usize,
    /// The code object's ELF flags, which encode processor and features.
    pub elf_flags: u32,
    /// Every kernel the code object holds.
    pub kernels: Vec<String>,
}

/// hipRTC without a device: kernels compile for the variant's architecture,
/// and a load checks the code object as a device would — a whole AMD GPU
/// code object that holds the entry point's kernel — and returns a
/// [`CompiledKernel`] describing it.
///
/// It serves machines with hipRTC and no AMD GPU: ahead-of-time compiles,
/// and kiln's own tests.
#[derive(Debug, Clone)]
pub struct HipCompileOnlyTarget {
    compiler: HipCompiler,
}

impl HipCompileOnlyTarget {
    /// A target compiling with `compiler`.
    pub fn new(compiler: HipCompiler) -> Self {
        Self { compiler }
    }

    /// A target compiling with the process's hipRTC.
    ///
    /// # Errors
    ///
    /// hipRTC or comgr is missing ([`Error::LibraryMissing`]).
    pub fn open() -> Result<Self> {
        Ok(Self::new(HipCompiler::new()?))
    }
}

impl CompilationTarget for HipCompileOnlyTarget {
    type Compiler = HipCompiler;
    type Loaded = Arc<CompiledKernel>;

    fn compiler(&self) -> &HipCompiler {
        &self.compiler
    }

    fn persists(&self) -> bool {
        false
    }

    fn lookup(&mut self, _id: &ArtifactId<HipVariant>) -> Lookup<HipArtifact> {
        Lookup::Miss(Miss::Absent)
    }

    fn lookup_source(
        &mut self,
        _id: &ArtifactId<HipVariant>,
        _source: &str,
    ) -> Lookup<HipArtifact> {
        Lookup::Miss(Miss::Absent)
    }

    fn store(
        &mut self,
        _id: &ArtifactId<HipVariant>,
        _artifact: &HipArtifact,
        _source: Option<&str>,
        _work: Duration,
    ) -> StoreOutcome {
        StoreOutcome::Skipped
    }

    fn load(
        &mut self,
        id: &ArtifactId<HipVariant>,
        artifact: &HipArtifact,
    ) -> Result<Arc<CompiledKernel>, DeviceRefusal> {
        let info = code_object::inspect(&artifact.code_object).map_err(refusal)?;
        if !info.has_kernel(&artifact.symbol) {
            return Err(refusal(Error::KernelMissing {
                symbol: artifact.symbol.clone(),
                kernels: info.kernels,
            }));
        }
        Ok(Arc::new(CompiledKernel {
            kernel: id.kernel.clone(),
            arch: artifact.arch.clone(),
            symbol: artifact.symbol.clone(),
            code_object_bytes: artifact.code_object.len(),
            elf_flags: info.flags,
            kernels: info.kernels,
        }))
    }
}
