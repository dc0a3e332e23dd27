//! Named blobs: data a backend keeps in the store beside its artifacts that
//! is no kernel's artifact (the driver's pipeline cache of wgpu), under a
//! key of its own vocabulary.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::encoding;

/// The context BLAKE3 derives a blob key's digest under: never the digest
/// of a [`StoreKey`](super::StoreKey), whatever the two hold.
const BLOB_KEY_CONTEXT: &str = "kiln blob key";

/// The name of a blob: what it is, and every component that decides
/// whether its bytes may be used (P1).
///
/// Two keys that differ in the kind, in one component's name or value, or
/// in the order of the components, are two blobs.
///
/// ```
/// use kiln_engine::store::BlobKey;
///
/// let key = BlobKey::new("wgpu pipeline cache")
///     .component("wgpu", "26.0.1")
///     .component("adapter", "llvmpipe [10005:0000]")
///     .component("driver", "llvmpipe 25.0");
/// assert_eq!(key.kind, "wgpu pipeline cache");
/// assert_ne!(key.digest(), key.clone().component("extra", "").digest());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BlobKey {
    /// What the blob is, as `kiln ls` names it (`wgpu pipeline cache`).
    pub kind: String,
    /// What identifies it, as `(name, value)` pairs in a fixed order.
    pub components: Vec<(String, String)>,
}

impl BlobKey {
    /// A key of `kind` with no components yet.
    pub fn new(kind: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            components: Vec::new(),
        }
    }

    /// The key with one more component, `name` = `value`.
    #[must_use]
    pub fn component(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.components.push((name.into(), value.into()));
        self
    }

    /// A BLAKE3 digest of the kind and every component, derived under a
    /// context of its own: where a store files the blob.
    pub fn digest(&self) -> [u8; 32] {
        let mut hasher = blake3::Hasher::new_derive_key(BLOB_KEY_CONTEXT);
        encoding::encode_to(self, &mut hasher)
            .expect("a blob key is plain data and always serializes");
        *hasher.finalize().as_bytes()
    }

    /// What first differs between `self` (what a store holds) and `asked`,
    /// in words; `None` when they are the same key.
    pub fn first_difference(&self, asked: &BlobKey) -> Option<String> {
        if self.kind != asked.kind {
            return Some(format!(
                "kind: stored `{}`, asked `{}`",
                self.kind, asked.kind
            ));
        }
        let held = self
            .components
            .iter()
            .map(Some)
            .chain(std::iter::repeat(None));
        let wanted = asked
            .components
            .iter()
            .map(Some)
            .chain(std::iter::repeat(None));
        let length = self.components.len().max(asked.components.len());
        held.zip(wanted)
            .take(length)
            .find(|(held, wanted)| held != wanted)
            .map(|(held, wanted)| {
                let text = |component: Option<&(String, String)>| {
                    component.map_or_else(
                        || "nothing".to_owned(),
                        |(name, value)| format!("{name} `{value}`"),
                    )
                };
                format!("stored {}, asked {}", text(held), text(wanted))
            })
    }
}

impl fmt::Display for BlobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.kind)?;
        for (index, (name, value)) in self.components.iter().enumerate() {
            let separator = if index == 0 { " (" } else { "; " };
            write!(f, "{separator}{name}: {value}")?;
        }
        if !self.components.is_empty() {
            f.write_str(")")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{KeyComponents, StoreKey};
    use crate::{ArtifactId, KernelId};

    fn key() -> BlobKey {
        BlobKey::new("pipeline cache")
            .component("adapter", "a")
            .component("driver", "1")
    }

    #[test]
    fn a_blob_key_names_the_first_component_that_differs() {
        // P1, P9
        assert_eq!(key().first_difference(&key()), None);
        let newer = BlobKey::new("pipeline cache")
            .component("adapter", "a")
            .component("driver", "2");
        assert_eq!(
            key().first_difference(&newer).as_deref(),
            Some("stored driver `1`, asked driver `2`")
        );
        assert!(
            key()
                .first_difference(&key().component("wgpu", "26"))
                .is_some_and(|difference| difference.contains("stored nothing"))
        );
        assert_ne!(key().digest(), newer.digest());
        assert_eq!(key().to_string(), "pipeline cache (adapter: a; driver: 1)");
    }

    #[test]
    fn a_blob_key_is_never_filed_where_an_artifact_key_is() {
        // P1: the two vocabularies are digested under different contexts.
        let components = KeyComponents::new("pipeline cache", "", "", "");
        let artifact = StoreKey::for_artifact(
            &components,
            &ArtifactId::new(KernelId::named("pipeline cache").build(), ()),
            None,
        );
        assert_ne!(BlobKey::new("pipeline cache").digest(), artifact.digest());
    }
}
