//! Everything that changes a CUDA artifact's bytes (P1): per artifact in
//! [`CudaKeyComponents`], carried on every artifact, and per target in the
//! [`KeyComponents`] a store files every artifact of the target under.
//!
//! # How the store key covers every component
//!
//! A store key is the store's format, the [`KeyComponents`] of
//! [`CudaKeyComponents::for_store`] (backend `cuda`, compiler
//! `nvrtc <major>.<minor>`, the target's architecture, the options every
//! kernel gets unless its own say otherwise), the variant (the
//! architecture again), and a subject:
//!
//! - by kernel: the kernel's id, into which
//!   [`CudaKernelBuilder`](crate::CudaKernelBuilder) folds the source (or
//!   the generator's parameters), the entry point, the kernel's own options
//!   and every header's text;
//! - by source (P7): the digest of the lowered text, whose first lines name
//!   the entry point, NVRTC's arguments and every header's digest.
//!
//! So the kernel's own parts are in both subjects, and the target's in the
//! shared components; nothing that changes the bytes is left out.

use std::fmt;

use kiln_core::KeyComponents;
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_128;

use crate::architecture::Architecture;
use crate::nvrtc::NvrtcVersion;
use crate::options::CudaOptions;

/// How [`KeyComponents::architecture`] reads for a compiler that no target
/// has named an architecture for: each artifact's own is in its variant.
pub(crate) const ANY_ARCHITECTURE: &str = "per variant";

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
            compiler: compiler_name(version),
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

    /// What every store key of a target's artifacts shares (P1): backend
    /// `cuda`, compiler `nvrtc <version>`, the target's `architecture`, and
    /// as options the NVRTC arguments a kernel that chooses none is compiled
    /// with, past the architecture (`-std=c++17`).
    ///
    /// The options are there because a kernel's id holds its
    /// [`CudaOptions`], not the arguments they become: should kiln-cuda's
    /// defaults change, every key changes with them instead of serving
    /// artifacts built under the old ones.
    ///
    /// ```
    /// use kiln_cuda::{Architecture, CudaKeyComponents, NvrtcVersion};
    ///
    /// let version = NvrtcVersion { major: 13, minor: 0 };
    /// let components = CudaKeyComponents::for_store(version, Some(Architecture::new(9, 0)));
    /// assert_eq!(components.to_string(), "cuda / nvrtc 13.0 / sm_90 / -std=c++17");
    /// ```
    pub fn for_store(version: NvrtcVersion, architecture: Option<Architecture>) -> KeyComponents {
        KeyComponents::new(
            Self::BACKEND,
            compiler_name(version),
            architecture.map_or_else(|| ANY_ARCHITECTURE.to_owned(), |arch| arch.to_string()),
            CudaOptions::default()
                .arguments_past_architecture()
                .join(" "),
        )
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

/// The compiler's identity in both kinds of key: `nvrtc 13.0`.
fn compiler_name(version: NvrtcVersion) -> String {
    format!("nvrtc {version}")
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
    fn the_store_components_name_backend_nvrtc_architecture_and_default_options() {
        let version = NvrtcVersion {
            major: 13,
            minor: 0,
        };
        let hopper = CudaKeyComponents::for_store(version, Some(Architecture::new(9, 0)));
        assert_eq!(
            hopper,
            KeyComponents::new("cuda", "nvrtc 13.0", "sm_90", "-std=c++17")
        );
        assert_eq!(
            hopper.compiler,
            components().compiler,
            "an artifact and its store key name the compiler alike"
        );
        assert_eq!(
            hopper,
            CudaKeyComponents::for_store(version, Some(Architecture::new(9, 0))),
            "the same inputs, the same components"
        );
        let ampere = CudaKeyComponents::for_store(version, Some(Architecture::new(8, 0)));
        assert_ne!(ampere.architecture, hopper.architecture);
        let newer = CudaKeyComponents::for_store(
            NvrtcVersion {
                major: 13,
                minor: 1,
            },
            Some(Architecture::new(9, 0)),
        );
        assert_ne!(newer.compiler, hopper.compiler);
        assert_eq!(
            CudaKeyComponents::for_store(version, None).architecture,
            ANY_ARCHITECTURE
        );
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
