//! Everything that changes a wgpu artifact (P1), in kiln-engine's key
//! vocabulary: the [`KeyComponents`] a store files every artifact under, and
//! the [`SourceCover`] a lowered text opens with.
//!
//! # How the store key covers every component
//!
//! A store key is the store's format, the components of
//! [`WgpuKey::for_store`] (backend `wgpu`, compiler `naga <version> / wgpu
//! <version> / artifact <format>`, architecture `wgsl` for WGSL and SPIR-V
//! alike, no options), the variant (there
//! is one: naga's artifact depends on no device) and a subject:
//!
//! - by kernel: the kernel's id, into which
//!   [`WgslKernelBuilder`](crate::WgslKernelBuilder) folds the source or
//!   the SPIR-V bytes (or the generator's parameters), the entry point, the
//!   constants and the layout;
//! - by source (P7): the digest of the lowered text, which opens with the
//!   [`SourceCover`] of [`WgpuKey::cover`]: the entry point, the constants,
//!   the layout and whether workgroup memory starts zeroed.
//!
//! The adapter and driver are not in these keys: they decide only the
//! driver's pipeline cache, keyed apart in
//! [`pipeline_cache`](crate::pipeline_cache).

use kiln_engine::store::{KeyComponents, SourceCover};

use crate::kernel::Language;
use crate::kernel::WgslKernel;

/// The naga kiln-wgpu validates with, as pinned in the workspace: part of
/// every artifact's key.
pub const NAGA_VERSION: &str = "30.0.2";

/// The wgpu kiln-wgpu builds pipelines with, as pinned in the workspace:
/// part of every pipeline cache's key.
pub const WGPU_VERSION: &str = "30.0.2";

/// The version of [`WgpuArtifact`](crate::WgpuArtifact)'s serialized form;
/// part of the key, so a change of the artifact type makes old entries
/// misses, not misreads. 2 added the compile's report (D4); 3 SPIR-V code,
/// the features a kernel needs and constants keyed as wgpu takes them.
const ARTIFACT_FORMAT: u32 = 4;

/// What kiln-wgpu adds to kiln-engine's key vocabulary: its backend name,
/// naga's identity, and the source cover of a lowered text. It holds
/// nothing.
///
/// ```
/// use kiln_wgpu::{NAGA_VERSION, WGPU_VERSION, WgpuKey};
///
/// assert_eq!(
///     WgpuKey::for_store().to_string(),
///     format!("wgpu / naga {NAGA_VERSION} / wgpu {WGPU_VERSION} / artifact 4 / wgsl"),
/// );
/// ```
#[derive(Debug, Clone, Copy)]
pub struct WgpuKey;

impl WgpuKey {
    /// The backend these components key: `wgpu`.
    pub const BACKEND: &'static str = "wgpu";

    /// What every store key of a wgpu artifact shares (P1): backend `wgpu`,
    /// naga's and wgpu's versions (naga validates the WGSL and SPIR-V, and
    /// wgpu's map of features to naga's capabilities decides what a kernel
    /// needs) and the artifact format. No device: the artifact is the same
    /// for all.
    pub fn for_store() -> KeyComponents {
        KeyComponents::new(
            Self::BACKEND,
            format!("naga {NAGA_VERSION} / wgpu {WGPU_VERSION} / artifact {ARTIFACT_FORMAT}"),
            "wgsl",
            "",
        )
    }

    /// What a source key of `kernel` covers beside its text: the entry
    /// point, the constants, the layout and whether workgroup memory starts
    /// zeroed, and for SPIR-V the language (its text is the module's bytes
    /// in hexadecimal), so two kernels share an artifact exactly when their
    /// pipelines are the same.
    pub fn cover(kernel: &WgslKernel) -> SourceCover {
        let cover = SourceCover::new(Self::BACKEND, kernel.entry());
        let cover = match kernel.language() {
            Language::Wgsl => cover,
            Language::Spirv => cover.setting("language", Language::Spirv.name()),
        };
        cover
            .setting("constants", kernel.constants().canonical())
            .setting("layout", kernel.layout())
            .setting(
                "zeroed workgroup memory",
                kernel.zero_initializes_workgroup_memory(),
            )
    }
}
