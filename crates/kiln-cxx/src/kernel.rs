//! What a C++ kernel is made of besides its id, its options and its
//! program name: the entry points, the headers (supplied, and those a fixed
//! source's includes reach), why the includes could not be resolved, and
//! the source generator. [`KernelParts`] holds them in a built kernel,
//! [`KernelPartsBuilder`] while it is built.
//!
//! kiln-cuda's `CudaKernel` and kiln-hip's `HipKernel` each hold one and
//! add what is their own (options, program name, the layout of their ids).
//! The methods both forward to it are written once, by the
//! [`kernel_methods!`](crate::kernel_methods) and
//! [`kernel_builder_methods!`](crate::kernel_builder_methods) macros, so
//! that they stay inherent methods of each backend's types.

use std::fmt;
use std::hash::Hash;
use std::path::PathBuf;
use std::sync::Arc;

use kiln_engine::{CompileFailure, KernelId, KernelIdBuilder};

use crate::{EntryPoint, FixedSource, Header, IncludeSearch, SourceGenerator};

/// A built kernel's entry points, headers and generator, for a device of
/// architecture `A`.
pub struct KernelParts<A> {
    entry: EntryPoint,
    /// The module's other entry points (B6), each loadable by name from the
    /// one loaded module.
    more_entries: Vec<EntryPoint>,
    headers: Vec<Header>,
    /// Why its includes could not be resolved (or an entry was named
    /// twice): the kernel then fails to lower with this reason, compiling
    /// nothing.
    include_failure: Option<String>,
    generator: Arc<dyn SourceGenerator<A>>,
}

// By hand: a derive would ask `A: Clone`, which the shared generator does
// not need.
impl<A> Clone for KernelParts<A> {
    fn clone(&self) -> Self {
        Self {
            entry: self.entry.clone(),
            more_entries: self.more_entries.clone(),
            headers: self.headers.clone(),
            include_failure: self.include_failure.clone(),
            generator: Arc::clone(&self.generator),
        }
    }
}

impl<A> KernelParts<A> {
    /// The entry point: the first of [`entries`](Self::entries).
    pub fn entry(&self) -> &EntryPoint {
        &self.entry
    }

    /// Every entry point of the module, the first one first (B6).
    pub fn entries(&self) -> impl Iterator<Item = &EntryPoint> {
        std::iter::once(&self.entry).chain(&self.more_entries)
    }

    /// The headers the source may include: those supplied, and for a fixed
    /// source every header its includes reach (P13).
    pub fn headers(&self) -> &[Header] {
        &self.headers
    }

    /// Why the source's includes could not be resolved (or an entry was
    /// named twice), when so; such a kernel fails to lower with this
    /// reason.
    pub fn include_failure(&self) -> Option<&str> {
        self.include_failure.as_deref()
    }

    /// Runs the generator.
    ///
    /// # Errors
    ///
    /// What the generator reported.
    pub fn generate(&self, architecture: A) -> Result<String, CompileFailure> {
        self.generator.generate(architecture)
    }

    /// The length of its fixed source and headers: the longest compile
    /// first (a generated source counts its headers only).
    pub fn cost_hint(&self) -> u64 {
        crate::source_cost(self.generator.as_ref(), &self.headers)
    }
}

impl<A> fmt::Debug for KernelParts<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelParts")
            .field("entry", &self.entry)
            .field("more_entries", &self.more_entries)
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

/// How a backend's kernel ids are laid out past the backend's name, the
/// entry point and the options. The two backends laid theirs out apart
/// before they shared this code; each keeps its own so that kernel ids, and
/// the stored artifacts keyed by them, stay as they were.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdLayout<'a> {
    /// kiln-cuda's: the program name, then the other entries, then each
    /// header's name as a parameter and its text.
    ProgramName(&'a str),
    /// kiln-hip's: the number of headers, then the other entries, then each
    /// header's name and text as bytes.
    HeaderCount,
}

