//! The HIP compiler: lowering runs a kernel's generator, finalizing runs
//! hipRTC to a code object for the variant's gfx architecture.

use std::ffi::CString;
use std::fmt;
use std::sync::Arc;

use kiln_engine::store::{Provenance, SourceCover};
use kiln_engine::worker::{ProcessCompiler, WorkerRecipe};
use kiln_engine::{
    ArtifactCompiler, ArtifactId, ArtifactReport, CompileFailure, Diagnostic, Finalized,
    KeyComponents, KeyedCompiler, Reported, ResourceUsage, Severity,
};
use serde::{Deserialize, Serialize};

use crate::architecture::{Architecture, SupportedTargets};
use crate::diagnostics;
use crate::error::{Error, Result};
use crate::kernel::{Header, HipKernel};
use crate::key::{CompilerIdentity, HipKey};
use crate::metadata;
use crate::options::{HipOptions, HipVariant};
use crate::program::{PROGRAM_NAME, Program};
use crate::result::c_string;
use crate::toolchain::Toolchain;

/// A lowered HIP kernel: its source and everything else its compile needs,
/// as plain data that can cross to another process.
///
/// Its [text](ArtifactCompiler::source) — the one the loader compares to
/// share artifacts between kernels — opens with the [`SourceCover`] of
/// [`HipKey::cover`] (comment lines naming the entry point, the
/// flags, the architecture's first, and each header's digest), so that two
/// kernels share an artifact only when everything that shapes it is equal.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HipLowered {
    text: String,
    source_start: usize,
    entry: String,
    options: HipOptions,
    headers: Vec<Header>,
    /// The kernel's own name for its source, which diagnostics give it;
    /// hipRTC itself always compiles [`PROGRAM_NAME`] (P14).
    #[serde(default)]
    program_name: Option<String>,
    /// The module's other entry points (B6).
    #[serde(default)]
    more_entries: Vec<String>,
}

impl HipLowered {
    /// Lowers `source` for `variant`.
    ///
    /// # Errors
    ///
    /// The options hold a flag that chooses the architecture.
    pub fn new(
        variant: &HipVariant,
        entry: &str,
        source: &str,
        options: &HipOptions,
        headers: &[Header],
    ) -> Result<Self> {
        Self::with_entries(variant, &[entry], source, options, headers)
    }

    /// Lowers `source` for `variant`, one module holding every entry of
    /// `entries` (B6); the first is [`entry`](Self::entry).
    ///
    /// # Errors
    ///
    /// The options hold a flag that chooses the architecture.
    pub fn with_entries(
        variant: &HipVariant,
        entries: &[&str],
        source: &str,
        options: &HipOptions,
        headers: &[Header],
    ) -> Result<Self> {
        let entry = entries.first().copied().unwrap_or_default();
        let mut text = HipKey::cover(
            &entries.join(" "),
            options.compile_flags(&variant.architecture)?,
            headers,
        )
        .preamble();
        text.reserve(source.len());
        let source_start = text.len();
        text.push_str(source);
        Ok(Self {
            text,
            source_start,
            entry: entry.to_owned(),
            options: options.clone(),
            headers: headers.to_vec(),
            program_name: None,
            more_entries: entries
                .iter()
                .skip(1)
                .map(|entry| (*entry).to_owned())
                .collect(),
        })
    }

    /// The module's other entry points (B6).
    pub fn more_entries(&self) -> &[String] {
        &self.more_entries
    }

    /// The same, whose diagnostics name the source `program_name`.
    pub fn named(mut self, program_name: Option<String>) -> Self {
        self.program_name = program_name;
        self
    }

    /// The HIP source hipRTC compiles.
    pub fn source(&self) -> &str {
        &self.text[self.source_start..]
    }

    /// The text artifacts are shared by: the source after a comment block
    /// naming everything else that shapes the artifact.
    pub fn sharing_text(&self) -> &str {
        &self.text
    }

