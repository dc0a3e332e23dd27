//! A HIP kernel: where its source comes from, the function to launch, its
//! options and the headers it includes.

use std::fmt;
use std::sync::Arc;

use kiln_core::{Kernel, KernelId};
use serde::{Deserialize, Serialize};

use crate::options::{HipOptions, HipVariant};

/// A user generator: HIP source for a variant, or why it cannot make it.
pub type HipGenerator = dyn Fn(&HipVariant) -> Result<String, String> + Send + Sync;

/// Where a kernel's HIP source comes from.
#[derive(Clone)]
pub enum HipSource {
    /// Fixed text; it is part of the kernel's id.
    Text(Arc<str>),
    /// A generator, run when the kernel is lowered, on a worker thread of
    /// the batch. It must be deterministic, and the kernel's id must cover
    /// every parameter it reads (see [`Kernel`]'s contract).
    Generated(Arc<HipGenerator>),
}

impl HipSource {
    /// Fixed source text.
    pub fn text(text: impl Into<Arc<str>>) -> Self {
        Self::Text(text.into())
    }

    /// Source made by `generator` for each variant.
    pub fn generated(
        generator: impl Fn(&HipVariant) -> Result<String, String> + Send + Sync + 'static,
    ) -> Self {
        Self::Generated(Arc::new(generator))
    }
}

impl fmt::Debug for HipSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Text(text) => write!(f, "Text({} bytes)", text.len()),
            Self::Generated(_) => f.write_str("Generated"),
        }
    }
}

/// A header the source includes by `include_name`, handed to hipRTC with
/// its text rather than read from disk, so that its text is part of the
/// kernel's id and of its artifact's key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HipHeader {
    /// The name the source includes it by: `"ops.h"` for
    /// `#include "ops.h"`.
    pub include_name: String,
    /// Its text.
    pub text: String,
}

/// A HIP kernel: its source, the function to launch, its options and its
/// headers.
///
/// The entry point is a *name expression*: the name of an `extern "C"`
/// kernel (`"saxpy"`), a kernel in a namespace (`"ops::saxpy"`), or a
/// template instantiation (`"reduce<float, 256>"`). hipRTC instantiates it
/// and reports the symbol it was lowered to, which is what loads.
///
/// The kernel's id starts from the id it is given (a family name and the
/// parameters its generator reads) and adds the entry point, the options,
/// the headers' text and, for fixed text, the source itself: kernels that
/// differ in any of them never share an id.
///
/// ```
/// use kiln_hip::{HipKernel, HipOptions, HipSource};
/// use kiln_core::{Kernel, KernelId};
///
/// // Fixed text.
/// let scale = HipKernel::from_text(
///     "scale",
///     "scale",
///     r#"extern "C" __global__ void scale(float* x, float by) { x[threadIdx.x] *= by; }"#,
/// );
///
/// // Generated per specialization: the id names what the generator reads.
/// let tile = 64u32;
/// let fill = HipKernel::new(
///     KernelId::named("fill").parameter(&tile).build(),
///     format!("fill<{tile}>"),
///     HipSource::generated(move |_variant| {
///         Ok("template <int N> __global__ void fill(float* x) { x[threadIdx.x % N] = N; }".into())
///     }),
/// )
/// .with_options(HipOptions::new().fast_math(true))
/// .with_header("config.h", "#define UNUSED 0\n");
/// assert_ne!(scale.id(), fill.id());
/// ```
#[derive(Clone)]
pub struct HipKernel {
    id: KernelId,
    base: KernelId,
    entry: String,
    source: HipSource,
    options: HipOptions,
    headers: Vec<HipHeader>,
}

impl HipKernel {
    /// A kernel identified by `base`, launching `entry`, made of `source`.
    pub fn new(base: KernelId, entry: impl Into<String>, source: HipSource) -> Self {
        let mut kernel = Self {
            id: base.clone(),
            base,
            entry: entry.into(),
            source,
            options: HipOptions::default(),
            headers: Vec::new(),
        };
        kernel.rebuild_id();
        kernel
    }

    /// A kernel of fixed `text`, in the family `name`.
    pub fn from_text(
        name: &'static str,
        entry: impl Into<String>,
        text: impl Into<Arc<str>>,
    ) -> Self {
        Self::new(KernelId::named(name).build(), entry, HipSource::text(text))
    }

    /// The same kernel compiled with `options`.
    pub fn with_options(mut self, options: HipOptions) -> Self {
        self.options = options;
        self.rebuild_id();
        self
    }

    /// The same kernel with one more header.
    pub fn with_header(mut self, include_name: impl Into<String>, text: impl Into<String>) -> Self {
        self.headers.push(HipHeader {
            include_name: include_name.into(),
            text: text.into(),
        });
        self.rebuild_id();
        self
    }

    /// The entry point's name expression.
    pub fn entry(&self) -> &str {
        &self.entry
    }

    /// Where the source comes from.
    pub fn source(&self) -> &HipSource {
        &self.source
    }

    /// The compile options.
    pub fn options(&self) -> &HipOptions {
        &self.options
    }

    /// The headers.
    pub fn headers(&self) -> &[HipHeader] {
        &self.headers
    }

    fn rebuild_id(&mut self) {
        let mut builder = KernelId::named(self.base.name().to_owned())
            .parameter(&self.base.digest())
            .parameter(self.entry.as_str())
            .parameter(&self.options)
            .parameter(&self.headers.len());
        for header in &self.headers {
            builder = builder
                .bytes(header.include_name.as_bytes())
                .bytes(header.text.as_bytes());
        }
        builder = match &self.source {
            HipSource::Text(text) => builder.parameter(&0u8).bytes(text.as_bytes()),
            // The generator's parameters are in `base`, by contract.
            HipSource::Generated(_) => builder.parameter(&1u8),
        };
        self.id = builder.build();
    }
}

impl Kernel for HipKernel {
    fn id(&self) -> KernelId {
        self.id.clone()
    }
}

impl fmt::Debug for HipKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipKernel")
            .field("id", &self.id)
            .field("entry", &self.entry)
            .field("source", &self.source)
            .field("options", &self.options)
            .field("headers", &self.headers.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"extern "C" __global__ void k(float* x) { x[0] = 1; }"#;

    #[test]
    fn every_part_of_a_kernel_is_part_of_its_id() {
        let base = HipKernel::from_text("k", "k", TEXT);
        let others = [
            HipKernel::from_text("k", "k", format!("{TEXT}\n")),
            HipKernel::from_text("k", "k2", TEXT),
            HipKernel::from_text("k", "k", TEXT).with_options(HipOptions::new().fast_math(true)),
            HipKernel::from_text("k", "k", TEXT).with_options(HipOptions::new().define("A", "1")),
            HipKernel::from_text("k", "k", TEXT).with_header("a.h", ""),
            HipKernel::from_text("k", "k", TEXT).with_header("a.h", "//"),
            HipKernel::from_text("other", "k", TEXT),
        ];
        for other in &others {
            assert_ne!(base.id(), other.id(), "{other:?}");
        }
        assert_eq!(base.id(), HipKernel::from_text("k", "k", TEXT).id());
        assert_eq!(base.id().name(), "k");
    }
}
