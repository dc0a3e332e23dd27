//! Loaded kernels: an artifact's code object loaded on a device, with the
//! function its entry point names, or, on a compile-only target, checked
//! and described without a device.
//!
//! Either way the code object is read first ([`crate::code_object`]): a
//! truncated or foreign one, or one without the entry point's kernel, is
//! refused before a driver sees it, since `hipModuleLoadData` takes no
//! length.
//!
//! [`HipDevice`]'s [`CxxDevice`] impl here is what the target's device step
//! calls, on the batch's workers (F9).

use std::fmt;
use std::sync::Arc;

use kiln_engine::{ArtifactReport, DeviceRefusal, Reported, ResourceUsage};

use crate::architecture::Architecture;
use crate::code_object::{self, CodeObjectInfo};
use crate::compiler::{HipArtifact, HipCompiler};
use crate::device::HipDevice;
use crate::error::{Error, Result};
use crate::result;
use crate::stream::HipStream;
use crate::sys;
use kiln_cxx::{CxxDevice, EntrySymbols, KernelArgument, LaunchConfig};

/// A kernel ready to launch, or described by a compile-only target: cheap
/// to clone (an `Arc`), and its module is unloaded when the last clone
/// drops. This is what a [`HipTarget`](crate::HipTarget)'s loader hands out
/// on every load.
#[derive(Clone)]
pub struct LoadedKernel(Arc<Loaded>);

struct Loaded {
    /// The entry points' symbols (B6).
    entries: EntrySymbols,
    architecture: Architecture,
    code_object_bytes: usize,
    info: CodeObjectInfo,
    /// The artifact's report (D4).
    report: ArtifactReport,
    module: Option<DeviceModule>,
}

/// A code object loaded on a device and the kernel in it, unloaded on drop.
struct DeviceModule {
    device: HipDevice,
    module: sys::hipModule_t,
    function: sys::hipFunction_t,
    /// The functions of the module's other entry points, in
    /// the order of [`EntrySymbols::more`].
    more_functions: Vec<sys::hipFunction_t>,
}

// SAFETY: module and function handles name process-wide driver objects; the
// HIP runtime is thread-safe and accepts them from any thread.
unsafe impl Send for DeviceModule {}
// SAFETY: as for `Send`: the handles are only passed to the runtime, never
// mutated or dereferenced here.
unsafe impl Sync for DeviceModule {}

impl Drop for DeviceModule {
    fn drop(&mut self) {
        // SAFETY: the module was loaded by `load_on_device` and is unloaded
        // once, here, when no clone of the kernel holding its function is
        // left.
        if let Err(error) = unsafe { result::module_unload(self.device.runtime(), self.module) } {
            log::warn!("could not unload a HIP module: {error}");
        }
    }
}

/// The artifact's report (D4); see [`LoadedKernel::resources`].
impl Reported for LoadedKernel {
    fn report(&self) -> &ArtifactReport {
        &self.0.report
    }
}

impl LoadedKernel {
    /// The entry point's symbol in the code object (mangled for C++ names).
    pub fn lowered_name(&self) -> &str {
        self.0.entries.first()
    }

    /// The architecture the code object was compiled for.
    pub fn architecture(&self) -> &Architecture {
        &self.0.architecture
    }

    /// The code object's size in bytes.
    pub fn code_object_bytes(&self) -> usize {
        self.0.code_object_bytes
    }

    /// The code object's ELF flags, which encode processor and features.
    pub fn elf_flags(&self) -> u32 {
        self.0.info.flags
    }

    /// Every kernel the code object holds.
    pub fn kernels(&self) -> &[String] {
        &self.0.info.kernels
    }

    /// What the kernel uses (D4): VGPRs, SGPRs, spills, LDS and scratch
    /// as the code object's metadata gives them, the same for a kernel
    /// read from a store as for one compiled here.
    pub fn resources(&self) -> &ResourceUsage {
        &self.0.report.resources
    }

    /// The device it is loaded on; `None` for a compile-only target's.
    pub fn device(&self) -> Option<&HipDevice> {
        self.0.module.as_ref().map(|module| &module.device)
    }

