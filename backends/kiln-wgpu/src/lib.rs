//! kiln's wgpu backend: WGSL through naga to compute pipelines, with the
//! driver's pipeline cache kept in kiln's store (rule B3, docs/BEHAVIOUR.md).
//!
//! # The way of a kernel
//!
//! - **Lower** runs the [`WgslKernel`]'s generator (user code) on a worker
//!   thread and records how its pipeline is built: the `@compute` entry
//!   point, the values of its pipeline-overridable constants and its bind
//!   group layout, automatic or explicit.
//! - **Finalize** parses and validates the WGSL with naga, checks that the
//!   entry point is a `@compute` function, applies the constants (a name the
//!   shader does not declare, or a value its type cannot hold, fails here),
//!   and checks an explicit layout against the buffers the entry point
//!   uses. naga's errors become kiln's diagnostics with line and column.
//!   The artifact keeps the validated source with the workgroup size and
//!   bindings naga found, so loading needs no second look at the source.
//!   It depends on no device: a store filled without one serves every
//!   device later.
//! - **Load** makes the shader module, the layouts and the compute pipeline
//!   on the user's `wgpu::Device`, inside error scopes: a pipeline the
//!   device rejects is that kernel's refusal (L9), never a panic.
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
//! [`pipeline_cache`]. It has no native layer (wgpu and naga are Rust), no
//! architecture (the adapter and driver key the pipeline cache instead) and
//! no worker processes (naga validates in microseconds and cannot crash the
//! process).
//!
//! # Without a device
//!
//! [`WgpuDevice::open`] returns [`Error::NoAdapter`] on a machine without a
//! Vulkan loader or driver, never a panic, and
//! [`WgpuTarget::compile_only`] then runs naga alone.

#![warn(missing_docs)]

mod compiler;
mod device;
mod diagnostics;
mod error;
mod kernel;
mod key;
mod launch;
mod module;
mod options;
pub mod pipeline_cache;
mod target;
mod timing;

pub use compiler::{
    NAGA_VERSION, ShaderBinding, WGPU_VERSION, WgpuArtifact, WgpuCompiler, WgpuLowered,
};
pub use device::{DriverIdentity, WgpuDevice};
pub use error::Error;
pub use kernel::{
    BindingLayout, BufferBinding, BufferKind, Constants, WgslGenerator, WgslKernel,
    WgslKernelBuilder,
};
pub use key::WgpuKey;
pub use module::WgpuPipeline;
pub use options::WgpuVariant;
pub use pipeline_cache::PipelineCacheState;
pub use target::WgpuTarget;
pub use timing::WgpuTimer;

/// wgpu, as kiln-wgpu uses it: build devices and buffers with this one.
pub use wgpu;
