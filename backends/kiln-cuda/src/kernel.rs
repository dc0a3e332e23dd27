//! CUDA kernels: a user generator of CUDA C++ source, the entry point to
//! launch, the options to compile with and the headers the source includes.

use std::fmt;
use std::sync::Arc;

use kiln_core::{CompileFailure, Kernel, KernelId, KernelIdBuilder};
use kiln_cxx::FixedSource;
pub use kiln_cxx::{EntryPoint, Header, SourceGenerator};

use crate::architecture::Architecture;
use crate::options::CudaOptions;

/// A CUDA kernel: cheap to clone, its id computed once when it is built.
///
/// ```
/// use kiln_core::KernelId;
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
/// assert_ne!(kiln_core::Kernel::id(&saxpy), kiln_core::Kernel::id(&scale));
/// ```
#[derive(Clone)]
pub struct CudaKernel {
    id: KernelId,
    program_name: String,
    entry: EntryPoint,
    options: CudaOptions,
    headers: Vec<Header>,
    generator: Arc<dyn SourceGenerator<Architecture>>,
}

impl CudaKernel {
    /// Starts a kernel whose id is `id` (the family name and the parameters
    /// the source depends on) and which launches `entry`.
    pub fn builder(id: KernelIdBuilder, entry: impl Into<EntryPoint>) -> CudaKernelBuilder {
        CudaKernelBuilder {
            id,
            program_name: None,
            entry: entry.into(),
            options: CudaOptions::default(),
            headers: Vec::new(),
        }
    }

    /// The name diagnostics give the source (`saxpy.cu`).
    pub fn program_name(&self) -> &str {
        &self.program_name
    }

    /// The entry point.
    pub fn entry(&self) -> &EntryPoint {
        &self.entry
    }

    /// The compile options.
    pub fn options(&self) -> &CudaOptions {
        &self.options
    }

    /// The headers the source may include.
    pub fn headers(&self) -> &[Header] {
        &self.headers
    }

    /// Runs the generator.
    ///
    /// # Errors
    ///
    /// What the generator reported.
    pub fn generate(&self, architecture: Architecture) -> Result<String, CompileFailure> {
        self.generator.generate(architecture)
    }
}

impl Kernel for CudaKernel {
    fn id(&self) -> KernelId {
        self.id.clone()
    }

    /// The length of its fixed source and headers: the longest compile
    /// first (a generated source counts its headers only).
    fn cost_hint(&self) -> u64 {
        kiln_cxx::source_cost(self.generator.as_ref(), &self.headers)
    }
}

impl fmt::Debug for CudaKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaKernel")
            .field("id", &self.id)
            .field("program_name", &self.program_name)
            .field("entry", &self.entry)
            .field("options", &self.options)
            .field(
                "headers",
                &self
                    .headers
                    .iter()
                    .map(|header| &header.name)
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// Builds a [`CudaKernel`]; see [`CudaKernel::builder`].
#[must_use = "a builder makes no kernel until `source` or `generator` is called"]
pub struct CudaKernelBuilder {
    id: KernelIdBuilder,
    program_name: Option<String>,
    entry: EntryPoint,
    options: CudaOptions,
    headers: Vec<Header>,
}

impl CudaKernelBuilder {
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

    /// Supplies a header the source includes as `#include "name"`.
    pub fn header(mut self, name: impl Into<String>, text: impl Into<String>) -> Self {
        self.headers.push(Header::new(name, text));
        self
    }

    /// Finishes the kernel with a fixed source, whose text joins its id.
    pub fn source(self, source: impl Into<String>) -> CudaKernel {
        let source: Arc<str> = Arc::from(source.into());
        let id = self.id.bytes(source.as_bytes());
        Self { id, ..self }.finish(Arc::new(FixedSource::new(source)))
    }

    /// Finishes the kernel with a generator, which kiln runs when it
    /// compiles the kernel. The id must cover every parameter the generator
    /// reads (see [`SourceGenerator`]'s contract).
    pub fn generator(self, generator: impl SourceGenerator<Architecture> + 'static) -> CudaKernel {
        self.finish(Arc::new(generator))
    }

    fn finish(self, generator: Arc<dyn SourceGenerator<Architecture>>) -> CudaKernel {
        let program_name = self.program_name.unwrap_or_else(|| {
            let base: String = self
                .entry
                .expression()
                .chars()
                .take_while(|character| character.is_alphanumeric() || *character == '_')
                .collect();
            format!("{}.cu", if base.is_empty() { "kernel" } else { &base })
        });
        // Everything that changes the compiled code joins the id, so two
        // kernels with one family name and other options never share an id.
        let mut id = self
            .id
            .parameter("kiln-cuda")
            .parameter(self.entry.expression())
            .parameter(&self.options)
            .parameter(program_name.as_str());
        for header in &self.headers {
            id = id
                .parameter(header.name.as_str())
                .bytes(header.text.as_bytes());
        }
        CudaKernel {
            id: id.build(),
            program_name,
            entry: self.entry,
            options: self.options,
            headers: self.headers,
            generator,
        }
    }
}
