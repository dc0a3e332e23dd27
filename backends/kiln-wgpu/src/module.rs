//! Loaded kernels: a compute pipeline and its bind group layouts on a
//! device, or, on a compile-only target, the artifact described without
//! one.

use std::fmt;
use std::sync::Arc;

use kiln_engine::{ArtifactReport, Reported, ResourceUsage};

use crate::compiler::ShaderBinding;
use crate::error::Error;

/// A kernel ready to dispatch: cheap to clone (an `Arc`), and its pipeline
/// lives as long as the last clone.
#[derive(Clone)]
pub struct WgpuPipeline(Arc<Loaded>);

pub(crate) struct Loaded {
    pub(crate) label: String,
    pub(crate) entry: String,
    pub(crate) workgroup_size: [u32; 3],
    pub(crate) bindings: Vec<ShaderBinding>,
    /// The artifact's report (D4).
    pub(crate) report: ArtifactReport,
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

    /// What the kernel uses (D4): workgroup size, bindings and workgroup
    /// memory, the same for a kernel read from a store as for one compiled
    /// here.
    pub fn resources(&self) -> &ResourceUsage {
        &self.0.report.resources
    }

    /// The compute pipeline, to set in a compute pass of the program's own
    /// command encoder (B5); `None` for a compile-only target's kernel.
    ///
    /// ```no_run
    /// use kiln_engine::{ArtifactId, Kernel, KernelId, KernelLoader};
    /// use kiln_wgpu::{WgpuDevice, WgpuTarget, WgpuVariant, WgslKernel, wgpu};
    ///
    /// let device = WgpuDevice::open()?;
    /// let mut loader = KernelLoader::new(WgpuTarget::on_device(device.clone()));
    /// let double = WgslKernel::builder(KernelId::named("example.double"), "main").source(
    ///     "@group(0) @binding(0) var<storage, read_write> data: array<f32>;
    ///      @compute @workgroup_size(64)
    ///      fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    ///          if id.x < arrayLength(&data) { data[id.x] = data[id.x] * 2.0; }
    ///      }",
    /// );
    /// let kernel = loader.load(&double, &ArtifactId::new(double.id(), WgpuVariant))?;
    ///
    /// // The program's own buffer, bind group, encoder and submission.
    /// let data = device.storage_buffer("data", &[0u8; 256 * 4])?;
    /// let bind_group = device.device().create_bind_group(&wgpu::BindGroupDescriptor {
    ///     label: Some("data"),
    ///     layout: kernel.bind_group_layout(0)?,
    ///     entries: &[wgpu::BindGroupEntry { binding: 0, resource: data.as_entire_binding() }],
    /// });
    /// let mut encoder = device.device().create_command_encoder(&Default::default());
    /// {
    ///     let mut pass = encoder.begin_compute_pass(&Default::default());
    ///     pass.set_pipeline(kernel.pipeline().expect("loaded on a device"));
    ///     pass.set_bind_group(0, &bind_group, &[]);
    ///     pass.dispatch_workgroups(4, 1, 1);
    /// }
    /// device.queue().submit([encoder.finish()]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pipeline(&self) -> Option<&wgpu::ComputePipeline> {
        self.0.on_device.as_ref().map(|device| &device.pipeline)
    }

    /// The layouts of the pipeline's bind groups, group 0 first, to make
    /// the program's own bind groups with; empty for a compile-only
    /// target's kernel.
    pub fn bind_group_layouts(&self) -> &[wgpu::BindGroupLayout] {
        self.0
            .on_device
            .as_ref()
            .map_or(&[], |device| device.bind_group_layouts.as_slice())
    }

    /// The layout of bind group `group`, to make bind groups with (see the
    /// example on [`pipeline`](Self::pipeline)).
    ///
    /// # Errors
    ///
    /// [`Error::CompileOnly`] for a compile-only target's kernel, and
    /// [`Error::NoSuchGroup`] for a group the pipeline does not have.
    pub fn bind_group_layout(&self, group: u32) -> Result<&wgpu::BindGroupLayout, Error> {
        let device = self
            .0
            .on_device
            .as_ref()
            .ok_or_else(|| Error::CompileOnly {
                entry: self.0.entry.clone(),
            })?;
        device
            .bind_group_layouts
            .get(group as usize)
            .ok_or_else(|| Error::NoSuchGroup {
                entry: self.0.entry.clone(),
                group,
                groups: device.bind_group_layouts.len(),
            })
    }

    /// Whether the kernel is on a device (it is not on a compile-only
    /// target).
    pub fn is_on_device(&self) -> bool {
        self.0.on_device.is_some()
    }
}

/// The artifact's report (D4); see [`WgpuPipeline::resources`].
impl Reported for WgpuPipeline {
    fn report(&self) -> &ArtifactReport {
        &self.0.report
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
