//! Resolutions kept for a set of kernels built together: what `kiln warm`
//! shares between the specializations of one file, so that a folder's
//! headers are read and scanned once per run, not once per module.

use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

use kiln_engine::KernelId;

use super::{IncludeError, IncludeSearch};
use crate::Header;

/// What one resolution gave: the headers reached, or why none could be.
type Resolved = Result<Vec<Header>, IncludeError>;

/// Include resolutions shared by the kernels built with it
/// (`include_cache` on a kernel builder): a text resolved once, with the
/// same search and supplied headers, is answered from memory after. The
/// answer is what the first resolution read, so one cache serves kernels
/// built together (a batch, a folder's specializations); a header edited
/// after is read again only through another cache or none. Cheap to clone:
/// clones share the resolutions.
#[derive(Clone, Default)]
pub struct IncludeCache(Arc<Mutex<HashMap<u128, Resolved>>>);

impl IncludeCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// What `search` resolves `text` (named `label`, with `supplied`
    /// headers) to: kept from an earlier call, or resolved now by
    /// `resolve` and kept.
    pub(super) fn resolved(
        &self,
        search: &IncludeSearch,
        text: &str,
        label: &str,
        supplied: &[Header],
        resolve: impl FnOnce() -> Resolved,
    ) -> Resolved {
        let key = KernelId::named("kiln-cxx.include")
            .bytes(text.as_bytes())
            .bytes(label.as_bytes())
            .parameter(supplied)
            .parameter(search)
            .build()
            .digest();
        let held = |cache: &Self| {
            cache
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&key)
                .cloned()
        };
        if let Some(resolved) = held(self) {
            return resolved;
        }
        let resolved = resolve();
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, resolved.clone());
        resolved
    }
}

impl fmt::Debug for IncludeCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let held = self.0.lock().unwrap_or_else(PoisonError::into_inner).len();
        write!(f, "IncludeCache({held} resolutions)")
    }
}

/// Two searches that differ only in their cache search alike.
impl PartialEq for IncludeCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for IncludeCache {}

/// A cache is no part of what a search finds.
impl Hash for IncludeCache {
    fn hash<H: Hasher>(&self, _: &mut H) {}
}
