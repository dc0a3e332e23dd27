//! The CUDA compiler: a kernel's generator to CUDA C++ (lower), then NVRTC
//! to a cubin for the exact architecture with its PTX beside it (finalize).

use std::fmt;

use kiln_engine::store::{LibraryFile, Provenance, SourceCover};
use kiln_engine::worker::{ProcessCompiler, WorkerRecipe};
use kiln_engine::{
    ArtifactCompiler, ArtifactId, ArtifactReport, CompileFailure, Diagnostic, Finalized,
    KeyComponents, KeyedCompiler, Reported, Severity,
};
use serde::{Deserialize, Serialize};

use crate::architecture::Architecture;
use crate::diagnostics::{self, NAME_EXPRESSION_FILE};
use crate::error::Error;
use crate::kernel::CudaKernel;
use crate::key::CudaKey;
use crate::nvrtc::{CompileRequest, Nvrtc, NvrtcVersion};
use crate::resources::{self, VERBOSE_PTXAS};

/// The name NVRTC is given for every program, whatever the kernel's own:
/// NVRTC writes it into the cubin's line table (`-lineinfo`) and into
/// `__FILE__`, and one text must make one artifact under every kernel name
/// (P14). Diagnostics name the kernel's own program name instead.
pub(crate) const PROGRAM_NAME: &str = "kernel.cu";

/// Keeps NVRTC from searching the folder of the program, which for a
/// program of no folder is the working directory: kiln hands it every
/// header in memory (P13), so nothing is read from disk behind the key.
pub(crate) const NO_SOURCE_INCLUDE: &str = "--no-source-include";

/// The compile choice of a CUDA target: the architecture of its device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CudaVariant {
    /// The device's architecture; kernels that pin another in their options
    /// are built for that one instead.
    pub architecture: Architecture,
}

/// A lowered CUDA kernel: the text NVRTC compiles and everything it is
/// compiled with, ready to finalize here or in another process.
///
/// The text starts with the [`SourceCover`] of
/// [`CudaKey::cover`] (comment lines naming the entry point,
/// NVRTC's arguments and the headers' digests), then a `#line 1` (without a file name) that gives
/// the kernel's own source its own line numbers. So two kernels have the
/// same text exactly when they compile to the same artifact, which is what
/// kiln's sharing of artifacts between kernels with identical text needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CudaLowered {
    program_name: String,
    text: String,
    source_start: usize,
    headers: Vec<(String, String)>,
    arguments: Vec<String>,
    architecture: Architecture,
    entry: String,
    /// The module's other entry points (B6).
    more_entries: Vec<String>,
}

impl CudaLowered {
    /// The kernel's own source, as its generator returned it.
    pub fn source(&self) -> &str {
        &self.text[self.source_start..]
    }

    /// The full text NVRTC compiles.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// NVRTC's options.
    pub fn arguments(&self) -> &[String] {
        &self.arguments
    }

    /// The architecture the cubin is for.
    pub fn architecture(&self) -> Architecture {
        self.architecture
    }

    /// What its source key covers beside the kernel's own source.
    pub fn cover(&self) -> SourceCover {
        CudaKey::cover(&self.entry_points(), &self.arguments, &self.headers)
    }