    /// The entry point's name expression.
    pub fn entry(&self) -> &str {
        &self.entry
    }

    /// The compile options.
    pub fn options(&self) -> &HipOptions {
        &self.options
    }

    /// The headers.
    pub fn headers(&self) -> &[Header] {
        &self.headers
    }

    /// What its source key covers beside the source, compiled for `architecture`.
    ///
    /// # Errors
    ///
    /// The options hold a flag that chooses the architecture.
    pub fn cover(&self, architecture: &Architecture) -> Result<SourceCover> {
        let entries: Vec<&str> = std::iter::once(self.entry.as_str())
            .chain(self.more_entries.iter().map(String::as_str))
            .collect();
        Ok(HipKey::cover(
            &entries.join(" "),
            self.options.compile_flags(architecture)?,
            &self.headers,
        ))
    }
}

/// A compiled HIP kernel: a code object for one gfx architecture, the
/// symbol its entry point was lowered to, and the report of its compile
/// (D4).
///
/// Stores keep it serialized. A change to its fields changes
/// [`HipKey::ARTIFACT_FORMAT`], which the compiler component of
/// [`HipKey::for_store`] names (or kiln-engine's
/// [`STORE_FORMAT`](kiln_engine::STORE_FORMAT)), so that old entries miss
/// instead of being read as damaged.
#[derive(Clone, Serialize, Deserialize)]
pub struct HipArtifact {
    /// The code object, as hipRTC returned it.
    pub code_object: Vec<u8>,
    /// The entry point's symbol in the code object (mangled for C++ names).
    pub symbol: String,
    /// The entry point's name expression.
    pub entry: String,
    /// The module's other entry points (B6), each as `(name expression,
    /// symbol)`.
    pub more_entries: Vec<(String, String)>,
    /// The architecture it was compiled for.
    pub architecture: Architecture,
    /// What shaped it: the compiler's key components, the flags (the
    /// architecture's first), the digests of the source and headers, and
    /// the entry point.
    pub key: Provenance,
    /// The compile's warnings and the kernel's resources, as the code
    /// object's metadata gives them (D4).
    pub report: ArtifactReport,
}

/// The record of the compile, kept in the artifact's bytes: a store hit
/// reports what the compile did (D4).
impl Reported for HipArtifact {
    fn report(&self) -> &ArtifactReport {
        &self.report
    }
}

impl fmt::Debug for HipArtifact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipArtifact")
            .field(
                "code_object",
                &format_args!("{} bytes", self.code_object.len()),
            )
            .field("symbol", &self.symbol)
            .field("entry", &self.entry)
            .field("architecture", &self.architecture)
            .field("report", &self.report)
            .finish_non_exhaustive()
    }
}

/// hipRTC, turning HIP kernels into code objects.
///
/// Cloning is cheap: every clone shares the process's one opened hipRTC.
/// Compiles run one at a time in a process, because ROCm 5's hipRTC aborts
/// the process when two threads compile at once; a batch still lowers (runs
/// generators) on all its workers.
///
/// ```no_run
/// use kiln_engine::{ArtifactId, Kernel, KernelId, KernelLoader};
/// use kiln_hip::{HipCompiler, HipKernel, HipTarget};
///
/// let compiler = HipCompiler::new()?;
/// let target = HipTarget::compile_only("gfx90a".parse()?)?.with_compiler(compiler);
/// let variant = target.variant();
/// let mut loader = KernelLoader::new(target);
/// let kernel = HipKernel::builder(KernelId::named("scale"), "scale")
///     .source(r#"extern "C" __global__ void scale(float* x) { x[threadIdx.x] *= 2.0f; }"#);
/// let compiled = loader.load(&kernel, &ArtifactId::new(kernel.id(), variant))?;
/// assert_eq!(compiled.lowered_name(), "scale");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Its store keys (it is a [`KeyedCompiler`]) name the architecture of the
/// target it serves, which the targets give it with
/// [`keyed_for`](Self::keyed_for); see [`HipKey::for_store`].
#[derive(Clone)]
pub struct HipCompiler {
    toolchain: Arc<Toolchain>,
    /// The architecture its store keys name; `None` until a target names it.
    keyed_architecture: Option<Architecture>,
    /// Whether every finalize checks its target first; only the crash
    /// tests turn this off.
    checks_targets: bool,
}