/// The family name of the module of a kernel file: `warm/NAME`, with
/// `:ENTRY,ENTRY` after it when the module has several entries, `NAME`
/// being the file's path under the folder `kiln warm` is given (`gemm.cu`,
/// `ops/scan.hip`). `kiln ls` and `kiln forget` show and take it.
pub fn file_kernel_name<'a>(file: &str, entries: impl IntoIterator<Item = &'a str>) -> String {
    let entries: Vec<&str> = entries.into_iter().collect();
    if entries.len() > 1 {
        format!("warm/{file}:{}", entries.join(","))
    } else {
        format!("warm/{file}")
    }
}

/// How a kernel's id starts, before its source, options and parts join
/// it: an id the program began, or the kernel file the kernel is a module
/// of, named once every entry is known ([`file_kernel_name`]).
#[allow(
    clippy::large_enum_variant,
    reason = "a builder held its id's hasher inline before files were named; boxing it would \
              allocate for every program's kernel"
)]
pub enum IdStart {
    /// The program's own: a family name and the parameters it chose.
    Given(KernelIdBuilder),
    /// The module of the kernel file at this path under the folder warmed.
    File(String),
}

impl IdStart {
    /// The id's beginning, for a kernel of `parts`' entry points.
    pub fn begin(self, parts: &KernelPartsBuilder) -> KernelIdBuilder {
        match self {
            Self::Given(id) => id,
            Self::File(file) => {
                let entries = std::iter::once(&parts.entry)
                    .chain(&parts.more_entries)
                    .map(EntryPoint::expression);
                KernelId::named(file_kernel_name(&file, entries))
            }
        }
    }
}

impl From<KernelIdBuilder> for IdStart {
    fn from(id: KernelIdBuilder) -> Self {
        Self::Given(id)
    }
}

/// A kernel's entry points, headers and include search while it is built.
#[derive(Debug)]
pub struct KernelPartsBuilder {
    entry: EntryPoint,
    more_entries: Vec<EntryPoint>,
    headers: Vec<Header>,
    search: IncludeSearch,
}

impl KernelPartsBuilder {
    /// The parts of a kernel that launches `entry`, with no header and no
    /// include folder.
    pub fn new(entry: EntryPoint) -> Self {
        Self {
            entry,
            more_entries: Vec::new(),
            headers: Vec::new(),
            search: IncludeSearch::new(),
        }
    }

    /// The first entry point.
    pub fn entry(&self) -> &EntryPoint {
        &self.entry
    }

    /// Adds another entry point of the same source (B6).
    pub fn add_entry(&mut self, entry: EntryPoint) {
        self.more_entries.push(entry);
    }

    /// Supplies a header, with its text.
    pub fn add_header(&mut self, header: Header) {
        self.headers.push(header);
    }

    /// Where a fixed source's includes are looked for: the backend sets
    /// its compiler's own folders here before [`fix`](Self::fix).
    pub fn search_mut(&mut self) -> &mut IncludeSearch {
        &mut self.search
    }

    /// Sets the folder of the file a fixed source was read from.
    pub fn set_source_folder(&mut self, folder: PathBuf) {
        self.search.source_folder = Some(folder);
    }

    /// Adds an include folder, searched after those added before.
    pub fn add_include_folder(&mut self, folder: PathBuf) {
        self.search.folders.push(folder);
    }

    /// Makes `source` the kernel's fixed source: resolves its includes
    /// (P13), adding every header they reach, and folds the text into `id`
    /// (with the reason, when the includes could not be resolved, so that
    /// the failing kernel and a fixed one never share an id). `program_name`
    /// names the source in the reason.
    ///
    /// Returns the id, the generator of the text and why the includes could
    /// not be resolved.
    pub fn fix(
        &mut self,
        id: KernelIdBuilder,
        source: Arc<str>,
        program_name: Option<&str>,
    ) -> (KernelIdBuilder, FixedSource, Option<String>) {
        let search = std::mem::take(&mut self.search);
        let label = program_name.unwrap_or("the source");
        let include_failure = match search.resolve(&source, label, &self.headers) {
            Ok(found) => {
                self.headers.extend(found);
                None
            }
            Err(error) => Some(error.to_string()),
        };
        let mut id = id.bytes(source.as_bytes());
        if let Some(failure) = &include_failure {
            id = id.parameter(failure.as_str());
        }
        (id, FixedSource::new(source), include_failure)
    }

