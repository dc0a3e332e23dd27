//! Everything that changes the bytes of a HIP artifact (P1), in kiln-engine's
//! key vocabulary: the [`KeyComponents`] a store files every artifact of a
//! target under, the [`SourceCover`] a lowered text opens with, and the
//! [`Provenance`](kiln_engine::store::Provenance) every artifact carries.
//!
//! # How the store key covers every component
//!
//! A store key is the store's format, the [`KeyComponents`] of
//! [`HipKey::for_store`] (backend `hip`, the compiler's whole
//! identity and the artifact format, the target's architecture, the flags
//! every kernel gets), the
//! variant (the architecture kernels are built for), and a subject:
//!
//! - by kernel: the kernel's id, into which [`HipKernel`](crate::HipKernel)
//!   folds the source (or the generator's parameters), the entry point,
//!   the kernel's own options and every header's text;
//! - by source (P7): the digest of the lowered text, which opens with the
//!   [`SourceCover`] of [`HipKey::cover`]: the entry point, every
//!   flag (the architecture's first) and every header's digest.

use std::fmt;

use kiln_engine::KeyComponents;
use kiln_engine::store::{LibraryFile, SourceCover};
use serde::{Deserialize, Serialize};

pub use kiln_engine::store::HeaderDigest;

use crate::architecture::Architecture;
use crate::kernel::Header;
use crate::options::HipOptions;

/// Which compiler built an artifact.
///
/// hipRTC's own version says little (ROCm 5.2's reports `9.0`), so the
/// identity also holds the library files of hipRTC and of comgr (the
/// compiler hipRTC drives) by name, links followed, and by the digest of
/// their bytes, with comgr's version: a rebuilt or patched library with the
/// same name and version is another compiler.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CompilerIdentity {
    /// `hiprtcVersion`, `major.minor`.
    pub hiprtc_version: String,
    /// The file hipRTC was loaded from.
    pub hiprtc_library: LibraryFile,
    /// `amd_comgr_get_version`, `major.minor`.
    pub comgr_version: String,
    /// The file comgr was loaded from.
    pub comgr_library: LibraryFile,
}

/// `hiprtc 9.0 (libamdhip64.so.5.2.21153 blake3:…), comgr 2.4
/// (libamd_comgr.so.2.4.0 blake3:…)`: every field, so that the compiler
/// component of a store key changes whenever one of them does.
impl fmt::Display for CompilerIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "hiprtc {} ({}), comgr {} ({})",
            self.hiprtc_version, self.hiprtc_library, self.comgr_version, self.comgr_library
        )
    }
}

/// What kiln-hip adds to kiln-engine's key vocabulary: how it names the
/// parts of its keys. It holds nothing.
///
/// ```
/// use kiln_engine::store::LibraryFile;
/// use kiln_hip::{CompilerIdentity, Architecture, HipKey};
///
/// let library = |name: &str| LibraryFile { name: name.into(), digest: [0; 32] };
/// let identity = CompilerIdentity {
///     hiprtc_version: "9.0".into(),
///     hiprtc_library: library("libamdhip64.so.5.2.21153"),
///     comgr_version: "2.4".into(),
///     comgr_library: library("libamd_comgr.so.2.4.0"),
/// };
/// let components = HipKey::for_store(&identity, Some(&Architecture::new("gfx90a")?));
/// let zeros = "0".repeat(32);
/// assert_eq!(
///     components.compiler,
///     format!(
///         "hiprtc 9.0 (libamdhip64.so.5.2.21153 blake3:{zeros}), \
///          comgr 2.4 (libamd_comgr.so.2.4.0 blake3:{zeros}) / artifact 3"
///     )
/// );
/// assert_eq!(components.architecture, "gfx90a");
/// # Ok::<(), kiln_hip::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct HipKey;

impl HipKey {
    /// The backend these components key: `hip`.
    pub const BACKEND: &'static str = "hip";

    /// The version of [`HipArtifact`](crate::HipArtifact)'s serialized
    /// form, named by the compiler component: a change of the artifact
    /// type makes old entries misses, not misreads. 3 added the module's
    /// other entry points (B6); 2 the compile's report (D4); the form
    /// before it had no number.
    pub const ARTIFACT_FORMAT: u32 = 3;

