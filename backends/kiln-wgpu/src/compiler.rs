//! The wgpu compiler: a kernel's generator to WGSL or SPIR-V (lower), then
//! naga's front end and validator, the entry point, the constants, the
//! layout and the device features it needs checked, to an artifact a device
//! loads without surprises (finalize).

use std::fmt;

use kiln_engine::store::{KeyComponents, KeyedCompiler};
use kiln_engine::worker::{ProcessCompiler, WorkerRecipe};
use kiln_engine::{
    ArtifactCompiler, ArtifactId, ArtifactReport, CompileFailure, Finalized, Reported,
    ResourceUsage,
};
use serde::{Deserialize, Serialize};

use crate::kernel::{BindingLayout, BufferKind, Constants, Generated, Language, WgslKernel};
use crate::key::WgpuKey;
use crate::modules::{self, WgslModule};
use crate::options::WgpuVariant;
use crate::{bounded, constants, diagnostics, features, spirv};

/// A lowered wgpu kernel: the source its generator returned (WGSL text, or
/// a SPIR-V module's bytes in hexadecimal) and everything its pipeline is
/// built with, ready to finalize here or in another process.
///
/// The text kernels are grouped by (see [`ArtifactCompiler::source`]) starts
/// with the [`SourceCover`](kiln_engine::store::SourceCover) of
/// [`WgpuKey::cover`], naming the entry point, the constants, the layout
/// and whether workgroup memory starts zeroed (and the language, for
/// SPIR-V), so two kernels share an artifact exactly when their pipelines
/// are the same. naga parses the generator's source alone, so the lines
/// and columns of diagnostics are the author's.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WgpuLowered {
    label: String,
    language: Language,
    text: String,
    source_start: usize,
    entry: String,
    constants: Constants,
    layout: BindingLayout,
    zero_initialize_workgroup_memory: bool,
    /// The modules the kernel may `#import`, also in `text`.
    modules: Vec<WgslModule>,
}

impl WgpuLowered {
    /// The kernel's own source, as its generator returned it (a SPIR-V
    /// module's bytes in hexadecimal, 32 a line).
    pub fn source(&self) -> &str {
        &self.text[self.source_start..]
    }

    /// The pipeline constants it is compiled with.
    pub fn constants(&self) -> &Constants {
        &self.constants
    }

    /// The full text kernels are grouped by.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The shader's language.
    pub fn language(&self) -> Language {
        self.language
    }
}

/// A validated shader, as the device is given it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShaderCode {
    /// WGSL text.
    Wgsl(String),
    /// A SPIR-V module's bytes (little-endian words).
    Spirv(Vec<u8>),
}

impl ShaderCode {
    /// The shader's language.
    pub fn language(&self) -> Language {
        match self {
            Self::Wgsl(_) => Language::Wgsl,
            Self::Spirv(_) => Language::Spirv,
        }
    }
}

/// A buffer the entry point uses, as naga found it in the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ShaderBinding {
    /// The `@group`.
    pub group: u32,
    /// The `@binding`.
    pub binding: u32,
    /// How the source declares it.
    pub kind: BufferKind,
}

/// A validated wgpu kernel: what a device needs to build its pipeline, and
/// what naga learnt about it so that loading needs no second look.
///
/// Stores keep it serialized; a change to its fields changes the artifact
/// format its key names ([`WgpuKey::for_store`]), so old entries miss.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WgpuArtifact {
    /// The shader naga validated: WGSL text or a SPIR-V module.
    pub code: ShaderCode,
    /// The label of the shader module and pipeline.
    pub label: String,
    /// The `@compute` entry point.
    pub entry: String,
    /// The constants' values, keyed as wgpu takes them: by number for a
    /// constant declared with one, else by name.
    pub constants: Constants,
    /// The wgpu features the shader needs (`SHADER_F64`, `SUBGROUP`), by
    /// name: a device without one refuses the kernel, naming it.
    pub required_features: Vec<String>,
    /// How the pipeline's bind group layouts are made.
    pub layout: BindingLayout,
    /// Whether workgroup memory starts zeroed.
    pub zero_initialize_workgroup_memory: bool,
    /// The workgroup size, with the constants applied.
    pub workgroup_size: [u32; 3],
    /// The buffers the entry point uses, by group and binding.
    pub bindings: Vec<ShaderBinding>,
    /// The kernel's resources as naga found them: workgroup size, bindings
    /// and workgroup memory (D4). naga gives no warnings.
    pub report: ArtifactReport,
    /// A SPIR-V module naga cannot read, specialized and handed to the
    /// driver as it is (B7): its workgroup size and bindings were read from
    /// the module itself, and the device needs `PASSTHROUGH_SHADERS`.
    pub passthrough: bool,
}

