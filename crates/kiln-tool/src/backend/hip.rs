//! HIP: `.hip` files, and `.cu` files when asked (`--backend hip`) or
//! when their header names hip, compiled by hipRTC in compile workers, for
//! gfx90a when there is no GPU.

use kiln_cxx::CxxBackend;
use kiln_engine::resources::decode_report;
use kiln_engine::worker::WorkerEntry;
use kiln_engine::{ArtifactReport, StoreKey};
use kiln_hip::{Architecture, HipArtifact, HipCompiler, HipOptions};

use super::cxx;
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
        <kiln_hip::Hip as CxxBackend>::architecture(text).map(drop)
    }

    fn warm(&self, job: &Job<'_>) -> BackendReport {
        cxx::warm::<kiln_hip::Hip>(job, |lines| {
            super::options::hip(HipOptions::default(), lines)
        })
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
