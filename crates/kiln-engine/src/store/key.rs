//! An artifact's key (P1): every component that changes its bytes, in the
//! clear, and the compiler side that names them.
//!
//! The whole key vocabulary lives here, so that the backends speak it alike:
//! the [`StoreKey`] and its one [`digest`](StoreKey::digest), the
//! [`KeyComponents`] a compiler shares with all its artifacts (whose
//! library files `identity` tells apart), the [`SourceCover`] that a
//! lowered text opens with so that its source key covers what shapes the
//! artifact beside the text, and the [`Provenance`] a backend carries on
//! each artifact.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::compiler::ArtifactCompiler;
use crate::encoding;
use crate::id::ArtifactId;

/// The version of the store's key and record format. Part of every key: a
/// change of format makes every earlier entry a miss instead of a misread.
///
/// 2: compiler identities name a digest of the compiler's library, source
/// keys are of texts opened by a [`SourceCover`], and artifacts carry a
/// [`Provenance`].
///
/// 3: a C++ kernel's headers are resolved by kiln and keyed by their text,
/// NVRTC compiles every program under one name with
/// `--no-source-include`, and `kiln warm` compiles a file's text as it is
/// (P13, P14): artifacts of the same keys as before would differ, so none
/// of the earlier entries is read.
pub const STORE_FORMAT: u32 = 3;

/// The key-derivation context of [`StoreKey::digest`].
const KEY_CONTEXT: &str = "kiln store key";

/// The key-derivation context of [`Provenance::digest`].
const PROVENANCE_CONTEXT: &str = "kiln provenance";

/// What every artifact of one compiler shares in its key (P1).
///
/// Each field is text that a person can read in `kiln ls` and in a miss's
/// explanation; two compilers that could produce different bytes must differ
/// in at least one field.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KeyComponents {
    /// The backend: `cuda`, `hip`, `wgpu`.
    pub backend: String,
    /// The compiler's identity and version: `nvrtc 12.4`, `hiprtc 6.1`,
    /// `naga 24 / driver 550.54`.
    pub compiler: String,
    /// The architecture compiled for: `sm_90`, `gfx942`, an adapter name.
    pub architecture: String,
    /// The compile options, in a canonical order.
    pub options: String,
}

impl KeyComponents {
    /// [`architecture`](Self::architecture) of a compiler that no target has
    /// named an architecture for: each artifact's own is in its variant.
    pub const ANY_ARCHITECTURE: &'static str = "per variant";

    /// Components from their four parts.
    pub fn new(
        backend: impl Into<String>,
        compiler: impl Into<String>,
        architecture: impl Into<String>,
        options: impl Into<String>,
    ) -> Self {
        Self {
            backend: backend.into(),
            compiler: compiler.into(),
            architecture: architecture.into(),
            options: options.into(),
        }
    }
}

impl fmt::Display for KeyComponents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} / {} / {}",
            self.backend, self.compiler, self.architecture
        )?;
        if !self.options.is_empty() {
            write!(f, " / {}", self.options)?;
        }
        Ok(())
    }
}

/// One component of a key, to say which one differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum KeyComponent {
    /// [`STORE_FORMAT`].
    Format,
    /// [`KeyComponents::backend`].
    Backend,
    /// [`KeyComponents::compiler`].
    Compiler,
    /// [`KeyComponents::architecture`].
    Architecture,
    /// [`KeyComponents::options`].
    Options,
    /// [`StoreKey::variant`].
    Variant,
    /// [`StoreKey::entry_point`].
    EntryPoint,
    /// The kernel of [`KeySubject::Kernel`].
    Kernel,
    /// The source of [`KeySubject::Source`].
    Source,
}

impl fmt::Display for KeyComponent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Format => "store format version",
            Self::Backend => "backend",
            Self::Compiler => "compiler",
            Self::Architecture => "architecture",
            Self::Options => "compile options",
            Self::Variant => "variant",
            Self::EntryPoint => "entry point",
            Self::Kernel => "kernel",
            Self::Source => "source",
        })
    }
}

/// What a key is about: a kernel, looked up before lowering, or the text it
/// lowered to, looked up after.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum KeySubject {
    /// A kernel by its id.
    Kernel {
        /// [`KernelId::name`](crate::KernelId::name).
        name: String,
        /// [`KernelId::digest`](crate::KernelId::digest).
        digest: u128,
    },
    /// Lowered source text by its BLAKE3 digest.
    Source {
        /// The digest of the text.
        digest: [u8; 32],
    },
}

/// The full key of one stored artifact: every component that changes its
/// bytes (P1).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StoreKey {
    /// [`STORE_FORMAT`] when the key was made.
    pub format: u32,
    /// What the compiler shares with all its artifacts.
    pub components: KeyComponents,
    /// The variant, serialized: what identifies it.
    pub variant: Vec<u8>,
    /// The variant as a person reads it (its `Debug` form).
    pub variant_text: String,
    /// The entry point, when the compiler takes it apart from the source.
    pub entry_point: Option<String>,
    /// The kernel or the source.
    pub subject: KeySubject,
}