/// The record of the compile, kept in the artifact's bytes: a store hit
/// reports what the compile did (D4).
impl Reported for WgpuArtifact {
    fn report(&self) -> &ArtifactReport {
        &self.report
    }
}

/// Lowers wgpu kernels by running their generators and finalizes them with
/// naga. Shared by every worker of a batch; holds no state between calls.
///
/// naga reads every shader in a bounded place: a panic of naga's is the
/// kernel's failure, and a shader over
/// [`MAX_SHADER_BYTES`](crate::MAX_SHADER_BYTES) is refused unread. The
/// default compiler finalizes on the loader's threads (naga takes
/// microseconds); [`in_workers`](Self::in_workers) makes one that finalizes
/// in compile worker processes, for shaders from a source that is not
/// trusted.
#[derive(Debug, Clone, Default)]
pub struct WgpuCompiler {
    /// The address space of each compile worker, in bytes; `None`:
    /// finalized on the loader's threads.
    worker_memory: Option<u64>,
}

impl WgpuCompiler {
    /// A compiler that finalizes in compile worker processes (`kiln-wgpu`
    /// in the worker hook's list: [`worker_entry`](crate::worker_entry)),
    /// each limited to `memory` bytes of address space and stopped at the
    /// loader's compile timeout: a shader that makes naga grow without end
    /// or never finish fails alone. Where the loader has no worker program
    /// it finalizes on its threads, a panic still the kernel's failure.
    pub fn in_workers(memory: u64) -> Self {
        Self {
            worker_memory: Some(memory),
        }
    }

    /// The address space of each compile worker, when this compiler
    /// finalizes in them.
    pub fn worker_memory(&self) -> Option<u64> {
        self.worker_memory
    }
}

/// What a compile worker rebuilds a [`WgpuCompiler`] from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WgpuRecipe {
    /// naga's version in the loader's process: a worker of another refuses.
    pub naga_version: String,
    /// The worker's address space, in bytes.
    pub memory: u64,
}

/// A wgpu compiler made [`in_workers`](WgpuCompiler::in_workers)
/// finalizes in worker processes, which limit their own address space.
impl ProcessCompiler for WgpuCompiler {
    const NAME: &'static str = "kiln-wgpu";
    type Recipe = WgpuRecipe;

    fn recipe(&self) -> WgpuRecipe {
        WgpuRecipe {
            naga_version: crate::NAGA_VERSION.to_owned(),
            memory: self
                .worker_memory
                .unwrap_or(crate::bounded::DEFAULT_WORKER_MEMORY),
        }
    }

    fn from_recipe(recipe: WgpuRecipe) -> Result<Self, String> {
        if recipe.naga_version != crate::NAGA_VERSION {
            return Err(format!(
                "the worker has naga {} and the loader naga {}",
                crate::NAGA_VERSION,
                recipe.naga_version
            ));
        }
        crate::bounded::limit_memory(recipe.memory)?;
        // A panic of naga's reaches the loader as the kernel's failure,
        // with its message: the default hook's lines on standard error
        // would only repeat it.
        std::panic::set_hook(Box::new(|_| {}));
        Ok(Self::in_workers(recipe.memory))
    }
}

impl ArtifactCompiler for WgpuCompiler {
    type Kernel = WgslKernel;
    type Variant = WgpuVariant;
    type Lowered = WgpuLowered;
    type Artifact = WgpuArtifact;

    fn lower(
        &self,
        kernel: &WgslKernel,
        _id: &ArtifactId<WgpuVariant>,
    ) -> Result<WgpuLowered, CompileFailure> {
        let generated = kernel.generate_code()?;
        let mut text = WgpuKey::cover(kernel).preamble();
        modules::cover_into(kernel.modules(), &mut text);
        let source_start = text.len();
        match generated {
            Generated::Wgsl(source) => text.push_str(&source),
            Generated::Spirv(bytes) => spirv::hex_into(&bytes, &mut text),
        }
        Ok(WgpuLowered {
            label: kernel.label().to_owned(),
            language: kernel.language(),
            text,
            source_start,
            entry: kernel.entry().to_owned(),
            constants: kernel.constants().clone(),
            layout: kernel.layout().clone(),
            zero_initialize_workgroup_memory: kernel.zero_initializes_workgroup_memory(),
            modules: kernel.modules().to_vec(),
        })
    }

