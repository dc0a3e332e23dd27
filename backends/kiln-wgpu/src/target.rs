//! The wgpu target: a device (or none, compile-only), a store in front of
//! it, and the driver's pipeline cache kept in that store.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_engine::store::ArtifactStore;
use kiln_engine::{ArtifactId, CompilationTarget, DeviceRefusal, DeviceStep, StoreOutcome};

use crate::compiler::{ShaderCode, WgpuArtifact, WgpuCompiler};
use crate::device::WgpuDevice;
use crate::error::Error;
use crate::features::{self, LoadedOn};
use crate::kernel::{BindingLayout, BufferKind};
use crate::mode;
use crate::module::{Loaded, OnDevice, WgpuPipeline};
use crate::options::WgpuVariant;
use crate::pipeline_cache::{PersistedPipelineCache, PipelineCacheState};

/// Where a wgpu loader's kernels are compiled, kept and loaded.
///
/// - [`on_device`](Self::on_device) builds pipelines on a device;
///   [`compile_only`](Self::compile_only) runs naga alone, for machines
///   without an adapter, and its loaded kernels describe their artifact.
/// - A target is made on the process's default store (in a program on the
///   `kiln` facade, the `KILN_CACHE_*` store);
///   [`without_store`](Self::without_store) keeps none.
/// - [`with_store`](Self::with_store) keeps artifacts in a store (P1-P9)
///   and, on a device with [`wgpu::Features::PIPELINE_CACHE`], the driver's
///   pipeline cache too (B3).
///
/// ```no_run
/// use kiln_engine::{Kernel, KernelId, KernelLoader};
/// use kiln_wgpu::{WgpuDevice, WgpuTarget, WgpuVariant, WgslKernel};
///
/// let target = match WgpuDevice::open() {
///     Ok(device) => WgpuTarget::on_device(device),
///     Err(_) => WgpuTarget::compile_only(),
/// };
/// let mut loader = KernelLoader::new(target);
/// let kernel = WgslKernel::builder(KernelId::named("example.noop"), "main")
///     .source("@compute @workgroup_size(1) fn main() {}");
/// let id = kiln_engine::ArtifactId::new(kernel.id(), WgpuVariant);
/// let pipeline = loader.load(&kernel, &id)?;
/// # Ok::<(), kiln_engine::KernelError>(())
/// ```
#[derive(Debug)]
pub struct WgpuTarget {
    compiler: Arc<WgpuCompiler>,
    device: Option<WgpuDevice>,
    store: Option<Arc<dyn ArtifactStore>>,
    pipeline_cache: Option<PersistedPipelineCache>,
    pipeline_cache_state: PipelineCacheState,
    pipelines_made: usize,
    pipeline_time: Duration,
    /// The features a compile-only target stands for.
    compile_only_features: wgpu::Features,
    /// The device, cache and features above, shared with the workers.
    step: Arc<WgpuDeviceStep>,
}

/// The wgpu target's device step (F9): each pipeline is made on the
/// batch's worker that has its artifact, several at once. A wgpu `Device`
/// is `Send + Sync` and its error scopes belong to the thread that pushed
/// them, so each worker captures its own pipeline's errors. Measured: one
/// device makes pipelines on several threads at once (lavapipe: 2.08x on 2
/// threads; see docs/DEVICE.md).
#[derive(Debug)]
pub struct WgpuDeviceStep {
    /// `None` on a compile-only target: the artifact is described.
    device: Option<WgpuDevice>,
    cache: Option<wgpu::PipelineCache>,
    /// The features a compile-only target stands for.
    compile_only_features: wgpu::Features,
}

/// A pipeline a worker made (none on a compile-only target), and how long
/// the driver took: what [`WgpuTarget`] publishes.
#[derive(Debug)]
pub struct WgpuMade {
    on_device: Option<OnDevice>,
    took: Duration,
}

impl DeviceStep<WgpuCompiler> for WgpuDeviceStep {
    type Made = WgpuMade;