impl HipCompiler {
    /// Opens hipRTC and comgr, or reuses the process's.
    ///
    /// # Errors
    ///
    /// [`Error::LibraryMissing`] naming the library, where it was looked
    /// for and how to install it; or a library that does not answer.
    pub fn new() -> Result<Self> {
        Ok(Self {
            toolchain: Toolchain::get()?,
            keyed_architecture: None,
            checks_targets: true,
        })
    }

    /// **For crash tests only.** The same compiler without the target check
    /// that keeps hipRTC from aborting the process: a kernel for a target
    /// comgr lacks (or a feature its processor lacks, `gfx1030:xnack+`)
    /// reaches hipRTC, and comgr aborts whichever process compiles it. Its
    /// loader must finalize in worker processes, where that fails only the
    /// kernel: on threads it ends the loader's own process. Only behind the
    /// `testing` feature, which this crate's own tests turn on.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn without_target_check_for_crash_tests(mut self) -> Self {
        self.checks_targets = false;
        self
    }

    /// The same compiler, naming `architecture` in its store keys: that of the
    /// target it compiles for. What it compiles is unchanged: each kernel is
    /// built for its variant's architecture.
    pub fn keyed_for(mut self, architecture: Architecture) -> Self {
        self.keyed_architecture = Some(architecture);
        self
    }

    /// The architecture its store keys name, when a target named one.
    pub fn keyed_architecture(&self) -> Option<&Architecture> {
        self.keyed_architecture.as_ref()
    }

    /// Which hipRTC and comgr compile. Their library files are read and
    /// digested on the first call in the process.
    pub fn identity(&self) -> &CompilerIdentity {
        self.toolchain.identity()
    }

    /// The targets the installed compiler supports.
    pub fn supported_targets(&self) -> &SupportedTargets {
        &self.toolchain.supported
    }

    /// Refuses a target this compiler cannot compile for. Every finalize
    /// asks this first, because hipRTC aborts the process on such a target.
    ///
    /// # Errors
    ///
    /// [`Error::UnsupportedArchitecture`] listing the supported processors.
    pub fn check_target(&self, architecture: &Architecture) -> Result<()> {
        self.toolchain.check_target(architecture)
    }

    /// What made the artifact of `lowered` compiled under `id`'s variant:
    /// what the artifact carries as [`HipArtifact::key`].
    ///
    /// # Errors
    ///
    /// The options hold a flag that chooses the architecture.
    pub fn artifact_key(
        &self,
        id: &ArtifactId<HipVariant>,
        lowered: &HipLowered,
    ) -> Result<Provenance> {
        self.provenance(&id.variant.architecture, lowered)
    }

    fn provenance(&self, architecture: &Architecture, lowered: &HipLowered) -> Result<Provenance> {
        Ok(Provenance::new(
            self.key_components(),
            &lowered.cover(architecture)?,
            lowered.source(),
        ))
    }

    fn compile(
        &self,
        architecture: &Architecture,
        lowered: &HipLowered,
    ) -> Result<Finalized<HipArtifact>, CompileFailure> {
        if self.checks_targets {
            self.check_target(architecture)
                .map_err(configuration_failure)?;
        }
        let key = self
            .provenance(architecture, lowered)
            .map_err(configuration_failure)?;

        // hipRTC's own failures and text it cannot take are reported as they
        // are: neither is about the source or the configuration.
        let as_failure = |error: Error| CompileFailure::message(error.to_string());
        let source = c_string(lowered.source(), || "the source".to_owned()).map_err(as_failure)?;
        let name = CString::new(PROGRAM_NAME).expect("the program name has no NUL");
        let entry =
            c_string(lowered.entry(), || "the entry point".to_owned()).map_err(as_failure)?;
        let mut headers = Vec::with_capacity(lowered.headers().len());
        for header in lowered.headers() {
            let what = || format!("the header {:?}", header.name);
            headers.push((
                c_string(&header.name, what).map_err(as_failure)?,
                c_string(&header.text, what).map_err(as_failure)?,
            ));
        }
        let flags = key
            .options
            .iter()
            .map(|flag| c_string(flag, || format!("the flag {flag:?}")))
            .collect::<Result<Vec<_>>>()
            .map_err(as_failure)?;

        let mut program =
            Program::new(&self.toolchain.hiprtc, &source, &name, &headers).map_err(as_failure)?;
        program.add_name_expression(&entry).map_err(as_failure)?;
        // hipRTC finds a name expression's symbol by comparing the
        // demangled name as text, which spells a template argument as its
        // parameter's type has it (`64u`, `5ul`, `(short)3`): each entry is
        // asked by those spellings too, from the template's declared
        // parameter types, so `convolution<5>` names `template <size_t N>`
        // as it does in C++.
        let texts: Vec<&str> = std::iter::once(lowered.source())
            .chain(lowered.headers().iter().map(|header| header.text.as_str()))
            .collect();
        let spelled = |expression: &str, what: &'static str| {
            crate::names::spellings(expression, &texts)
                .iter()
                .map(|spelling| c_string(spelling, || what.to_owned()))
                .collect::<Result<Vec<_>>>()
                .map_err(as_failure)
        };
        let alternatives = spelled(lowered.entry(), "the entry point")?;
        for alternative in &alternatives {
            program
                .add_name_expression(alternative)
                .map_err(as_failure)?;
        }
        let mut more = Vec::with_capacity(lowered.more_entries.len());
        for expression in &lowered.more_entries {
            let written =
                c_string(expression, || "an entry point".to_owned()).map_err(as_failure)?;
            program.add_name_expression(&written).map_err(as_failure)?;
            let alternatives = spelled(expression, "an entry point")?;
            for alternative in &alternatives {
                program
                    .add_name_expression(alternative)
                    .map_err(as_failure)?;
            }
            more.push((expression.clone(), written, alternatives));
        }
        let compiled = program.compile(&flags).map_err(as_failure)?;
        let log = program.log().map_err(as_failure)?;
        let source_lines = lowered.source().lines().count().max(1);
        let entry_names: Vec<&str> = std::iter::once(lowered.entry())
            .chain(lowered.more_entries.iter().map(String::as_str))
            .collect();
        if !compiled {
            let mut failure = diagnostics::failure(&log, source_lines, &entry_names);
            // hipRTC names every program alike; the author knows its file.
            if let Some(program_name) = &lowered.program_name {
                for diagnostic in &mut failure.diagnostics {
                    if let Some(location) = &mut diagnostic.location
                        && location.file.is_none()
                    {
                        location.file = Some(program_name.clone());
                    }
                }
            }
            return Err(failure);
        }
        let code_object = program.code().map_err(as_failure)?;
        let symbol = program
            .lowered_name(&entry)
            .or_else(|error| {
                alternatives
                    .iter()
                    .find_map(|alternative| program.lowered_name(alternative).ok())
                    .ok_or(error)
            })
            .map_err(|error| match error {
                Error::Hiprtc { code, .. }
                    if code == crate::sys::HIPRTC_ERROR_NAME_EXPRESSION_NOT_VALID =>
                {
                    CompileFailure::message(format!(
                        "the entry point `{}` is not a kernel hipRTC can name",
                        lowered.entry()
                    ))
                    .with_hint(
                        "name a __global__ function or an instantiation of a __global__ template; \
                     device functions and kernels in anonymous namespaces cannot be entry points",
                    )
                }
                other => as_failure(other),
            })?;
        let mut more_entries = Vec::with_capacity(more.len());
        for (expression, written, alternatives) in &more {
            let symbol = program
                .lowered_name(written)
                .or_else(|error| {
                    alternatives
                        .iter()
                        .find_map(|alternative| program.lowered_name(alternative).ok())
                        .ok_or(error)
                })
                .map_err(|_| {
                    CompileFailure::message(format!(
                        "the entry point `{expression}` is not a kernel hipRTC can name"
                    ))
                    .with_hint(
                        "name a __global__ function or an instantiation of a __global__ \
                         template",
                    )
                })?;
            more_entries.push((expression.clone(), symbol));
        }
        drop(program);

        let mut diagnostics: Vec<Diagnostic> = diagnostics::parse(&log, source_lines, &entry_names)
            .into_iter()
            .filter(|diagnostic| diagnostic.severity < Severity::Error)
            .collect();
        // The figures are a report, not the artifact: a code object whose
        // metadata kiln cannot read still loads, with no figures.
        let resources = metadata::kernel_resources(&code_object, &symbol).unwrap_or_else(|error| {
            log::warn!("no resource report for `{}`: {error}", lowered.entry());
            ResourceUsage::default()
        });
        diagnostics.extend(resources.spill_warning(lowered.entry()));
        Ok(Finalized {
            artifact: HipArtifact {
                code_object,
                symbol,
                entry: lowered.entry().to_owned(),
                more_entries,
                architecture: architecture.clone(),
                key,
                report: ArtifactReport::new(diagnostics.clone(), resources),
            },
            diagnostics,
        })
    }
}

