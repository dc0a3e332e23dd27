//! kiln's CUDA backend: CUDA C++ through NVRTC to a cubin for the device's
//! exact architecture, loaded with the driver and launched (rule B1, docs/BEHAVIOUR.md).
//!
//! # The way of a kernel
//!
//! - **Lower** runs the [`CudaKernel`]'s generator (user code) on a worker
//!   thread and records how it compiles: entry point, options, headers.
//! - **Finalize** runs NVRTC with `-arch=sm_XX` for the exact architecture,
//!   keeping the cubin and, beside it, the PTX it was assembled from. The
//!   entry point goes through NVRTC's name expressions, so a template
//!   instantiation (`scale<float, 128>`) is found by its mangled name.
//!   NVRTC's log becomes kiln's diagnostics: warnings stay on the record,
//!   a failure leads with its first error and its line and column.
//! - **Load** gives the driver the cubin with `cuModuleLoadData`, and the
//!   PTX when the driver refuses the cubin; a [`LoadedKernel`] is an `Arc`
//!   whose module is unloaded, on its own context, with the last clone.
//!
//! # Run time, not build time
//!
//! NVRTC and the driver are opened when first needed (cudarc with dynamic
//! loading), so building needs no CUDA toolkit, and a machine without them
//! runs everything that needs neither. A missing library is an
//! [`Error::LibraryMissing`] naming where kiln-cuda looked and how to
//! install it — never a panic: the [`library`] module checks before cudarc
//! is reached. `KILN_NVRTC_PATH` names the NVRTC library (or its directory)
//! to use.
//!
//! # Features: cudarc's CUDA version
//!
//! kiln-cuda asks cudarc for no CUDA version and no linking mode of its
//! own; its features pass them through, so that a program whose own cudarc
//! names others builds with kiln:
//!
//! - `cuda-13000` and `dynamic-loading`, the defaults: tested with NVRTC 13
//!   and NVRTC 12 (cudarc opens whichever `libnvrtc.so.13` or
//!   `libnvrtc.so.12` kiln-cuda found; the functions kiln-cuda calls are
//!   the same in both).
//! - `cuda-12000` to `cuda-12090` and `cuda-13010` to `cuda-13040`:
//!   cudarc's bindings for another toolkit. A `cuda-12xxx` build opens
//!   NVRTC 12 only: cudarc's names for the library then stop at
//!   `libnvrtc.so.12`. `cuda-12080` with `dynamic-loading` is built and run
//!   with NVRTC 12.8 in CI, by a program outside the workspace whose own
//!   cudarc names them; `cuda-12090` through this crate's features is
//!   checked.
//!
//! A program on another CUDA version turns the defaults off
//! (`default-features = false`) and names its version here or on its own
//! cudarc, with `dynamic-loading` here or cudarc's
//! `fallback-dynamic-loading` there: cudarc does not build with two version
//! features (`cuda-13000` is a default). cudarc's
//! `dynamic-linking` and `static-linking` do not build with kiln-cuda,
//! which opens NVRTC and the driver itself at run time, under the names
//! cudarc's loading opens them by (see [`library`]).
//!
//! # Targets
//!
//! [`CudaTarget::from_context`] compiles for the GPU of a cudarc
//! [`CudaContext`](cudarc::driver::CudaContext) the program already has and
//! loads on that context; [`CudaTarget::on_device`] does the same on a GPU's
//! primary context;
//! [`CudaTarget::compile_only`] compiles for an architecture with no GPU at
//! all, and its loaded kernels describe their artifact (and cannot launch).
//! Either is storeless until [`CudaTarget::with_store`] puts it on an
//! [`ArtifactStore`](kiln_engine::ArtifactStore), such as kiln-store's disk
//! store: then no process compiles a kernel another already stored, and a
//! kernel read from the store loads as one compiled here does.
//! [`CudaKey`] says what the keys are made of and why they cover
//! everything that changes an artifact's bytes (P1).
//!
//! # Worker processes
//!
//! NVRTC takes a lock inside its process: threads stop scaling at about
//! four. A [`CudaCompiler`] therefore finalizes in compile worker processes
//! whenever the program provides them — its `main` starts with
//! `kiln_engine::worker::run_if_worker(&[kiln_cuda::worker_entry()])` — and
//! on threads otherwise (see [`kiln_engine::worker`]).
//!
//! # The native layer
//!
//! The crate has the files of ARCHITECTURE.md's backend template, each in
//! the role it has in every backend (`kernel`, `options`, `architecture`,
//! `compiler`, `key`, `diagnostics`, `device`, `module`, `launch`,
//! `target`, `error`), but one: where kiln-hip opens its libraries in
//! hand-written `sys` (raw) and `result` (every call a `Result`) files,
//! kiln-cuda stands on cudarc, which is layered that way already. Two files
//! take their place: [`library`] finds and opens NVRTC and the driver,
//! refusing a missing one with an install hint before cudarc is reached,
//! and `nvrtc` wraps cudarc's raw NVRTC calls in [`Nvrtc`]: every call a
//! `Result`, a program destroyed when it drops, and a compile's cubin, PTX
//! and log returned together.
//!
//! # Launching
//!
//! kiln launches on no stream the program did not choose (B5). A cudarc
//! program launches a loaded kernel's cudarc
//! [`function`](LoadedKernel::function) with cudarc's own launch builder on
//! its own stream, with its own `CudaSlice`s and `DeviceRepr` arguments;
//! [`cudarc`] is the version kiln-cuda was built with, so the types match.
//! Without cudarc, [`LoadedKernel::launch`] takes the stream, a
//! [`LaunchConfig`] and [`KernelArgument`]s: device pointers and plain
//! numbers. [`CudaDevice`] allocates [`DeviceBuffer`]s of plain numbers and
//! copies them whole; kiln is not a tensor library, and that is all the
//! memory it manages.

