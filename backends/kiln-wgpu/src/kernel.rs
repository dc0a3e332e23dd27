//! wgpu kernels: a user generator of WGSL source or SPIR-V bytes, the
//! compute entry point, the values of the shader's pipeline-overridable
//! constants (WGSL `override`s, SPIR-V specialization constants), and the
//! bind group layout the pipeline is built with.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::modules::WgslModule;
use kiln_engine::{CompileFailure, Kernel, KernelId, KernelIdBuilder};
use serde::{Deserialize, Serialize};

/// Generates a kernel's WGSL source: the user code kiln runs in `lower`, on
/// a worker thread, only when the kernel is neither loaded nor stored.
///
/// Closures `Fn() -> Result<String, CompileFailure>` are generators.
///
/// # Contract
///
/// The same generator returns the same text every time: the kernel's id
/// stands for it.
pub trait WgslGenerator: Send + Sync {
    /// The source.
    ///
    /// # Errors
    ///
    /// Why no source can be made; the kernel fails alone with it.
    fn generate(&self) -> Result<String, CompileFailure>;
}

impl<F> WgslGenerator for F
where
    F: Fn() -> Result<String, CompileFailure> + Send + Sync,
{
    fn generate(&self) -> Result<String, CompileFailure> {
        self()
    }
}

/// Generates a kernel's SPIR-V module (its bytes, as `glslangValidator -V`
/// or `spirv-as` write them): the user code kiln runs in `lower`, on a
/// worker thread, only when the kernel is neither loaded nor stored.
///
/// Closures `Fn() -> Result<Vec<u8>, CompileFailure>` are generators.
///
/// # Contract
///
/// The same generator returns the same bytes every time: the kernel's id
/// stands for them.
pub trait SpirvGenerator: Send + Sync {
    /// The module's bytes.
    ///
    /// # Errors
    ///
    /// Why no module can be made; the kernel fails alone with it.
    fn generate(&self) -> Result<Vec<u8>, CompileFailure>;
}

impl<F> SpirvGenerator for F
where
    F: Fn() -> Result<Vec<u8>, CompileFailure> + Send + Sync,
{
    fn generate(&self) -> Result<Vec<u8>, CompileFailure> {
        self()
    }
}

/// A generator that returns the text it was given.
struct FixedSource(Arc<str>);

impl WgslGenerator for FixedSource {
    fn generate(&self) -> Result<String, CompileFailure> {
        Ok(self.0.to_string())
    }
}

/// A generator that returns the bytes it was given.
struct FixedModule(Arc<[u8]>);

impl SpirvGenerator for FixedModule {
    fn generate(&self) -> Result<Vec<u8>, CompileFailure> {
        Ok(self.0.to_vec())
    }
}

/// The language of a kernel's shader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Language {
    /// WGSL text.
    Wgsl,
    /// A SPIR-V module (from GLSL, HLSL, rust-gpu, ...), read by naga's
    /// SPIR-V front end.
    Spirv,
}

impl Language {
    /// `wgsl` or `spir-v`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Wgsl => "wgsl",
            Self::Spirv => "spir-v",
        }
    }
}

/// What a kernel's shader is made by.
#[derive(Clone)]
enum Code {
    Wgsl(Arc<dyn WgslGenerator>),
    Spirv(Arc<dyn SpirvGenerator>),
}

/// What a kernel's generator made.
pub(crate) enum Generated {
    Wgsl(String),
    Spirv(Vec<u8>),
}

/// What a buffer binding of an explicit layout holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BufferKind {
    /// `var<uniform>`.
    Uniform,
    /// `var<storage, read>`.
    ReadOnlyStorage,
    /// `var<storage, read_write>`.
    Storage,
}

/// One binding of an explicit bind group layout: a buffer the compute
/// stage sees at `@binding(binding)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BufferBinding {
    /// The `@binding` number.
    pub binding: u32,
    /// What the buffer is bound as.
    pub kind: BufferKind,
}

