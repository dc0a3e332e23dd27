//! kiln's HIP backend: HIP source → hipRTC → a code object for a gfx
//! architecture → `hipModuleLoadData` → a kernel to launch (rule B2, docs/BEHAVIOUR.md).
//!
//! # Status: compiles for real, has never run on AMD hardware
//!
//! The compile half is tested for real: hipRTC compiles every test kernel
//! for gfx90a, gfx908 and gfx1030, and the core conformance suite runs
//! against it. The device half — [`HipDevice`], [`HipTarget`], launches and
//! device memory — is written against the ROCm headers, but **no AMD GPU has
//! ever run it**: kiln is developed where none exists. There it is tested
//! only for what a machine without a GPU shows: the runtime does not start,
//! and [`HipDevice::open`] returns [`Error::NoDevice`] instead of panicking.
//! Treat the device path as unproven until a test launches a kernel on an
//! AMD GPU and checks its numbers (`cargo xtask test-backend hip`).
//!
//! # Files
//!
//! The files are the backend template's (ARCHITECTURE.md, "The backend
//! template"): `kernel`, `options`, `architecture` (with comgr's ISA
//! check), `compiler`, `key`, `diagnostics`, `sys` → `result`, `device`,
//! `module` (the loaded kernel, and its launch), `target` and `error`.
//! Four are HIP's own:
//!
//! - `code_object` reads an AMD GPU code object's headers and kernels,
//!   because `hipModuleLoadData` takes no length and must never see a
//!   truncated or foreign object.
//! - `program` is the safe owner of one hipRTC program (destroyed on drop)
//!   and of the process-wide hipRTC lock it holds while it lives.
//! - `toolchain` opens hipRTC and comgr once per process and keeps what
//!   they say about themselves: their identity and their supported targets.
//! - `stream` holds [`HipStream`], the stream a launch goes on: kiln-cuda
//!   takes cudarc's streams, and HIP has no such crate to take them from.
//!
//! # Layers
//!
//! As in cudarc, three layers: `sys` opens hipRTC, comgr and the HIP runtime
//! with `libloading` at run time (no ROCm is needed to build), `result`
//! turns every call into a `Result`, and the safe types on top — a hipRTC
//! program, [`LoadedKernel`], [`DeviceBuffer`] — release what they own when
//! dropped.
//!
//! hipRTC is `libhiprtc.so` from ROCm 6 on and lives inside
//! `libamdhip64.so.5` on ROCm 5; kiln-hip takes whichever exists. A missing
//! library is an [`Error::LibraryMissing`] naming it, where it was looked
//! for, and how to install it.
//!
//! # Design choices
//!
//! - **The target is checked before hipRTC sees it.** hipRTC aborts the
//!   whole process (SIGABRT inside comgr) on an architecture its comgr does
//!   not support, or on a feature the processor lacks (`gfx1030:xnack+`).
//!   Every compile first asks comgr for its ISA list
//!   (`amd_comgr_get_isa_count`, `amd_comgr_get_isa_name`) and, for a target
//!   with features, whether it accepts the full ISA name; anything else
//!   fails its kernel with the list of supported targets. Flags that could
//!   choose the architecture behind this check are refused. Without worker
//!   processes this check is what protects the host process; where the
//!   program provides compile worker
//!   processes (`kiln_engine::worker::run_if_worker(&[kiln_hip::worker_entry()])`
//!   at the top of `main`), every finalize runs in one of them, so even an
//!   abort the check misses fails only its kernel, and the worker is
//!   replaced.
//! - **Compiles run one at a time in a process.** ROCm 5's hipRTC aborts the
//!   process when two threads compile at once, so every hipRTC call holds
//!   one process-wide lock. A batch still runs generators on all its
//!   workers; worker processes compile in parallel.
//! - **Entry points are name expressions.** Every entry point, plain or a
//!   template instantiation (`reduce<float, 256>`), is handed to
//!   `hiprtcAddNameExpression`, and the symbol `hiprtcGetLoweredName`
//!   returns is what loads. An entry point the source does not declare
//!   fails its compile with an error that says so.
//! - **The key is one value.** Every artifact carries the
//!   [`Provenance`](kiln_engine::store::Provenance) of everything that shaped
//!   it: compiler identity (hipRTC and comgr versions and library files),
//!   architecture, the exact flags, BLAKE3 digests of the source and of
//!   each header, and the entry point. A store files artifacts under
//!   [`HipKey::for_store`]'s components (backend, the whole compiler
//!   identity, architecture) plus the kernel's id or the lowered text, which
//!   between them hold the rest.
//! - **One target, with or without a device.** [`HipTarget::on_device`]
//!   loads on an AMD GPU; [`HipTarget::compile_only`] stops after compiling
//!   and describes what a device would have loaded. Both hand out a
//!   [`LoadedKernel`].
//! - **Targets are storeless until given a store.**
//!   [`HipTarget::with_store`] puts a target on any
//!   [`ArtifactStore`](kiln_engine::ArtifactStore), such as kiln-store's disk
//!   store, which the
//!   [`KernelLoader`](kiln_engine::KernelLoader) binds to the compiler's keys:
//!   a kernel the store holds is read, not compiled, by every later process.
//! - **Nothing unchecked reaches the driver.** `hipModuleLoadData` takes no
//!   length, so every code object is read first: a truncated or foreign one
//!   is refused before the driver sees it.
//!
//! # Launching
//!
//! kiln launches on no stream the program did not choose (B5):
//! [`LoadedKernel::launch`] takes a [`HipStream`], as kiln-cuda's takes a
//! cudarc stream — one kiln made ([`HipDevice::new_stream`], non-blocking),
//! the device's [`default_stream`](HipDevice::default_stream), or a stream
//! the program already has ([`HipStream::from_raw`]) — with a
//! [`LaunchConfig`] and [`KernelArgument`]s: device pointers and plain
//! numbers, as in kiln-cuda. A kernel launched on a stream of another
//! device is refused ([`Error::ForeignStream`]).
//! [`HipDevice`] allocates [`DeviceBuffer`]s of plain numbers and copies
//! them whole, after the work of every stream of the device; kiln is not
//! a tensor library, and that is all the memory it manages.
//!
//! # Example
//!
//! ```no_run
//! use kiln_engine::{ArtifactId, Kernel, KernelId, KernelLoader};
//! use kiln_hip::{HipKernel, HipTarget, LaunchConfig};
//!
//! let target = HipTarget::on_device(0)?;
//! let variant = target.variant();
//! let device = target.device().expect("a device target has a device").clone();
//! let mut loader = KernelLoader::new(target);
//!
//! let kernel = HipKernel::builder(KernelId::named("scale"), "scale").source(
//!     r#"extern "C" __global__ void scale(float* x, float by, unsigned n) {
//!         unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
//!         if (i < n) x[i] *= by;
//!     }"#,
//! );
//! let id = ArtifactId::new(kernel.id(), variant);
//! let scale = loader.load(&kernel, &id)?;
//!
//! let values = device.upload(&[1.0f32, 2.0, 3.0])?;
//! let stream = device.new_stream()?;
//! // SAFETY: the arguments match `scale`'s parameters, and the launch covers
//! // the buffer's three values.
//! unsafe {
//!     scale.launch(
//!         &stream,
//!         LaunchConfig::for_elements(3, 64),
//!         &[(&values).into(), 2.0f32.into(), 3u32.into()],
//!     )?
//! };
//! assert_eq!(values.to_vec()?, [2.0, 4.0, 6.0]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