#![warn(missing_docs)]

mod architecture;
mod compiler;
mod device;
mod diagnostics;
mod error;
mod kernel;
mod key;
pub mod library;
mod module;
mod nvrtc;
mod options;
mod resources;
pub use resources::cubin_resources;
mod target;
mod timing;
pub mod toolkit;

pub use architecture::{Architecture, ArchitectureParseError};
pub use compiler::{CudaArtifact, CudaCompiler, CudaLowered, CudaRecipe, CudaVariant};
pub use device::{CudaDevice, DeviceBuffer, DeviceScalar};
pub use error::{CudaLibrary, Error};
pub use kernel::{
    CudaKernel, CudaKernelBuilder, EntryPoint, Header, IncludeSearch, SourceGenerator,
};
pub use key::CudaKey;
pub use kiln_cxx::{KernelArgument, LaunchConfig};
pub use module::{LoadedImage, LoadedKernel};
pub use nvrtc::{Nvrtc, NvrtcVersion};
pub use options::{CudaOptions, CxxStandard, DEFAULT_STANDARD};
pub use target::{Cuda, CudaDeviceStep, CudaTarget};
pub use timing::CudaTimer;

/// The cudarc kiln-cuda was built with: its `CudaContext` goes into
/// [`CudaTarget::from_context`], and its `CudaModule`, `CudaFunction` and
/// launch builder are what a loaded kernel gives out. Using this path
/// rather than a cudarc of the program's own guarantees the types are the
/// same.
pub use cudarc;

/// The entry of the CUDA compiler for the worker hook at the top of `main`,
/// so that NVRTC compiles in worker processes and a batch reaches every
/// core (NVRTC serializes inside one process):
///
/// ```no_run
/// fn main() {
///     kiln_engine::worker::run_if_worker(&[kiln_cuda::worker_entry()]);
///     // ...
/// }
/// ```
///
/// See [`kiln_engine::worker`] for how the workers are found and run.
#[allow(
    clippy::needless_doctest_main,
    reason = "the hook belongs on the first line of main, which the example shows"
)]
pub fn worker_entry() -> kiln_engine::worker::WorkerEntry {
    kiln_engine::worker::entry::<CudaCompiler>()
}
