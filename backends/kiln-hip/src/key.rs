//! Everything that changes the bytes of a HIP artifact, in one value: the
//! key a store files it under (P1).

use serde::{Deserialize, Serialize};

use crate::compiler::HipLowered;
use crate::error::Result;
use crate::isa::GfxArch;

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
/// kiln-hip is storeless for now: the key is computed and kept on every
/// artifact, ready for the store.
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
