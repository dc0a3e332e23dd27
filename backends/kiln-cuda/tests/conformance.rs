//! The core conformance suite (the L, S and D rules) against the real
//! NVRTC (B4): on a compile-only target everywhere NVRTC is, and on GPU 0
//! where there is one.

mod support;

use kiln_core::KernelId;
use kiln_core::conformance::ConformanceSubject;
use kiln_cuda::{Architecture, CudaKernel, CudaOptions, CudaTarget, CudaVariant};

/// The CUDA backend as the suite's subject.
struct Cuda {
    on_device: bool,
    architecture: Architecture,
}

impl Cuda {
    fn compile_only() -> Result<Self, String> {
        match CudaTarget::compile_only(support::ARCHITECTURE) {
            Ok(target) => Ok(Self {
                on_device: false,
                architecture: target.architecture(),
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
            }),
            Err(error) => Err(format!("no CUDA device: {error}")),
        }
    }
}

impl ConformanceSubject for Cuda {
    type Target = CudaTarget;

    fn target(&self) -> CudaTarget {
        if self.on_device {
            CudaTarget::on_device(0).expect("the device opened when the subject was made")
        } else {
            CudaTarget::compile_only(self.architecture)
                .expect("NVRTC opened when the subject was made")
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
                move |_architecture| -> Result<String, kiln_core::CompileFailure> {
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
    kiln_core::conformance_suite!(super::Cuda::compile_only());
}

mod on_device {
    kiln_core::conformance_suite!(super::Cuda::on_device());
}