    fn source(lowered: &WgpuLowered) -> Option<&str> {
        Some(&lowered.text)
    }

    fn finalize(
        &self,
        _id: &ArtifactId<WgpuVariant>,
        lowered: WgpuLowered,
    ) -> Result<Finalized<WgpuArtifact>, CompileFailure> {
        let bytes = match lowered.language {
            Language::Wgsl => lowered.source().len(),
            // Two hexadecimal digits a byte.
            Language::Spirv => lowered.source().len() / 2,
        };
        bounded::check_size(&lowered.label, bytes)?;
        let label = lowered.label.clone();
        bounded::contain(&label, || finalize(lowered))
    }

    fn worker_recipe(&self) -> Option<WorkerRecipe> {
        self.worker_memory.map(|_| WorkerRecipe::of(self))
    }
}

/// [`WgpuCompiler::finalize`], inside its bound.
fn finalize(lowered: WgpuLowered) -> Result<Finalized<WgpuArtifact>, CompileFailure> {
    // A kernel that imports modules is validated, and run, as the one
    // WGSL text naga_oil composes it into.
    let composed = match lowered.language {
        Language::Wgsl => modules::compose(lowered.source(), &lowered.label, &lowered.modules)?,
        Language::Spirv => String::new(),
    };
    let source = match lowered.language {
        Language::Wgsl => composed.as_str(),
        Language::Spirv => lowered.source(),
    };
    let (module, code) = match lowered.language {
        Language::Wgsl => (
            naga::front::wgsl::parse_str(source)
                .map_err(|error| diagnostics::parse_failure(&error, source, &lowered.label))?,
            ShaderCode::Wgsl(source.to_owned()),
        ),
        Language::Spirv => {
            let bytes = spirv::from_hex(source).ok_or_else(|| {
                CompileFailure::message(format!(
                    "{}: the lowered SPIR-V is not the hexadecimal kiln writes",
                    lowered.label
                ))
            })?;
            spirv::check_header(&bytes, &lowered.label, Some(&lowered.entry))?;
            match spirv::parse(&bytes, &lowered.label, Some(&lowered.entry)) {
                Ok(module) => (module, ShaderCode::Spirv(bytes)),
                // What naga cannot read goes to the driver as it is (B7).
                Err(refusal) => return passthrough_artifact(lowered, &bytes, &refusal),
            }
        }
    };
    // Every shader feature allowed: what the device lacks (f64,
    // subgroups) is the device's refusal at load, where the device is
    // known, naming the feature; here the source is checked for
    // everything that holds on any device.
    let (needed, info) =
        features::validate_needing(&module).map_err(|error| match lowered.language {
            Language::Wgsl => diagnostics::validation_failure(&error, source, &lowered.label),
            Language::Spirv => {
                diagnostics::spirv_validation_failure(&error, &lowered.label, &lowered.entry)
            }
        })?;

    let Some(entry_index) = module
        .entry_points
        .iter()
        .position(|entry| entry.name == lowered.entry && entry.stage == naga::ShaderStage::Compute)
    else {
        return Err(missing_entry(&module, &lowered.entry));
    };

    let resolved = constants::resolve(&module, &lowered.constants)?;
    let pipeline_constants: naga::back::PipelineConstants = resolved
        .iter()
        .map(|(name, value)| (name.to_owned(), value))
        .collect();
    let (processed, processed_info) = naga::back::pipeline_constants::process_overrides(
        &module,
        &info,
        Some((naga::ShaderStage::Compute, &lowered.entry)),
        &pipeline_constants,
    )
    .map_err(|error| diagnostics::constant_failure(&error, &module, source))?;
    let workgroup_size = processed
        .entry_points
        .iter()
        .find(|entry| entry.name == lowered.entry)
        .map_or(module.entry_points[entry_index].workgroup_size, |entry| {
            entry.workgroup_size
        });

    let bindings = used_bindings(&module, info.get_entry_point(entry_index));
    if let BindingLayout::Explicit(groups) = &lowered.layout {
        check_layout(groups, &bindings, &lowered.entry)?;
    }
    // Sized after the constants are applied: an override may size a
    // workgroup array.
    let resources = processed
        .entry_points
        .iter()
        .position(|entry| entry.name == lowered.entry)
        .map(|index| {
            resources(
                &processed,
                processed_info.get_entry_point(index),
                workgroup_size,
            )
        })
        .unwrap_or_else(|| resources(&module, info.get_entry_point(entry_index), workgroup_size));

    Ok(Finalized::quiet(WgpuArtifact {
        code,
        label: lowered.label,
        entry: lowered.entry,
        constants: resolved,
        required_features: features::feature_names(needed),
        layout: lowered.layout,
        zero_initialize_workgroup_memory: lowered.zero_initialize_workgroup_memory,
        workgroup_size,
        bindings,
        report: ArtifactReport::new(Vec::new(), resources),
        passthrough: false,
    }))
}

