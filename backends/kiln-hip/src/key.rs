//! Everything that changes the bytes of a HIP artifact (P1): per artifact
//! in [`HipArtifactKey`], carried on every artifact, and per target in the
//! [`KeyComponents`] a store files every artifact of the target under.
//!
//! # How the store key covers every component
//!
//! A store key is the store's format, the [`KeyComponents`] of
//! [`HipArtifactKey::for_store`] (backend `hip`, the compiler's whole
//! identity, the target's architecture, the flags every kernel gets), the
//! variant (the architecture again), and a subject:
//!
//! - by kernel: the kernel's id, into which [`HipKernel`](crate::HipKernel)
//!   folds the source (or the generator's parameters), the entry point,
//!   the kernel's own options and every header's text;
//! - by source (P7): the digest of the lowered text, whose first lines name
//!   the target, the entry point, every flag and every header's digest.

use std::fmt;

use kiln_core::KeyComponents;
use serde::{Deserialize, Serialize};

use crate::compiler::HipLowered;
use crate::error::Result;
use crate::isa::GfxArch;
use crate::options::HipOptions;

/// How [`KeyComponents::architecture`] reads for a compiler that no target
/// has named an architecture for: each artifact's own is in its variant.
pub(crate) const ANY_ARCHITECTURE: &str = "per variant";

/// Which compiler built an artifact.
///
/// hipRTC's own version says little (ROCm 5.2's reports `9.0`), so the
/// identity also holds the file names of hipRTC's library and of comgr with
/// symbolic links followed, which carry the full release
/// (`libamdhip64.so.5.2.21153`), and comgr's version: comgr is the compiler
/// hipRTC drives.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CompilerIdentity {
    /// `hiprtcVersion`, `major.minor`.
    pub hiprtc_version: String,
    /// The file hipRTC was loaded from, without its directory.
    pub hiprtc_library: String,
    /// `amd_comgr_get_version`, `major.minor`.
    pub comgr_version: String,
    /// The file comgr was loaded from, without its directory.
    pub comgr_library: String,
}

/// `hiprtc 9.0 (libamdhip64.so.5.2.21153), comgr 2.4 (libamd_comgr.so.2.4.0)`:
/// every field, so that the compiler component of a store key changes
/// whenever one of them does.
impl fmt::Display for CompilerIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "hiprtc {} ({}), comgr {} ({})",
            self.hiprtc_version, self.hiprtc_library, self.comgr_version, self.comgr_library
        )
    }
}

/// The digest of one header.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HeaderDigest {
    /// The name the source includes it by.
    pub include_name: String,
    /// BLAKE3 of its text, in hex.
    pub digest: String,
}

/// The key components of one HIP artifact: compiler identity, architecture,
/// the exact flags hipRTC was given, digests of the source and of each
/// header, and the entry point. Two processes with the same inputs compute
/// the same key; any changed component gives another.
///
/// Kept on every artifact, so a store hit can say what built it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HipArtifactKey {
    /// The compiler.
    pub compiler: CompilerIdentity,
    /// The target architecture, features included.
    pub arch: GfxArch,
    /// The flags handed to hipRTC, in order, the architecture's included.
    pub options: Vec<String>,
    /// BLAKE3 of the source text, in hex.
    pub source_digest: String,
    /// One digest per header, in the order given to hipRTC.
    pub headers: Vec<HeaderDigest>,
    /// The entry point's name expression.
    pub entry_point: String,
}

/// Bumped whenever the key's encoding or meaning changes, so old entries
/// miss rather than match.
const KEY_FORMAT: &str = "kiln-hip artifact key 1";

/// The backend store keys name: `hip`.
const BACKEND: &str = "hip";

impl HipArtifactKey {
    /// The key of `lowered` compiled for `arch` by `compiler`.
    ///
    /// # Errors
    ///
    /// The options hold a flag that chooses the architecture.
    pub fn new(compiler: &CompilerIdentity, arch: &GfxArch, lowered: &HipLowered) -> Result<Self> {
        Ok(Self {
            compiler: compiler.clone(),
            arch: arch.clone(),
            options: lowered.options().compile_flags(arch)?,
            source_digest: digest_hex(lowered.source().as_bytes()),
            headers: lowered
                .headers()
                .iter()
                .map(|header| HeaderDigest {
                    include_name: header.include_name.clone(),
                    digest: digest_hex(header.text.as_bytes()),
                })
                .collect(),
            entry_point: lowered.entry().to_owned(),
        })
    }

    /// What every store key of a target's artifacts shares (P1): backend
    /// `hip`, the compiler's whole identity (hipRTC's and comgr's versions
    /// and library files: hipRTC's own version says little), the target's
    /// architecture, and as options the flags a kernel that chooses none is
    /// compiled with, past the architecture (none: hipRTC's defaults).
    ///
    /// ```
    /// use kiln_hip::{CompilerIdentity, GfxArch, HipArtifactKey};
    ///
    /// let identity = CompilerIdentity {
    ///     hiprtc_version: "9.0".into(),
    ///     hiprtc_library: "libamdhip64.so.5.2.21153".into(),
    ///     comgr_version: "2.4".into(),
    ///     comgr_library: "libamd_comgr.so.2.4.0".into(),
    /// };
    /// let components = HipArtifactKey::for_store(&identity, Some(&GfxArch::new("gfx90a")?));
    /// assert_eq!(
    ///     components.compiler,
    ///     "hiprtc 9.0 (libamdhip64.so.5.2.21153), comgr 2.4 (libamd_comgr.so.2.4.0)"
    /// );
    /// assert_eq!(components.architecture, "gfx90a");
    /// # Ok::<(), kiln_hip::Error>(())
    /// ```
    pub fn for_store(identity: &CompilerIdentity, arch: Option<&GfxArch>) -> KeyComponents {
        KeyComponents::new(
            BACKEND,
            identity.to_string(),
            arch.map_or_else(|| ANY_ARCHITECTURE.to_owned(), ToString::to_string),
            HipOptions::new().flags_past_architecture().join(" "),
        )
    }