    /// Launches the kernel on `stream`, a stream of the kernel's device
    /// (one made with [`HipDevice::new_stream`], the
    /// [`default_stream`](HipDevice::default_stream), or the program's own
    /// through [`HipStream::from_raw`]): it runs after the work queued on
    /// `stream` before it, and what is queued after waits for it. kiln
    /// launches on no stream the caller did not name (B5).
    ///
    /// # Safety
    ///
    /// `arguments` must match the kernel's parameters in number, order and
    /// type, every pointer must be device memory of this device, large enough
    /// for every access the kernel makes with this `config`, and that memory
    /// must stay allocated until the kernel finishes: the runtime can check
    /// none of it.
    ///
    /// # Errors
    ///
    /// [`Error::CompileOnly`] for a kernel without a device, unless this
    /// thread is in compile-only mode ([`kiln_engine::mode`]), where such a
    /// launch does nothing and succeeds (L11);
    /// [`Error::ForeignStream`] for a stream of another device, or the
    /// runtime's refusal of the launch.
    pub unsafe fn launch(
        &self,
        stream: &HipStream,
        config: LaunchConfig,
        arguments: &[KernelArgument],
    ) -> Result<()> {
        // SAFETY: the caller's contract is this function's.
        unsafe { self.launch_function(None, stream, config, arguments) }
    }

    /// The symbol of the module's entry point `expression` (B6), one of
    /// the kernel's other entries; `None` for a name that is none.
    pub fn lowered_name_of(&self, expression: &str) -> Option<&str> {
        self.0.entries.symbol_of(expression)
    }