impl fmt::Debug for HipCompiler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipCompiler")
            .field("identity", self.identity())
            .field("keyed_architecture", &self.keyed_architecture)
            .field("checks_targets", &self.checks_targets)
            .finish_non_exhaustive()
    }
}

/// A configuration mistake as a compile failure: what is wrong, and a hint
/// saying what to change.
fn configuration_failure(error: Error) -> CompileFailure {
    match error {
        Error::UnsupportedArchitecture {
            requested,
            features_refused,
            supported,
            comgr_version,
        } => {
            let message = if features_refused {
                format!(
                    "{requested} is not a target this hipRTC can compile for: comgr {comgr_version} \
                     refuses its features for that processor"
                )
            } else {
                format!("{requested} is not a target this hipRTC can compile for")
            };
            CompileFailure::message(message).with_hint(format!(
                "compile for a target comgr {comgr_version} supports: {}",
                supported.join(", ")
            ))
        }
        Error::ArchitectureFlag { flag } => CompileFailure::message(format!(
            "the flag {flag:?} would choose the architecture"
        ))
        .with_hint(
            "remove it: the architecture comes from the variant, so it can be checked first",
        ),
        other => CompileFailure::message(other.to_string()),
    }
}

impl ArtifactCompiler for HipCompiler {
    type Kernel = HipKernel;
    type Variant = HipVariant;
    type Lowered = HipLowered;
    type Artifact = HipArtifact;