/// A key component that differs between two keys, with both values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Difference {
    /// Which component.
    pub component: KeyComponent,
    /// Its value in the key the store holds.
    pub stored: String,
    /// Its value in the key asked for.
    pub asked: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} changed: {:?} -> {:?}",
            self.component, self.stored, self.asked
        )
    }
}

impl StoreKey {
    /// The key of `id` as compiled by a compiler with `components`.
    pub fn for_artifact<V: Serialize + fmt::Debug>(
        components: &KeyComponents,
        id: &ArtifactId<V>,
        entry_point: Option<String>,
    ) -> Self {
        Self::new(
            components,
            &id.variant,
            entry_point,
            KeySubject::Kernel {
                name: id.kernel.name().to_owned(),
                digest: id.kernel.digest(),
            },
        )
    }

    /// The key of lowered `source` compiled under `id`'s variant by a
    /// compiler with `components`, whatever kernel it came from.
    pub fn for_source<V: Serialize + fmt::Debug>(
        components: &KeyComponents,
        id: &ArtifactId<V>,
        entry_point: Option<String>,
        source: &str,
    ) -> Self {
        Self::new(
            components,
            &id.variant,
            entry_point,
            KeySubject::Source {
                digest: *blake3::hash(source.as_bytes()).as_bytes(),
            },
        )
    }

    fn new<V: Serialize + fmt::Debug>(
        components: &KeyComponents,
        variant: &V,
        entry_point: Option<String>,
        subject: KeySubject,
    ) -> Self {
        Self {
            format: STORE_FORMAT,
            components: components.clone(),
            variant: encoding::encode(variant).unwrap_or_else(|error| {
                // A variant serde cannot write still needs a key; its text is
                // the best stand-in, and it stays distinct per value.
                log::warn!("variant {variant:?} does not serialize ({error}); keyed by its text");
                format!("{variant:?}").into_bytes()
            }),
            variant_text: format!("{variant:?}"),
            entry_point,
            subject,
        }
    }

    /// The variant the key was made under, read back from its bytes as a
    /// `V`: `None` when they are not one (another backend's variant, or a
    /// variant that did not serialize and is keyed by its text). With
    /// [`KeyedCompiler::variant_label`], this names a stored entry's
    /// variant as its backend does, whenever it was stored: the bytes are
    /// what the key was always made of.
    pub fn decode_variant<V: serde::de::DeserializeOwned>(&self) -> Option<V> {
        match encoding::decode::<V>(&self.variant) {
            Ok((variant, read)) if read == self.variant.len() => Some(variant),
            _ => None,
        }
    }

    /// Whether this key is of lowered source rather than of a kernel.
    pub fn is_source(&self) -> bool {
        matches!(self.subject, KeySubject::Source { .. })
    }

    /// The kernel this key is of, as `(name, digest)`, if it is of a kernel.
    pub fn kernel(&self) -> Option<(&str, u128)> {
        match &self.subject {
            KeySubject::Kernel { name, digest } => Some((name, *digest)),
            KeySubject::Source { .. } => None,
        }
    }

    /// The BLAKE3 digest of every component: the name the key is stored
    /// under, the same in every process. The one digest of a key: every
    /// store files its entries under it.
    ///
    /// The key is encoded straight into the hasher, so a lookup that names
    /// its record file by it allocates nothing.
    pub fn digest(&self) -> [u8; 32] {
        let mut hasher = blake3::Hasher::new_derive_key(KEY_CONTEXT);
        encoding::encode_to(self, &mut hasher).expect("a key is plain data and always serializes");
        *hasher.finalize().as_bytes()
    }

