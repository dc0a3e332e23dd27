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
pub struct IncludeCache(Arc<Mutex<Held>>);

/// What a cache holds.
#[derive(Default)]
struct Held {
    /// Every resolution, by the digest of its text, label, supplied
    /// headers and search.
    by_key: HashMap<u128, Resolved>,
    /// The last one asked, answered again without hashing when the same
    /// text is asked with the same search (a file's specializations): a
    /// comparison of bytes costs less than a digest of them and the
    /// search.
    last: Option<Last>,
}

/// The last resolution asked of a cache.
struct Last {
    text: Arc<str>,
    label: String,
    supplied: Vec<Header>,
    search: IncludeSearch,
    resolved: Resolved,
}

impl Last {
    fn answers(
        &self,
        search: &IncludeSearch,
        text: &str,
        label: &str,
        supplied: &[Header],
    ) -> bool {
        *self.text == *text
            && self.label == label
            && self.supplied == supplied
            && searches_alike(&self.search, search)
    }
}

/// Whether `a` and `b` search alike, whatever caches they hold.
fn searches_alike(a: &IncludeSearch, b: &IncludeSearch) -> bool {
    let IncludeSearch {
        source_folder,
        folders,
        toolkit,
        compiler_folders,
        compiler_headers,
        compiler,
        stdlib_off,
        tree,
        outside_allowed,
        cache: _,
    } = a;
    *source_folder == b.source_folder
        && *folders == b.folders
        && *toolkit == b.toolkit
        && *compiler_folders == b.compiler_folders
        && *compiler_headers == b.compiler_headers
        && *compiler == b.compiler
        && *stdlib_off == b.stdlib_off
        && *tree == b.tree
        && *outside_allowed == b.outside_allowed
}

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
        let lock = || self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(last) = &lock().last
            && last.answers(search, text, label, supplied)
        {
            return last.resolved.clone();
        }
        let key = KernelId::named("kiln-cxx.include")
            .bytes(text.as_bytes())
            .bytes(label.as_bytes())
            .parameter(supplied)
            .parameter(search)
            .build()
            .digest();
        let held = lock().by_key.get(&key).cloned();
        let resolved = held.unwrap_or_else(resolve);
        let mut held = lock();
        held.by_key.insert(key, resolved.clone());
        held.last = Some(Last {
            text: Arc::from(text),
            label: label.to_owned(),
            supplied: supplied.to_vec(),
            // Without this cache, which it would otherwise keep alive.
            search: IncludeSearch {
                cache: None,
                ..search.clone()
            },
            resolved: resolved.clone(),
        });
        resolved
    }
}

impl fmt::Debug for IncludeCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let held = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_key
            .len();
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
