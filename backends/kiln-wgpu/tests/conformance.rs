//! The core conformance suite (the L, S, D and K rules) against real naga
//! (B4): compile-only everywhere, and on the Vulkan adapter where there is
//! one (lavapipe in CI, the NVIDIA driver on the H200), for WGSL kernels
//! and for SPIR-V kernels born in GLSL (kiln-spirv-kernels). Each keeps its
//! artifacts in a fresh disk store per target.

mod support;

use std::sync::Arc;

use kiln_engine::KernelId;
use kiln_engine::conformance::{ConformanceSubject, Overlap};
use kiln_wgpu::{WgpuDevice, WgpuTarget, WgpuVariant, WgslKernel};

/// The wgpu backend as the suite's subject.
struct Wgpu {
    device: Option<WgpuDevice>,
    /// What the lasting kernels' generators count themselves in (L5).
    overlap: Arc<Overlap>,
}

impl Wgpu {
    fn compile_only() -> Result<Self, String> {
        Ok(Self {
            device: None,
            overlap: Arc::default(),
        })
    }

    fn on_device() -> Result<Self, String> {
        support::device_or_reason().map(|device| Self {
            device: Some(device),
            overlap: Arc::default(),
        })
    }
}

impl ConformanceSubject for Wgpu {
    type Target = WgpuTarget;

    fn target(&self) -> WgpuTarget {
        let target = match &self.device {
            Some(device) => WgpuTarget::on_device(device.clone()),
            None => WgpuTarget::compile_only(),
        };
        target.with_store(support::fresh_store("conformance"))
    }

    fn variant(&self) -> WgpuVariant {
        WgpuVariant
    }

    fn distinct(&self, index: usize) -> Box<WgslKernel> {
        Box::new(support::distinct(index))
    }

    fn lasting(&self, index: usize) -> Box<WgslKernel> {
        Box::new(support::lasting(index, &self.overlap))
    }

    fn most_at_once(&self, _target: &WgpuTarget) -> Option<usize> {
        Some(self.overlap.most())
    }

    fn sharing_source(&self, index: usize) -> Box<WgslKernel> {
        Box::new(
            WgslKernel::builder(
                KernelId::named("conformance.sharing").parameter(&index),
                "main",
            )
            .generator(|| {
                Ok(
                    "@group(0) @binding(0) var<storage, read_write> data: array<f32>;\n\
                    @compute @workgroup_size(32)\n\
                    fn main(@builtin(global_invocation_id) id: vec3<u32>) { data[id.x] = 1.0; }\n"
                        .to_owned(),
                )
            }),
        )
    }

    fn failing(&self, index: usize) -> Box<WgslKernel> {
        Box::new(support::broken(index))
    }

    fn panicking(&self, index: usize) -> Option<Box<WgslKernel>> {
        Some(Box::new(
            WgslKernel::builder(
                KernelId::named("conformance.panicking").parameter(&index),
                "main",
            )
            .generator(move || -> Result<String, kiln_engine::CompileFailure> {
                panic!("generator {index} panicked")
            }),
        ))
    }

    fn refused(&self, index: usize) -> Option<Box<WgslKernel>> {
        // Valid WGSL on every device, and a workgroup of a million
        // invocations, which no device's limits allow: naga takes it, the
        // device refuses the pipeline. A compile-only target has no device
        // to refuse it.
        self.device.as_ref()?;
        Some(Box::new(
            WgslKernel::builder(
                KernelId::named("conformance.refused").parameter(&index),
                "main",
            )
            .source("@compute @workgroup_size(1024, 1024, 1) fn main() {}"),
        ))
    }

    fn switch_store(&self, target: &mut WgpuTarget) -> bool {
        let current = std::mem::replace(target, WgpuTarget::compile_only());
        *target = current.with_store(support::fresh_store("conformance-switched"));
        true
    }
}

mod compile_only {
    kiln_engine::conformance_suite!(super::Wgpu::compile_only());
}

mod on_device {
    kiln_engine::conformance_suite!(super::Wgpu::on_device());
}