    fn lower(
        &self,
        kernel: &HipKernel,
        id: &ArtifactId<HipVariant>,
    ) -> Result<HipLowered, CompileFailure> {
        if let Some(reason) = kernel.include_failure() {
            // The setup's, not the source's: never remembered (P11).
            return Err(CompileFailure::message(reason.to_owned()).not_the_kernels());
        }
        // The generator's failure is the kernel's, unchanged: its message
        // and hint are the generator's own words.
        let source = kernel.generate(id.variant.architecture.clone())?;
        let entries: Vec<&str> = kernel.entries().map(|entry| entry.expression()).collect();
        // Every include gets an answer kiln keys, so hipRTC searches no
        // folder of its own (P13).
        let label = kernel.program_name().unwrap_or("the source");
        let mut headers = kernel.headers().to_vec();
        headers.extend(
            crate::includes::close(&source, &headers, label).map_err(CompileFailure::message)?,
        );
        HipLowered::with_entries(&id.variant, &entries, &source, kernel.options(), &headers)
            .map(|lowered| lowered.named(kernel.program_name().map(str::to_owned)))
            .map_err(configuration_failure)
    }

    fn source(lowered: &HipLowered) -> Option<&str> {
        Some(lowered.sharing_text())
    }

    fn finalize(
        &self,
        id: &ArtifactId<HipVariant>,
        lowered: HipLowered,
    ) -> Result<Finalized<HipArtifact>, CompileFailure> {
        self.compile(&id.variant.architecture, &lowered)
    }