    /// What every store key of a target's artifacts shares (P1): backend
    /// `hip`, the compiler's whole identity (hipRTC's and comgr's versions
    /// and library files: hipRTC's own version says little) and the
    /// [artifact format](Self::ARTIFACT_FORMAT), the target's
    /// architecture, and as options the flags a kernel that chooses none is
    /// compiled with, past the architecture (none: hipRTC's defaults).
    pub fn for_store(
        identity: &CompilerIdentity,
        architecture: Option<&Architecture>,
    ) -> KeyComponents {
        KeyComponents::new(
            Self::BACKEND,
            format!("{identity} / artifact {}", Self::ARTIFACT_FORMAT),
            architecture.map_or_else(
                || KeyComponents::ANY_ARCHITECTURE.to_owned(),
                ToString::to_string,
            ),
            HipOptions::new().flags_past_architecture().join(" "),
        )
    }

    /// What a source key of a kernel entered at `entry`, compiled with
    /// hipRTC's `flags` and `headers`, covers beside its text.
    pub fn cover(entry: &str, flags: Vec<String>, headers: &[Header]) -> SourceCover {
        headers.iter().fold(
            SourceCover::new(Self::BACKEND, entry).options(flags),
            |cover, header| cover.header(&header.name, &header.text),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> CompilerIdentity {
        CompilerIdentity {
            hiprtc_version: "9.0".into(),
            hiprtc_library: LibraryFile {
                name: "libamdhip64.so.5.2.21153".into(),
                digest: [1; 32],
            },
            comgr_version: "2.4".into(),
            comgr_library: LibraryFile {
                name: "libamd_comgr.so.2.4.0".into(),
                digest: [2; 32],
            },
        }
    }

    // P1
    #[test]
    fn the_store_components_name_the_whole_compiler_identity_and_the_architecture() {
        let base = identity();
        let gfx90a = Architecture::new("gfx90a").expect("valid");
        let components = HipKey::for_store(&base, Some(&gfx90a));
        assert_eq!(
            components,
            KeyComponents::new(
                "hip",
                format!(
                    "hiprtc 9.0 (libamdhip64.so.5.2.21153 blake3:{}), comgr 2.4 \
                     (libamd_comgr.so.2.4.0 blake3:{}) / artifact 3",
                    "01".repeat(16),
                    "02".repeat(16)
                ),
                "gfx90a",
                ""
            )
        );
        let identity_changes: [fn(&mut CompilerIdentity); 6] = [
            |identity| identity.hiprtc_version = "9.1".into(),
            |identity| identity.hiprtc_library.name = "libhiprtc.so.6.2.60200".into(),
            |identity| identity.hiprtc_library.digest = [3; 32],
            |identity| identity.comgr_version = "2.6".into(),
            |identity| identity.comgr_library.name = "libamd_comgr.so.2.6.0".into(),
            |identity| identity.comgr_library.digest = [3; 32],
        ];
        for change in identity_changes {
            let mut identity = base.clone();
            change(&mut identity);
            let changed = HipKey::for_store(&identity, Some(&gfx90a));
            assert_ne!(changed.compiler, components.compiler, "{identity:?}");
        }
        let gfx908 = Architecture::new("gfx908").expect("valid");
        assert_ne!(
            HipKey::for_store(&base, Some(&gfx908)).architecture,
            components.architecture
        );
        assert_eq!(
            HipKey::for_store(&base, None).architecture,
            KeyComponents::ANY_ARCHITECTURE
        );
    }

    // P1, P7
    #[test]
    fn the_cover_names_the_entry_point_every_flag_and_every_header() {
        let header = |text: &str| Header {
            name: "a.h".into(),
            text: text.into(),
        };
        let flags = vec!["--gpu-architecture=gfx90a".to_owned(), "-DA=1".to_owned()];
        let cover = HipKey::cover("k", flags.clone(), &[header("int a;")]);
        assert_eq!(cover.entry_point(), "k");
        assert_eq!(cover.compile_options(), flags);
        assert_eq!(cover.headers(), [HeaderDigest::new("a.h", "int a;")]);
        assert_ne!(
            HipKey::cover("k", flags, &[header("int b;")]).preamble(),
            cover.preamble()
        );
    }
}
