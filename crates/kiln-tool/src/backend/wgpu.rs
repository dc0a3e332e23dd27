//! wgpu: `.wgsl` files and `.spv` SPIR-V modules, in one batch with one
//! pipeline cache, on the Vulkan adapter when there is one, else with naga
//! alone.

use std::sync::Arc;

use kiln_engine::resources::decode_report;
use kiln_engine::worker::WorkerEntry;
use kiln_engine::{ArtifactReport, CompileFailure, StoreKey};
use kiln_wgpu::{WgpuArtifact, WgpuCompiler, WgpuTarget, WgpuVariant, WgslKernel};

use super::batch::{self, Placed};
use super::{Backend, BackendReport, Job, Recompiler};
use crate::kernel::Language;

/// The wgpu backend.
pub struct Wgpu;

impl Backend for Wgpu {
    fn name(&self) -> &'static str {
        "wgpu"
    }

    // WGSL and SPIR-V share wgpu's batch, target and pipeline cache.
    fn languages(&self) -> &'static [Language] {
        &[Language::Wgsl, Language::Spirv]
    }

    fn warm(&self, job: &Job<'_>) -> BackendReport {
        let make = || {
            batch::kernels_of(&job.files, |_, file, entry, specialization| {
                let mut builder =
                    WgslKernel::builder(batch::base_id(file, entry, specialization), entry)
                        .label(file.name.clone());
                // The modules its `#import`s reach (B9), in its id and key.
                for module in &file.modules {
                    builder = builder.module(
                        module.name.clone(),
                        module.file.clone(),
                        module.source.clone(),
                    );
                }
                let mut refused = None;
                for (name, value) in &specialization.0 {
                    match constant_value(value) {
                        Some(number) => builder = builder.constant(name.clone(), number),
                        // Never passed on as some number: the kernel fails
                        // alone, naming the constant and what it was given.
                        None => {
                            refused.get_or_insert(format!(
                                "the constant {name}={value} is neither a number nor true or \
                                 false"
                            ));
                        }
                    }
                }
                // A refused constant fails the kernel when it compiles, alone.
                let check = move || match &refused {
                    Some(reason) => Err(CompileFailure::message(reason.clone())
                        .with_hint("write a number, or true or false for a bool")),
                    None => Ok(()),
                };
                match &file.module {
                    Some(module) => {
                        let module = Arc::clone(module);
                        builder.spirv_generator(move || check().map(|()| module.to_vec()))
                    }
                    None => {
                        let source = Arc::clone(&file.source);
                        builder.generator(move || check().map(|()| source.to_string()))
                    }
                }
            })
        };
        // `kiln warm` started opening it beside its other start-up work.
        let (target, description, on_device) = match super::wgpu_early::open_wgpu_device() {
            Ok(device) => {
                let description = format!("{} (Vulkan)", device.info().name);
                // The process's exit frees the device: a handle kept past
                // the target means the batch's end does not tear the driver
                // down (its threads joined, its memory freed, every Vulkan
                // driver unloaded: 8-14 ms on lavapipe, one thread, after
                // the last kernel), which the exit does anyway.
                keep_until_exit(device.clone());
                (WgpuTarget::on_device(device), description, true)
            }
            Err(error) => {
                log::info!("wgpu: {error}; compiling with naga alone");
                (
                    WgpuTarget::compile_only(),
                    format!(
                        "compile-only: naga {} (no adapter)",
                        kiln_wgpu::NAGA_VERSION
                    ),
                    false,
                )
            }
        };
        log::debug!("wgpu: {description}");
        // The folder's shaders are not trusted: naga reads them in compile
        // workers, each under the compile timeout and a memory limit, so
        // a shader that makes naga run away fails alone.
        let target = target.with_compiles_in_workers(kiln_wgpu::DEFAULT_WORKER_MEMORY);
        let target = match &job.store {
            Some(store) => target.with_store(Arc::clone(store)),
            None => target.without_store(),
        };
        let placed = Placed {
            target,
            variant: WgpuVariant,
            description,
            on_device,
        };
        let (mut report, target) = batch::run("wgpu", placed, job.retry_failed, job.progress, make);
        if on_device {
            report.pipeline_cache = Some(target.pipeline_cache_state().to_string());
        }
        // The target closes here (its pipeline cache saved); its device
        // is left to the process's exit.
        drop(target);
        log::debug!("wgpu: the target closed, its device left to the exit");
        report
    }

    fn worker_entry(&self) -> Option<WorkerEntry> {
        Some(kiln_wgpu::worker_entry())
    }

    fn variant_label(&self, key: &StoreKey) -> Option<String> {
        super::label_as::<WgpuCompiler>(key)
    }

    fn stored_report(&self, bytes: &[u8]) -> Option<ArtifactReport> {
        decode_report::<WgpuArtifact>(bytes)
    }

    fn specialization(&self, bytes: &[u8]) -> Option<Vec<String>> {
        let lowered = super::lowered::<WgpuArtifact, kiln_wgpu::WgpuLowered>(bytes)?;
        let constants = lowered.constants().iter();
        Some(
            constants
                .map(|(name, value)| format!("{name}={value}"))
                .collect(),
        )
    }

    fn recompiler(&self) -> Result<Box<dyn Recompiler>, String> {
        // naga is in the binary: there is always one, of every key's
        // architecture.
        Ok(super::keyed(WgpuCompiler::default(), |_, _| None))
    }
}

/// Keeps `device` open until the process exits: `kiln warm` makes one
/// wgpu batch and ends, and the exit frees what the driver holds.
fn keep_until_exit(device: kiln_wgpu::WgpuDevice) {
    std::mem::forget(device);
}

/// The number a `// kiln specialize:` value gives a WGSL `override`: `true`
/// and `false` as 1 and 0, a finite number as itself; `None` for anything
/// else. kiln-wgpu then checks it fits the constant's declared type.
fn constant_value(text: &str) -> Option<f64> {
    match text {
        "true" => Some(1.0),
        "false" => Some(0.0),
        _ => text.parse::<f64>().ok().filter(|number| number.is_finite()),
    }
}
