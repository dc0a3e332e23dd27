//! HIP kernels: a user generator of HIP source, the entry point to launch,
//! the options to compile with and the headers the source includes.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use kiln_cxx::FixedSource;
pub use kiln_cxx::{EntryPoint, Header, IncludeSearch, SourceGenerator};
use kiln_engine::{CompileFailure, Kernel, KernelId, KernelIdBuilder};

use crate::architecture::Architecture;
use crate::options::HipOptions;

/// A HIP kernel: cheap to clone, its id computed once when it is built.
///
/// The entry point is a *name expression*: the name of an `extern "C"`
/// kernel (`"saxpy"`), a kernel in a namespace (`"ops::saxpy"`), or a
/// template instantiation (`"reduce<float, 256>"`). hipRTC instantiates it
/// and reports the symbol it was lowered to, which is what loads.
///
/// The kernel's id starts from the id it is given (a family name and the
/// parameters its generator reads) and adds the entry point, the options,
/// the headers' text and, for a fixed source, the source itself: kernels
/// that differ in any of them never share an id.
///
/// ```
/// use kiln_engine::{Kernel, KernelId};
/// use kiln_hip::{HipKernel, HipOptions};
///
/// // A fixed source: its text is part of the id.
/// let scale = HipKernel::builder(KernelId::named("scale"), "scale").source(
///     r#"extern "C" __global__ void scale(float* x, float by) { x[threadIdx.x] *= by; }"#,
/// );
///
/// // A generated source: the id names what the generator reads, and the
/// // generator runs only when kiln compiles the kernel.
/// let tile = 64u32;
/// let fill = HipKernel::builder(
///     KernelId::named("fill").parameter(&tile),
///     format!("fill<{tile}>"),
/// )
/// .options(HipOptions::new().fast_math(true))
/// .header("config.h", "#define UNUSED 0\n")
/// .generator(move |_architecture| {
///     Ok("template <int N> __global__ void fill(float* x) { x[threadIdx.x % N] = N; }".into())
/// });
/// assert_ne!(scale.id(), fill.id());
/// ```
#[derive(Clone)]
pub struct HipKernel {
    id: KernelId,
    entry: EntryPoint,
    /// The module's other entry points (B6).
    more_entries: Vec<EntryPoint>,
    options: HipOptions,
    headers: Vec<Header>,
    /// Why its includes could not be resolved, when they could not.
    include_failure: Option<String>,
    /// The name diagnostics give its source.
    program_name: Option<String>,
    generator: Arc<dyn SourceGenerator<Architecture>>,
}

impl HipKernel {
    /// Starts a kernel whose id is `id` (the family name and the parameters
    /// the source depends on) and which launches `entry`.
    pub fn builder(id: KernelIdBuilder, entry: impl Into<EntryPoint>) -> HipKernelBuilder {
        HipKernelBuilder {
            id,
            entry: entry.into(),
            more_entries: Vec::new(),
            options: HipOptions::default(),
            headers: Vec::new(),
            search: IncludeSearch::new(),
            program_name: None,
        }
    }

    /// The entry point: the first of [`entries`](Self::entries).
    pub fn entry(&self) -> &EntryPoint {
        &self.entry
    }

    /// Every entry point of the module, the first one first (B6).
    pub fn entries(&self) -> impl Iterator<Item = &EntryPoint> {
        std::iter::once(&self.entry).chain(&self.more_entries)
    }

    /// The compile options.
    pub fn options(&self) -> &HipOptions {
        &self.options
    }

    /// The headers: those supplied, and for a fixed source every header
    /// its includes reach (P13).
    pub fn headers(&self) -> &[Header] {
        &self.headers
    }

    /// Why the source's includes could not be resolved, when they could
    /// not; such a kernel fails to lower with this reason.
    pub fn include_failure(&self) -> Option<&str> {
        self.include_failure.as_deref()
    }