    /// Folds the parts into `id`, after `backend`'s name, the entry point
    /// and `options`, in `layout`: everything that changes the compiled
    /// code joins the id, so two kernels with one family name and other
    /// options never share an id.
    pub fn identify(
        &self,
        id: KernelIdBuilder,
        backend: &str,
        options: &impl Hash,
        layout: IdLayout<'_>,
    ) -> KernelIdBuilder {
        let id = id
            .parameter(backend)
            .parameter(self.entry.expression())
            .parameter(options);
        let mut id = match layout {
            IdLayout::ProgramName(name) => id.parameter(name),
            IdLayout::HeaderCount => id.parameter(&self.headers.len()),
        };
        // A kernel of one entry keeps the id it had before entries were
        // several.
        for entry in &self.more_entries {
            id = id.parameter(entry.expression());
        }
        for header in &self.headers {
            id = match layout {
                IdLayout::ProgramName(_) => id.parameter(header.name.as_str()),
                IdLayout::HeaderCount => id.bytes(header.name.as_bytes()),
            }
            .bytes(header.text.as_bytes());
        }
        id
    }

    /// The built parts, generating with `generator`. `include_failure`,
    /// from [`fix`](Self::fix), is kept; without one, an entry named twice
    /// is the kernel's failure.
    pub fn finish<A>(
        self,
        generator: Arc<dyn SourceGenerator<A>>,
        include_failure: Option<String>,
    ) -> KernelParts<A> {
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
        let twice = twice
            .map(|entry| format!("the entry point `{entry}` is named twice; name each entry once"));
        KernelParts {
            entry: self.entry,
            more_entries: self.more_entries,
            headers: self.headers,
            include_failure: include_failure.or(twice),
            generator,
        }
    }
}

/// Writes, inside a backend's crate, the methods its kernel type `$kernel`
/// forwards to the [`KernelParts`] in its `parts` field (entry points,
/// headers, the include failure, the generator), its
/// [`Kernel`](kiln_engine::Kernel) impl from its `id` field, and the
/// [`CxxKernelBuilder`](crate::CxxKernelBuilder) impl of its builder
/// `$builder`, each method a call of the builder's inherent method (options
/// `$options`). `$architecture` is the backend's architecture, which the
/// generator takes.
#[macro_export]
macro_rules! kernel_methods {
    ($kernel:ty, $builder:ty, $options:ty, $architecture:ty) => {
        impl $crate::CxxKernelBuilder for $builder {
            type Kernel = $kernel;
            type Options = $options;

            fn entry(self, entry: &str) -> Self {
                <$builder>::entry(self, entry)
            }

            fn options(self, options: $options) -> Self {
                <$builder>::options(self, options)
            }

            fn source_folder(self, folder: ::std::path::PathBuf) -> Self {
                <$builder>::source_folder(self, folder)
            }

            fn include_folder(self, folder: ::std::path::PathBuf) -> Self {
                <$builder>::include_folder(self, folder)
            }

            fn include_tree(self, folder: ::std::path::PathBuf) -> Self {
                <$builder>::include_tree(self, folder)
            }

            fn includes_outside_tree(self, allowed: bool) -> Self {
                <$builder>::includes_outside_tree(self, allowed)
            }

            fn standard_headers(self, on: bool) -> Self {
                <$builder>::standard_headers(self, on)
            }

            fn include_cache(self, cache: &$crate::IncludeCache) -> Self {
                <$builder>::include_cache(self, cache)
            }

            fn source(self, source: ::std::sync::Arc<str>) -> $kernel {
                <$builder>::shared_source(self, source)
            }

            fn failing(self, reason: String) -> $kernel {
                <$builder>::generator(self, move |_: $architecture| {
                    Err(::kiln_engine::CompileFailure::message(reason.clone()).not_the_kernels())
                })
            }
        }

        impl $kernel {
            /// The entry point: the first of [`entries`](Self::entries).
            pub fn entry(&self) -> &$crate::EntryPoint {
                self.parts.entry()
            }

            /// Every entry point of the module, the first one first (B6).
            pub fn entries(&self) -> impl Iterator<Item = &$crate::EntryPoint> {
                self.parts.entries()
            }

            /// The headers the source may include: those supplied, and for
            /// a fixed source every header its includes reach (P13).
            pub fn headers(&self) -> &[$crate::Header] {
                self.parts.headers()
            }

            /// Why the source's includes could not be resolved, when they
            /// could not; such a kernel fails to lower with this reason.
            pub fn include_failure(&self) -> Option<&str> {
                self.parts.include_failure()
            }

            /// Runs the generator.
            ///
            /// # Errors
            ///
            /// What the generator reported.
            pub fn generate(
                &self,
                architecture: $architecture,
            ) -> Result<String, ::kiln_engine::CompileFailure> {
                self.parts.generate(architecture)
            }
        }

        impl ::kiln_engine::Kernel for $kernel {
            fn id(&self) -> ::kiln_engine::KernelId {
                self.id.clone()
            }

            /// The length of its fixed source and headers: the longest
            /// compile first (a generated source counts its headers only).
            fn cost_hint(&self) -> u64 {
                self.parts.cost_hint()
            }
        }
    };
}