    fn make(
        &self,
        _id: &ArtifactId<WgpuVariant>,
        artifact: &WgpuArtifact,
    ) -> Result<WgpuMade, DeviceRefusal> {
        let started = Instant::now();
        let on_device = match &self.device {
            None => {
                // A pass-through module is checked, not built, without a
                // device: its compile said so.
                let needed: Vec<String> = artifact
                    .required_features
                    .iter()
                    .filter(|name| *name != "PASSTHROUGH_SHADERS")
                    .cloned()
                    .collect();
                features::check(
                    &artifact.entry,
                    &needed,
                    self.compile_only_features,
                    &LoadedOn::CompileOnly,
                )?;
                None
            }
            Some(device) => Some(WgpuTarget::build(device, self.cache.as_ref(), artifact)?),
        };
        Ok(WgpuMade {
            on_device,
            took: started.elapsed(),
        })
    }
}

impl WgpuTarget {
    /// A target that builds pipelines on `device` and keeps nothing beyond
    /// the process.
    ///
    /// In compile-only mode ([`kiln_engine::mode`]) the target is
    /// compile-only, standing for the adapter profile the mode names
    /// (`KILN_WGPU_PROFILE`, see [`AdapterProfile`](crate::AdapterProfile)), and `device` is
    /// dropped (L11); a profile that cannot be found is warned of, and the
    /// target stands for `baseline`.
    pub fn on_device(device: WgpuDevice) -> Self {
        match mode::profile_of_mode() {
            None => Self::new(Some(device)).on_default_store(),
            Some(Ok(profile)) => Self::compile_only_for(profile.features()),
            Some(Err(error)) => {
                log::warn!(
                    "{error}; the compile-only target stands for an adapter without shader \
                     features"
                );
                Self::compile_only()
            }
        }
    }

    /// A target on the best Vulkan adapter here; see [`WgpuDevice::open`].
    ///
    /// # Errors
    ///
    /// No adapter, or it opened no device.
    /// In compile-only mode ([`kiln_engine::mode`]) it opens no adapter and
    /// makes the compile-only target standing for the adapter profile the
    /// mode names (`KILN_WGPU_PROFILE`, see [`AdapterProfile`](crate::AdapterProfile); L11), and
    /// fails with [`Error::AdapterProfile`] when that cannot be found.
    pub fn open() -> Result<Self, Error> {
        match mode::profile_of_mode() {
            None => WgpuDevice::open().map(Self::on_device),
            Some(profile) => Ok(Self::compile_only_for(profile?.features())),
        }
    }

    /// A target without a device: naga parses and validates, loads describe
    /// the artifact. Its artifacts are the same as a device's, so a store it
    /// fills serves devices later.
    pub fn compile_only() -> Self {
        Self::new(None).on_default_store()
    }

    /// The same target on the process's default store
    /// ([`kiln_engine::store::default_store`]), when there is one. Opened
    /// here rather than at the first batch: the pipeline cache is read from
    /// the store when the target is put on it.
    fn on_default_store(self) -> Self {
        match kiln_engine::store::default_store() {
            Some(store) => self.with_store(store),
            None => self,
        }
    }

    /// The same target without a store, not even the default one: its
    /// loader keeps artifacts as long as itself, and the driver's pipeline
    /// cache is not kept.
    #[must_use = "the target without its store is returned, not changed in place"]
    pub fn without_store(mut self) -> Self {
        self.save_pipeline_cache();
        self.store = None;
        self.pipeline_cache = None;
        self.pipeline_cache_state = PipelineCacheState::Unavailable {
            reason: "the target has no store".into(),
        };
        self.refresh_step();
        self
    }

    /// A compile-only target standing for an adapter with `features`: a
    /// kernel needing a shader feature outside them is refused at load as
    /// on a device without it, so one folder of kernels gives the same
    /// answer here as on every adapter with those features.
    /// [`compile_only`](Self::compile_only) stands for
    /// [`DEFAULT_COMPILE_ONLY_FEATURES`](crate::DEFAULT_COMPILE_ONLY_FEATURES)
    /// (none); an adapter's are [`WgpuDevice::features`] on a machine that
    /// has it, or [`parse_features`](crate::parse_features) of their names.
    ///
    /// ```
    /// use kiln_wgpu::{WgpuTarget, wgpu};
    ///
    /// let target = WgpuTarget::compile_only_for(wgpu::Features::SHADER_F64);
    /// assert_eq!(target.compile_only_features(), wgpu::Features::SHADER_F64);
    /// ```
    pub fn compile_only_for(features: wgpu::Features) -> Self {
        let mut target = Self::compile_only();
        target.compile_only_features = features;
        target.refresh_step();
        target
    }