    /// BLAKE3 of every component, in hex: one name for the whole key.
    pub fn digest(&self) -> String {
        let mut hasher = blake3::Hasher::new();
        let mut field = |bytes: &[u8]| {
            // Length-prefixed, so that no two lists of fields encode alike.
            hasher.update(&(bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        };
        field(KEY_FORMAT.as_bytes());
        field(self.compiler.hiprtc_version.as_bytes());
        field(self.compiler.hiprtc_library.as_bytes());
        field(self.compiler.comgr_version.as_bytes());
        field(self.compiler.comgr_library.as_bytes());
        field(self.arch.as_str().as_bytes());
        field(&(self.options.len() as u64).to_le_bytes());
        for option in &self.options {
            field(option.as_bytes());
        }
        field(self.source_digest.as_bytes());
        field(&(self.headers.len() as u64).to_le_bytes());
        for header in &self.headers {
            field(header.include_name.as_bytes());
            field(header.digest.as_bytes());
        }
        field(self.entry_point.as_bytes());
        hasher.finalize().to_hex().to_string()
    }
}

/// BLAKE3 of `bytes`, in hex.
pub(crate) fn digest_hex(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> HipArtifactKey {
        HipArtifactKey {
            compiler: CompilerIdentity {
                hiprtc_version: "9.0".into(),
                hiprtc_library: "libamdhip64.so.5.2.21153".into(),
                comgr_version: "2.4".into(),
                comgr_library: "libamd_comgr.so.2.4.0".into(),
            },
            arch: GfxArch::new("gfx90a").expect("valid"),
            options: vec!["--gpu-architecture=gfx90a".into()],
            source_digest: digest_hex(b"source"),
            headers: vec![HeaderDigest {
                include_name: "a.h".into(),
                digest: digest_hex(b"header"),
            }],
            entry_point: "k".into(),
        }
    }

    // P1
    #[test]
    fn the_store_components_name_the_whole_compiler_identity_and_the_architecture() {
        let base = key();
        let gfx90a = GfxArch::new("gfx90a").expect("valid");
        let components = HipArtifactKey::for_store(&base.compiler, Some(&gfx90a));
        assert_eq!(
            components,
            KeyComponents::new(
                "hip",
                "hiprtc 9.0 (libamdhip64.so.5.2.21153), comgr 2.4 (libamd_comgr.so.2.4.0)",
                "gfx90a",
                ""
            )
        );
        let identity_changes: [fn(&mut CompilerIdentity); 4] = [
            |identity| identity.hiprtc_version = "9.1".into(),
            |identity| identity.hiprtc_library = "libhiprtc.so.6.2.60200".into(),
            |identity| identity.comgr_version = "2.6".into(),
            |identity| identity.comgr_library = "libamd_comgr.so.2.6.0".into(),
        ];
        for change in identity_changes {
            let mut identity = base.compiler.clone();
            change(&mut identity);
            let changed = HipArtifactKey::for_store(&identity, Some(&gfx90a));
            assert_ne!(changed.compiler, components.compiler, "{identity:?}");
        }
        let gfx908 = GfxArch::new("gfx908").expect("valid");
        assert_ne!(
            HipArtifactKey::for_store(&base.compiler, Some(&gfx908)).architecture,
            components.architecture
        );
        assert_eq!(
            HipArtifactKey::for_store(&base.compiler, None).architecture,
            ANY_ARCHITECTURE
        );
    }

    // P1
    #[test]
    fn every_key_component_changes_the_digest() {
        let base = key();
        assert_eq!(base.digest(), key().digest(), "the same inputs, one key");
        let mut changed = Vec::new();
        let mut next = key();
        next.compiler.hiprtc_version = "9.1".into();
        changed.push(next);
        let mut next = key();
        next.compiler.hiprtc_library = "libhiprtc.so.6.2.60200".into();
        changed.push(next);
        let mut next = key();
        next.compiler.comgr_version = "2.6".into();
        changed.push(next);
        let mut next = key();
        next.arch = GfxArch::new("gfx908").expect("valid");
        changed.push(next);
        let mut next = key();
        next.options.push("-ffast-math".into());
        changed.push(next);
        let mut next = key();
        next.source_digest = digest_hex(b"other source");
        changed.push(next);
        let mut next = key();
        next.headers[0].digest = digest_hex(b"other header");
        changed.push(next);
        let mut next = key();
        next.entry_point = "k2".into();
        changed.push(next);
        for other in changed {
            assert_ne!(base.digest(), other.digest(), "{other:?}");
        }
    }
}
