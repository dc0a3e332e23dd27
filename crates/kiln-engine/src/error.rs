//! kiln-engine's errors.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::diagnostic::CompileFailure;
use crate::id::{DeviceId, KernelId};

/// The step of a kernel's way to the device that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Stage {
    /// Generating the backend source: user code.
    Lower,
    /// Turning the source into an artifact: the compiler.
    Finalize,
    /// Making the artifact a device object: the driver.
    Load,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Lower => "lower",
            Self::Finalize => "finalize",
            Self::Load => "load",
        })
    }
}

/// The device refused an artifact: the driver's message and status code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct DeviceRefusal {
    /// What the driver said, with what the backend knows of why.
    pub message: String,
    /// The driver's native status code, when it gave one.
    pub code: Option<i64>,
}

impl DeviceRefusal {
    /// A refusal with a message and no native code.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: None,
        }
    }
}

/// Why a kernel did not load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// The generator or the compiler reported an error. Boxed, because a
    /// compile failure carries every diagnostic while a launch's `Result`
    /// should stay small.
    #[error("{0}")]
    Compile(Box<CompileFailure>),
    /// The generator or the compiler panicked; the panic stopped at this
    /// kernel.
    #[error("panicked: {message}")]
    Panicked {
        /// The panic's message.
        message: String,
    },
    /// The device refused the artifact; the kernel was not kept or stored.
    #[error("the device refused it: {0}")]
    Refused(DeviceRefusal),
}

/// A kernel that could not be loaded: which one, at which step, and why.
///
/// Every kernel of a batch fails alone: this value belongs to the kernel it
/// names, and is returned by that kernel's own load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("kernel {kernel} failed to {stage}: {failure}")]
pub struct KernelError {
    /// The kernel that failed.
    pub kernel: KernelId,
    /// The step that failed.
    pub stage: Stage,
    /// Why.
    pub failure: Failure,
}

impl KernelError {
    /// The compile failure behind this error, when a compiler reported one:
    /// every diagnostic it gave.
    pub fn compile_failure(&self) -> Option<&CompileFailure> {
        match &self.failure {
            Failure::Compile(failure) => Some(failure),
            Failure::Panicked { .. } | Failure::Refused(_) => None,
        }
    }
}

/// A `KILN_*` environment variable that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}={value:?} is not valid: {expected}")]
pub struct ConfigError {
    /// The variable's name.
    pub variable: &'static str,
    /// What it held.
    pub value: String,
    /// What it should hold.
    pub expected: &'static str,
}

/// Why a [`KernelCache`](crate::handle::KernelCache) gave no kernel.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    /// The cache was asked for a kernel to launch on a device other than
    /// its own. Nothing was built or handed out: ask the cache of `used`.
    #[error(
        "this kernel cache serves device {owner} and was asked from device {used}: a kernel \
         loaded on one device cannot launch on another; use the cache of {used}"
    )]
    WrongDevice {
        /// The device the cache serves.
        owner: DeviceId,
        /// The device it was asked from.
        used: DeviceId,
    },
    /// The kernel asked for failed; a request stays wanted, so the next
    /// build tries it again.
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// Kernels of the batch a build ran failed.
    #[error(transparent)]
    Build(#[from] BuildFailure),
    /// The kernel asked for is not built yet and its fallback is not
    /// either.
    #[error(transparent)]
    FallbackMissing(#[from] FallbackMissing),
}

/// A load with a fallback (`load_or`, `resolve_or`) found neither the
/// kernel nor its fallback loaded: a fallback is a kernel the program
/// loads once, before it serves with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the fallback kernel {fallback} is not loaded: load it once (with `load` or `resolve`) \
     before serving with it"
)]
pub struct FallbackMissing {
    /// The fallback asked for.
    pub fallback: KernelId,
}

/// The kernels of one batch that failed. Each failed alone: the rest of the
/// batch loaded, and each failed request stays wanted, so the next build
/// tries it again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct BuildFailure {
    /// How many kernels the batch built.
    pub kernels: usize,
    /// Each failed kernel's own error, in the batch's order; never empty.
    pub failures: Vec<KernelError>,
}

impl fmt::Display for BuildFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of the {} kernels of the batch failed",
            self.failures.len(),
            self.kernels
        )?;
        if let Some(first) = self.failures.first() {
            write!(f, "; the first: {first}")?;
        }
        Ok(())
    }
}