    /// hipRTC runs one compile at a time in a process and aborts the
    /// process on a target its comgr lacks: worker processes give a batch
    /// every core and keep such a crash to its kernel.
    fn worker_recipe(&self) -> Option<WorkerRecipe> {
        Some(WorkerRecipe::of(self))
    }
}

/// What a compile worker process rebuilds a [`HipCompiler`] from: the
/// compiler it must find, the architecture its keys name, and whether it
/// checks targets.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HipRecipe {
    /// The hipRTC and comgr of the loader's process; a worker that opens
    /// others refuses, so artifacts never mix compilers.
    pub identity: CompilerIdentity,
    /// [`HipCompiler::keyed_architecture`].
    pub keyed_architecture: Option<Architecture>,
    /// Whether finalizes check their target first (always, but in crash
    /// tests).
    pub checks_targets: bool,
}

/// A HIP compiler finalizes in worker processes (`kiln-hip` in the worker
/// hook's list: [`worker_entry`](crate::worker_entry)).
impl ProcessCompiler for HipCompiler {
    const NAME: &'static str = "kiln-hip";
    type Recipe = HipRecipe;

    fn recipe(&self) -> HipRecipe {
        HipRecipe {
            identity: self.identity().clone(),
            keyed_architecture: self.keyed_architecture.clone(),
            checks_targets: self.checks_targets,
        }
    }

    fn from_recipe(recipe: HipRecipe) -> std::result::Result<Self, String> {
        let mut compiler = Self::new().map_err(|error| error.to_string())?;
        if *compiler.identity() != recipe.identity {
            return Err(format!(
                "the worker opened {} and the loader uses {}",
                compiler.identity(),
                recipe.identity
            ));
        }
        compiler.keyed_architecture = recipe.keyed_architecture;
        compiler.checks_targets = recipe.checks_targets;
        Ok(compiler)
    }
}

/// The HIP compiler's store keys (P1): see [`HipKey::for_store`]
/// for the components and why they cover every artifact's bytes.
impl KeyedCompiler for HipCompiler {
    fn key_components(&self) -> KeyComponents {
        HipKey::for_store(self.identity(), self.keyed_architecture.as_ref())
    }

    // The entry point stays `None`: it is folded into every kernel's id and
    // named by the source cover the lowered text opens with, so both kinds
    // of key already hold it, and the loader's id alone could not say it.

    /// The architecture, as the vendor names it: `gfx90a`.
    fn variant_label(variant: &Self::Variant) -> String {
        variant.architecture.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sharing_text_names_everything_that_shapes_the_artifact() {
        let variant = HipVariant::new(Architecture::new("gfx90a").expect("valid"));
        let options = HipOptions::new().define("A", "1");
        let headers = [Header {
            name: "a.h".into(),
            text: "int a;".into(),
        }];
        let lowered =
            HipLowered::new(&variant, "k<1>", "source text", &options, &headers).expect("lowers");
        assert_eq!(lowered.source(), "source text");
        let text = lowered.sharing_text();
        for part in ["gfx90a", "\"k<1>\"", "\"-DA=1\"", "\"a.h\"", "source text"] {
            assert!(text.contains(part), "{part} in {text}");
        }
        let other_architecture = HipVariant::new(Architecture::new("gfx908").expect("valid"));
        let other = HipLowered::new(
            &other_architecture,
            "k<1>",
            "source text",
            &options,
            &headers,
        )
        .expect("lowers");
        assert_ne!(other.sharing_text(), text, "another target, another text");
    }
}
