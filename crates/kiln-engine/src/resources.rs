//! What an artifact says about itself (D4): the warnings of the compile
//! that made it and the resources its kernel uses on the device.
//!
//! Every backend's artifact carries an [`ArtifactReport`], filled in by
//! finalize and kept in the artifact's bytes, so a store hit reads the
//! same record the compile wrote, without compiling again. The figures
//! come from what each compiler says of its own output (ptxas's report
//! through NVRTC, the code object's metadata on HIP, naga's module on
//! wgpu), so [`ResourceUsage`] has one optional field per figure and a
//! backend fills the ones it knows; the three backends share the fields
//! whose meaning they share (registers per thread, shared memory, local
//! memory, the largest block).
//!
//! [`Reported`] is how a program, a tool or the CLI reads the report of an
//! artifact or of a kernel loaded from one without knowing the backend.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::diagnostic::{Diagnostic, Severity};
use crate::encoding;

/// The record an artifact carries of its compile (D4): what the compiler
/// warned of, and what the kernel uses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactReport {
    /// The warnings and remarks of the successful compile, in the order the
    /// compiler gave them, with the spill warning kiln adds when the kernel
    /// spills: what the reporter (D3) was told when it was built.
    pub warnings: Vec<Diagnostic>,
    /// What the kernel uses on the device.
    pub resources: ResourceUsage,
}

impl ArtifactReport {
    /// A report of `warnings` and `resources`.
    pub fn new(warnings: Vec<Diagnostic>, resources: ResourceUsage) -> Self {
        Self {
            warnings,
            resources,
        }
    }

    /// Whether the kernel spills registers to memory.
    pub fn spills(&self) -> bool {
        self.resources.spills()
    }
}

/// The resources a kernel uses, as its compiler reported them. A field is
/// `None` when the backend does not have that figure (a CUDA kernel has no
/// scalar registers, a WGSL one no register count at all) or the compiler
/// did not say it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceUsage {
    /// Registers per thread: CUDA's registers, HIP's vector registers
    /// (VGPRs) per work-item.
    pub registers: Option<u32>,
    /// HIP: scalar registers (SGPRs) per wavefront.
    pub scalar_registers: Option<u32>,
    /// CUDA: bytes per thread stored to local memory by register spills.
    pub spill_store_bytes: Option<u64>,
    /// CUDA: bytes per thread loaded back from local memory by register
    /// spills.
    pub spill_load_bytes: Option<u64>,
    /// HIP: vector registers spilled to scratch.
    pub spilled_vector_registers: Option<u32>,
    /// HIP: scalar registers spilled.
    pub spilled_scalar_registers: Option<u32>,
    /// Memory shared by a block, in bytes, allocated by the source itself:
    /// CUDA's static shared memory, HIP's LDS (group segment), WGSL's
    /// `var<workgroup>` memory. Dynamic shared memory chosen at launch is
    /// not in it.
    pub shared_memory_bytes: Option<u64>,
    /// Private memory per thread, in bytes: CUDA's local memory (the stack
    /// frame, spills included), HIP's scratch (private segment).
    pub local_memory_bytes: Option<u64>,
    /// CUDA: bytes of constant bank 0 (parameters and constants) the
    /// kernel uses, when ptxas reports it for the architecture.
    pub constant_memory_bytes: Option<u64>,
    /// The most threads a block may have: CUDA's from `__launch_bounds__`
    /// or, on a device, from the driver; HIP's maximum flat workgroup size.
    pub max_threads_per_block: Option<u32>,
    /// WGSL: the entry point's `@workgroup_size`, with the constants
    /// applied.
    pub workgroup_size: Option<[u32; 3]>,
    /// WGSL: the number of resources (buffers, textures, samplers) the
    /// entry point binds.
    pub bindings: Option<u32>,
}

impl ResourceUsage {
    /// Whether the kernel spills registers: a spill store or load on CUDA,
    /// a spilled register on HIP. A figure that is unknown is no spill.
    pub fn spills(&self) -> bool {
        let some = |value: Option<u64>| value.is_some_and(|value| value > 0);
        some(self.spill_store_bytes)
            || some(self.spill_load_bytes)
            || some(self.spilled_vector_registers.map(u64::from))
            || some(self.spilled_scalar_registers.map(u64::from))
    }

    /// The spills in a few words (`1744 B stored, 1780 B loaded per
    /// thread`, `3 VGPRs, 0 SGPRs`); `None` when the kernel does not spill.
    pub fn spill_summary(&self) -> Option<String> {
        if !self.spills() {
            return None;
        }
        let mut parts = Vec::new();
        if self.spill_store_bytes.is_some() || self.spill_load_bytes.is_some() {
            parts.push(format!(
                "{} B stored, {} B loaded per thread",
                self.spill_store_bytes.unwrap_or(0),
                self.spill_load_bytes.unwrap_or(0)
            ));
        }
        if self.spilled_vector_registers.is_some() || self.spilled_scalar_registers.is_some() {
            parts.push(format!(
                "{} VGPRs, {} SGPRs",
                self.spilled_vector_registers.unwrap_or(0),
                self.spilled_scalar_registers.unwrap_or(0)
            ));
        }
        Some(parts.join("; "))
    }