    /// The same target finalizing in compile worker processes, each
    /// limited to `memory` bytes of address space and stopped at the
    /// loader's compile timeout ([`WgpuCompiler::in_workers`]): for shaders
    /// from a source that is not trusted, so that one that makes naga run
    /// away fails alone. The program lists [`worker_entry`](crate::worker_entry)
    /// in its worker hook, or has `kiln-worker` beside it.
    #[must_use = "the target is returned, not changed in place"]
    pub fn with_compiles_in_workers(mut self, memory: u64) -> Self {
        self.compiler = Arc::new(WgpuCompiler::in_workers(memory));
        self
    }

    /// The features a compile-only target stands for (see
    /// [`compile_only_for`](Self::compile_only_for)).
    pub fn compile_only_features(&self) -> wgpu::Features {
        self.compile_only_features
    }

    /// The features kernels may use here: the device's, or those a
    /// compile-only target stands for. A program that chooses its kernels
    /// by them chooses in compile-only mode as on the adapter its profile
    /// names.
    pub fn features(&self) -> wgpu::Features {
        match &self.device {
            Some(device) => device.features(),
            None => self.compile_only_features,
        }
    }

    fn new(device: Option<WgpuDevice>) -> Self {
        Self {
            compiler: Arc::new(WgpuCompiler::default()),
            store: None,
            pipeline_cache: None,
            pipeline_cache_state: PipelineCacheState::Unavailable {
                reason: "the target has no store".into(),
            },
            pipelines_made: 0,
            pipeline_time: Duration::ZERO,
            compile_only_features: features::DEFAULT_COMPILE_ONLY_FEATURES,
            step: Arc::new(WgpuDeviceStep {
                device: device.clone(),
                cache: None,
                compile_only_features: features::DEFAULT_COMPILE_ONLY_FEATURES,
            }),
            device,
        }
    }

    /// The device step again, after the device's cache or the features a
    /// compile-only target stands for changed: the next batch makes its
    /// pipelines with them.
    fn refresh_step(&mut self) {
        self.step = Arc::new(WgpuDeviceStep {
            device: self.device.clone(),
            cache: self
                .pipeline_cache
                .as_ref()
                .map(|cache| cache.cache().clone()),
            compile_only_features: self.compile_only_features,
        });
    }

    /// The same target keeping its artifacts in `store`, and its device's
    /// pipeline cache too where the device has one. The pipeline cache is
    /// read from the store now and written back after each batch that made
    /// a pipeline.
    #[must_use = "the target with its store is returned, not changed in place"]
    pub fn with_store(mut self, store: Arc<dyn ArtifactStore>) -> Self {
        // Whatever the target held for another store is saved there first.
        self.save_pipeline_cache();
        self.store = Some(Arc::clone(&store));
        self.pipeline_cache = None;
        self.pipeline_cache_state = match &self.device {
            None => PipelineCacheState::Unavailable {
                reason: "compile-only: no device".into(),
            },
            Some(device) => match PersistedPipelineCache::open(device, store) {
                Ok(cache) => {
                    let state = cache.state().clone();
                    self.pipeline_cache = Some(cache);
                    state
                }
                Err(state) => state,
            },
        };
        log::debug!("wgpu target: {}", self.pipeline_cache_state);
        self.refresh_step();
        self
    }

    /// The same target on `store` when there is one, as it is otherwise:
    /// for a store that may be disabled, such as the facade's
    /// `kiln::Store::from_env()` or kiln-store's `DiskStore::open_from_env()`
    /// under `KILN_CACHE_DISABLE=1`.
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// use kiln_engine::{CompilationTarget, MemoryStore};
    /// use kiln_wgpu::WgpuTarget;
    ///
    /// let storeless = WgpuTarget::compile_only().with_optional_store(None);
    /// assert!(storeless.store().is_none());
    /// let stored = WgpuTarget::compile_only().with_optional_store(Some(Arc::new(MemoryStore::new())));
    /// assert!(stored.store().is_some());
    /// ```
    #[must_use = "the target with its store is returned, not changed in place"]
    pub fn with_optional_store(self, store: Option<Arc<dyn ArtifactStore>>) -> Self {
        match store {
            Some(store) => self.with_store(store),
            None => self,
        }
    }