    /// The name diagnostics give its source, when it was given one.
    pub fn program_name(&self) -> Option<&str> {
        self.program_name.as_deref()
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

impl Kernel for HipKernel {
    fn id(&self) -> KernelId {
        self.id.clone()
    }

    /// The length of its fixed source and headers: the longest compile
    /// first (a generated source counts its headers only).
    fn cost_hint(&self) -> u64 {
        kiln_cxx::source_cost(self.generator.as_ref(), &self.headers)
    }
}

impl fmt::Debug for HipKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipKernel")
            .field("id", &self.id)
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

/// Builds a [`HipKernel`]; see [`HipKernel::builder`].
#[must_use = "a builder makes no kernel until `source` or `generator` is called"]
pub struct HipKernelBuilder {
    id: KernelIdBuilder,
    entry: EntryPoint,
    more_entries: Vec<EntryPoint>,
    options: HipOptions,
    headers: Vec<Header>,
    search: IncludeSearch,
    program_name: Option<String>,
}

impl HipKernelBuilder {
    /// Adds another entry point of the same source (B6): one compile, one
    /// module holding every entry, each launched by name
    /// ([`LoadedKernel::launch_entry`](crate::LoadedKernel::launch_entry)).
    /// An entry named twice makes a kernel that fails to lower.
    pub fn entry(mut self, entry: impl Into<EntryPoint>) -> Self {
        self.more_entries.push(entry.into());
        self
    }

    /// Names the source in diagnostics (`scan.hip`); hipRTC compiles every
    /// program under one name, so the name changes no artifact (P14).
    pub fn program_name(mut self, name: impl Into<String>) -> Self {
        self.program_name = Some(name.into());
        self
    }

    /// Compiles with `options`.
    pub fn options(mut self, options: HipOptions) -> Self {
        self.options = options;
        self
    }

    /// Supplies a header the source includes as `#include "name"`.
    pub fn header(mut self, name: impl Into<String>, text: impl Into<String>) -> Self {
        self.headers.push(Header::new(name, text));
        self
    }

    /// The folder of the file a fixed [`source`](Self::source) was read
    /// from: its quoted includes are looked for there first. The working
    /// directory is never searched.
    pub fn source_folder(mut self, folder: impl Into<PathBuf>) -> Self {
        self.search.source_folder = Some(folder.into());
        self
    }

    /// Adds an include folder, searched (in the order added) for a fixed
    /// source's includes after its own folder.
    pub fn include_folder(mut self, folder: impl Into<PathBuf>) -> Self {
        self.search.folders.push(folder.into());
        self
    }

    /// Finishes the kernel with a fixed source, whose text joins its id.
    ///
    /// kiln resolves the text's includes itself (P13): every header they
    /// reach is read here, handed to hipRTC in memory and folded into the
    /// id by its text; `<hip/...>` headers that no folder holds are
    /// hipRTC's own. An include that cannot be resolved makes a kernel
    /// that fails to lower, saying which include and where it looked.
    pub fn source(mut self, source: impl Into<String>) -> HipKernel {
        let source: Arc<str> = Arc::from(source.into());
        let mut search = std::mem::take(&mut self.search);
        search.compiler_folders = vec!["hip".to_owned()];
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
        let mut id = self.id.parameter(&0u8).bytes(source.as_bytes());
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
    pub fn generator(self, generator: impl SourceGenerator<Architecture> + 'static) -> HipKernel {
        let id = self.id.parameter(&1u8);
        Self { id, ..self }.finish(Arc::new(generator))
    }

    fn finish(self, generator: Arc<dyn SourceGenerator<Architecture>>) -> HipKernel {
        // Everything that changes the code object joins the id, so two
        // kernels with one family name and other options never share an id.
        let mut id = self
            .id
            .parameter("kiln-hip")
            .parameter(self.entry.expression())
            .parameter(&self.options)
            .parameter(&self.headers.len());
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
                .bytes(header.name.as_bytes())
                .bytes(header.text.as_bytes());
        }
        HipKernel {
            id: id.build(),
            entry: self.entry,
            more_entries: self.more_entries,
            options: self.options,
            headers: self.headers,
            include_failure: twice.map(|entry| {
                format!("the entry point `{entry}` is named twice; name each entry once")
            }),
            program_name: self.program_name,
            generator,
        }
    }
}

impl fmt::Debug for HipKernelBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipKernelBuilder")
            .field("entry", &self.entry)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"extern "C" __global__ void k(float* x) { x[0] = 1; }"#;

    fn kernel(name: &'static str, entry: &str) -> HipKernelBuilder {
        HipKernel::builder(KernelId::named(name), entry)
    }

    #[test]
    fn every_part_of_a_kernel_is_part_of_its_id() {
        let base = kernel("k", "k").source(TEXT);
        let others = [
            kernel("k", "k").source(format!("{TEXT}\n")),
            kernel("k", "k2").source(TEXT),
            kernel("k", "k")
                .options(HipOptions::new().fast_math(true))
                .source(TEXT),
            kernel("k", "k")
                .options(HipOptions::new().define("A", "1"))
                .source(TEXT),
            kernel("k", "k").header("a.h", "").source(TEXT),
            kernel("k", "k").header("a.h", "//").source(TEXT),
            kernel("other", "k").source(TEXT),
            kernel("k", "k").generator(|_architecture| Ok(TEXT.to_owned())),
        ];
        for other in &others {
            assert_ne!(base.id(), other.id(), "{other:?}");
        }
        assert_eq!(base.id(), kernel("k", "k").source(TEXT).id());
        assert_eq!(base.id().name(), "k");
    }
}
