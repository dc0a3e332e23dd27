//! What a wgpu kernel is compiled under: the variant. WGSL has no compile
//! options of its own; a kernel's `override` constants and layout are on
//! its [`WgslKernel`](crate::WgslKernel).

use serde::{Deserialize, Serialize};

/// The compile choice of a wgpu target. WGSL validated by naga does not
/// depend on the device, so there is one: artifacts made without a device
/// (compile-only) serve every device later.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WgpuVariant;