    /// Every entry point, as the source cover names them: the first alone
    /// for a module of one, else all separated by spaces.
    fn entry_points(&self) -> String {
        std::iter::once(&self.entry)
            .chain(&self.more_entries)
            .cloned()
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A compiled CUDA kernel: the cubin for one architecture, the PTX it was
/// assembled from (the fallback a newer driver can compile for itself),
/// the entry point's symbol in both, and the report of its compile (D4).
///
/// Stores keep it serialized. A change to its fields changes
/// [`CudaKey::ARTIFACT_FORMAT`], which the compiler component of
/// [`CudaKey::for_store`] names (or kiln-engine's
/// [`STORE_FORMAT`](kiln_engine::STORE_FORMAT)), so that old entries miss
/// instead of being read as damaged.
#[derive(Clone, Serialize, Deserialize)]
pub struct CudaArtifact {
    /// The cubin (an ELF image) for [`architecture`](Self::architecture),
    /// read as bytes, not byte by byte (the same encoding).
    #[serde(with = "kiln_engine::store::bytes")]
    pub cubin: Vec<u8>,
    /// The PTX, as text.
    pub ptx: String,
    /// The entry point's symbol: the name expression NVRTC lowered.
    pub lowered_name: String,
    /// The module's other entry points (B6), each as `(name expression,
    /// symbol)`.
    pub more_entries: Vec<(String, String)>,
    /// The architecture the cubin is for.
    pub architecture: Architecture,
    /// What made these bytes: the compiler's key components, NVRTC's
    /// arguments (the architecture's among them), the digests of the source
    /// and headers, and the entry point.
    pub key: Provenance,
    /// The compile's warnings and the kernel's resources, as ptxas reported
    /// them (D4).
    pub report: ArtifactReport,
}

/// The record of the compile, kept in the artifact's bytes: a store hit
/// reports what the compile did (D4).
impl Reported for CudaArtifact {
    fn report(&self) -> &ArtifactReport {
        &self.report
    }
}

impl fmt::Debug for CudaArtifact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaArtifact")
            .field("cubin_bytes", &self.cubin.len())
            .field("ptx_bytes", &self.ptx.len())
            .field("lowered_name", &self.lowered_name)
            .field("architecture", &self.architecture)
            .field("report", &self.report)
            .finish_non_exhaustive()
    }
}

/// Lowers CUDA kernels by running their generators and finalizes them with
/// NVRTC. Shared by every worker of a batch; holds no state between calls.
///
/// Its store keys (it is a [`KeyedCompiler`]) name the architecture of the
/// target it serves, which [`CudaTarget`](crate::CudaTarget) gives it with
/// [`keyed_for`](Self::keyed_for); see [`CudaKey::for_store`].
#[derive(Debug, Clone)]
pub struct CudaCompiler {
    nvrtc: Nvrtc,
    /// The architecture its store keys name; `None` until a target names it.
    keyed_architecture: Option<Architecture>,
}

impl CudaCompiler {
    /// A compiler on the NVRTC this machine has.
    ///
    /// # Errors
    ///
    /// NVRTC is missing or too old: the error names where it looked and how
    /// to install it.
    pub fn new() -> Result<Self, Error> {
        Ok(Self {
            nvrtc: Nvrtc::open()?,
            keyed_architecture: None,
        })
    }

    /// The same compiler, naming `architecture` in its store keys: that of
    /// the target it compiles for. What it compiles is unchanged: each
    /// kernel is built for its variant's architecture (or its options').
    pub fn keyed_for(mut self, architecture: Architecture) -> Self {
        self.keyed_architecture = Some(architecture);
        self
    }

    /// The architecture its store keys name, when a target named one.
    pub fn keyed_architecture(&self) -> Option<Architecture> {
        self.keyed_architecture
    }

    /// The NVRTC it compiles with.
    pub fn nvrtc(&self) -> &Nvrtc {
        &self.nvrtc
    }

    /// NVRTC's version.
    pub fn version(&self) -> NvrtcVersion {
        self.nvrtc.version()
    }

