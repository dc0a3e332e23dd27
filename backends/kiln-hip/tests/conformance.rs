//! The core conformance suite (L, S and D rules) against real hipRTC,
//! through the compile-only target (B4): every kernel is compiled for
//! gfx90a by hipRTC, and every load checks the code object as a device
//! would. It runs storeless, and on a real disk store in a temporary folder,
//! where the store's rules (L5a hits, L5c sharing across the store, L10
//! switching roots) apply too.

mod support;

use std::sync::Arc;

use kiln_engine::KernelId;
use kiln_engine::conformance::{ConformanceSubject, Overlap};
use kiln_hip::{Architecture, HipCompiler, HipKernel, HipTarget, HipVariant};
use support::StoreRoots;

struct Hip {
    compiler: HipCompiler,
    /// Where each target's store lives, when the targets persist: a fresh
    /// root per target, removed with the subject at the end of the test.
    stores: Option<StoreRoots>,
    /// What the lasting kernels' generators count themselves in (L5).
    overlap: Arc<Overlap>,
}

fn subject() -> Result<Hip, String> {
    HipCompiler::new()
        .map(|compiler| Hip {
            compiler,
            stores: None,
            overlap: Arc::default(),
        })
        .map_err(|error| error.to_string())
}

/// The subject whose targets sit on disk stores.
fn subject_on_store() -> Result<Hip, String> {
    subject().map(|subject| Hip {
        stores: Some(support::store_roots("conformance")),
        ..subject
    })
}

fn gfx90a() -> Architecture {
    Architecture::new("gfx90a").expect("gfx90a is a valid name")
}

/// One kernel body every sharing kernel lowers to.
const SHARED: &str = r#"extern "C" __global__ void shared_scale(float* x) {
    x[threadIdx.x] *= 3.0f;
}
"#;

impl ConformanceSubject for Hip {
    type Target = HipTarget;

    fn target(&self) -> HipTarget {
        let target = support::compile_only(&self.compiler, "gfx90a");
        match &self.stores {
            Some(stores) => target.with_store(stores.fresh()),
            None => target,
        }
    }

    fn variant(&self) -> HipVariant {
        HipVariant::new(gfx90a())
    }

    fn switch_store(&self, target: &mut HipTarget) -> bool {
        // Another root: another store, with its own generation.
        match &self.stores {
            Some(stores) => target.switch_store(stores.fresh()),
            None => false,
        }
    }

    fn distinct(&self, index: usize) -> Box<HipKernel> {
        Box::new(
            HipKernel::builder(
                KernelId::named("conformance.distinct"),
                format!("scale_{index}"),
            )
            .source(format!(
                "extern \"C\" __global__ void scale_{index}(float* x) {{\n    x[threadIdx.x] *= {index}.0f;\n}}\n"
            )),
        )
    }

    fn lasting(&self, index: usize) -> Box<HipKernel> {
        // A generator that takes 25 ms, as user code that builds a large
        // kernel does, counted in `overlap`: kernels lowered at once are
        // seen to overlap (L5).
        let overlap = Arc::clone(&self.overlap);
        Box::new(
            HipKernel::builder(
                KernelId::named("conformance.lasting").parameter(&index),
                "lasting",
            )
            .generator(move |_architecture| {
                overlap.during(|| std::thread::sleep(std::time::Duration::from_millis(25)));
                Ok(format!(
                    "extern \"C\" __global__ void lasting(float* x) {{\n    x[threadIdx.x] += {index}.5f;\n}}\n"
                ))
            }),
        )
    }

    fn most_at_once(&self, _target: &HipTarget) -> Option<usize> {
        Some(self.overlap.most())
    }

    fn sharing_source(&self, index: usize) -> Box<HipKernel> {
        Box::new(
            HipKernel::builder(
                KernelId::named("conformance.sharing").parameter(&index),
                "shared_scale",
            )
            .generator(|_architecture| Ok(SHARED.to_owned())),
        )
    }

    fn failing(&self, index: usize) -> Box<HipKernel> {
        // Line 2 lacks a semicolon, and line 3 names nothing declared: a
        // located first error and a cascade.
        Box::new(
            HipKernel::builder(
                KernelId::named("conformance.failing").parameter(&index),
                "broken",
            )
            .generator(|_architecture| {
                Ok("extern \"C\" __global__ void broken(float* x) {\n    x[0] = 1.0f\n    undeclared_name(x);\n}\n".to_owned())
            }),
        )
    }

    fn panicking(&self, index: usize) -> Option<Box<HipKernel>> {
        Some(Box::new(
            HipKernel::builder(
                KernelId::named("conformance.panicking").parameter(&index),
                "never",
            )
            .generator(|_architecture| panic!("the generator panicked on purpose")),
        ))
    }

    // No `refused` kernel: a code object hipRTC makes is one the
    // compile-only target accepts, and an entry point that is not a kernel
    // (a device function) already fails to compile, so L9 has no subject.
}

mod storeless {
    kiln_engine::conformance_suite!(super::subject());
}

mod on_store {
    kiln_engine::conformance_suite!(super::subject_on_store());
}