/// The artifact of a SPIR-V module naga refused (`refusal`): specialized,
/// validated with spirv-val where it is installed, its workgroup size and
/// bindings read from the module, for the driver's pass-through (B7).
fn passthrough_artifact(
    lowered: WgpuLowered,
    bytes: &[u8],
    refusal: &CompileFailure,
) -> Result<Finalized<WgpuArtifact>, CompileFailure> {
    let label = lowered.label.as_str();
    // A module that cannot go to the driver either fails with naga's reason
    // (naming the entry) and why not.
    let naga_said = refusal
        .first_error()
        .map_or_else(|| refusal.to_string(), |first| first.message.clone());
    let neither = |failure: CompileFailure| {
        let mut failed = CompileFailure::message(format!(
            "{naga_said}; and it cannot go to the driver as it is: {}",
            failure
                .first_error()
                .map_or_else(|| failure.to_string(), |first| first.message.clone())
        ))
        .with_log(failure.log.clone());
        if let Some(hint) = failure.hint.clone().or_else(|| refusal.hint.clone()) {
            failed = failed.with_hint(hint);
        }
        failed
    };
    let (specialized, constants) =
        crate::passthrough::specialize(bytes, &lowered.constants).map_err(neither)?;
    let reflected = crate::passthrough::reflect(&specialized, &lowered.entry).map_err(neither)?;
    if let BindingLayout::Explicit(groups) = &lowered.layout {
        check_layout(groups, &reflected.bindings, &lowered.entry)?;
    }
    let mut diagnostics = vec![kiln_engine::Diagnostic {
        severity: kiln_engine::Severity::Note,
        message: format!(
            "{label}: handed to the driver as it is (naga cannot read it: {naga_said})"
        ),
        location: None,
    }];
    if let Some(unvalidated) = crate::passthrough::validate(&specialized, label).map_err(neither)? {
        diagnostics.push(unvalidated);
    }
    let resources = ResourceUsage {
        workgroup_size: Some(reflected.workgroup_size),
        bindings: u32::try_from(reflected.bindings.len()).ok(),
        ..ResourceUsage::default()
    };
    Ok(Finalized {
        artifact: WgpuArtifact {
            code: ShaderCode::Spirv(specialized),
            label: lowered.label,
            entry: lowered.entry,
            constants,
            required_features: vec!["PASSTHROUGH_SHADERS".to_owned()],
            layout: lowered.layout,
            zero_initialize_workgroup_memory: lowered.zero_initialize_workgroup_memory,
            workgroup_size: reflected.workgroup_size,
            bindings: reflected.bindings,
            report: ArtifactReport::new(diagnostics.clone(), resources),
            passthrough: true,
        },
        diagnostics,
    })
}

/// What the entry point whose analysis is `function` uses (D4): its
/// workgroup size, how many resources it binds (buffers, textures and
/// samplers), and the bytes of the `var<workgroup>` variables it touches,
/// each placed at its type's alignment as a device lays them out.
fn resources(
    module: &naga::Module,
    function: &naga::valid::FunctionInfo,
    workgroup_size: [u32; 3],
) -> ResourceUsage {
    let used = || {
        module
            .global_variables
            .iter()
            .filter(|(handle, _)| !function[*handle].is_empty())
            .map(|(_, variable)| variable)
    };
    let bindings = used().filter(|variable| variable.binding.is_some()).count();
    let mut layouter = naga::proc::Layouter::default();
    let workgroup_memory = match layouter.update(module.to_ctx()) {
        Ok(()) => used()
            .filter(|variable| variable.space == naga::AddressSpace::WorkGroup)
            .try_fold(0u64, |offset, variable| {
                let layout = layouter[variable.ty];
                let start = u64::from(layout.alignment.round_up(u32::try_from(offset).ok()?));
                start.checked_add(u64::from(layout.size))
            }),
        // A module naga validated lays out; should it not, the figure is
        // unknown rather than wrong.
        Err(_) => None,
    };
    ResourceUsage {
        workgroup_size: Some(workgroup_size),
        bindings: u32::try_from(bindings).ok(),
        shared_memory_bytes: workgroup_memory,
        ..ResourceUsage::default()
    }
}

