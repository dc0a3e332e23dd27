//! kiln-cuda's errors.
//!
//! A compile failure is not one of these: it belongs to the kernel that
//! failed, as kiln-engine's [`CompileFailure`](kiln_engine::CompileFailure) on
//! that kernel's `KernelError`. These are the errors of setting the backend
//! up (a missing library, no device) and of using the device directly
//! (copies, launches).

use std::fmt;

use kiln_engine::DefineProblem;

/// A CUDA library kiln-cuda opens at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CudaLibrary {
    /// The runtime compiler, `libnvrtc.so.13`.
    Nvrtc,
    /// The driver, `libcuda.so.1`, installed with the GPU's kernel module.
    Driver,
}

impl CudaLibrary {
    /// How to install the library, for error messages.
    pub fn install_hint(self) -> &'static str {
        match self {
            Self::Nvrtc => {
                "install it with `pip install nvidia-cuda-nvrtc==13.0.88` or the \
                 CUDA 13 toolkit, then point KILN_NVRTC_PATH at libnvrtc.so.13 or put its \
                 directory on LD_LIBRARY_PATH"
            }
            Self::Driver => {
                "install the NVIDIA driver (it ships libcuda.so.1) on a machine with an \
                 NVIDIA GPU; compiling needs only NVRTC, so a compile-only target works \
                 without it"
            }
        }
    }
}

impl fmt::Display for CudaLibrary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Nvrtc => "NVRTC (libnvrtc)",
            Self::Driver => "the CUDA driver (libcuda)",
        })
    }
}

/// What went wrong setting the CUDA backend up or using its device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A library could not be opened: nothing on this machine provides it
    /// where kiln-cuda looked. Install it, or say where it is.
    #[error("{library} is not available: looked for {}; {}", searched.join(", "), library.install_hint())]
    LibraryMissing {
        /// The library.
        library: CudaLibrary,
        /// Every name and path tried, in order.
        searched: Vec<String>,
    },
    /// A library was found but lacks a function kiln-cuda calls: it is older
    /// than kiln-cuda supports. Install a newer one.
    #[error("{library} at {path} has no `{symbol}`: it is too old; {}", library.install_hint())]
    SymbolMissing {
        /// The library.
        library: CudaLibrary,
        /// Where it was opened from.
        path: String,
        /// The missing function.
        symbol: &'static str,
    },
    /// The driver is present but has no device to offer: no GPU, or the GPU
    /// asked for does not exist. Use a compile-only target, or another
    /// ordinal.
    #[error("no CUDA device: {detail}")]
    NoDevice {
        /// The driver's answer.
        detail: String,
    },
    /// A driver call failed.
    #[error("{call} failed: {message}")]
    Driver {
        /// The driver function.
        call: &'static str,
        /// The driver's error name and description.
        message: String,
        /// The driver's `CUresult` code.
        code: i64,
    },
    /// An NVRTC call other than the compile itself failed.
    #[error("{call} failed: {message}")]
    Nvrtc {
        /// The NVRTC function.
        call: &'static str,
        /// NVRTC's description of its result code.
        message: String,
    },
    /// The kernel was described by a compile-only target: there is no device
    /// to launch it on.
    #[error(
        "kernel `{entry}` was compiled without a device (compile-only target): it cannot be launched"
    )]
    CompileOnly {
        /// The kernel's entry point.
        entry: String,
    },
    /// A launch was asked on a stream of another context than the one the
    /// kernel is loaded on: its module does not exist there. Launch on a
    /// stream of the kernel's device's context
    /// ([`CudaDevice::context`](crate::CudaDevice::context)), or load the
    /// kernel through a target on the stream's context.
    #[error(
        "kernel `{entry}` is loaded on a context of GPU {kernel_ordinal}, and the stream belongs to another context (of GPU {stream_ordinal})"
    )]
    ForeignStream {
        /// The kernel's entry point.
        entry: String,
        /// The ordinal of the GPU the kernel is loaded on.
        kernel_ordinal: usize,
        /// The ordinal of the GPU whose context the stream belongs to.
        stream_ordinal: usize,
    },
    /// A kernel's define cannot reach NVRTC as one macro: its name is not
    /// an identifier, or its value holds what an option cannot carry. The
    /// kernel fails to compile; fix the define.
    #[error("the define {name:?} {problem}")]
    InvalidDefine {
        /// The define's name, as given.
        name: String,
        /// What is wrong with it.
        problem: DefineProblem,
    },
    /// An option that names a file or an include folder: kiln resolves a
    /// kernel's headers itself and hands them to NVRTC in memory (P13), so
    /// none reaches NVRTC as a path.
    #[error("the option {flag:?} {}", kiln_cxx::why_no_file_option("NVRTC"))]
    FileOption {
        /// The option as given.
        flag: String,
    },
    /// A launch or copy was asked with sizes that do not fit.
    #[error("invalid request: {0}")]
    Invalid(String),
}

impl Error {
    pub(crate) fn driver(call: &'static str, error: cudarc::driver::DriverError) -> Self {
        Self::Driver {
            call,
            message: driver_message(error),
            code: error.0 as i64,
        }
    }
}

/// The driver's name and description of `error`, e.g.
/// `CUDA_ERROR_INVALID_IMAGE (device kernel image is invalid)`.
pub(crate) fn driver_message(error: cudarc::driver::DriverError) -> String {
    let name = error
        .error_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", error.0));
    match error.error_string() {
        Ok(description) => format!("{name} ({})", description.to_string_lossy()),
        Err(_) => name,
    }
}