impl BufferBinding {
    /// A uniform buffer at `binding`.
    pub const fn uniform(binding: u32) -> Self {
        Self {
            binding,
            kind: BufferKind::Uniform,
        }
    }

    /// A read-only storage buffer at `binding`.
    pub const fn read_only(binding: u32) -> Self {
        Self {
            binding,
            kind: BufferKind::ReadOnlyStorage,
        }
    }

    /// A read-write storage buffer at `binding`.
    pub const fn storage(binding: u32) -> Self {
        Self {
            binding,
            kind: BufferKind::Storage,
        }
    }
}

/// How a kernel's pipeline gets its bind group layouts.
///
/// `Automatic` lets wgpu derive them from the shader, which suits a kernel
/// used alone. `Explicit` names them, so that several kernels can share one
/// bind group (and a wrong layout is the device's refusal of the kernel,
/// not a surprise at the first launch).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BindingLayout {
    /// Derived from the shader by wgpu.
    #[default]
    Automatic,
    /// One list of buffer bindings per bind group, group 0 first.
    Explicit(Vec<Vec<BufferBinding>>),
}

impl BindingLayout {
    /// An explicit layout of one bind group.
    pub fn one_group(bindings: impl Into<Vec<BufferBinding>>) -> Self {
        Self::Explicit(vec![bindings.into()])
    }
}

impl fmt::Display for BindingLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Automatic => f.write_str("automatic"),
            Self::Explicit(groups) => {
                for (group, bindings) in groups.iter().enumerate() {
                    if group > 0 {
                        f.write_str(" ")?;
                    }
                    write!(f, "{group}:[")?;
                    for (index, binding) in bindings.iter().enumerate() {
                        if index > 0 {
                            f.write_str(",")?;
                        }
                        let kind = match binding.kind {
                            BufferKind::Uniform => "uniform",
                            BufferKind::ReadOnlyStorage => "read",
                            BufferKind::Storage => "read_write",
                        };
                        write!(f, "{}={kind}", binding.binding)?;
                    }
                    f.write_str("]")?;
                }
                Ok(())
            }
        }
    }
}

/// The values of a shader's pipeline-overridable constants, by name or by
/// number (a WGSL `@id(n)`, a SPIR-V `SpecId`), in a fixed order.
///
/// A constant declared with a number can be set by either: `1300` or
/// `gain` for `@id(1300) override gain: f32`, `0` or the name GLSL gave it
/// for `layout(constant_id = 0) const float scale`. A value is an `f64` as
/// wgpu takes it and is converted to the constant's type when the pipeline
/// is built; a name the shader does not declare, a constant set twice
/// (once by name, once by number) or a value its type cannot hold fails
/// the kernel in finalize.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Constants(BTreeMap<String, f64>);

impl Constants {
    /// No constant set: every override keeps its default.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `name` to `value`.
    pub fn set(&mut self, name: impl Into<String>, value: f64) {
        self.0.insert(name.into(), value);
    }

