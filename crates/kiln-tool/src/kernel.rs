//! The words a kernel file is described in, shared by its header
//! ([`crate::header`]) and the walk that finds it ([`crate::manifest`]):
//! its language and one specialization of its constants.

use std::fmt;
use std::path::Path;

/// The language of a kernel file, from its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Language {
    /// `*.wgsl` and `*.wesl`: the wgpu backend; a file without a compute
    /// entry is a module kernels `#import`.
    Wgsl,
    /// `*.spv`: a SPIR-V module, for the wgpu backend; its header is in a
    /// sidecar `*.spv.kiln`.
    Spirv,
    /// `*.cu` (and a `*.cuh` with a kiln header): the CUDA backend, and
    /// HIP's (hipRTC takes CUDA's dialect).
    Cuda,
    /// `*.hip`: the HIP backend.
    Hip,
}

impl Language {
    /// Whether the language's constants are set by number as well as by
    /// name, and it has no includes or compiler options: wgpu's two.
    pub fn has_override_ids(self) -> bool {
        matches!(self, Self::Wgsl | Self::Spirv)
    }

    /// The language of the file at `path`, by its extension; `None` for
    /// a file that is no kernel.
    pub fn of(path: &Path) -> Option<Self> {
        match path.extension()?.to_str()? {
            "wgsl" | "wesl" => Some(Self::Wgsl),
            "spv" => Some(Self::Spirv),
            "cu" | "cuh" => Some(Self::Cuda),
            "hip" => Some(Self::Hip),
            _ => None,
        }
    }
}

/// One `NAME=VALUE` set of a `specialize` line, in the order written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Specialization(pub Vec<(String, String)>);

impl fmt::Display for Specialization {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pairs: Vec<String> = self
            .0
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        f.write_str(&pairs.join(" "))
    }
}