    /// The first component, in the order of [`KeyComponent`], in which `self`
    /// (what the store holds) differs from `asked`.
    pub fn first_difference(&self, asked: &StoreKey) -> Option<Difference> {
        let differs = |component, stored: &dyn fmt::Display, asked: &dyn fmt::Display| {
            Some(Difference {
                component,
                stored: stored.to_string(),
                asked: asked.to_string(),
            })
        };
        let (held, wanted) = (&self.components, &asked.components);
        if self.format != asked.format {
            return differs(KeyComponent::Format, &self.format, &asked.format);
        }
        if held.backend != wanted.backend {
            return differs(KeyComponent::Backend, &held.backend, &wanted.backend);
        }
        if held.compiler != wanted.compiler {
            return differs(KeyComponent::Compiler, &held.compiler, &wanted.compiler);
        }
        if held.architecture != wanted.architecture {
            return differs(
                KeyComponent::Architecture,
                &held.architecture,
                &wanted.architecture,
            );
        }
        if held.options != wanted.options {
            return differs(KeyComponent::Options, &held.options, &wanted.options);
        }
        if self.variant != asked.variant {
            return differs(
                KeyComponent::Variant,
                &self.variant_text,
                &asked.variant_text,
            );
        }
        if self.entry_point != asked.entry_point {
            let text = |entry: &Option<String>| entry.clone().unwrap_or_else(|| "none".into());
            return differs(
                KeyComponent::EntryPoint,
                &text(&self.entry_point),
                &text(&asked.entry_point),
            );
        }
        match (&self.subject, &asked.subject) {
            (a, b) if a == b => None,
            (KeySubject::Source { digest: a }, KeySubject::Source { digest: b }) => {
                differs(KeyComponent::Source, &hex(&a[..8]), &hex(&b[..8]))
            }
            _ => differs(
                KeyComponent::Kernel,
                &self.subject_text(),
                &asked.subject_text(),
            ),
        }
    }

    /// The subject as a person reads it: `name#digest` or `source:digest`.
    pub fn subject_text(&self) -> String {
        match &self.subject {
            KeySubject::Kernel { name, digest } => format!("{name}#{digest:032x}"),
            KeySubject::Source { digest } => format!("source:{}", hex(&digest[..8])),
        }
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use fmt::Write;
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        write!(text, "{byte:02x}").expect("writing to a String cannot fail");
    }
    text
}

/// The digest of one header a source includes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HeaderDigest {
    /// The name the source includes it by.
    pub include_name: String,
    /// BLAKE3 of its text.
    pub digest: [u8; 32],
}

impl HeaderDigest {
    /// The digest of the header `include_name` with `text`.
    pub fn new(include_name: &str, text: &str) -> Self {
        Self {
            include_name: include_name.to_owned(),
            digest: *blake3::hash(text.as_bytes()).as_bytes(),
        }
    }
}

/// `name=<digest in hex>`.
impl fmt::Display for HeaderDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.include_name, hex(&self.digest))
    }
}

/// What a source key covers beside the source text itself (P1, P7): the
/// entry point, the exact compile options, every header by its digest and
/// any setting of the backend's own that shapes the artifact.
///
/// A backend opens the text it gives the loader as a kernel's source with
/// [`preamble`](Self::preamble), so that two kernels have the same text
/// exactly when they compile to the same artifact, which is what sharing
/// artifacts between kernels with identical text needs. Each value is
/// quoted on a line of its own, so no two covers write the same lines.
///
/// The architecture has no line of its own: the backends' options name it
/// (`-arch=sm_90`, `--gpu-architecture=gfx90a`), taken from the variant.
///
/// ```
/// use kiln_engine::store::SourceCover;
///
/// let cover = SourceCover::new("cuda", "scale<float, 128>")
///     .options(["-arch=sm_90", "-std=c++17"])
///     .header("common.cuh", "#define ONE 1");
/// let preamble = cover.preamble();
/// assert!(preamble.starts_with("// kiln source key: cuda\n"));
/// assert!(preamble.contains("// entry point: \"scale<float, 128>\"\n"));
/// assert!(preamble.contains("// option: \"-arch=sm_90\"\n"));
/// assert!(preamble.contains("// header: \"common.cuh\" blake3:"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceCover {
    backend: String,
    entry_point: String,
    options: Vec<String>,
    headers: Vec<HeaderDigest>,
    settings: Vec<(String, String)>,
}

impl SourceCover {
    /// The cover of a source of `backend` entered at `entry_point`.
    pub fn new(backend: impl Into<String>, entry_point: impl Into<String>) -> Self {
        Self {
            backend: backend.into(),
            entry_point: entry_point.into(),
            options: Vec::new(),
            headers: Vec::new(),
            settings: Vec::new(),
        }
    }

    /// With `options`, in the order the compiler is given them.
    pub fn options(mut self, options: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.options.extend(options.into_iter().map(Into::into));
        self
    }

    /// With the header `include_name`, by the digest of its `text`.
    pub fn header(mut self, include_name: &str, text: &str) -> Self {
        self.headers.push(HeaderDigest::new(include_name, text));
        self
    }

    /// With a setting of the backend's own, `name` (a fixed phrase) with
    /// `value`.
    pub fn setting(mut self, name: &str, value: impl fmt::Display) -> Self {
        self.settings.push((name.to_owned(), value.to_string()));
        self
    }

    /// The entry point.
    pub fn entry_point(&self) -> &str {
        &self.entry_point
    }

    /// The compile options, in order.
    pub fn compile_options(&self) -> &[String] {
        &self.options
    }

    /// The headers' digests, in order.
    pub fn headers(&self) -> &[HeaderDigest] {
        &self.headers
    }