    /// Whether none is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every `(name, value)`, ordered by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, f64)> {
        self.0.iter().map(|(name, value)| (name.as_str(), *value))
    }

    /// `name=value` pairs separated by spaces, the values in Rust's shortest
    /// exact form: what kernel ids, lowered text and keys are made of.
    pub fn canonical(&self) -> String {
        self.iter()
            .map(|(name, value)| format!("{name}={value:?}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl Serialize for Constants {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // As bits: an f64's bits round-trip exactly in every encoding.
        let bits: Vec<(&str, u64)> = self
            .0
            .iter()
            .map(|(name, value)| (name.as_str(), value.to_bits()))
            .collect();
        bits.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Constants {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let bits: Vec<(String, u64)> = Vec::deserialize(deserializer)?;
        Ok(Self(
            bits.into_iter()
                .map(|(name, bits)| (name, f64::from_bits(bits)))
                .collect(),
        ))
    }
}

/// A wgpu compute kernel, WGSL or SPIR-V: cheap to clone, its id computed
/// once when built.
///
/// A SPIR-V kernel is finished with [`WgslKernelBuilder::spirv`] (or
/// [`spirv_generator`](WgslKernelBuilder::spirv_generator)) instead of
/// `source`; its entry point is a `GLCompute` entry of the module and its
/// constants are the module's specialization constants. Everything else is
/// the same as for WGSL.
///
/// ```
/// use kiln_engine::KernelId;
/// use kiln_wgpu::{BindingLayout, BufferBinding, WgslKernel};
///
/// // A fixed source: its text is part of the id.
/// let double = WgslKernel::builder(KernelId::named("example.double"), "main").source(
///     "@group(0) @binding(0) var<storage, read_write> data: array<f32>;\n\
///      @compute @workgroup_size(64)\n\
///      fn main(@builtin(global_invocation_id) id: vec3<u32>) {\n\
///          if id.x < arrayLength(&data) { data[id.x] = 2.0 * data[id.x]; }\n\
///      }\n",
/// );
///
/// // A generated source with a constant set per kernel: the id is made of
/// // the parameters the generator reads, and the generator runs only when
/// // kiln compiles the kernel.
/// let factor = 3.0;
/// let scale = WgslKernel::builder(KernelId::named("example.scale"), "main")
///     .constant("factor", factor)
///     .layout(BindingLayout::one_group([BufferBinding::storage(0)]))
///     .generator(|| {
///         Ok("override factor: f32 = 1.0;\n\
///             @group(0) @binding(0) var<storage, read_write> data: array<f32>;\n\
///             @compute @workgroup_size(64)\n\
///             fn main(@builtin(global_invocation_id) id: vec3<u32>) {\n\
///                 if id.x < arrayLength(&data) { data[id.x] = factor * data[id.x]; }\n\
///             }\n"
///             .to_owned())
///     });
/// assert_ne!(kiln_engine::Kernel::id(&double), kiln_engine::Kernel::id(&scale));
/// ```
#[derive(Clone)]
pub struct WgslKernel {
    id: KernelId,
    label: String,
    entry: String,
    constants: Constants,
    layout: BindingLayout,
    zero_initialize_workgroup_memory: bool,
    modules: Vec<WgslModule>,
    code: Code,
}

impl WgslKernel {
    /// Starts a kernel whose id is `id` (its family name and the parameters
    /// its source depends on) and whose entry point is the `@compute`
    /// function `entry`.
    pub fn builder(id: KernelIdBuilder, entry: impl Into<String>) -> WgslKernelBuilder {
        WgslKernelBuilder {
            id,
            label: None,
            entry: entry.into(),
            constants: Constants::new(),
            layout: BindingLayout::Automatic,
            zero_initialize_workgroup_memory: true,
            modules: Vec::new(),
        }
    }

    /// The WGSL modules the kernel may `#import` (B9).
    pub fn modules(&self) -> &[WgslModule] {
        &self.modules
    }

    /// The name diagnostics and wgpu labels give the kernel (`main.wgsl`).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The entry point.
    pub fn entry(&self) -> &str {
        &self.entry
    }

    /// The values of the pipeline-overridable constants.
    pub fn constants(&self) -> &Constants {
        &self.constants
    }

    /// The bind group layout.
    pub fn layout(&self) -> &BindingLayout {
        &self.layout
    }

    /// Whether workgroup memory starts zeroed (wgpu's default, which costs
    /// a little at each dispatch).
    pub fn zero_initializes_workgroup_memory(&self) -> bool {
        self.zero_initialize_workgroup_memory
    }

    /// The shader's language.
    pub fn language(&self) -> Language {
        match self.code {
            Code::Wgsl(_) => Language::Wgsl,
            Code::Spirv(_) => Language::Spirv,
        }
    }

    /// Runs the generator of a WGSL kernel.
    ///
    /// # Errors
    ///
    /// What the generator reported; a SPIR-V kernel has no WGSL (see
    /// [`generate_spirv`](Self::generate_spirv)).
    pub fn generate(&self) -> Result<String, CompileFailure> {
        match &self.code {
            Code::Wgsl(generator) => generator.generate(),
            Code::Spirv(_) => Err(CompileFailure::message(format!(
                "`{}` is a SPIR-V kernel: it has no WGSL text",
                self.label
            ))),
        }
    }

    /// Runs the generator of a SPIR-V kernel.
    ///
    /// # Errors
    ///
    /// What the generator reported; a WGSL kernel has no SPIR-V.
    pub fn generate_spirv(&self) -> Result<Vec<u8>, CompileFailure> {
        match &self.code {
            Code::Spirv(generator) => generator.generate(),
            Code::Wgsl(_) => Err(CompileFailure::message(format!(
                "`{}` is a WGSL kernel: it has no SPIR-V module",
                self.label
            ))),
        }
    }

    /// Runs whichever generator the kernel has.
    pub(crate) fn generate_code(&self) -> Result<Generated, CompileFailure> {
        match &self.code {
            Code::Wgsl(generator) => generator.generate().map(Generated::Wgsl),
            Code::Spirv(generator) => generator.generate().map(Generated::Spirv),
        }
    }
}

impl Kernel for WgslKernel {
    fn id(&self) -> KernelId {
        self.id.clone()
    }
}

impl fmt::Debug for WgslKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WgslKernel")
            .field("id", &self.id)
            .field("label", &self.label)
            .field("entry", &self.entry)
            .field("language", &self.language())
            .field("constants", &self.constants)
            .field("layout", &self.layout)
            .finish_non_exhaustive()
    }
}

