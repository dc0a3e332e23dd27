//! Loaded kernels: a compute pipeline and its bind group layouts on a
//! device, or, on a compile-only target, the artifact described without
//! one.

use std::fmt;
use std::sync::Arc;

use crate::compiler::ShaderBinding;

/// A kernel ready to dispatch: cheap to clone (an `Arc`), and its pipeline
/// lives as long as the last clone.
#[derive(Clone)]
pub struct WgpuPipeline(Arc<Loaded>);

pub(crate) struct Loaded {
    pub(crate) label: String,
    pub(crate) entry: String,
    pub(crate) workgroup_size: [u32; 3],
    pub(crate) bindings: Vec<ShaderBinding>,
    pub(crate) on_device: Option<OnDevice>,
}

/// The device objects of a loaded kernel.
#[derive(Debug)]
pub(crate) struct OnDevice {
    pub(crate) pipeline: wgpu::ComputePipeline,
    /// One per bind group the pipeline has, group 0 first.
    pub(crate) bind_group_layouts: Vec<wgpu::BindGroupLayout>,
}

impl WgpuPipeline {
    pub(crate) fn new(loaded: Loaded) -> Self {
        Self(Arc::new(loaded))
    }

    /// The label of the shader module and pipeline.
    pub fn label(&self) -> &str {
        &self.0.label
    }

    /// The entry point.
    pub fn entry(&self) -> &str {
        &self.0.entry
    }

    /// The workgroup size, with the kernel's constants applied.
    pub fn workgroup_size(&self) -> [u32; 3] {
        self.0.workgroup_size
    }

    /// The buffers the entry point uses, by group and binding.
    pub fn bindings(&self) -> &[ShaderBinding] {
        &self.0.bindings
    }

    /// The compute pipeline; `None` for a compile-only target's kernel.
    pub fn pipeline(&self) -> Option<&wgpu::ComputePipeline> {
        self.0.on_device.as_ref().map(|device| &device.pipeline)
    }

    /// The layout of bind group `group`, to make bind groups with.
    ///
    /// # Panics
    ///
    /// For a compile-only target's kernel, or a group the pipeline does not
    /// have: both are the caller's mistake, seen at once.
    pub fn bind_group_layout(&self, group: u32) -> wgpu::BindGroupLayout {
        let device = self
            .0
            .on_device
            .as_ref()
            .expect("a pipeline loaded on a device, not a compile-only description");
        device
            .bind_group_layouts
            .get(group as usize)
            .unwrap_or_else(|| {
                panic!(
                    "kernel `{}` has {} bind groups, not group {group}",
                    self.0.entry,
                    device.bind_group_layouts.len()
                )
            })
            .clone()
    }

    /// Whether the kernel is on a device (it is not on a compile-only
    /// target).
    pub fn is_on_device(&self) -> bool {
        self.0.on_device.is_some()
    }
}

impl fmt::Debug for WgpuPipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WgpuPipeline")
            .field("label", &self.0.label)
            .field("entry", &self.0.entry)
            .field("workgroup_size", &self.0.workgroup_size)
            .field("on_device", &self.is_on_device())
            .finish()
    }
}
