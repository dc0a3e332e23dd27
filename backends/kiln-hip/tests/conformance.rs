//! The core conformance suite (L, S and D rules) against real hipRTC,
//! through the compile-only target (B4): every kernel is compiled for
//! gfx90a by hipRTC, and every load checks the code object as a device
//! would.

use kiln_core::KernelId;
use kiln_core::conformance::ConformanceSubject;
use kiln_hip::{GfxArch, HipCompileOnlyTarget, HipCompiler, HipKernel, HipSource, HipVariant};

struct Hip {
    compiler: HipCompiler,
}

fn subject() -> Result<Hip, String> {
    HipCompiler::new()
        .map(|compiler| Hip { compiler })
        .map_err(|error| error.to_string())
}

/// One kernel body every sharing kernel lowers to.
const SHARED: &str = r#"extern "C" __global__ void shared_scale(float* x) {
    x[threadIdx.x] *= 3.0f;
}
"#;

impl ConformanceSubject for Hip {
    type Target = HipCompileOnlyTarget;

    fn target(&self) -> HipCompileOnlyTarget {
        HipCompileOnlyTarget::new(self.compiler.clone())
    }

    fn variant(&self) -> HipVariant {
        HipVariant::new(GfxArch::new("gfx90a").expect("gfx90a is a valid name"))
    }

    fn distinct(&self, index: usize) -> Box<HipKernel> {
        Box::new(HipKernel::from_text(
            "conformance.distinct",
            format!("scale_{index}"),
            format!(
                "extern \"C\" __global__ void scale_{index}(float* x) {{\n    x[threadIdx.x] *= {index}.0f;\n}}\n"
            ),
        ))
    }

    fn sharing_source(&self, index: usize) -> Box<HipKernel> {
        Box::new(HipKernel::new(
            KernelId::named("conformance.sharing")
                .parameter(&index)
                .build(),
            "shared_scale",
            HipSource::generated(|_variant| Ok(SHARED.to_owned())),
        ))
    }

    fn failing(&self, index: usize) -> Box<HipKernel> {
        // Line 2 lacks a semicolon, and line 3 names nothing declared: a
        // located first error and a cascade.
        Box::new(HipKernel::new(
            KernelId::named("conformance.failing")
                .parameter(&index)
                .build(),
            "broken",
            HipSource::generated(|_variant| {
                Ok("extern \"C\" __global__ void broken(float* x) {\n    x[0] = 1.0f\n    undeclared_name(x);\n}\n".to_owned())
            }),
        ))
    }

    fn panicking(&self, index: usize) -> Option<Box<HipKernel>> {
        Some(Box::new(HipKernel::new(
            KernelId::named("conformance.panicking")
                .parameter(&index)
                .build(),
            "never",
            HipSource::generated(|_variant| panic!("the generator panicked on purpose")),
        )))
    }

    // No `refused` kernel: a code object hipRTC makes is one the
    // compile-only target accepts, and an entry point that is not a kernel
    // (a device function) already fails to compile, so L9 has no subject.
}

kiln_core::conformance_suite!(subject());
