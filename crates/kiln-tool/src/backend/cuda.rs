//! CUDA: `.cu` files (unless their header names other backends only),
//! compiled by NVRTC in compile workers, for sm_90 when there is no GPU.

use kiln_cuda::{Architecture, CudaArtifact, CudaCompiler, CudaOptions};
use kiln_cxx::CxxBackend;
use kiln_engine::resources::decode_report;
use kiln_engine::worker::WorkerEntry;
use kiln_engine::{ArtifactReport, StoreKey};

use super::cxx;
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
        <kiln_cuda::Cuda as CxxBackend>::architecture(text).map(drop)
    }

    fn warm(&self, job: &Job<'_>) -> BackendReport {
        cxx::warm::<kiln_cuda::Cuda>(job, |lines| {
            super::options::cuda(CudaOptions::default(), lines)
        })
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