mod architecture;
pub mod code_object;
mod compiler;
mod device;
mod diagnostics;
pub mod error;
pub mod includes;
mod kernel;
mod key;
pub mod metadata;
mod module;
mod names;
mod options;
mod program;
mod result;
mod stderr;
mod stream;
mod sys;
mod target;
mod toolchain;

pub use architecture::{Architecture, SupportedTargets};
pub use code_object::CodeObjectInfo;
pub use compiler::{HipArtifact, HipCompiler, HipLowered, HipRecipe};
pub use device::{DeviceBuffer, DeviceScalar, HipDevice};
pub use error::{Error, Result};
pub use kernel::{EntryPoint, Header, HipKernel, HipKernelBuilder, SourceGenerator};
pub use key::{CompilerIdentity, HeaderDigest, HipKey};
pub use kiln_cxx::{KernelArgument, LaunchConfig};
pub use module::LoadedKernel;
pub use options::{CxxStandard, HipOptions, HipVariant};
pub use stream::HipStream;
pub use target::{Hip, HipDeviceStep, HipTarget};

/// The entry of the HIP compiler for the worker hook at the top of `main`,
/// so that hipRTC compiles in worker processes: in parallel, and where a
/// compiler abort fails only its kernel.
///
/// ```no_run
/// fn main() {
///     kiln_engine::worker::run_if_worker(&[kiln_hip::worker_entry()]);
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
    kiln_engine::worker::entry::<HipCompiler>()
}