    /// The warning a compile of the kernel entered at `entry` adds to its
    /// diagnostics when it spills, so that the reporter (D3) is told once
    /// per built artifact; `None` when it does not spill.
    pub fn spill_warning(&self, entry: &str) -> Option<Diagnostic> {
        let summary = self.spill_summary()?;
        Some(Diagnostic {
            severity: Severity::Warning,
            message: format!("`{entry}` spills registers to memory: {summary}"),
            location: None,
        })
    }
}

/// Something that carries the report of the compile that made it: an
/// artifact, or a kernel loaded from one (D4).
///
/// # Contract
///
/// An artifact read from a store reports exactly what the compile that
/// stored it reported: the report is part of the artifact's bytes, never
/// recomputed. A loaded kernel reports its artifact's record; a backend
/// may fill in what only the device knows (the CUDA driver's largest
/// block), the same for a hit and a compile.
pub trait Reported {
    /// The report.
    fn report(&self) -> &ArtifactReport;
}

/// The report of the artifact of type `A` serialized at the start of
/// `bytes` (as a store keeps it: a store may keep more after it, such as
/// what the artifact was finalized from), or `None` for bytes that do not
/// start with one whole such artifact. Malformed bytes are a `None`, never
/// a panic.
pub fn decode_report<A: Reported + DeserializeOwned>(bytes: &[u8]) -> Option<ArtifactReport> {
    encoding::decode::<A>(bytes)
        .ok()
        .map(|(artifact, _)| artifact.report().clone())
}

/// As [`decode_report`], for bytes read without a store's checks (a
/// listing that opens an object by its path): `None` unless their BLAKE3
/// digest is `digest`, so a damaged object reports nothing rather than
/// figures it never held.
pub fn decode_verified_report<A: Reported + DeserializeOwned>(
    bytes: &[u8],
    digest: &[u8; 32],
) -> Option<ArtifactReport> {
    if blake3::hash(bytes).as_bytes() != digest {
        return None;
    }
    decode_report::<A>(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, Deserialize)]
    struct Artifact {
        code: Vec<u8>,
        report: ArtifactReport,
    }

    impl Reported for Artifact {
        fn report(&self) -> &ArtifactReport {
            &self.report
        }
    }

    fn spilling() -> ResourceUsage {
        ResourceUsage {
            registers: Some(24),
            spill_store_bytes: Some(16),
            spill_load_bytes: Some(20),
            ..ResourceUsage::default()
        }
    }

    // D4
    #[test]
    fn d4_a_spill_of_either_kind_is_a_spill_and_is_named_in_one_warning() {
        assert!(!ResourceUsage::default().spills());
        assert!(spilling().spills());
        let hip = ResourceUsage {
            spilled_vector_registers: Some(0),
            spilled_scalar_registers: Some(2),
            ..ResourceUsage::default()
        };
        assert!(hip.spills());
        assert_eq!(hip.spill_summary().as_deref(), Some("0 VGPRs, 2 SGPRs"));
        let warning = spilling().spill_warning("gemm").expect("it spills");
        assert_eq!(warning.severity, Severity::Warning);
        assert_eq!(
            warning.message,
            "`gemm` spills registers to memory: 16 B stored, 20 B loaded per thread"
        );
        let quiet = ResourceUsage {
            spill_store_bytes: Some(0),
            spill_load_bytes: Some(0),
            ..ResourceUsage::default()
        };
        assert!(quiet.spill_warning("gemm").is_none());
    }

    // D4
    #[test]
    fn d4_a_report_reads_back_from_its_artifacts_bytes_and_garbage_reads_as_none() {
        let artifact = Artifact {
            code: vec![1, 2, 3],
            report: ArtifactReport::new(vec![Diagnostic::warning("unused")], spilling()),
        };
        let bytes = encoding::encode(&artifact).expect("plain data encodes");
        assert_eq!(
            decode_report::<Artifact>(&bytes),
            Some(artifact.report.clone())
        );
        for cut in 0..bytes.len() {
            assert_eq!(decode_report::<Artifact>(&bytes[..cut]), None, "cut {cut}");
        }
        let mut longer = bytes.clone();
        longer.extend([7, 7]);
        assert_eq!(
            decode_report::<Artifact>(&longer),
            Some(artifact.report.clone()),
            "what a store keeps after the artifact is not read"
        );
        assert_eq!(decode_report::<Artifact>(&[0xff; 64]), None);
        let digest = *blake3::hash(&bytes).as_bytes();
        assert_eq!(
            decode_verified_report::<Artifact>(&bytes, &digest),
            Some(artifact.report.clone())
        );
        let mut damaged = bytes.clone();
        damaged[0] ^= 1;
        assert_eq!(decode_verified_report::<Artifact>(&damaged, &digest), None);
    }
}
