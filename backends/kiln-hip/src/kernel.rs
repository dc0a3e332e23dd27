//! HIP kernels: a user generator of HIP source, the entry point to launch,
//! the options to compile with and the headers the source includes.

use std::fmt;
use std::sync::Arc;

pub use kiln_cxx::{EntryPoint, Header, SourceGenerator};
use kiln_cxx::{IdLayout, IdStart, KernelParts, KernelPartsBuilder};
use kiln_engine::{KernelId, KernelIdBuilder};

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
    options: HipOptions,
    /// The name diagnostics give its source.
    program_name: Option<String>,
    parts: KernelParts<Architecture>,
}

impl HipKernel {
    /// Starts a kernel whose id is `id` (the family name and the parameters
    /// the source depends on) and which launches `entry`.
    pub fn builder(id: KernelIdBuilder, entry: impl Into<EntryPoint>) -> HipKernelBuilder {
        HipKernelBuilder {
            id: IdStart::Given(id),
            options: HipOptions::default(),
            program_name: None,
            parts: KernelPartsBuilder::new(entry.into()),
        }
    }

    /// Starts the module of the kernel file `file` (its path under the
    /// folder `kiln warm` is given: `scan.hip`, `ops/conv.hip`) that
    /// launches `entry`, named and identified as `kiln warm` names and
    /// identifies that file's modules, so that a program finds what
    /// `kiln warm` stored by id, with no compile and no store write (L11).
    ///
    /// The ids are the same when the program gives what the file's header
    /// gives: every `entry` in the header's order (the first here, the
    /// others with [`entry`](HipKernelBuilder::entry)); the options of its
    /// `options` line and its `define` and `specialize` pairs as
    /// [`HipOptions`] (defines in any order); and the file's whole text,
    /// header included, to [`source`](HipKernelBuilder::source), with
    /// [`source_folder`](HipKernelBuilder::source_folder) and the
    /// `include` folders, so that its includes reach the same headers.
    ///
    /// ```
    /// use kiln_hip::{HipKernel, HipOptions};
    ///
    /// let text = "// kiln entry: scan\n\
    ///             extern \"C\" __global__ void scan(float* x) { x[0] = 1; }\n";
    /// let scan = HipKernel::of_file("scan.hip", "scan").source(text);
    /// assert_eq!(kiln_engine::Kernel::id(&scan).name(), "warm/scan.hip");
    /// ```
    pub fn of_file(file: impl Into<String>, entry: impl Into<EntryPoint>) -> HipKernelBuilder {
        let file = file.into();
        HipKernelBuilder {
            program_name: Some(file.clone()),
            id: IdStart::File(file),
            options: HipOptions::default(),
            parts: KernelPartsBuilder::new(entry.into()),
        }
    }

    /// The compile options.
    pub fn options(&self) -> &HipOptions {
        &self.options
    }

    /// The name diagnostics give its source, when it was given one.
    pub fn program_name(&self) -> Option<&str> {
        self.program_name.as_deref()
    }
}

kiln_cxx::kernel_methods!(HipKernel, HipKernelBuilder, HipOptions, Architecture);

impl fmt::Debug for HipKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipKernel")
            .field("id", &self.id)
            .field("options", &self.options)
            .field("parts", &self.parts)
            .finish_non_exhaustive()
    }
}

/// Builds a [`HipKernel`]; see [`HipKernel::builder`].
#[must_use = "a builder makes no kernel until `source` or `generator` is called"]
pub struct HipKernelBuilder {
    id: IdStart,
    options: HipOptions,
    program_name: Option<String>,
    parts: KernelPartsBuilder,
}

impl HipKernelBuilder {
    kiln_cxx::kernel_builder_methods!();

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

    /// Finishes the kernel with a fixed source, whose text joins its id.
    ///
    /// kiln resolves the text's includes itself (P13): every header they
    /// reach is read here, handed to hipRTC in memory and folded into the
    /// id by its text; `<hip/...>` headers that no folder holds are
    /// hipRTC's own. An include that cannot be resolved makes a kernel
    /// that fails to lower, saying which include and where it looked.
    pub fn source(self, source: impl Into<String>) -> HipKernel {
        self.shared_source(Arc::from(source.into()))
    }

    /// Finishes the kernel with a fixed source held in an `Arc`, shared
    /// with other kernels rather than copied: the kernel
    /// [`source`](Self::source) makes of the same text, id included.
    pub fn shared_source(self, source: Arc<str>) -> HipKernel {
        let Self {
            id,
            options,
            program_name,
            mut parts,
        } = self;
        crate::includes::prepare(parts.search_mut());
        // 0 and 1 tell a fixed source from a generated one in the id.
        let (id, source, include_failure) = parts.fix(
            id.begin(&parts).parameter(&0u8),
            source,
            program_name.as_deref(),
        );
        let id = parts.identify(id, "kiln-hip", &options, IdLayout::HeaderCount);
        HipKernel {
            id: id.build(),
            options,
            program_name,
            parts: parts.finish(Arc::new(source), include_failure),
        }
    }

    /// Finishes the kernel with a generator, which kiln runs when it
    /// compiles the kernel. The id must cover every parameter the generator
    /// reads (see [`SourceGenerator`]'s contract).
    pub fn generator(self, generator: impl SourceGenerator<Architecture> + 'static) -> HipKernel {
        let id = self.id.begin(&self.parts).parameter(&1u8);
        let id = self
            .parts
            .identify(id, "kiln-hip", &self.options, IdLayout::HeaderCount);
        HipKernel {
            id: id.build(),
            options: self.options,
            program_name: self.program_name,
            parts: self.parts.finish(Arc::new(generator), None),
        }
    }
}

impl fmt::Debug for HipKernelBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipKernelBuilder")
            .field("entry", self.parts.entry())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use kiln_engine::Kernel;

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
