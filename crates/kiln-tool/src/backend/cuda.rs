//! CUDA: `.cu` files (unless their header names other backends only),
//! compiled by NVRTC in compile workers, for sm_90 when there is no GPU.

use std::path::PathBuf;
use std::sync::Arc;

use kiln_cuda::{
    Architecture, CudaArtifact, CudaCompiler, CudaKernel, CudaKernelBuilder, CudaOptions,
    CudaTarget,
};
use kiln_engine::resources::decode_report;
use kiln_engine::store::ArtifactStore;
use kiln_engine::worker::WorkerEntry;
use kiln_engine::{ArtifactReport, CompilationTarget, KernelIdBuilder, StoreKey};

use super::cxx::{self, Cxx, Source};
use super::{Architectures, Backend, BackendReport, Job, Recompiler};
use crate::kernel::Language;
use crate::manifest::KernelFile;

/// The CUDA backend.
pub struct Cuda;

impl Backend for Cuda {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn languages(&self) -> &'static [Language] {
        &[Language::Cuda]
    }

    // A `.cu` file is CUDA's unless its header says otherwise (which
    // `asked` overrides only under `--force`).
    fn takes(&self, file: &KernelFile, asked: bool) -> bool {
        file.language == Language::Cuda && (asked || super::declares(file, "cuda").unwrap_or(true))
    }

    fn architecture_option(&self) -> Option<&'static str> {
        Some("--cuda-arch")
    }

    fn asked_architectures<'a>(&self, asked: &'a Architectures) -> &'a [String] {
        &asked.cuda_arch
    }

    fn check_architecture(&self, text: &str) -> Result<(), String> {
        Self::architecture(text).map(drop)
    }

    fn warm(&self, job: &Job<'_>) -> BackendReport {
        cxx::warm::<Self>(job)
    }

    fn worker_entry(&self) -> Option<WorkerEntry> {
        Some(kiln_cuda::worker_entry())
    }

    fn variant_label(&self, key: &StoreKey) -> Option<String> {
        super::label_as::<CudaCompiler>(key)
    }

    fn stored_report(&self, bytes: &[u8]) -> Option<ArtifactReport> {
        decode_report::<CudaArtifact>(bytes)
    }

    fn specialization(&self, bytes: &[u8]) -> Option<Vec<String>> {
        let lowered = super::lowered::<CudaArtifact, kiln_cuda::CudaLowered>(bytes)?;
        let defines = lowered.arguments().iter();
        Some(
            defines
                .filter_map(|argument| argument.strip_prefix("-D"))
                .map(str::to_owned)
                .collect(),
        )
    }

    fn recompiler(&self) -> Result<Box<dyn Recompiler>, String> {
        let compiler = CudaCompiler::new().map_err(|error| error.to_string())?;
        Ok(super::keyed(compiler, |compiler, architecture| {
            let architecture = architecture.parse::<Architecture>().ok()?;
            Some(compiler.clone().keyed_for(architecture))
        }))
    }
}

impl Cxx for Cuda {
    const NAME: &'static str = "cuda";
    const DEFAULT_ARCHITECTURE: &'static str = "sm_90";
    type Architecture = Architecture;
    type Target = CudaTarget;
    type Options = CudaOptions;
    type Builder = CudaKernelBuilder;

    fn architecture(text: &str) -> Result<Architecture, String> {
        text.parse()
            .map_err(|error: kiln_cuda::ArchitectureParseError| error.to_string())
    }

    fn on_device() -> Result<(CudaTarget, Architecture), String> {
        let target = CudaTarget::on_device(0).map_err(|error| error.to_string())?;
        let architecture = target.architecture();
        Ok((target, architecture))
    }

    fn describe_device(target: &CudaTarget) -> String {
        let name = target
            .device()
            .map(|device| device.name().to_owned())
            .unwrap_or_default();
        format!("{name} {}", target.architecture())
    }

    fn compile_only(architecture: Architecture) -> Result<(CudaTarget, String), String> {
        let target = CudaTarget::compile_only(architecture).map_err(|error| error.to_string())?;
        let description = format!(
            "compile-only: {architecture}, nvrtc {}",
            target.compiler().version()
        );
        Ok((target, description))
    }

    fn with_store(target: CudaTarget, store: Option<Arc<dyn ArtifactStore>>) -> CudaTarget {
        match store {
            Some(store) => target.with_optional_store(Some(store)),
            None => target.without_store(),
        }
    }

    fn variant(target: &CudaTarget) -> kiln_cuda::CudaVariant {
        target.variant()
    }

    fn toolkit() -> Vec<PathBuf> {
        kiln_cuda::toolkit::include_folders()
    }

    fn prepare(search: &mut kiln_cxx::IncludeSearch) {
        kiln_cuda::toolkit::prepare(search);
    }

    fn options(lines: &[String]) -> Result<CudaOptions, String> {
        super::options::cuda(CudaOptions::default(), lines)
    }

    fn define(options: CudaOptions, name: &str, value: &str) -> CudaOptions {
        options.define(name, value)
    }

    fn builder(id: KernelIdBuilder, first: &str, name: &str) -> CudaKernelBuilder {
        CudaKernel::builder(id, first).program_name(name)
    }

    fn entry(builder: CudaKernelBuilder, entry: &str) -> CudaKernelBuilder {
        builder.entry(entry)
    }

    fn with_options(builder: CudaKernelBuilder, options: CudaOptions) -> CudaKernelBuilder {
        builder.options(options)
    }

    fn with_header(builder: CudaKernelBuilder, header: &kiln_cxx::Header) -> CudaKernelBuilder {
        builder.header(header.name.clone(), header.text.clone())
    }

    fn finish(builder: CudaKernelBuilder, source: Source) -> CudaKernel {
        builder.generator(move |_: Architecture| source.text())
    }
}
