//! Launching a loaded kernel: its buffers bound into bind groups by
//! `(group, binding)`, and one dispatch over a grid of workgroups.
//!
//! wgpu has no kernel arguments beside its bind groups, so a launch is a
//! [`WgpuPipeline`], the buffers it binds and the workgroup count; the
//! device records and submits it inside an error scope, so that a binding
//! the layout does not take is an error value, not a panic.

use crate::device::WgpuDevice;
use crate::error::Error;
use crate::module::WgpuPipeline;

impl WgpuDevice {
    /// Dispatches `pipeline` over `workgroups`, with `buffers` bound as
    /// `(group, binding, buffer)`, and waits for nothing: the next
    /// [`read`](Self::read) waits for it.
    ///
    /// # Errors
    ///
    /// [`Error::CompileOnly`] for a pipeline without a device,
    /// [`Error::NoSuchGroup`] for a buffer in a group the pipeline does not
    /// have, or wgpu's refusal of the bind groups or the dispatch.
    pub fn dispatch(
        &self,
        pipeline: &WgpuPipeline,
        buffers: &[(u32, u32, &wgpu::Buffer)],
        workgroups: [u32; 3],
    ) -> Result<(), Error> {
        let Some(compute) = pipeline.pipeline() else {
            return Err(Error::CompileOnly {
                entry: pipeline.entry().to_owned(),
            });
        };
        let groups = buffers
            .iter()
            .map(|(group, _, _)| *group + 1)
            .max()
            .unwrap_or(0);
        let layouts = (0..groups)
            .map(|group| pipeline.bind_group_layout(group))
            .collect::<Result<Vec<_>, Error>>()?;
        let ((), error) = self.capture(|| {
            let bind_groups: Vec<wgpu::BindGroup> = layouts
                .iter()
                .zip(0u32..)
                .map(|(layout, group)| {
                    let entries: Vec<wgpu::BindGroupEntry<'_>> = buffers
                        .iter()
                        .filter(|(of, _, _)| *of == group)
                        .map(|(_, binding, buffer)| wgpu::BindGroupEntry {
                            binding: *binding,
                            resource: buffer.as_entire_binding(),
                        })
                        .collect();
                    self.device().create_bind_group(&wgpu::BindGroupDescriptor {
                        label: Some(pipeline.label()),
                        layout,
                        entries: &entries,
                    })
                })
                .collect();
            let mut encoder =
                self.device()
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                        label: Some(pipeline.label()),
                    });
            {
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some(pipeline.label()),
                    timestamp_writes: None,
                });
                pass.set_pipeline(compute);
                for (group, bind_group) in bind_groups.iter().enumerate() {
                    pass.set_bind_group(group as u32, bind_group, &[]);
                }
                pass.dispatch_workgroups(workgroups[0], workgroups[1], workgroups[2]);
            }
            self.queue().submit([encoder.finish()]);
        });
        match error {
            Some(error) => Err(Error::Device {
                operation: "dispatching a kernel",
                detail: error.to_string(),
            }),
            None => Ok(()),
        }
    }
}