/// Writes, inside a backend's crate and an `impl` of its kernel builder,
/// the builder methods it forwards to the [`KernelPartsBuilder`] in its
/// `parts` field: more entry points, headers, and where includes are
/// looked for.
#[macro_export]
macro_rules! kernel_builder_methods {
    () => {
        /// Adds another entry point of the same source (B6): the source is
        /// compiled once, into one module holding every entry, and each
        /// loads by name from it. An entry named twice makes a kernel that
        /// fails to lower, saying so.
        pub fn entry(mut self, entry: impl Into<$crate::EntryPoint>) -> Self {
            self.parts.add_entry(entry.into());
            self
        }

        /// Supplies a header the source includes as `#include "name"` (or
        /// `<name>`), with its text: it is never looked for on disk.
        pub fn header(mut self, name: impl Into<String>, text: impl Into<String>) -> Self {
            self.parts.add_header($crate::Header::new(name, text));
            self
        }

        /// The folder of the file a fixed [`source`](Self::source) was read
        /// from: its quoted includes are looked for there first, as a C
        /// compiler looks beside the including file. The working directory
        /// is never searched.
        pub fn source_folder(mut self, folder: impl Into<::std::path::PathBuf>) -> Self {
            self.parts.set_source_folder(folder.into());
            self
        }

        /// Adds an include folder, searched (in the order added) for a
        /// fixed source's includes after its own folder and before the
        /// compiler's own.
        pub fn include_folder(mut self, folder: impl Into<::std::path::PathBuf>) -> Self {
            self.parts.add_include_folder(folder.into());
            self
        }

        /// The kernel's tree: a fixed source's quoted includes may reach
        /// files under it (`"../include/tiles.h"`) as well as under its
        /// include folders. Without one, the tree is the
        /// [`source_folder`](Self::source_folder): a file found outside
        /// it is refused, unread.
        pub fn include_tree(mut self, folder: impl Into<::std::path::PathBuf>) -> Self {
            self.parts.search_mut().tree = Some(folder.into());
            self
        }

        /// Lets a fixed source's includes reach files outside its tree
        /// and include folders (off by default).
        pub fn includes_outside_tree(mut self, allowed: bool) -> Self {
            self.parts.search_mut().outside_allowed = allowed;
            self
        }

        /// Shares include resolutions with the other kernels built with
        /// `cache` (see [`IncludeCache`](kiln_cxx::IncludeCache)): a text
        /// already resolved with the same folders is answered from memory,
        /// its headers read once for all of them. The id is the same with
        /// or without one.
        pub fn include_cache(mut self, cache: &$crate::IncludeCache) -> Self {
            self.parts.search_mut().cache = Some(cache.clone());
            self
        }

        /// Turns kiln's built-in stand-ins for the C and C++ standard
        /// headers (`<cstdint>`, `<cmath>`, ...) on (the default) or off
        /// (B8): off, such an include must be found in an include folder.
        pub fn standard_headers(mut self, on: bool) -> Self {
            self.parts.search_mut().stdlib_off = !on;
            self
        }
    };
}

