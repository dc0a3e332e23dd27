//! kiln-hip's errors.

use std::path::PathBuf;

use kiln_engine::DefineProblem;

/// What can go wrong in kiln-hip outside a kernel's own compile: libraries,
/// targets, devices and launches.
///
/// A kernel's compile errors are not here: they are a
/// [`CompileFailure`](kiln_engine::CompileFailure) with every diagnostic, and
/// errors of this type that stop one kernel's compile (an unsupported
/// target, say) reach its caller inside one too.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A ROCm library is not installed, or not where the loader looks.
    #[error(
        "{library} could not be loaded: looked for {} in {searched}; {install} (dynamic loader: {detail})",
        names.join(", ")
    )]
    LibraryMissing {
        /// Which library.
        library: &'static str,
        /// The file names tried.
        names: Vec<String>,
        /// The places they were looked for in.
        searched: String,
        /// How to install it.
        install: &'static str,
        /// What the dynamic loader said: about a file that exists and did
        /// not load when there was one, else about the last file tried.
        detail: String,
    },
    /// A library opened but lacks a function kiln-hip calls: another
    /// release than the ones kiln-hip knows, or not the ROCm library.
    #[error("{} lacks the function {symbol}: {detail}", path.display())]
    SymbolMissing {
        /// The library.
        path: PathBuf,
        /// The missing function.
        symbol: &'static str,
        /// What the dynamic loader said.
        detail: String,
    },
    /// A hipRTC call failed.
    #[error("hipRTC {call} failed: {message} (status {code})")]
    Hiprtc {
        /// The function that failed.
        call: &'static str,
        /// hipRTC's status code.
        code: i32,
        /// hipRTC's name for the status.
        message: String,
    },
    /// A comgr call failed.
    #[error("comgr {call} failed with status {code}")]
    Comgr {
        /// The function that failed.
        call: &'static str,
        /// comgr's status code.
        code: i32,
    },
    /// A HIP runtime call failed.
    #[error("{call} failed: {name} ({code})")]
    Hip {
        /// The function that failed.
        call: &'static str,
        /// The runtime's status code.
        code: i32,
        /// The runtime's name for it.
        name: String,
    },
    /// No AMD GPU can be used: the runtime did not start or sees no device.
    #[error("no AMD GPU is usable: {call} returned {name} ({code})")]
    NoDevice {
        /// The call that showed it: `hipInit` or `hipGetDeviceCount`.
        call: &'static str,
        /// The runtime's status code, `0` when the call succeeded and
        /// counted no device.
        code: i32,
        /// The runtime's name for the status.
        name: String,
    },
    /// The device asked for does not exist.
    #[error("there is no HIP device {ordinal}: {count} are visible")]
    DeviceOutOfRange {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices the runtime sees.
        count: usize,
    },
    /// The device's properties name no gfx architecture kiln-hip can read.
    #[error(
        "could not read the gfx architecture of HIP device {ordinal}; give it with HipDevice::with_architecture"
    )]
    UnknownDeviceArchitecture {
        /// The device.
        ordinal: usize,
    },
    /// Compile-only mode (`KILN_MODE=compile-only`) names no gfx
    /// architecture for HIP targets.
    #[error(
        "compile-only mode names no HIP architecture: set {variable}=gfx90a (the GPU the store is for), or name it in the ProcessModeOverride"
    )]
    NoCompileOnlyArchitecture {
        /// The variable that names it.
        variable: &'static str,
    },
    /// A name that is not a gfx architecture.
    #[error(
        "{name:?} is not a gfx architecture name ({reason}); names look like gfx90a or gfx90a:xnack-"
    )]
    InvalidArchitecture {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A target the installed hipRTC cannot compile for. hipRTC aborts the
    /// whole process on such a target, so kiln-hip refuses it first.
    #[error(
        "{requested} is not a target this hipRTC can compile for{}; comgr {comgr_version} supports: {}",
        if *features_refused { " (comgr refuses its features for that processor)" } else { "" },
        supported.join(", ")
    )]
    UnsupportedArchitecture {
        /// The target asked for.
        requested: String,
        /// Whether the processor is supported and only its features
        /// (`:xnack+`, `:sramecc-`) are not.
        features_refused: bool,
        /// Every processor comgr lists.
        supported: Vec<String>,
        /// comgr's version, `major.minor`.
        comgr_version: String,
    },
    /// An extra compile flag that would choose the architecture behind the
    /// supported-target check.
    #[error(
        "the flag {flag:?} chooses the architecture; kiln-hip sets it from the variant so that it can check it first"
    )]
    ArchitectureFlag {
        /// The refused flag.
        flag: String,
    },
    /// A launch named an entry point the kernel was not built with.
    #[error("`{entry}` is no other entry point of this kernel; it has {}", entries.join(", "))]
    NoSuchEntry {
        /// The name asked for.
        entry: String,
        /// The kernel's other entry points.
        entries: Vec<String>,
    },
    /// A flag that names a file or an include folder: kiln resolves a
    /// kernel's headers itself and hands them to hipRTC in memory (P13).
    #[error("the flag {flag:?} {}", kiln_cxx::why_no_file_option("hipRTC"))]
    FileFlag {
        /// The refused flag.
        flag: String,
    },
    /// A kernel's define cannot reach hipRTC as one macro: its name is not
    /// an identifier, or its value holds what an option cannot carry. The
    /// kernel fails to compile; fix the define.
    #[error("the define {name:?} {problem}")]
    InvalidDefine {
        /// The define's name, as given.
        name: String,
        /// What is wrong with it.
        problem: DefineProblem,
    },
    /// Text handed to a C function holds a NUL byte.
    #[error("{what} holds a NUL byte, which C strings cannot carry")]
    InteriorNul {
        /// Which text.
        what: String,
    },
    /// Bytes that are not a complete AMD GPU code object.
    #[error("not a loadable AMD GPU code object: {reason}")]
    InvalidCodeObject {
        /// What is wrong with it.
        reason: String,
    },
    /// A code object without the kernel asked for.
    #[error(
        "the code object has no kernel named {symbol} (it has: {})",
        if kernels.is_empty() { "none".to_owned() } else { kernels.join(", ") }
    )]
    KernelMissing {
        /// The kernel's symbol.
        symbol: String,
        /// The kernels it does have.
        kernels: Vec<String>,
    },
    /// A launch of a kernel a compile-only target described: there is no
    /// device to run it on.
    #[error(
        "{symbol} was compiled without a device and cannot launch; load it on HipTarget::on_device"
    )]
    CompileOnly {
        /// The kernel's symbol.
        symbol: String,
    },
    /// A launch on a stream of another device than the one the kernel is
    /// loaded on: its module does not exist there. Launch on a stream of
    /// the kernel's device ([`HipDevice::new_stream`](crate::HipDevice::new_stream)),
    /// or load the kernel through a target on the stream's device.
    #[error(
        "kernel {symbol} is loaded on GPU {kernel_ordinal}, and the stream belongs to GPU {stream_ordinal}"
    )]
    ForeignStream {
        /// The kernel's symbol.
        symbol: String,
        /// The ordinal of the GPU the kernel is loaded on.
        kernel_ordinal: usize,
        /// The ordinal of the GPU the stream belongs to.
        stream_ordinal: usize,
    },
    /// A host slice whose length is not the device buffer's.
    #[error("the host slice has {host} values and the device buffer {device}")]
    HostLength {
        /// The host slice's length.
        host: usize,
        /// The device buffer's length.
        device: usize,
    },
    /// An artifact compiled for another processor than the device's.
    #[error("the artifact was compiled for {artifact}, the device is {device}")]
    ArchitectureMismatch {
        /// The artifact's target.
        artifact: String,
        /// The device's target.
        device: String,
    },
}

/// A `Result` of kiln-hip.
pub type Result<T, E = Error> = std::result::Result<T, E>;