    /// The comment lines (`//`, which CUDA C++, HIP and WGSL all read as
    /// comments) that open the text a source key is made of. Every value is
    /// quoted as Rust quotes it, so none spans lines and no line ends in a
    /// backslash that would join it to the next.
    pub fn preamble(&self) -> String {
        use fmt::Write;
        let mut text = String::with_capacity(128 + 64 * self.options.len());
        let mut line = |args: fmt::Arguments<'_>| {
            text.write_fmt(args)
                .expect("writing to a String cannot fail");
            text.push('\n');
        };
        line(format_args!("// kiln source key: {}", self.backend));
        line(format_args!("// entry point: {:?}", self.entry_point));
        for option in &self.options {
            line(format_args!("// option: {option:?}"));
        }
        for header in &self.headers {
            line(format_args!(
                "// header: {:?} blake3:{}",
                header.include_name,
                hex(&header.digest)
            ));
        }
        for (name, value) in &self.settings {
            line(format_args!("// {name}: {value:?}"));
        }
        text
    }
}

/// What built one artifact: the key components of the compiler that made
/// it, the options it was given, the digests of the source and headers it
/// compiled, and the entry point (P1).
///
/// A backend carries one on every artifact it compiles, so that an artifact
/// read from a store says what made it. Its
/// [`components`](Self::components) are the compiler's
/// [`key_components`](KeyedCompiler::key_components), the same as its store
/// keys'; the artifact's own architecture is in its options and on the
/// artifact.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Provenance {
    /// The compiler's key components.
    pub components: KeyComponents,
    /// The options the compiler was given, in order.
    pub options: Vec<String>,
    /// BLAKE3 of the source text compiled.
    pub source_digest: [u8; 32],
    /// The digest of every header, in the order the compiler was given them.
    pub headers: Vec<HeaderDigest>,
    /// The entry point.
    pub entry_point: String,
}

impl Provenance {
    /// What a compiler with `components` made of `source` under `cover`.
    pub fn new(components: KeyComponents, cover: &SourceCover, source: &str) -> Self {
        Self {
            components,
            options: cover.options.clone(),
            source_digest: *blake3::hash(source.as_bytes()).as_bytes(),
            headers: cover.headers.clone(),
            entry_point: cover.entry_point.clone(),
        }
    }

    /// Every part as `(name, value)`, in a fixed order.
    pub fn parts(&self) -> [(&'static str, String); 5] {
        [
            ("compiler", self.components.to_string()),
            ("options", format!("{:?}", self.options)),
            ("source", hex(&self.source_digest)),
            (
                "headers",
                self.headers
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            ("entry point", self.entry_point.clone()),
        ]
    }

    /// The name of the first part that differs from `other`'s.
    pub fn first_difference(&self, other: &Self) -> Option<&'static str> {
        self.parts()
            .into_iter()
            .zip(other.parts())
            .find(|(mine, theirs)| mine.1 != theirs.1)
            .map(|(mine, _)| mine.0)
    }

    /// The BLAKE3 digest of every part: one name for what built the
    /// artifact, the same in every process.
    pub fn digest(&self) -> [u8; 32] {
        let mut hasher = blake3::Hasher::new_derive_key(PROVENANCE_CONTEXT);
        encoding::encode_to(self, &mut hasher)
            .expect("a provenance is plain data and always serializes");
        *hasher.finalize().as_bytes()
    }
}

impl fmt::Display for Provenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .parts()
            .into_iter()
            .map(|(name, value)| format!("{name}: {value}"))
            .collect();
        f.write_str(&parts.join("; "))
    }
}

/// A compiler whose artifacts can be kept in a store: it names what its keys
/// are made of (P1).
///
/// # Contract
///
/// - [`key_components`](Self::key_components) names everything that changes
///   the bytes of the artifacts this compiler makes beside the kernel, its
///   variant and its source: two compilers that could make different bytes
///   return different components. It is called once, when a target binds to
///   a store.
/// - The artifact type's serialized form is part of the compiler's identity:
///   change [`KeyComponents::compiler`] when it changes.
pub trait KeyedCompiler: ArtifactCompiler {
    /// What every key of this compiler's artifacts shares.
    fn key_components(&self) -> KeyComponents;

    /// The entry point `id` compiles to, when the compiler takes it apart
    /// from the source text (so the same text can make different
    /// artifacts). `None`, the default, when the source names it.
    fn entry_point(&self, id: &ArtifactId<Self::Variant>) -> Option<String> {
        let _ = id;
        None
    }

    /// `variant` as a person reads it in a listing: `sm_90`, `gfx90a`. The
    /// default is its `Debug` text, which [`StoreKey::variant_text`] also
    /// keeps.
    fn variant_label(variant: &Self::Variant) -> String {
        format!("{variant:?}")
    }
}

#[cfg(test)]
mod tests;