#[cfg(test)]
mod tests {
    use kiln_engine::KernelId;

    use super::*;

    fn parts(entries: &[&str]) -> KernelPartsBuilder {
        let mut parts = KernelPartsBuilder::new(EntryPoint::new(entries[0]));
        for entry in &entries[1..] {
            parts.add_entry(EntryPoint::new(*entry));
        }
        parts
    }

    fn generator() -> Arc<dyn SourceGenerator<u32>> {
        Arc::new(FixedSource::new(Arc::from("")))
    }

    // B6
    #[test]
    fn an_entry_named_twice_fails_its_kernel_unless_its_includes_failed_first() {
        let twice = parts(&["a", "b", "a"]).finish(generator(), None);
        assert_eq!(
            twice.include_failure(),
            Some("the entry point `a` is named twice; name each entry once")
        );
        let unresolved =
            parts(&["a", "a"]).finish(generator(), Some("`x.h` is in no folder".to_owned()));
        assert_eq!(unresolved.include_failure(), Some("`x.h` is in no folder"));
        let once = parts(&["a", "b"]).finish(generator(), None);
        assert_eq!(once.include_failure(), None);
        let entries: Vec<&str> = once.entries().map(EntryPoint::expression).collect();
        assert_eq!(entries, ["a", "b"]);
    }

    // L11: a file's module is named as `kiln warm` names it, once every
    // entry is known, whatever order the builder was given them in.
    #[test]
    fn a_files_module_is_named_by_its_path_and_every_entry() {
        assert_eq!(file_kernel_name("gemm.cu", ["gemm"]), "warm/gemm.cu");
        assert_eq!(
            file_kernel_name("ops/scan.hip", ["scan<64>", "add"]),
            "warm/ops/scan.hip:scan<64>,add"
        );
        let begun = |start: IdStart, parts: &KernelPartsBuilder| start.begin(parts).build();
        let file = |entries: &[&str]| begun(IdStart::File("k.cu".to_owned()), &parts(entries));
        assert_eq!(file(&["a"]).name(), "warm/k.cu");
        assert_eq!(file(&["a", "b"]).name(), "warm/k.cu:a,b");
        assert_ne!(file(&["a", "b"]), file(&["b", "a"]));
        assert_eq!(
            begun(KernelId::named("own").into(), &parts(&["a"])),
            KernelId::named("own").build()
        );
    }

    // P13: a header's text is part of the id, in either layout.
    #[test]
    fn the_two_id_layouts_give_two_ids_and_each_covers_every_header() {
        let id = |parts: &KernelPartsBuilder, layout| {
            parts
                .identify(KernelId::named("k"), "backend", &0u8, layout)
                .build()
        };
        let mut with_header = parts(&["k"]);
        with_header.add_header(Header::new("a.h", "1"));
        let mut other_text = parts(&["k"]);
        other_text.add_header(Header::new("a.h", "2"));
        for layout in [IdLayout::ProgramName("k.cu"), IdLayout::HeaderCount] {
            assert_ne!(id(&with_header, layout), id(&other_text, layout));
            assert_ne!(id(&with_header, layout), id(&parts(&["k"]), layout));
        }
        assert_ne!(
            id(&with_header, IdLayout::ProgramName("k.cu")),
            id(&with_header, IdLayout::HeaderCount)
        );
    }
}
