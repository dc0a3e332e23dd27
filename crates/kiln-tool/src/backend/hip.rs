//! HIP: `.hip` files, and `.cu` files when asked (`--backend hip`) or
//! when their header names hip, compiled by hipRTC in compile workers, for
//! gfx90a when there is no GPU.

use std::sync::Arc;

use kiln_engine::resources::decode_report;
use kiln_engine::store::ArtifactStore;
use kiln_engine::worker::WorkerEntry;
use kiln_engine::{ArtifactReport, CompilationTarget, KernelIdBuilder, StoreKey};
use kiln_hip::{
    Architecture, HipArtifact, HipCompiler, HipKernel, HipKernelBuilder, HipOptions, HipTarget,
    HipVariant,
};

use super::cxx::{self, Cxx, Source};
use super::{Architectures, Backend, BackendReport, Job, Recompiler};
use crate::kernel::Language;
use crate::manifest::KernelFile;

/// The HIP backend.
pub struct Hip;

impl Backend for Hip {
    fn name(&self) -> &'static str {
        "hip"
    }

    fn languages(&self) -> &'static [Language] {
        &[Language::Hip, Language::Cuda]
    }

    // hipRTC takes CUDA's dialect, but a `.cu` file is HIP's only when
    // asked: CUDA-only code (inline PTX, cooperative groups) must not fail
    // a folder of CUDA kernels.
    fn takes(&self, file: &KernelFile, asked: bool) -> bool {
        match file.language {
            Language::Hip => true,
            Language::Cuda => asked || super::declares(file, "hip").unwrap_or(false),
            _ => false,
        }
    }

    fn architecture_option(&self) -> Option<&'static str> {
        Some("--hip-arch")
    }

    fn asked_architectures<'a>(&self, asked: &'a Architectures) -> &'a [String] {
        &asked.hip_arch
    }

    fn check_architecture(&self, text: &str) -> Result<(), String> {
        Self::architecture(text).map(drop)
    }

    fn warm(&self, job: &Job<'_>) -> BackendReport {
        cxx::warm::<Self>(job)
    }

    fn worker_entry(&self) -> Option<WorkerEntry> {
        Some(kiln_hip::worker_entry())
    }

    fn variant_label(&self, key: &StoreKey) -> Option<String> {
        super::label_as::<HipCompiler>(key)
    }

    fn stored_report(&self, bytes: &[u8]) -> Option<ArtifactReport> {
        decode_report::<HipArtifact>(bytes)
    }

    fn specialization(&self, bytes: &[u8]) -> Option<Vec<String>> {
        let lowered = super::lowered::<HipArtifact, kiln_hip::HipLowered>(bytes)?;
        let defines = lowered.options().defines.iter();
        Some(
            defines
                .map(|(name, value)| match value {
                    Some(value) => format!("{name}={value}"),
                    None => name.clone(),
                })
                .collect(),
        )
    }

    fn recompiler(&self) -> Result<Box<dyn Recompiler>, String> {
        let compiler = HipCompiler::new().map_err(|error| error.to_string())?;
        Ok(super::keyed(compiler, |compiler, architecture| {
            let architecture = Architecture::new(architecture).ok()?;
            Some(compiler.clone().keyed_for(architecture))
        }))
    }
}

impl Cxx for Hip {
    const NAME: &'static str = "hip";
    const DEFAULT_ARCHITECTURE: &'static str = "gfx90a";
    type Architecture = Architecture;
    type Target = HipTarget;
    type Options = HipOptions;
    type Builder = HipKernelBuilder;

    fn architecture(text: &str) -> Result<Architecture, String> {
        Architecture::new(text).map_err(|error| error.to_string())
    }

    fn on_device() -> Result<(HipTarget, Architecture), String> {
        let target = HipTarget::on_device(0).map_err(|error| error.to_string())?;
        let architecture = target.architecture().clone();
        Ok((target, architecture))
    }

    fn describe_device(target: &HipTarget) -> String {
        format!("AMD GPU {}", target.architecture())
    }

    fn compile_only(architecture: Architecture) -> Result<(HipTarget, String), String> {
        let target = HipTarget::compile_only(architecture).map_err(|error| error.to_string())?;
        let description = format!(
            "compile-only: {}, hiprtc {}",
            target.architecture(),
            target.compiler().identity().hiprtc_version
        );
        Ok((target, description))
    }

    fn with_store(target: HipTarget, store: Option<Arc<dyn ArtifactStore>>) -> HipTarget {
        match store {
            Some(store) => target.with_optional_store(Some(store)),
            None => target.without_store(),
        }
    }

    fn variant(target: &HipTarget) -> HipVariant {
        target.variant()
    }

    // `<hip/hip_runtime.h>` and its kin are hipRTC's own.
    fn prepare(search: &mut kiln_cxx::IncludeSearch) {
        kiln_hip::includes::prepare(search);
    }

    fn options(lines: &[String]) -> Result<HipOptions, String> {
        super::options::hip(HipOptions::default(), lines)
    }

    fn define(options: HipOptions, name: &str, value: &str) -> HipOptions {
        options.define(name, value)
    }

    fn builder(id: KernelIdBuilder, first: &str, name: &str) -> HipKernelBuilder {
        HipKernel::builder(id, first).program_name(name)
    }

    fn entry(builder: HipKernelBuilder, entry: &str) -> HipKernelBuilder {
        builder.entry(entry)
    }

    fn with_options(builder: HipKernelBuilder, options: HipOptions) -> HipKernelBuilder {
        builder.options(options)
    }

    fn with_header(builder: HipKernelBuilder, header: &kiln_cxx::Header) -> HipKernelBuilder {
        builder.header(header.name.clone(), header.text.clone())
    }

    fn finish(builder: HipKernelBuilder, source: Source) -> HipKernel {
        builder.generator(move |_: Architecture| source.text())
    }
}
