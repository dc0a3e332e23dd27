//! CUDA kernels: a user generator of CUDA C++ source, the entry point to
//! launch, the options to compile with and the headers the source includes.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use kiln_cxx::FixedSource;
pub use kiln_cxx::{EntryPoint, Header, IncludeSearch, SourceGenerator};
use kiln_engine::{CompileFailure, Kernel, KernelId, KernelIdBuilder};

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
    entry: EntryPoint,
    /// The module's other entry points (B6), each loadable by name from the
    /// one loaded module.
    more_entries: Vec<EntryPoint>,
    options: CudaOptions,
    headers: Vec<Header>,
    /// Why its includes could not be resolved, when they could not: the
    /// kernel then fails to lower with this reason, compiling nothing.
    include_failure: Option<String>,
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
            more_entries: Vec::new(),
            options: CudaOptions::default(),
            headers: Vec::new(),
            search: IncludeSearch::new(),
        }
    }

    /// The name diagnostics give the source (`saxpy.cu`).
    pub fn program_name(&self) -> &str {
        &self.program_name
    }

    /// The entry point: the first of [`entries`](Self::entries), whose
    /// function [`LoadedKernel::function`](crate::LoadedKernel::function)
    /// gives.
    pub fn entry(&self) -> &EntryPoint {
        &self.entry
    }

    /// Every entry point of the module, the first one first (B6).
    pub fn entries(&self) -> impl Iterator<Item = &EntryPoint> {
        std::iter::once(&self.entry).chain(&self.more_entries)
    }

    /// The compile options.
    pub fn options(&self) -> &CudaOptions {
        &self.options
    }

    /// The headers the source may include: those supplied, and for a fixed
    /// source every header its includes reach (P13).
    pub fn headers(&self) -> &[Header] {
        &self.headers
    }

    /// Why the source's includes could not be resolved, when they could
    /// not; such a kernel fails to lower with this reason.
    pub fn include_failure(&self) -> Option<&str> {
        self.include_failure.as_deref()
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
            .field("more_entries", &self.more_entries)
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
    more_entries: Vec<EntryPoint>,
    options: CudaOptions,
    headers: Vec<Header>,
    search: IncludeSearch,
}

impl CudaKernelBuilder {
    /// Names the source in diagnostics; the default is the entry point's
    /// name with `.cu`.
    pub fn program_name(mut self, name: impl Into<String>) -> Self {
        self.program_name = Some(name.into());
        self
    }

    /// Adds another entry point of the same source (B6): the source is
    /// compiled once, into one module holding every entry, and each loads
    /// by name from it ([`LoadedKernel::function_of`](crate::LoadedKernel::function_of)).
    /// An entry named twice makes a kernel that fails to lower, saying so.
    pub fn entry(mut self, entry: impl Into<EntryPoint>) -> Self {
        self.more_entries.push(entry.into());
        self
    }

    /// Compiles with `options`.
    pub fn options(mut self, options: CudaOptions) -> Self {
        self.options = options;
        self
    }

    /// Supplies a header the source includes as `#include "name"` (or
    /// `<name>`), with its text: it is never looked for on disk.
    pub fn header(mut self, name: impl Into<String>, text: impl Into<String>) -> Self {
        self.headers.push(Header::new(name, text));
        self
    }

    /// The folder of the file a fixed [`source`](Self::source) was read
    /// from: its quoted includes are looked for there first, as a C
    /// compiler looks beside the including file. The working directory is
    /// never searched.
    pub fn source_folder(mut self, folder: impl Into<PathBuf>) -> Self {
        self.search.source_folder = Some(folder.into());
        self
    }

    /// Adds an include folder, searched (in the order added) for a fixed
    /// source's includes after its own folder and before the toolkit's
    /// ([`toolkit::include_folder`](crate::toolkit::include_folder)).
    pub fn include_folder(mut self, folder: impl Into<PathBuf>) -> Self {
        self.search.folders.push(folder.into());
        self
    }

    /// Finishes the kernel with a fixed source, whose text joins its id.
    ///
    /// kiln resolves the text's includes itself (P13): every header they
    /// reach, searched as [`source_folder`](Self::source_folder) and
    /// [`include_folder`](Self::include_folder) say, is read here, handed
    /// to NVRTC in memory and folded into the id by its text, so an edited
    /// header compiles again and the working directory changes nothing.
    /// An include that cannot be resolved makes a kernel that fails to
    /// lower, saying which include and where it looked.
    pub fn source(mut self, source: impl Into<String>) -> CudaKernel {
        let source: Arc<str> = Arc::from(source.into());
        let mut search = std::mem::take(&mut self.search);
        search.toolkit = crate::toolkit::include_folders();
        let label = self
            .program_name
            .clone()
            .unwrap_or_else(|| "the source".to_owned());
        let include_failure = match search.resolve(&source, &label, &self.headers) {
            Ok(found) => {
                self.headers.extend(found);
                None
            }
            Err(error) => Some(error.to_string()),
        };
        let mut id = self.id.bytes(source.as_bytes());
        if let Some(failure) = &include_failure {
            id = id.parameter(failure.as_str());
        }
        let mut kernel = Self { id, ..self }.finish(Arc::new(FixedSource::new(source)));
        if include_failure.is_some() {
            kernel.include_failure = include_failure;
        }
        kernel
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
        // A kernel of one entry keeps the id it had before entries were
        // several.
        for entry in &self.more_entries {
            id = id.parameter(entry.expression());
        }
        let mut seen = vec![self.entry.expression()];
        let twice = self.more_entries.iter().find_map(|entry| {
            let expression = entry.expression();
            if seen.contains(&expression) {
                Some(expression.to_owned())
            } else {
                seen.push(expression);
                None
            }
        });
        for header in &self.headers {
            id = id
                .parameter(header.name.as_str())
                .bytes(header.text.as_bytes());
        }
        CudaKernel {
            id: id.build(),
            program_name,
            entry: self.entry,
            more_entries: self.more_entries,
            options: self.options,
            headers: self.headers,
            include_failure: twice.map(|entry| {
                format!("the entry point `{entry}` is named twice; name each entry once")
            }),
            generator,
        }
    }
}