    /// The device; `None` on a compile-only target.
    pub fn device(&self) -> Option<&WgpuDevice> {
        self.device.as_ref()
    }

    /// How the pipeline cache started: loaded from the store, empty,
    /// refused, or unavailable and why.
    pub fn pipeline_cache_state(&self) -> &PipelineCacheState {
        &self.pipeline_cache_state
    }

    /// Whether pipelines are made through a pipeline cache kept in the store.
    pub fn has_pipeline_cache(&self) -> bool {
        self.pipeline_cache.is_some()
    }

    /// How many pipelines this target made, and the time it spent making
    /// them (shader module, layouts and pipeline, on the driver).
    pub fn pipelines_made(&self) -> (usize, Duration) {
        (self.pipelines_made, self.pipeline_time)
    }

    /// Writes the pipeline cache to the store now, if pipelines were made
    /// since it was last written; the loader does this after every batch.
    pub fn save_pipeline_cache(&mut self) -> StoreOutcome {
        match &mut self.pipeline_cache {
            Some(cache) => cache.save(),
            None => StoreOutcome::Skipped,
        }
    }

    /// Makes the pipeline of `artifact` on `device`, every wgpu error
    /// captured.
    fn build(
        device: &WgpuDevice,
        cache: Option<&wgpu::PipelineCache>,
        artifact: &WgpuArtifact,
    ) -> Result<OnDevice, DeviceRefusal> {
        features::check(
            &artifact.entry,
            &artifact.required_features,
            device.features(),
            &LoadedOn::Device {
                adapter: &device.info().name,
                adapter_features: device.adapter_features(),
            },
        )?;
        let wgpu_device = device.device();
        let label = Some(artifact.label.as_str());
        let (built, error) = device.capture(|| {
            let module = match &artifact.code {
                // A module naga cannot read goes to the driver as it is (B7).
                ShaderCode::Spirv(bytes) if artifact.passthrough => {
                    let [x, y, z] = artifact.workgroup_size;
                    let entry_points = [wgpu::PassthroughShaderEntryPoint {
                        name: artifact.entry.as_str().into(),
                        workgroup_size: (x, y, z),
                    }];
                    // SAFETY: the module is valid SPIR-V (spirv-val passed it
                    // where it is installed, the compile says where not), and
                    // the pipeline's layout is the bindings read from it.
                    unsafe {
                        wgpu_device.create_shader_module_passthrough(
                            wgpu::ShaderModuleDescriptorPassthrough {
                                label,
                                entry_points: entry_points.as_slice().into(),
                                spirv: Some(crate::spirv::words(bytes).into()),
                                ..Default::default()
                            },
                        )
                    }
                }
                ShaderCode::Wgsl(text) => {
                    wgpu_device.create_shader_module(wgpu::ShaderModuleDescriptor {
                        label,
                        source: wgpu::ShaderSource::Wgsl(text.as_str().into()),
                    })
                }
                ShaderCode::Spirv(bytes) => {
                    wgpu_device.create_shader_module(wgpu::ShaderModuleDescriptor {
                        label,
                        source: wgpu::ShaderSource::SpirV(crate::spirv::words(bytes).into()),
                    })
                }
            };
            // A pass-through module has no layout wgpu can derive: its own
            // bindings make one.
            let reflected = (artifact.passthrough
                && matches!(artifact.layout, BindingLayout::Automatic))
            .then(|| reflected_layout(&artifact.bindings));
            let explicit: Option<Vec<wgpu::BindGroupLayout>> = match reflected
                .as_ref()
                .unwrap_or(&artifact.layout)
            {
                BindingLayout::Automatic => None,
                BindingLayout::Explicit(groups) => Some(
                    groups
                        .iter()
                        .map(|bindings| {
                            let entries: Vec<wgpu::BindGroupLayoutEntry> = bindings
                                .iter()
                                .map(|binding| wgpu::BindGroupLayoutEntry {
                                    binding: binding.binding,
                                    visibility: wgpu::ShaderStages::COMPUTE,
                                    ty: wgpu::BindingType::Buffer {
                                        ty: match binding.kind {
                                            BufferKind::Uniform => wgpu::BufferBindingType::Uniform,
                                            BufferKind::ReadOnlyStorage => {
                                                wgpu::BufferBindingType::Storage { read_only: true }
                                            }
                                            BufferKind::Storage => {
                                                wgpu::BufferBindingType::Storage {
                                                    read_only: false,
                                                }
                                            }
                                        },
                                        has_dynamic_offset: false,
                                        min_binding_size: None,
                                    },
                                    count: None,
                                })
                                .collect();
                            wgpu_device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                                label,
                                entries: &entries,
                            })
                        })
                        .collect(),
                ),
            };
            let layout = explicit.as_ref().map(|layouts| {
                let groups: Vec<Option<&wgpu::BindGroupLayout>> =
                    layouts.iter().map(Some).collect();
                wgpu_device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                    label,
                    bind_group_layouts: &groups,
                    immediate_size: 0,
                })
            });
            // A pass-through module's constants are in its bytes already.
            let constants: Vec<(&str, f64)> = if artifact.passthrough {
                Vec::new()
            } else {
                artifact.constants.iter().collect()
            };
            let pipeline = wgpu_device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label,
                layout: layout.as_ref(),
                module: &module,
                entry_point: Some(&artifact.entry),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants: &constants,
                    zero_initialize_workgroup_memory: artifact.zero_initialize_workgroup_memory,
                },
                cache,
            });
            let bind_group_layouts = match explicit {
                Some(layouts) => layouts,
                None => {
                    let groups = artifact
                        .bindings
                        .iter()
                        .map(|binding| binding.group + 1)
                        .max()
                        .unwrap_or(0);
                    (0..groups)
                        .map(|group| pipeline.get_bind_group_layout(group))
                        .collect()
                }
            };
            OnDevice {
                pipeline,
                bind_group_layouts,
            }
        });
        match error {
            None => Ok(built),
            Some(error) => Err(DeviceRefusal::new(format!(
                "the device refused the pipeline of `{}`: {}",
                artifact.entry,
                one_paragraph(&error.to_string())
            ))),
        }
    }
}

