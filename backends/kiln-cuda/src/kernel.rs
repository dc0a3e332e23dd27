//! CUDA kernels: a user generator of CUDA C++ source, the entry point to
//! launch, the options to compile with and the headers the source includes.

use std::fmt;
use std::sync::Arc;

pub use kiln_cxx::{EntryPoint, Header, IncludeSearch, SourceGenerator};
use kiln_cxx::{IdLayout, KernelParts, KernelPartsBuilder};
use kiln_engine::{KernelId, KernelIdBuilder};

use crate::architecture::Architecture;
use crate::options::CudaOptions;

/// A CUDA kernel: cheap to clone, its id computed once when it is built.
///
/// ```
/// use kiln_engine::KernelId;
/// use kiln_cuda::{CudaKernel, CudaOptions};
///
/// // A fixed source: its text is part of the id.
/// let saxpy = CudaKernel::builder(KernelId::named("example.saxpy"), "saxpy").source(
///     r#"extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
///            int i = blockIdx.x * blockDim.x + threadIdx.x;
///            if (i < n) y[i] = a * x[i] + y[i];
///        }"#,
/// );
///
/// // A generated source: the id is made of the parameters the generator
/// // uses, and the generator runs only when kiln compiles the kernel.
/// let block = 256u32;
/// let scale = CudaKernel::builder(
///     KernelId::named("example.scale").parameter(&block),
///     format!("scale<float, {block}>"),
/// )
/// .options(CudaOptions::default().fast_math(true))
/// .generator(move |_architecture| {
///     Ok(format!(
///         "template <typename T, int B> __global__ void scale(T* y, T a) {{\n\
///              y[blockIdx.x * B + threadIdx.x] *= a;\n\
///          }}\n\
///          // block {block}\n"
///     ))
/// });
/// assert_ne!(kiln_engine::Kernel::id(&saxpy), kiln_engine::Kernel::id(&scale));
/// ```
#[derive(Clone)]
pub struct CudaKernel {
    id: KernelId,
    program_name: String,
    options: CudaOptions,
    parts: KernelParts<Architecture>,
}

impl CudaKernel {
    /// Starts a kernel whose id is `id` (the family name and the parameters
    /// the source depends on) and which launches `entry`.
    pub fn builder(id: KernelIdBuilder, entry: impl Into<EntryPoint>) -> CudaKernelBuilder {
        CudaKernelBuilder {
            id,
            program_name: None,
            options: CudaOptions::default(),
            parts: KernelPartsBuilder::new(entry.into()),
        }
    }

    /// The name diagnostics give the source (`saxpy.cu`).
    pub fn program_name(&self) -> &str {
        &self.program_name
    }

    /// The compile options.
    pub fn options(&self) -> &CudaOptions {
        &self.options
    }
}

kiln_cxx::kernel_methods!(CudaKernel, Architecture);

impl fmt::Debug for CudaKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaKernel")
            .field("id", &self.id)
            .field("program_name", &self.program_name)
            .field("options", &self.options)
            .field("parts", &self.parts)
            .finish()
    }
}

/// Builds a [`CudaKernel`]; see [`CudaKernel::builder`].
#[must_use = "a builder makes no kernel until `source` or `generator` is called"]
pub struct CudaKernelBuilder {
    id: KernelIdBuilder,
    program_name: Option<String>,
    options: CudaOptions,
    parts: KernelPartsBuilder,
}

impl CudaKernelBuilder {
    kiln_cxx::kernel_builder_methods!();

    /// Names the source in diagnostics; the default is the entry point's
    /// name with `.cu`.
    pub fn program_name(mut self, name: impl Into<String>) -> Self {
        self.program_name = Some(name.into());
        self
    }

    /// Compiles with `options`.
    pub fn options(mut self, options: CudaOptions) -> Self {
        self.options = options;
        self
    }

    /// Finishes the kernel with a fixed source, whose text joins its id.
    ///
    /// kiln resolves the text's includes itself (P13): every header they
    /// reach, searched as [`source_folder`](Self::source_folder) and
    /// [`include_folder`](Self::include_folder) say and then in the
    /// toolkit's folders
    /// ([`toolkit::include_folder`](crate::toolkit::include_folder)), is
    /// read here, handed to NVRTC in memory and folded into the id by its
    /// text, so an edited header compiles again and the working directory
    /// changes nothing. An include that cannot be resolved makes a kernel
    /// that fails to lower, saying which include and where it looked.
    pub fn source(mut self, source: impl Into<String>) -> CudaKernel {
        crate::toolkit::prepare(self.parts.search_mut());
        let (id, source, include_failure) =
            self.parts
                .fix(self.id, source.into(), self.program_name.as_deref());
        Self { id, ..self }.finish(Arc::new(source), include_failure)
    }

    /// Finishes the kernel with a generator, which kiln runs when it
    /// compiles the kernel. The id must cover every parameter the generator
    /// reads (see [`SourceGenerator`]'s contract).
    pub fn generator(self, generator: impl SourceGenerator<Architecture> + 'static) -> CudaKernel {
        self.finish(Arc::new(generator), None)
    }

    fn finish(
        self,
        generator: Arc<dyn SourceGenerator<Architecture>>,
        include_failure: Option<String>,
    ) -> CudaKernel {
        let program_name = self.program_name.unwrap_or_else(|| {
            let base: String = self
                .parts
                .entry()
                .expression()
                .chars()
                .take_while(|character| character.is_alphanumeric() || *character == '_')
                .collect();
            format!("{}.cu", if base.is_empty() { "kernel" } else { &base })
        });
        let id = self.parts.identify(
            self.id,
            "kiln-cuda",
            &self.options,
            IdLayout::ProgramName(&program_name),
        );
        CudaKernel {
            id: id.build(),
            program_name,
            options: self.options,
            parts: self.parts.finish(generator, include_failure),
        }
    }
}