    /// NVRTC's library file by its digest: with the version, the compiler's
    /// identity in keys. Read on the first call in the process.
    pub fn library_file(&self) -> &'static LibraryFile {
        self.nvrtc.library_file()
    }

    /// What made the artifact of `lowered` compiled by this compiler (P1):
    /// what its artifact carries as [`CudaArtifact::key`].
    pub fn artifact_key(&self, lowered: &CudaLowered) -> Provenance {
        Provenance::new(self.key_components(), &lowered.cover(), lowered.source())
    }

    fn failure(&self, lowered: &CudaLowered, log: &str, invalid_option: bool) -> CompileFailure {
        // The entry an error names: the misspelt one, not the first.
        let entries: Vec<&str> = std::iter::once(lowered.entry.as_str())
            .chain(lowered.more_entries.iter().map(String::as_str))
            .collect();
        let named = |message: &str| -> String {
            entries
                .iter()
                .find(|entry| {
                    let name = entry.split('<').next().unwrap_or(entry).trim();
                    let base = name.rsplit("::").next().unwrap_or(name);
                    !base.is_empty() && message.contains(base)
                })
                .copied()
                .unwrap_or(lowered.entry.as_str())
                .to_owned()
        };
        let mut blamed = lowered.entry.clone();
        let mut names_entry = false;
        // NVRTC knows the program as PROGRAM_NAME; its author, by its own.
        let log = log.replace(
            &format!("\"{PROGRAM_NAME}\""),
            &format!("\"{}\"", lowered.program_name),
        );
        let log = log
            .lines()
            .map(|line| match line.strip_prefix(PROGRAM_NAME) {
                Some(rest) if rest.starts_with('(') => format!("{}{rest}", lowered.program_name),
                _ => line.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        let log = log.as_str();
        let opens_a_file = log.contains("open source file");
        let diagnostics: Vec<Diagnostic> = diagnostics::parse(log)
            .into_iter()
            .map(|mut diagnostic| {
                // NVRTC reports entry points in a file of its own making; the
                // place means nothing to the kernel's author, the name does.
                let in_name_map = diagnostic
                    .location
                    .as_ref()
                    .and_then(|location| location.file.as_deref())
                    == Some(NAME_EXPRESSION_FILE);
                if in_name_map {
                    if !names_entry {
                        blamed = named(&diagnostic.message);
                    }
                    names_entry = true;
                    diagnostic.location = None;
                    diagnostic.message = format!(
                        "entry point `{}`: {}",
                        named(&diagnostic.message),
                        diagnostic.message
                    );
                }
                diagnostic
            })
            .collect();
        let mut failure = CompileFailure::new(diagnostics).with_log(log);
        if names_entry {
            failure = failure.with_hint(format!(
                "the entry point `{blamed}` must name a __global__ function of the source: a \
                 plain name (declared extern \"C\" to keep it unmangled) or a template \
                 instantiation such as scale<float, 128>"
            ));
        } else if opens_a_file {
            failure = failure.with_hint(
                "NVRTC reads no header from disk: kiln hands it each one in memory. A fixed \
                 source's includes are found beside its file (source_folder), in its include \
                 folders (include_folder; kiln warm: --include DIR or `// kiln include: DIR`) \
                 and the CUDA toolkit's (KILN_CUDA_INCLUDE); a generated source's headers are \
                 given with header(name, text)",
            );
        } else if invalid_option {
            failure = failure.with_hint(if log.contains("gpu-architecture") {
                format!(
                    "NVRTC {} does not compile for {}; it compiles for {}",
                    self.version(),
                    lowered.architecture,
                    self.nvrtc
                        .supported_architectures()
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            } else {
                format!(
                    "NVRTC refused one of the kernel's options: {}",
                    lowered.arguments.join(" ")
                )
            });
        }
        failure
    }
}

impl ArtifactCompiler for CudaCompiler {
    type Kernel = CudaKernel;
    type Variant = CudaVariant;
    type Lowered = CudaLowered;
    type Artifact = CudaArtifact;

    fn lower(
        &self,
        kernel: &CudaKernel,
        id: &ArtifactId<CudaVariant>,
    ) -> Result<CudaLowered, CompileFailure> {
        if let Some(reason) = kernel.include_failure() {
            // The setup's, not the source's: never remembered (P11), so the
            // header added or the folder given compiles at once.
            return Err(CompileFailure::message(reason.to_owned()).not_the_kernels());
        }
        kernel.options().check_defines().map_err(|error| {
            CompileFailure::message(error.to_string())
                .with_hint("name each define with an identifier and give it a one-line value")
        })?;
        kernel.options().check_flags().map_err(|error| {
            CompileFailure::message(error.to_string())
                .with_hint("give headers with the kernel builder's include_folder or header")
        })?;
        let architecture = kernel.options().architecture_on(id.variant.architecture);
        let source = kernel.generate(architecture)?;
        let mut arguments = kernel.options().arguments(id.variant.architecture);
        arguments.push(NO_SOURCE_INCLUDE.to_owned());
        let headers: Vec<(String, String)> = kernel
            .headers()
            .iter()
            .map(|header| (header.name.clone(), header.text.clone()))
            .collect();
        let entry = kernel.entry().expression().to_owned();
        let more_entries: Vec<String> = kernel
            .entries()
            .skip(1)
            .map(|entry| entry.expression().to_owned())
            .collect();
        let program_name = kernel.program_name().to_owned();
        let entry_points = std::iter::once(entry.clone())
            .chain(more_entries.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ");

        let mut text = CudaKey::cover(&entry_points, &arguments, &headers).preamble();
        text.reserve(source.len() + 64);
        // No file name here: NVRTC names the program in its messages, and
        // a kernel's text (so its source key) must not change when only
        // its file's name does.
        text.push_str("#line 1\n");
        let source_start = text.len();
        text.push_str(&source);
        Ok(CudaLowered {
            program_name,
            text,
            source_start,
            headers,
            arguments,
            architecture,
            entry,
            more_entries,
        })
    }

    fn source(lowered: &CudaLowered) -> Option<&str> {
        Some(&lowered.text)
    }

    fn finalize(
        &self,
        _id: &ArtifactId<CudaVariant>,
        lowered: CudaLowered,
    ) -> Result<Finalized<CudaArtifact>, CompileFailure> {
        // ptxas's report only adds to the log: the cubin is the same, so
        // the option is no part of the key or of the lowered text.
        let mut arguments = lowered.arguments.clone();
        arguments.push(VERBOSE_PTXAS.to_owned());
        let expressions: Vec<String> = std::iter::once(lowered.entry.clone())
            .chain(lowered.more_entries.iter().cloned())
            .collect();
        let request = CompileRequest {
            program_name: PROGRAM_NAME,
            source: &lowered.text,
            headers: &lowered.headers,
            arguments: &arguments,
            name_expressions: &expressions,
        };
        let outcome = self
            .nvrtc
            .compile(&request)
            .map_err(|error| CompileFailure::message(error.to_string()).not_the_kernels())?;
        let Some(output) = outcome.output else {
            let mut failure = self.failure(&lowered, &outcome.log, outcome.invalid_option);
            if failure.diagnostics.is_empty() && outcome.log.trim().is_empty() {
                failure = CompileFailure::message(format!("NVRTC failed: {}", outcome.status));
            }
            if outcome.transient {
                failure = failure.not_the_kernels();
            }
            return Err(failure);
        };
        for (expression, symbol) in expressions.iter().zip(&output.lowered_names) {
            if !output.ptx.contains(&format!(".entry {symbol}(")) {
                return Err(CompileFailure::message(format!(
                    "entry point `{expression}` (`{symbol}`) is not a kernel of the compiled \
                     module"
                ))
                .with_hint(format!(
                    "the entry point `{expression}` must name a __global__ function"
                )));
            }
        }
        let mut lowered_names = output.lowered_names.into_iter();
        let lowered_name = lowered_names.next().unwrap_or_default();
        let more_entries: Vec<(String, String)> = lowered
            .more_entries
            .iter()
            .cloned()
            .zip(lowered_names)
            .collect();
        let mut diagnostics: Vec<Diagnostic> = diagnostics::parse(&outcome.log)
            .into_iter()
            .filter(|diagnostic| diagnostic.severity < Severity::Error)
            .collect();
        // The report is the first entry's: the one `function` launches.
        let mut resources = resources::read(&outcome.log, &output.ptx, &lowered_name);
        resources::fill_from_cubin(&mut resources, &output.cubin, &lowered_name);
        diagnostics.extend(resources.spill_warning(&lowered.entry));
        let key = self.artifact_key(&lowered);
        Ok(Finalized {
            artifact: CudaArtifact {
                cubin: output.cubin,
                ptx: output.ptx,
                lowered_name,
                more_entries,
                architecture: lowered.architecture,
                key,
                report: ArtifactReport::new(diagnostics.clone(), resources),
            },
            diagnostics,
        })
    }

    /// NVRTC serializes compiles inside one process, so a batch reaches the
    /// machine's cores only with worker processes.
    fn worker_recipe(&self) -> Option<WorkerRecipe> {
        Some(WorkerRecipe::of(self))
    }
}

/// What a compile worker process rebuilds a [`CudaCompiler`] from: the
/// NVRTC it must find, and the architecture its keys name.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CudaRecipe {
    /// The NVRTC version of the loader's process; a worker that opens
    /// another refuses, so artifacts never mix versions.
    pub nvrtc_version: NvrtcVersion,
    /// The NVRTC library of the loader's process, by digest; a worker that
    /// opens another refuses, so artifacts never mix patch releases.
    pub nvrtc_library: LibraryFile,
    /// [`CudaCompiler::keyed_architecture`].
    pub keyed_architecture: Option<Architecture>,
}

/// A CUDA compiler finalizes in worker processes (`kiln-cuda` in the
/// worker hook's list: [`worker_entry`](crate::worker_entry)). Each worker
/// opens NVRTC as the loader's process did (`KILN_NVRTC_PATH` and the rest
/// are inherited).
impl ProcessCompiler for CudaCompiler {
    const NAME: &'static str = "kiln-cuda";
    type Recipe = CudaRecipe;

    fn recipe(&self) -> CudaRecipe {
        CudaRecipe {
            nvrtc_version: self.version(),
            nvrtc_library: self.library_file().clone(),
            keyed_architecture: self.keyed_architecture,
        }
    }

    fn from_recipe(recipe: CudaRecipe) -> Result<Self, String> {
        let compiler = Self::new().map_err(|error| error.to_string())?;
        if compiler.version() != recipe.nvrtc_version {
            return Err(format!(
                "the worker opened NVRTC {} from {} and the loader uses NVRTC {}",
                compiler.version(),
                compiler.nvrtc().origin(),
                recipe.nvrtc_version
            ));
        }
        if *compiler.library_file() != recipe.nvrtc_library {
            return Err(format!(
                "the worker opened NVRTC {} ({}) from {} and the loader uses NVRTC {} ({})",
                compiler.version(),
                compiler.library_file(),
                compiler.nvrtc().origin(),
                recipe.nvrtc_version,
                recipe.nvrtc_library
            ));
        }
        Ok(match recipe.keyed_architecture {
            Some(architecture) => compiler.keyed_for(architecture),
            None => compiler,
        })
    }

    /// One empty kernel compiled for the compiler's architecture (or the
    /// newest NVRTC knows): NVRTC's first compile in a process opens its
    /// builtins and sets itself up, which a worker started early pays
    /// before the first batch (F5).
    fn warm_up(&self) {
        let Some(architecture) = self
            .keyed_architecture
            .or_else(|| self.nvrtc.supported_architectures().last().copied())
        else {
            return;
        };
        let arguments = crate::CudaOptions::default().arguments(architecture);
        let request = CompileRequest {
            program_name: "kiln_warm_up.cu",
            source: "extern \"C\" __global__ void kiln_warm_up() {}\n",
            headers: &[],
            arguments: &arguments,
            name_expressions: &["kiln_warm_up".to_owned()],
        };
        if let Err(error) = self.nvrtc.compile(&request) {
            log::debug!("the worker's warm-up compile failed: {error}");
        }
    }
}

/// The CUDA compiler's store keys (P1): see [`CudaKey::for_store`]
/// for the components and why they cover every artifact's bytes.
impl KeyedCompiler for CudaCompiler {
    fn key_components(&self) -> KeyComponents {
        CudaKey::for_store(self.version(), self.library_file(), self.keyed_architecture)
    }

    // The entry point stays `None`: it is folded into every kernel's id and
    // named by the source cover its lowered text opens with, so both kinds
    // of key already hold it, and the loader's id alone could not say it.

    /// The architecture, as the vendor names it: `sm_90`.
    fn variant_label(variant: &Self::Variant) -> String {
        variant.architecture.to_string()
    }
}
