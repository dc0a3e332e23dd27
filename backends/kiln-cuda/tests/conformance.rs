//! The core conformance suite (the L, S and D rules) against the real
//! NVRTC (B4): on a compile-only target everywhere NVRTC is, and on GPU 0
//! where there is one; each storeless, and on a real disk store in a
//! temporary folder, where the store's rules (L5a hits, L5c sharing across
//! the store, L10 switching roots) apply too.

mod support;

use std::sync::Arc;

use kiln_cuda::{Architecture, CudaKernel, CudaOptions, CudaTarget, CudaVariant};
use kiln_engine::KernelId;
use kiln_engine::conformance::{ConformanceSubject, Overlap};
use support::StoreRoots;

/// The CUDA backend as the suite's subject.
struct Cuda {
    on_device: bool,
    architecture: Architecture,
    /// Where each target's store lives, when the targets persist: a fresh
    /// root per target, removed with the subject at the end of the test.
    stores: Option<StoreRoots>,
    /// What the lasting kernels' generators count themselves in (L5).
    overlap: Arc<Overlap>,
}

impl Cuda {
    /// The same subject, whose targets sit on disk stores.
    fn on_store(subject: Result<Self, String>, test: &str) -> Result<Self, String> {
        subject.map(|subject| Self {
            stores: Some(support::store_roots(test)),
            ..subject
        })
    }

    fn compile_only() -> Result<Self, String> {
        match CudaTarget::compile_only(support::ARCHITECTURE) {
            Ok(target) => Ok(Self {
                on_device: false,
                architecture: target.architecture(),
                stores: None,
                overlap: Arc::default(),
            }),
            Err(error) if support::nvrtc_is_required() => {
                panic!("the conformance suite needs NVRTC, and KILN_REQUIRE_NVRTC=1: {error}")
            }
            Err(error) => Err(format!("no NVRTC: {error}")),
        }
    }

    fn on_device() -> Result<Self, String> {
        match CudaTarget::on_device(0) {
            Ok(target) => Ok(Self {
                on_device: true,
                architecture: target.architecture(),
                stores: None,
                overlap: Arc::default(),
            }),
            Err(error) => Err(format!("no CUDA device: {error}")),
        }
    }
}

impl ConformanceSubject for Cuda {
    type Target = CudaTarget;

    fn target(&self) -> CudaTarget {
        let target = if self.on_device {
            CudaTarget::on_device(0).expect("the device opened when the subject was made")
        } else {
            CudaTarget::compile_only(self.architecture)
                .expect("NVRTC opened when the subject was made")
        };
        match &self.stores {
            Some(stores) => target.with_store(stores.fresh()),
            None => target,
        }
    }

    fn switch_store(&self, target: &mut CudaTarget) -> bool {
        // Another root: another store, with its own generation.
        match &self.stores {
            Some(stores) => target.switch_store(stores.fresh()),
            None => false,
        }
    }

    fn variant(&self) -> CudaVariant {
        CudaVariant {
            architecture: self.architecture,
        }
    }

    fn distinct(&self, index: usize) -> Box<CudaKernel> {
        Box::new(support::distinct(index))
    }

    fn lasting(&self, index: usize) -> Box<CudaKernel> {
        Box::new(support::lasting(index, &self.overlap))
    }

    fn most_at_once(&self, _target: &CudaTarget) -> Option<usize> {
        Some(self.overlap.most())
    }

    fn sharing_source(&self, index: usize) -> Box<CudaKernel> {
        Box::new(
            CudaKernel::builder(
                KernelId::named("conformance.sharing").parameter(&index),
                "shared",
            )
            .generator(|_architecture| {
                Ok(
                    "extern \"C\" __global__ void shared(float* y) { y[threadIdx.x] = 1.0f; }\n"
                        .to_owned(),
                )
            }),
        )
    }

    fn failing(&self, index: usize) -> Box<CudaKernel> {
        Box::new(support::broken(index))
    }

    fn panicking(&self, index: usize) -> Option<Box<CudaKernel>> {
        Some(Box::new(
            CudaKernel::builder(
                KernelId::named("conformance.panicking").parameter(&index),
                "k",
            )
            .generator(
                move |_architecture| -> Result<String, kiln_engine::CompileFailure> {
                    panic!("generator {index} panicked")
                },
            ),
        ))
    }

    fn refused(&self, index: usize) -> Option<Box<CudaKernel>> {
        // Code for the next architecture up: its cubin is for another
        // device, and its PTX asks for features this one lacks, so the
        // driver (or a compile-only target, by the same rule) refuses both.
        let newer = if self.architecture.major < 10 {
            Architecture::new(10, 0)
        } else {
            Architecture::new(self.architecture.major + 1, 0)
        };
        Some(Box::new(
            CudaKernel::builder(
                KernelId::named("conformance.refused").parameter(&index),
                "saxpy",
            )
            .options(CudaOptions::default().architecture(newer))
            .source(support::SAXPY),
        ))
    }
}

mod compile_only {
    kiln_engine::conformance_suite!(super::Cuda::compile_only());
}

mod on_device {
    kiln_engine::conformance_suite!(super::Cuda::on_device());
}

mod compile_only_on_store {
    kiln_engine::conformance_suite!(super::Cuda::on_store(
        super::Cuda::compile_only(),
        "compile-only"
    ));
}

mod on_device_on_store {
    kiln_engine::conformance_suite!(super::Cuda::on_store(super::Cuda::on_device(), "on-device"));
}