/// The wgpu backend as the suite's subject, on SPIR-V kernels: the same
/// target, kernels made of the GLSL-born modules of kiln-spirv-kernels.
struct Spirv {
    device: Option<WgpuDevice>,
    /// What the lasting kernels' generators count themselves in (L5).
    overlap: Arc<Overlap>,
    scale_bias: &'static [u8],
    huge_workgroup: &'static [u8],
}

impl Spirv {
    fn modules(device: Option<WgpuDevice>) -> Result<Self, String> {
        Ok(Self {
            device,
            overlap: Arc::default(),
            scale_bias: kiln_spirv_kernels::module("scale_bias")?,
            huge_workgroup: kiln_spirv_kernels::module("huge_workgroup")?,
        })
    }

    fn compile_only() -> Result<Self, String> {
        Self::modules(None)
    }

    fn on_device() -> Result<Self, String> {
        Self::modules(Some(support::device_or_reason()?))
    }
}

impl ConformanceSubject for Spirv {
    type Target = WgpuTarget;

    fn target(&self) -> WgpuTarget {
        Wgpu {
            device: self.device.clone(),
            overlap: Arc::clone(&self.overlap),
        }
        .target()
    }

    fn variant(&self) -> WgpuVariant {
        WgpuVariant
    }

    fn distinct(&self, index: usize) -> Box<WgslKernel> {
        // One module, another specialization per index: another text.
        Box::new(
            WgslKernel::builder(
                KernelId::named("conformance.spirv.distinct").parameter(&index),
                "main",
            )
            .constant("FACTOR", index as f64)
            .spirv(self.scale_bias),
        )
    }

    // L5 counts the workers' overlap, which is the loader's and not the
    // language's: the lasting kernels are the WGSL subject's.
    fn lasting(&self, index: usize) -> Box<WgslKernel> {
        Box::new(support::lasting(index, &self.overlap))
    }

    fn most_at_once(&self, _target: &WgpuTarget) -> Option<usize> {
        Some(self.overlap.most())
    }

    fn sharing_source(&self, index: usize) -> Box<WgslKernel> {
        let bytes = self.scale_bias;
        Box::new(
            WgslKernel::builder(
                KernelId::named("conformance.spirv.sharing").parameter(&index),
                "main",
            )
            .spirv_generator(move || Ok(bytes.to_vec())),
        )
    }

    fn failing(&self, index: usize) -> Box<WgslKernel> {
        // The module cut short: naga's SPIR-V front end refuses it.
        let bytes = self.scale_bias;
        Box::new(
            WgslKernel::builder(
                KernelId::named("conformance.spirv.failing").parameter(&index),
                "main",
            )
            .spirv_generator(move || Ok(bytes[..bytes.len() - 12].to_vec())),
        )
    }

    fn failures_have_lines(&self) -> bool {
        // A module is words, not lines: its failures name the file and the
        // entry point instead.
        false
    }

    fn panicking(&self, index: usize) -> Option<Box<WgslKernel>> {
        Some(Box::new(
            WgslKernel::builder(
                KernelId::named("conformance.spirv.panicking").parameter(&index),
                "main",
            )
            .spirv_generator(
                move || -> Result<Vec<u8>, kiln_engine::CompileFailure> {
                    panic!("SPIR-V generator {index} panicked")
                },
            ),
        ))
    }

    fn refused(&self, index: usize) -> Option<Box<WgslKernel>> {
        // A 1024 x 1024 workgroup: valid SPIR-V, past every device's limits.
        self.device.as_ref()?;
        Some(Box::new(
            WgslKernel::builder(
                KernelId::named("conformance.spirv.refused").parameter(&index),
                "main",
            )
            .spirv(self.huge_workgroup),
        ))
    }

    fn switch_store(&self, target: &mut WgpuTarget) -> bool {
        let current = std::mem::replace(target, WgpuTarget::compile_only());
        *target = current.with_store(support::fresh_store("conformance-spirv-switched"));
        true
    }
}

mod spirv_compile_only {
    kiln_engine::conformance_suite!(super::Spirv::compile_only());
}

mod spirv_on_device {
    kiln_engine::conformance_suite!(super::Spirv::on_device());
}
