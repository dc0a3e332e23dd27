//! An artifact's key (P1): every component that changes its bytes, in the
//! clear, and the compiler side that names them.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::compiler::ArtifactCompiler;
use crate::encoding;
use crate::id::ArtifactId;

/// The version of the store's key and record format. Part of every key: a
/// change of format makes every earlier entry a miss instead of a misread.
pub const STORE_FORMAT: u32 = 1;

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
    /// under, the same in every process.
    pub fn digest(&self) -> [u8; 32] {
        let mut hasher = blake3::Hasher::new_derive_key("kiln store key");
        hasher.update(&encoding::encode(self).expect("a key is plain data and always serializes"));
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::KernelId;

    fn components() -> KeyComponents {
        KeyComponents::new("cuda", "nvrtc 12.4", "sm_90", "-O3")
    }

    fn id(number: u32) -> ArtifactId<u8> {
        ArtifactId::new(KernelId::named("saxpy").parameter(&number).build(), 1)
    }

    #[test]
    fn the_same_inputs_give_the_same_key_digest() {
        // P1
        let a = StoreKey::for_artifact(&components(), &id(1), None);
        let b = StoreKey::for_artifact(&components(), &id(1), None);
        assert_eq!(a.digest(), b.digest());
    }

    #[test]
    fn every_changed_component_gives_another_key_and_is_named() {
        // P1, P9
        let base = StoreKey::for_artifact(&components(), &id(1), None);
        let mut changes: Vec<(KeyComponent, StoreKey)> = Vec::new();
        let mut key = base.clone();
        key.format += 1;
        changes.push((KeyComponent::Format, key));
        for (component, edit) in [
            (
                KeyComponent::Backend,
                (|c: &mut KeyComponents| c.backend = "hip".into()) as fn(&mut KeyComponents),
            ),
            (KeyComponent::Compiler, |c| c.compiler = "nvrtc 12.5".into()),
            (KeyComponent::Architecture, |c| {
                c.architecture = "sm_80".into()
            }),
            (KeyComponent::Options, |c| c.options = "-O2".into()),
        ] {
            let mut changed = components();
            edit(&mut changed);
            changes.push((component, StoreKey::for_artifact(&changed, &id(1), None)));
        }
        changes.push((
            KeyComponent::Variant,
            StoreKey::for_artifact(&components(), &ArtifactId::new(id(1).kernel, 2u8), None),
        ));
        changes.push((
            KeyComponent::EntryPoint,
            StoreKey::for_artifact(&components(), &id(1), Some("main".into())),
        ));
        changes.push((
            KeyComponent::Kernel,
            StoreKey::for_artifact(&components(), &id(2), None),
        ));
        for (component, key) in changes {
            assert_ne!(key.digest(), base.digest(), "{component} is in the key");
            let difference = base.first_difference(&key).expect("the keys differ");
            assert_eq!(difference.component, component);
        }
        assert_eq!(base.first_difference(&base), None);
    }

    #[test]
    fn source_keys_differ_by_text_and_not_by_kernel() {
        // P1, P7
        let a = StoreKey::for_source(&components(), &id(1), None, "text");
        let b = StoreKey::for_source(&components(), &id(2), None, "text");
        let c = StoreKey::for_source(&components(), &id(1), None, "other text");
        assert_eq!(a.digest(), b.digest());
        assert_ne!(a.digest(), c.digest());
        assert_eq!(
            a.first_difference(&c).map(|d| d.component),
            Some(KeyComponent::Source)
        );
        assert_ne!(
            a.digest(),
            StoreKey::for_artifact(&components(), &id(1), None).digest()
        );
    }
}