/// Builds a [`WgslKernel`]; see [`WgslKernel::builder`].
#[must_use = "a builder makes no kernel until `source` or `generator` is called"]
pub struct WgslKernelBuilder {
    id: KernelIdBuilder,
    label: Option<String>,
    entry: String,
    constants: Constants,
    layout: BindingLayout,
    zero_initialize_workgroup_memory: bool,
    modules: Vec<WgslModule>,
}

impl WgslKernelBuilder {
    /// Gives the kernel the WGSL module `name` (`shared::math`, from the
    /// file `file`, for messages) to `#import` (B9): naga_oil composes the
    /// kernel with the modules it imports. A module's text names itself
    /// with `#define_import_path` or is known by `name`. Its bytes join the
    /// kernel's id and key (P13).
    pub fn module(
        mut self,
        name: impl Into<String>,
        file: impl Into<String>,
        source: impl Into<String>,
    ) -> Self {
        let module = WgslModule {
            name: name.into(),
            file: file.into(),
            source: source.into(),
        };
        self.id = self
            .id
            .parameter(module.name.as_str())
            .parameter(module.file.as_str())
            .bytes(module.source.as_bytes());
        self.modules.push(module);
        self
    }

    /// Names the kernel in diagnostics and wgpu labels; the default is the
    /// entry point's name with `.wgsl` (`.spv` for SPIR-V).
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Sets the pipeline-overridable constant `name` (or its number: a
    /// WGSL `@id`, a SPIR-V `SpecId`) to `value`.
    pub fn constant(mut self, name: impl Into<String>, value: f64) -> Self {
        self.constants.set(name, value);
        self
    }

    /// Sets every constant of `constants`.
    pub fn constants(mut self, constants: Constants) -> Self {
        for (name, value) in constants.iter() {
            self.constants.set(name, value);
        }
        self
    }

    /// Builds the pipeline with `layout`.
    pub fn layout(mut self, layout: BindingLayout) -> Self {
        self.layout = layout;
        self
    }

    /// Whether workgroup memory starts zeroed; wgpu's default is yes.
    pub fn zero_initialize_workgroup_memory(mut self, zeroed: bool) -> Self {
        self.zero_initialize_workgroup_memory = zeroed;
        self
    }

    /// Finishes the kernel with a fixed source, whose text joins its id.
    pub fn source(self, source: impl Into<String>) -> WgslKernel {
        let source: Arc<str> = Arc::from(source.into());
        let id = self.id.bytes(source.as_bytes());
        Self { id, ..self }.finish(Code::Wgsl(Arc::new(FixedSource(source))))
    }

    /// Finishes the kernel with a generator, which kiln runs when it
    /// compiles the kernel. The id must cover every parameter the generator
    /// reads (see [`WgslGenerator`]'s contract).
    pub fn generator(self, generator: impl WgslGenerator + 'static) -> WgslKernel {
        self.finish(Code::Wgsl(Arc::new(generator)))
    }

    /// Finishes a SPIR-V kernel with a fixed module, whose bytes join its
    /// id: the entry point is one of the module's `GLCompute` entries.
    ///
    /// ```
    /// use kiln_engine::{Kernel, KernelId};
    /// use kiln_wgpu::{Language, WgslKernel};
    ///
    /// # let spirv: Vec<u8> = Vec::new();
    /// // `spirv`: what `glslangValidator -V scale.comp` wrote.
    /// let scale = WgslKernel::builder(KernelId::named("example.scale"), "main")
    ///     .constant("0", 2.5) // layout(constant_id = 0)
    ///     .spirv(spirv);
    /// assert_eq!(scale.language(), Language::Spirv);
    /// assert_eq!(scale.label(), "main.spv");
    /// ```
    pub fn spirv(self, bytes: impl Into<Vec<u8>>) -> WgslKernel {
        let bytes: Arc<[u8]> = Arc::from(bytes.into());
        let id = self.id.parameter("spir-v").bytes(&bytes);
        Self { id, ..self }.finish(Code::Spirv(Arc::new(FixedModule(bytes))))
    }

    /// Finishes a SPIR-V kernel with a generator of its module, which kiln
    /// runs when it compiles the kernel. The id must cover every parameter
    /// the generator reads (see [`SpirvGenerator`]'s contract).
    pub fn spirv_generator(self, generator: impl SpirvGenerator + 'static) -> WgslKernel {
        let id = self.id.parameter("spir-v");
        Self { id, ..self }.finish(Code::Spirv(Arc::new(generator)))
    }

    fn finish(self, code: Code) -> WgslKernel {
        let extension = match code {
            Code::Wgsl(_) => "wgsl",
            Code::Spirv(_) => "spv",
        };
        let label = self
            .label
            .unwrap_or_else(|| format!("{}.{extension}", self.entry));
        // Everything that changes the pipeline joins the id, so two kernels
        // of one family with other constants or layouts never share an id.
        let id = self
            .id
            .parameter("kiln-wgpu")
            .parameter(self.entry.as_str())
            .parameter(self.constants.canonical().as_str())
            .parameter(&self.layout)
            .parameter(&self.zero_initialize_workgroup_memory)
            .parameter(label.as_str())
            .build();
        WgslKernel {
            id,
            label,
            entry: self.entry,
            constants: self.constants,
            layout: self.layout,
            zero_initialize_workgroup_memory: self.zero_initialize_workgroup_memory,
            modules: self.modules,
            code,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(constant: f64) -> WgslKernel {
        WgslKernel::builder(KernelId::named("tests.kernel"), "main")
            .constant("c", constant)
            .source("@compute @workgroup_size(1) fn main() {}")
    }

    #[test]
    fn constants_are_part_of_the_id() {
        assert_eq!(kernel(1.0).id(), kernel(1.0).id());
        assert_ne!(kernel(1.0).id(), kernel(2.0).id());
    }

    #[test]
    fn constants_round_trip_exactly() {
        let mut constants = Constants::new();
        constants.set("b", 0.1);
        constants.set("a", -0.0);
        let bytes = bincode_like(&constants);
        assert_eq!(bytes, constants);
        assert_eq!(constants.canonical(), "a=-0.0 b=0.1");
    }

    fn bincode_like(constants: &Constants) -> Constants {
        let text = serde_json::to_string(constants).expect("constants serialize");
        serde_json::from_str(&text).expect("constants deserialize")
    }
}
