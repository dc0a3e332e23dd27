//! CUDA kernels: a user generator of CUDA C++ source, the entry point to
//! launch, the options to compile with and the headers the source includes.

use std::fmt;
use std::sync::Arc;

pub use kiln_cxx::{EntryPoint, Header, IncludeSearch, SourceGenerator};
use kiln_cxx::{IdLayout, IdStart, KernelParts, KernelPartsBuilder};
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
            id: IdStart::Given(id),
            program_name: None,
            options: CudaOptions::default(),
            parts: KernelPartsBuilder::new(entry.into()),
        }
    }

    /// Starts the module of the kernel file `file` (its path under the
    /// folder `kiln warm` is given: `gemm.cu`, `ops/attention.cu`) that
    /// launches `entry`, named and identified as `kiln warm` names and
    /// identifies that file's modules, so that a program finds what
    /// `kiln warm` stored by id, with no compile and no store write (L11).
    ///
    /// The ids are the same when the program gives what the file's header
    /// gives: every `entry` in the header's order (the first here, the
    /// others with [`entry`](CudaKernelBuilder::entry)); the options of its
    /// `options` line and its `define` and `specialize` pairs as
    /// [`CudaOptions`] (defines in any order); and the file's whole text,
    /// header included, to [`source`](CudaKernelBuilder::source), with
    /// [`source_folder`](CudaKernelBuilder::source_folder) and the
    /// `include` folders, so that its includes reach the same headers.
    /// The program name is `file`: leave it so.
    ///
    /// ```
    /// use kiln_cuda::{CudaKernel, CudaOptions};
    ///
    /// // `kernels/gemm.cu`, warmed with `kiln warm kernels`, whose header
    /// // says `// kiln entry: gemm` and `// kiln specialize: TILE=16`.
    /// let text = "// kiln entry: gemm\n// kiln specialize: TILE=16\n\
    ///             extern \"C\" __global__ void gemm(float* c) { c[0] = TILE; }\n";
    /// let gemm = CudaKernel::of_file("gemm.cu", "gemm")
    ///     .options(CudaOptions::default().define("TILE", "16"))
    ///     .source(text);
    /// assert_eq!(kiln_engine::Kernel::id(&gemm).name(), "warm/gemm.cu");
    /// ```
    pub fn of_file(file: impl Into<String>, entry: impl Into<EntryPoint>) -> CudaKernelBuilder {
        let file = file.into();
        CudaKernelBuilder {
            program_name: Some(file.clone()),
            id: IdStart::File(file),
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

kiln_cxx::kernel_methods!(CudaKernel, CudaKernelBuilder, CudaOptions, Architecture);

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
    id: IdStart,
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
    pub fn source(self, source: impl Into<String>) -> CudaKernel {
        self.shared_source(Arc::from(source.into()))
    }

    /// Finishes the kernel with a fixed source held in an `Arc`, shared
    /// with other kernels rather than copied: the kernel
    /// [`source`](Self::source) makes of the same text, id included.
    pub fn shared_source(self, source: Arc<str>) -> CudaKernel {
        let Self {
            id,
            program_name,
            options,
            mut parts,
        } = self;
        crate::toolkit::prepare(parts.search_mut());
        let (id, source, include_failure) =
            parts.fix(id.begin(&parts), source, program_name.as_deref());
        Started {
            id,
            program_name,
            options,
            parts,
        }
        .finish(Arc::new(source), include_failure)
    }

    /// Finishes the kernel with a generator, which kiln runs when it
    /// compiles the kernel. The id must cover every parameter the generator
    /// reads (see [`SourceGenerator`]'s contract).
    pub fn generator(self, generator: impl SourceGenerator<Architecture> + 'static) -> CudaKernel {
        Started {
            id: self.id.begin(&self.parts),
            program_name: self.program_name,
            options: self.options,
            parts: self.parts,
        }
        .finish(Arc::new(generator), None)
    }
}

/// A builder whose every entry is known, and so its id's beginning.
struct Started {
    id: KernelIdBuilder,
    program_name: Option<String>,
    options: CudaOptions,
    parts: KernelPartsBuilder,
}

impl Started {
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
