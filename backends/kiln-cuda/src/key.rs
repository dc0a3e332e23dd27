//! Everything that changes a CUDA artifact's bytes, gathered in one place
//! (P1), so that a store keys and explains CUDA artifacts from this struct
//! alone.

use std::fmt;

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_128;

use crate::architecture::Architecture;
use crate::nvrtc::NvrtcVersion;

/// The components of a CUDA artifact's key: two compiles with equal
/// components give interchangeable artifacts, and a change in any one of
/// them can change the bytes.
///
/// Digests are unseeded XXH3-128 in hex, the same in every process, like
/// kernel ids.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CudaKeyComponents {
    /// The compiler and its version, `nvrtc 13.0`.
    pub compiler: String,
    /// The architecture the cubin is for.
    pub architecture: Architecture,
    /// NVRTC's options, in the order they were passed.
    pub options: Vec<String>,
    /// Digest of the compiled source text.
    pub source_digest: String,
    /// `(include name, digest of its text)` of every supplied header.
    pub header_digests: Vec<(String, String)>,
    /// The entry point's name expression.
    pub entry_point: String,
}

impl CudaKeyComponents {
    /// The backend these components key: `cuda`.
    pub const BACKEND: &'static str = "cuda";

    /// The components of compiling `source` with `headers` under `options`
    /// for `architecture`, entering at `entry_point`, with NVRTC `version`.
    pub fn new(
        version: NvrtcVersion,
        architecture: Architecture,
        options: &[String],
        source: &str,
        headers: &[(String, String)],
        entry_point: &str,
    ) -> Self {
        Self {
            compiler: format!("nvrtc {version}"),
            architecture,
            options: options.to_vec(),
            source_digest: digest(source.as_bytes()),
            header_digests: headers
                .iter()
                .map(|(name, text)| (name.clone(), digest(text.as_bytes())))
                .collect(),
            entry_point: entry_point.to_owned(),
        }
    }

    /// Every component as `(name, value)`, in a fixed order: for a store
    /// that records them and names the one that changed (P9).
    pub fn components(&self) -> Vec<(&'static str, String)> {
        vec![
            ("backend", Self::BACKEND.to_owned()),
            ("compiler", self.compiler.clone()),
            ("architecture", self.architecture.to_string()),
            ("options", self.options.join(" ")),
            ("source", self.source_digest.clone()),
            (
                "headers",
                self.header_digests
                    .iter()
                    .map(|(name, digest)| format!("{name}={digest}"))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            ("entry point", self.entry_point.clone()),
        ]
    }

    /// The first component that differs from `other`'s, by name.
    pub fn first_difference(&self, other: &Self) -> Option<&'static str> {
        self.components()
            .into_iter()
            .zip(other.components())
            .find(|(mine, theirs)| mine.1 != theirs.1)
            .map(|(mine, _)| mine.0)
    }

    /// One digest of every component.
    pub fn digest(&self) -> String {
        let mut text = String::new();
        for (name, value) in self.components() {
            // Lengths first, so that no two component lists run together
            // into the same text.
            text.push_str(&format!("{}:{name}={}:{value}\n", name.len(), value.len()));
        }
        digest(text.as_bytes())
    }
}

impl fmt::Display for CudaKeyComponents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .components()
            .into_iter()
            .map(|(name, value)| format!("{name}: {value}"))
            .collect();
        f.write_str(&parts.join("; "))
    }
}

pub(crate) fn digest(bytes: &[u8]) -> String {
    format!("{:032x}", xxh3_128(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn components() -> CudaKeyComponents {
        CudaKeyComponents::new(
            NvrtcVersion {
                major: 13,
                minor: 0,
            },
            Architecture::new(9, 0),
            &["-arch=sm_90".into(), "-std=c++17".into()],
            "extern \"C\" __global__ void k() {}",
            &[("common.cuh".into(), "#define ONE 1".into())],
            "k",
        )
    }

    // P1
    #[test]
    fn the_same_inputs_give_the_same_key() {
        assert_eq!(components().digest(), components().digest());
    }

    // P1
    #[test]
    fn every_changed_component_gives_another_key_and_is_named() {
        let base = components();
        let mut changed = Vec::new();
        let mut compiler = base.clone();
        compiler.compiler = "nvrtc 13.1".into();
        changed.push((compiler, "compiler"));
        let mut architecture = base.clone();
        architecture.architecture = Architecture::new(8, 0);
        changed.push((architecture, "architecture"));
        let mut options = base.clone();
        options.options.push("--use_fast_math".into());
        changed.push((options, "options"));
        let mut source = base.clone();
        source.source_digest = "0".repeat(32);
        changed.push((source, "source"));
        let mut headers = base.clone();
        headers.header_digests[0].1 = "1".repeat(32);
        changed.push((headers, "headers"));
        let mut entry = base.clone();
        entry.entry_point = "other".into();
        changed.push((entry, "entry point"));
        for (other, component) in changed {
            assert_ne!(other.digest(), base.digest(), "{component}");
            assert_eq!(base.first_difference(&other), Some(component));
        }
    }
}