    /// Launches the module's other entry point `expression` (B6), one of
    /// the entries the kernel was built with
    /// ([`HipKernelBuilder::entry`](crate::HipKernelBuilder::entry)), as
    /// [`launch`](Self::launch) launches the first.
    ///
    /// # Safety
    ///
    /// As for [`launch`](Self::launch), for that entry's parameters.
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchEntry`] for a name that is no other entry of the
    /// kernel, and as for [`launch`](Self::launch).
    pub unsafe fn launch_entry(
        &self,
        expression: &str,
        stream: &HipStream,
        config: LaunchConfig,
        arguments: &[KernelArgument],
    ) -> Result<()> {
        let Some(index) = self.0.entries.position(expression) else {
            return Err(Error::NoSuchEntry {
                entry: expression.to_owned(),
                entries: self
                    .0
                    .entries
                    .more()
                    .iter()
                    .map(|(entry, _)| entry.clone())
                    .collect(),
            });
        };
        // SAFETY: the caller's contract is this function's.
        unsafe { self.launch_function(Some(index), stream, config, arguments) }
    }

    /// Launches the first entry (`None`) or the other entry `index`.
    ///
    /// # Safety
    ///
    /// As for [`launch`](Self::launch).
    unsafe fn launch_function(
        &self,
        index: Option<usize>,
        stream: &HipStream,
        config: LaunchConfig,
        arguments: &[KernelArgument],
    ) -> Result<()> {
        let Some(module) = &self.0.module else {
            // L11: in compile-only mode a launch does nothing, decided
            // where it is issued.
            if kiln_engine::mode::is_compile_only() {
                return Ok(());
            }
            return Err(Error::CompileOnly {
                symbol: self.0.entries.first().to_owned(),
            });
        };
        let function = match index {
            None => module.function,
            Some(index) => module.more_functions[index],
        };
        check_stream(
            self.0.entries.first(),
            module.device.ordinal(),
            stream.device().ordinal(),
        )?;
        module.device.make_current()?;
        kiln_cxx::launch::with_parameters(arguments, |parameters| {
            // SAFETY: the function's module is loaded on the current device
            // for as long as `self` lives, and `stream` is a live stream of
            // that device (checked above) that outlives the call;
            // `parameters` point into `arguments`, which outlive the call
            // (the runtime copies the values at launch and never writes
            // through them); the caller vouches that they match the
            // kernel's parameters and memory.
            unsafe {
                result::launch_kernel(
                    module.device.runtime(),
                    function,
                    config.grid,
                    config.block,
                    config.shared_memory_bytes,
                    stream.raw(),
                    parameters,
                )
            }
        })
    }
}

/// Refuses a stream of another device than the kernel's: its module is
/// not loaded there.
fn check_stream(symbol: &str, kernel_ordinal: usize, stream_ordinal: usize) -> Result<()> {
    if kernel_ordinal == stream_ordinal {
        return Ok(());
    }
    Err(Error::ForeignStream {
        symbol: symbol.to_owned(),
        kernel_ordinal,
        stream_ordinal,
    })
}

impl fmt::Debug for LoadedKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedKernel")
            .field("lowered_name", &self.0.entries.first())
            .field("architecture", &self.0.architecture)
            .field("code_object_bytes", &self.0.code_object_bytes)
            .field("device", &self.device().map(HipDevice::ordinal))
            .finish_non_exhaustive()
    }
}

/// The artifact's code object read as a device would read it: whole, and
/// holding the entry point's kernel.
fn inspect(artifact: &HipArtifact) -> Result<CodeObjectInfo> {
    let info = code_object::inspect(&artifact.code_object)?;
    let symbols = std::iter::once(&artifact.symbol)
        .chain(artifact.more_entries.iter().map(|(_, symbol)| symbol));
    for symbol in symbols {
        if !info.has_kernel(symbol) {
            return Err(Error::KernelMissing {
                symbol: symbol.clone(),
                kernels: info.kernels,
            });
        }
    }
    Ok(info)
}

fn loaded(
    artifact: &HipArtifact,
    info: CodeObjectInfo,
    module: Option<DeviceModule>,
) -> LoadedKernel {
    LoadedKernel(Arc::new(Loaded {
        entries: EntrySymbols::new(artifact.symbol.clone(), artifact.more_entries.clone()),
        architecture: artifact.architecture.clone(),
        code_object_bytes: artifact.code_object.len(),
        info,
        report: artifact.report.clone(),
        module,
    }))
}

/// A compile-only target's load: the code object checked as a device
/// would check it, and described.
///
/// # Errors
///
/// [`Error::InvalidCodeObject`] or [`Error::KernelMissing`].
pub(crate) fn describe(artifact: &HipArtifact) -> Result<LoadedKernel> {
    let info = inspect(artifact)?;
    Ok(loaded(artifact, info, None))
}

/// The artifact's code object loaded on `device`, and its entry point's
/// function.
///
/// # Errors
///
/// [`Error::ArchitectureMismatch`] for a code object of another processor,
/// [`Error::InvalidCodeObject`] or [`Error::KernelMissing`] (the driver
/// never sees such bytes), or the driver's refusal.
pub(crate) fn load_on_device(device: &HipDevice, artifact: &HipArtifact) -> Result<LoadedKernel> {
    if artifact.architecture.processor() != device.architecture().processor() {
        return Err(Error::ArchitectureMismatch {
            artifact: artifact.architecture.to_string(),
            device: device.architecture().to_string(),
        });
    }
    let info = inspect(artifact)?;
    device.make_current()?;
    // SAFETY: `inspect` found every header, segment and section inside the
    // code object, so the driver reads nothing past it.
    let raw_module = unsafe { result::module_load_data(device.runtime(), &artifact.code_object)? };
    // Owned from here, so that a failed lookup unloads it.
    let mut module = DeviceModule {
        device: device.clone(),
        module: raw_module,
        function: std::ptr::null_mut(),
        more_functions: Vec::new(),
    };
    let name = result::c_string(&artifact.symbol, || {
        format!("the symbol {:?}", artifact.symbol)
    })?;
    // SAFETY: the module is loaded, and stays loaded while `module` lives.
    module.function =
        unsafe { result::module_get_function(device.runtime(), module.module, &name)? };
    for (_, symbol) in &artifact.more_entries {
        let name = result::c_string(symbol, || format!("the symbol {symbol:?}"))?;
        // SAFETY: as above.
        let function =
            unsafe { result::module_get_function(device.runtime(), module.module, &name)? };
        module.more_functions.push(function);
    }
    Ok(loaded(artifact, info, Some(module)))
}

/// An AMD GPU loads an artifact's code object once it is read whole and for
/// its processor; a compile-only target checks it as a device would, and
/// describes it.
impl CxxDevice for HipDevice {
    type Compiler = HipCompiler;
    type Architecture = Architecture;
    type Loaded = LoadedKernel;

    fn compiles_for(&self) -> &Architecture {
        self.architecture()
    }

    fn load(&self, artifact: &HipArtifact) -> std::result::Result<LoadedKernel, DeviceRefusal> {
        load_on_device(self, artifact).map_err(refusal)
    }

    fn describe(
        _architecture: &Architecture,
        artifact: &HipArtifact,
    ) -> std::result::Result<LoadedKernel, DeviceRefusal> {
        describe(artifact).map_err(refusal)
    }
}

/// The refusal of a device step, with the runtime's code when it gave one.
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

#[cfg(test)]
mod tests {
    use super::*;

    // B5
    #[test]
    fn a_stream_of_another_gpu_is_refused_naming_both_gpus() {
        assert!(check_stream("scale", 1, 1).is_ok());
        let error =
            check_stream("scale", 0, 1).expect_err("GPU 1's stream cannot run GPU 0's kernel");
        assert!(
            matches!(
                &error,
                Error::ForeignStream {
                    symbol,
                    kernel_ordinal: 0,
                    stream_ordinal: 1,
                } if symbol == "scale"
            ),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            "kernel scale is loaded on GPU 0, and the stream belongs to GPU 1"
        );
    }
}