/// The wgpu compiler's store keys (P1): see [`WgpuKey::for_store`].
impl KeyedCompiler for WgpuCompiler {
    fn key_components(&self) -> KeyComponents {
        WgpuKey::for_store()
    }

    /// `-`: a wgpu artifact has no per-target variant; the adapter and
    /// driver key the pipeline cache instead.
    fn variant_label(_variant: &Self::Variant) -> String {
        "-".to_owned()
    }
}

/// The failure of an entry point that is not a `@compute` function.
fn missing_entry(module: &naga::Module, entry: &str) -> CompileFailure {
    let compute: Vec<&str> = module
        .entry_points
        .iter()
        .filter(|point| point.stage == naga::ShaderStage::Compute)
        .map(|point| point.name.as_str())
        .collect();
    let other_stage = module
        .entry_points
        .iter()
        .find(|point| point.name == entry)
        .map(|point| point.stage);
    let message = match other_stage {
        Some(stage) => {
            format!("entry point `{entry}` is a {stage:?} entry point, not a compute one")
        }
        None => format!("entry point `{entry}` is not an entry point of the shader"),
    };
    let hint = if compute.is_empty() {
        "the shader has no compute entry point (@compute, GLCompute); kiln-wgpu builds compute \
         pipelines only"
            .to_owned()
    } else {
        format!(
            "name one of the shader's compute entry points: {}",
            compute.join(", ")
        )
    };
    CompileFailure::message(message).with_hint(hint)
}

/// The buffers the entry point `function` uses.
fn used_bindings(
    module: &naga::Module,
    function: &naga::valid::FunctionInfo,
) -> Vec<ShaderBinding> {
    let mut bindings: Vec<ShaderBinding> = module
        .global_variables
        .iter()
        .filter(|(handle, _)| !function[*handle].is_empty())
        .filter_map(|(_, variable)| {
            let binding = variable.binding.as_ref()?;
            let kind = match variable.space {
                naga::AddressSpace::Uniform => BufferKind::Uniform,
                naga::AddressSpace::Storage { access } => {
                    if access.contains(naga::StorageAccess::STORE) {
                        BufferKind::Storage
                    } else {
                        BufferKind::ReadOnlyStorage
                    }
                }
                // Textures and samplers: automatic layouts take them, and
                // explicit layouts describe buffers only.
                _ => return None,
            };
            Some(ShaderBinding {
                group: binding.group,
                binding: binding.binding,
                kind,
            })
        })
        .collect();
    bindings.sort_by_key(|binding| (binding.group, binding.binding));
    bindings
}

/// Checks that an explicit layout has every buffer the entry point uses,
/// bound as the source declares it.
fn check_layout(
    groups: &[Vec<crate::kernel::BufferBinding>],
    used: &[ShaderBinding],
    entry: &str,
) -> Result<(), CompileFailure> {
    for binding in used {
        let declared = groups
            .get(binding.group as usize)
            .and_then(|group| group.iter().find(|entry| entry.binding == binding.binding));
        let problem = match declared {
            None => format!(
                "the explicit layout has no @group({}) @binding({}), which `{entry}` uses",
                binding.group, binding.binding
            ),
            Some(declared) if declared.kind != binding.kind => format!(
                "the explicit layout binds @group({}) @binding({}) as {:?}, and the source \
                 declares it {:?}",
                binding.group, binding.binding, declared.kind, binding.kind
            ),
            Some(_) => continue,
        };
        return Err(CompileFailure::message(problem).with_hint(
            "make the kernel's BindingLayout match the source's bindings, or use \
             BindingLayout::Automatic",
        ));
    }
    Ok(())
}

impl fmt::Display for ShaderBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "@group({}) @binding({}) {:?}",
            self.group, self.binding, self.kind
        )
    }
}
