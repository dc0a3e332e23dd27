//! The words a C++ kernel is made of, shared by the backends that compile
//! C++ at run time (kiln-cuda through NVRTC, kiln-hip through hipRTC), so
//! each is written once and means the same in both.
//!
//! - the source: an [`EntryPoint`] given as a name expression, [`Header`]s
//!   given with their text, a [`SourceGenerator`] (generic over the
//!   backend's architecture) or a [`FixedSource`];
//! - the kernel's parts that both backends' kernels hold the same way
//!   ([`kernel`]: entry points, headers, includes resolved, generator), and
//!   the methods of their kernels and builders that forward to them;
//! - the options every C++ compiler takes: a [`CxxStandard`] and
//!   [`defines`] turned into `-D` arguments, and the setters each
//!   backend's options share ([`options`]);
//! - the launch: a [`LaunchConfig`] (grid, block, shared memory) and
//!   [`KernelArgument`]s held as the bytes the driver copies, made from
//!   [`DeviceScalar`]s and [`DeviceAddress`]es.
//! - the backend as a whole ([`CxxBackend`], with its kernel builder as
//!   [`CxxKernelBuilder`]), for code that builds either backend's kernels
//!   and targets without naming it, as `kiln warm` does;
//! - the target: where its kernels go and the device step that loads them
//!   on the batch's workers ([`CxxDeviceStep`], through the backend's
//!   [`CxxDevice`]), and the store's setters and target impl both
//!   backends' targets share ([`target`]).
//!
//! It knows no compiler, driver or device: each backend keeps its own
//! options, kernel, device memory and launch call, and re-exports these
//! types under its own name (`kiln_cuda::LaunchConfig` is this crate's).
//! kiln-engine stays neutral about languages; kiln-wgpu does not see this
//! crate.

#![warn(missing_docs)]

pub mod backend;
pub mod defines;
mod entry;
mod generator;
mod header;
pub mod include;
pub mod kernel;
pub mod launch;
pub mod options;
mod scalar;
mod standard;
pub mod stdlib;
pub mod target;

pub use backend::{CxxBackend, CxxKernelBuilder};
pub use entry::{EntryPoint, EntrySymbols};
pub use generator::{FixedSource, SourceGenerator, source_cost};
pub use header::Header;
pub use include::{IncludeCache, IncludeError, IncludeSearch, names_a_file, why_no_file_option};
pub use kernel::{IdLayout, IdStart, KernelParts, KernelPartsBuilder, file_kernel_name};
pub use launch::{DeviceAddress, KernelArgument, LaunchConfig};
pub use scalar::DeviceScalar;
pub use standard::CxxStandard;
pub use stdlib::Compiler;
pub use target::{CxxDevice, CxxDeviceStep};
