//! Everything that changes a CUDA artifact's bytes (P1), in kiln-engine's key
//! vocabulary: the [`KeyComponents`] a store files every artifact of a
//! target under, the [`SourceCover`] a lowered text opens with, and the
//! [`Provenance`](kiln_engine::store::Provenance) every artifact carries.
//!
//! # How the store key covers every component
//!
//! A store key is the store's format, the [`KeyComponents`] of
//! [`CudaKey::for_store`] (backend `cuda`, compiler
//! `nvrtc <major>.<minor> (<library file> blake3:<digest>) / artifact
//! <format>`, the target's
//! architecture, the options every kernel gets unless its own say
//! otherwise), the variant (the architecture kernels are built for), and a
//! subject:
//!
//! - by kernel: the kernel's id, into which
//!   [`CudaKernelBuilder`](crate::CudaKernelBuilder) folds the source (or
//!   the generator's parameters), the entry point, the kernel's own options
//!   and every header's text;
//! - by source (P7): the digest of the lowered text, which opens with the
//!   [`SourceCover`] of [`CudaKey::cover`]: the entry point,
//!   NVRTC's arguments (the architecture's among them) and every header's
//!   digest.
//!
//! So the kernel's own parts are in both subjects, and the target's in the
//! shared components; nothing that changes the bytes is left out. NVRTC
//! reports only `major.minor`, so the compiler component also names the
//! digest of the library file loaded: a patch release is another compiler.

use kiln_engine::KeyComponents;
use kiln_engine::store::{LibraryFile, SourceCover};

use crate::architecture::Architecture;
use crate::nvrtc::NvrtcVersion;
use crate::options::CudaOptions;

/// What kiln-cuda adds to kiln-engine's key vocabulary: its backend name,
/// NVRTC's identity, and the source cover of a lowered text. It holds
/// nothing.
///
/// ```
/// use kiln_engine::store::LibraryFile;
/// use kiln_cuda::{Architecture, CudaKey, NvrtcVersion};
///
/// let version = NvrtcVersion { major: 13, minor: 0 };
/// let library = LibraryFile { name: "libnvrtc.so.13".into(), digest: [0; 32] };
/// let components =
///     CudaKey::for_store(version, &library, Some(Architecture::new(9, 0)));
/// assert_eq!(
///     components.to_string(),
///     format!(
///         "cuda / nvrtc 13.0 (libnvrtc.so.13 blake3:{}) / artifact 3 / sm_90 / -std=c++17",
///         "0".repeat(32)
///     )
/// );
/// ```
#[derive(Debug, Clone, Copy)]
pub struct CudaKey;

impl CudaKey {
    /// The backend these components key: `cuda`.
    pub const BACKEND: &'static str = "cuda";

    /// The version of [`CudaArtifact`](crate::CudaArtifact)'s serialized
    /// form, named by the compiler component: a change of the artifact
    /// type makes old entries misses, not misreads. 3 added the module's
    /// other entry points (B6); 2 the compile's report (D4); the form
    /// before it had no number.
    pub const ARTIFACT_FORMAT: u32 = 3;

    /// What every store key of a target's artifacts shares (P1): backend
    /// `cuda`, the compiler (NVRTC's `version` and its `library` file by
    /// digest, and the [artifact format](Self::ARTIFACT_FORMAT)), the
    /// target's `architecture`, and as options the NVRTC
    /// arguments a kernel that chooses none is compiled with, past the
    /// architecture (`-std=c++17`).
    ///
    /// The options are there because a kernel's id holds its
    /// [`CudaOptions`], not the arguments they become: should kiln-cuda's
    /// defaults change, every key changes with them instead of serving
    /// artifacts built under the old ones.
    pub fn for_store(
        version: NvrtcVersion,
        library: &LibraryFile,
        architecture: Option<Architecture>,
    ) -> KeyComponents {
        KeyComponents::new(
            Self::BACKEND,
            format!(
                "nvrtc {version} ({library}) / artifact {}",
                Self::ARTIFACT_FORMAT
            ),
            architecture.map_or_else(
                || KeyComponents::ANY_ARCHITECTURE.to_owned(),
                |arch| arch.to_string(),
            ),
            CudaOptions::default()
                .arguments_past_architecture()
                .join(" "),
        )
    }

    /// What a source key of a kernel entered at `entry_point`, compiled
    /// with NVRTC's `arguments` and `headers` (`(include name, text)`),
    /// covers beside its text.
    pub fn cover(
        entry_point: &str,
        arguments: &[String],
        headers: &[(String, String)],
    ) -> SourceCover {
        headers.iter().fold(
            SourceCover::new(Self::BACKEND, entry_point).options(arguments.iter().cloned()),
            |cover, (name, text)| cover.header(name, text),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn components(minor: u32, library_digest: u8, arch: Option<Architecture>) -> KeyComponents {
        let library = LibraryFile {
            name: "libnvrtc.so.13".into(),
            digest: [library_digest; 32],
        };
        CudaKey::for_store(NvrtcVersion { major: 13, minor }, &library, arch)
    }

    // P1
    #[test]
    fn the_store_components_name_backend_nvrtc_its_library_architecture_and_default_options() {
        let hopper = components(0, 1, Some(Architecture::new(9, 0)));
        assert_eq!(
            hopper,
            KeyComponents::new(
                "cuda",
                format!(
                    "nvrtc 13.0 (libnvrtc.so.13 blake3:{}) / artifact 3",
                    "01".repeat(16)
                ),
                "sm_90",
                "-std=c++17"
            )
        );
        assert_eq!(
            hopper,
            components(0, 1, Some(Architecture::new(9, 0))),
            "the same inputs, the same components"
        );
        let ampere = components(0, 1, Some(Architecture::new(8, 0)));
        assert_ne!(ampere.architecture, hopper.architecture);
        let newer = components(1, 1, Some(Architecture::new(9, 0)));
        assert_ne!(newer.compiler, hopper.compiler);
        let patched = components(0, 2, Some(Architecture::new(9, 0)));
        assert_ne!(
            patched.compiler, hopper.compiler,
            "another library with the same version is another compiler"
        );
        assert_eq!(
            components(0, 1, None).architecture,
            KeyComponents::ANY_ARCHITECTURE
        );
    }

    // P1, P7
    #[test]
    fn the_cover_names_the_entry_point_every_argument_and_every_header() {
        let arguments = ["-arch=sm_90".to_owned(), "-std=c++17".to_owned()];
        let headers = [("common.cuh".to_owned(), "#define ONE 1".to_owned())];
        let cover = CudaKey::cover("k", &arguments, &headers);
        assert_eq!(cover.entry_point(), "k");
        assert_eq!(cover.compile_options(), arguments);
        assert_eq!(cover.headers().len(), 1);
        let other_header = [("common.cuh".to_owned(), "#define ONE 2".to_owned())];
        assert_ne!(
            CudaKey::cover("k", &arguments, &other_header).preamble(),
            cover.preamble()
        );
    }
}