/// The explicit layout of `bindings`: one group per group number up to
/// the highest, each with the buffers bound in it.
fn reflected_layout(bindings: &[crate::compiler::ShaderBinding]) -> BindingLayout {
    let groups = bindings
        .iter()
        .map(|binding| binding.group as usize + 1)
        .max()
        .unwrap_or(0);
    let mut layout = vec![Vec::new(); groups];
    for binding in bindings {
        layout[binding.group as usize].push(crate::kernel::BufferBinding {
            binding: binding.binding,
            kind: binding.kind,
        });
    }
    BindingLayout::Explicit(layout)
}

/// wgpu's multi-line error text as one paragraph.
fn one_paragraph(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

impl CompilationTarget for WgpuTarget {
    type Compiler = WgpuCompiler;
    type Loaded = WgpuPipeline;
    type Device = WgpuDeviceStep;

    fn compiler(&self) -> &Arc<WgpuCompiler> {
        &self.compiler
    }

    fn device_step(&self) -> &Arc<WgpuDeviceStep> {
        &self.step
    }

    fn store(&self) -> Option<&Arc<dyn ArtifactStore>> {
        self.store.as_ref()
    }

    fn batch_finished(&mut self) {
        self.save_pipeline_cache();
    }

    fn publish(
        &mut self,
        _id: &ArtifactId<WgpuVariant>,
        artifact: &WgpuArtifact,
        made: WgpuMade,
    ) -> Result<WgpuPipeline, DeviceRefusal> {
        if made.on_device.is_some() {
            log::trace!(
                "wgpu: the pipeline of {} made in {:?}",
                artifact.label,
                made.took
            );
            self.pipelines_made += 1;
            self.pipeline_time += made.took;
            if let Some(cache) = &mut self.pipeline_cache {
                cache.made_pipeline(made.took);
            }
        }
        Ok(WgpuPipeline::new(Loaded {
            label: artifact.label.clone(),
            entry: artifact.entry.clone(),
            workgroup_size: artifact.workgroup_size,
            bindings: artifact.bindings.clone(),
            report: artifact.report.clone(),
            on_device: made.on_device,
        }))
    }
}

impl Drop for WgpuTarget {
    fn drop(&mut self) {
        // Pipelines made outside a batch's end (none today) are not lost.
        self.save_pipeline_cache();
    }
}
