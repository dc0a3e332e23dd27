//! kiln's wgpu backend: WGSL and SPIR-V through naga to compute pipelines,
//! with the driver's pipeline cache kept in kiln's store (rules B3 and B6,
//! docs/BEHAVIOUR.md).
//!
//! # The way of a kernel
//!
//! - **Lower** runs the [`WgslKernel`]'s generator (user code: WGSL text,
//!   or a SPIR-V module's bytes) on a worker thread and records how its
//!   pipeline is built: the compute entry point, the values of its
//!   pipeline-overridable constants (WGSL `override`s, SPIR-V
//!   specialization constants, by name or number) and its bind group
//!   layout, automatic or explicit.
//! - **Finalize** parses the WGSL (or reads the SPIR-V with naga's SPIR-V
//!   front end) and validates it with naga, checks that the entry point is
//!   a compute one, applies the constants (a name the shader does not
//!   declare, or a value its type cannot hold, fails here), finds the wgpu
//!   features the shader needs (f64, i64, f16, subgroups, ...), and checks
//!   an explicit layout against the buffers the entry point uses. naga's
//!   errors become kiln's diagnostics with line and column (with the file
//!   and entry for SPIR-V, which has no lines). The artifact keeps the
//!   validated shader with the workgroup size, bindings and features naga
//!   found, so loading needs no second look at the source. It depends on
//!   no device: a store filled without one serves every device later.
//! - **Load** checks the device has the features the kernel needs (a
//!   kernel that needs one it lacks fails naming it), then makes the shader
//!   module, the layouts and the compute pipeline on the user's
//!   `wgpu::Device`, inside error scopes: a pipeline the device rejects is
//!   that kernel's refusal (L9), never a panic. A compile-only target
//!   checks the features it stands for
//!   ([`WgpuTarget::compile_only_for`]) in the same way.
//!
//! # Modules of several kernels
//!
//! A WGSL file or SPIR-V module may hold several compute entry points
//! (B6): [`compute_entries`] and [`spirv_compute_entries`] list them, and
//! each is a kernel of its own built from the same text or bytes.
//!
//! # WGSL modules
//!
//! A kernel may `#import` shared WGSL modules (B9), in the syntax Bevy and
//! vello use: [`WgslKernelBuilder::module`] gives it one, naga_oil composes
//! the kernel with the modules it imports, and every module's bytes are in
//! the kernel's id and key. [`wgsl_imports`] reads what a text imports.
//!
//! # SPIR-V the driver reads
//!
//! A SPIR-V module naga's front end cannot read (arrays sized by
//! specialization constants, 8-bit storage, ...) is still a kernel (B7):
//! its constants are written into its bytes, `spirv-val` validates it where
//! it is installed (the compile says where it could only be checked), its
//! workgroup size and buffers are read from its own instructions, and the
//! device builds it from the bytes as they are, through wgpu's
//! [`wgpu::Features::PASSTHROUGH_SHADERS`]; a device without that feature
//! refuses the kernel naming it.
//!
//! # Pipeline caches
//!
//! Where the device has [`wgpu::Features::PIPELINE_CACHE`] (Vulkan),
//! [`WgpuTarget::with_store`] reads the driver's pipeline cache from the
//! store, every pipeline is made through it, and it is written back after
//! each batch that made one: a warm start skips the driver's compiler. The
//! [`pipeline_cache`] module says how it is keyed and what happens to data
//! the driver refuses.
//!
//! # Keys
//!
//! [`WgpuKey`] says what the store keys of artifacts are made of (naga's
//! version and the artifact format; no device, no variant but one) and why
//! they cover everything that changes an artifact (P1).
//!
//! # Files
//!
//! The crate has the files of ARCHITECTURE.md's backend template where
//! wgpu has the role: `kernel`, `options` (the variant: WGSL has
//! `override` constants on the kernel, not compile options), `compiler`,
//! `key`, `diagnostics`, `device`, `module` (the loaded [`WgpuPipeline`]),
//! `launch` ([`WgpuDevice::dispatch`]), `target`, `error`, and
//! [`pipeline_cache`]; and its own `constants` (constants matched by name
//! or number), `features` (the device features a kernel needs), `spirv`
//! (SPIR-V modules) and `entry_points` (a module's compute entries). It has no native layer (wgpu and naga are Rust), no
//! architecture (the adapter and driver key the pipeline cache instead), and
//! `bounded`: naga runs where it cannot take the process down (a panic is
//! the kernel's failure; [`WgpuCompiler::in_workers`] finalizes in compile
//! worker processes under the compile timeout and a memory limit, for
//! shaders from a source that is not trusted).
//!
//! # Without a device
//!
//! [`WgpuDevice::open`] returns [`Error::NoAdapter`] on a machine without a
//! Vulkan loader or driver, never a panic, and
//! [`WgpuTarget::compile_only`] then runs naga alone.

#![warn(missing_docs)]

mod bounded;
mod compiler;
mod constants;
mod device;
mod diagnostics;
mod entry_points;
mod error;
mod features;
mod kernel;
mod key;
mod launch;
mod mode;
mod module;
mod modules;
mod options;
mod passthrough;
pub mod pipeline_cache;
mod spirv;
mod target;
mod timing;

pub use bounded::{DEFAULT_WORKER_MEMORY, MAX_SHADER_BYTES};
pub use compiler::{
    ShaderBinding, ShaderCode, WgpuArtifact, WgpuCompiler, WgpuLowered, WgpuRecipe,
};
pub use device::{DriverIdentity, WgpuDevice};
pub use entry_points::compute_entries;
pub use error::Error;
pub use features::{DEFAULT_COMPILE_ONLY_FEATURES, SHADER_FEATURES, feature_names, parse_features};
pub use kernel::{
    BindingLayout, BufferBinding, BufferKind, Constants, Language, SpirvGenerator, WgslGenerator,
    WgslKernel, WgslKernelBuilder,
};
pub use key::{NAGA_VERSION, WGPU_VERSION, WgpuKey};
pub use mode::AdapterProfile;
pub use module::WgpuPipeline;
pub use modules::{WgslModule, wgsl_imports};
pub use options::WgpuVariant;
pub use pipeline_cache::PipelineCacheState;
pub use spirv::spirv_compute_entries;
pub use target::{WgpuDeviceStep, WgpuMade, WgpuTarget};
pub use timing::WgpuTimer;

/// The wgpu compiler's entry for the compile worker hook
/// (`kiln_engine::worker::run_if_worker`): a program whose loaders use
/// [`WgpuCompiler::in_workers`] (as `kiln warm` does) lists it, so its
/// workers can finalize wgpu kernels.
pub fn worker_entry() -> kiln_engine::worker::WorkerEntry {
    kiln_engine::worker::entry::<WgpuCompiler>()
}

/// wgpu, as kiln-wgpu uses it: build devices and buffers with this one.
pub use wgpu;
