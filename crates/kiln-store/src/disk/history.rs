//! What the store remembers of each kernel id: the key it was last stored
//! under and the key it last missed under, so a miss can be explained
//! (P9). Histories explain and decide nothing.

use std::fs;

use kiln_core::{Explanation, StoreKey};

use super::DiskStore;
use super::write::within_file_size_limit;
use crate::durable;
use crate::record::{KernelHistory, Seen, now_seconds};

impl DiskStore {
    /// What the store knows of the kernel whose id has digest
    /// `kernel_digest`.
    pub fn history(&self, kernel_digest: u128) -> Option<KernelHistory> {
        let sealed = fs::read(self.inner.layout.kernel(kernel_digest)).ok()?;
        KernelHistory::open(&sealed).ok()
    }

    /// Why `key` is or is not held (P9): [`ArtifactStore::explain`].
    ///
    /// [`ArtifactStore::explain`]: kiln_core::ArtifactStore::explain
    pub(super) fn explain_key(&self, key: &StoreKey) -> Explanation {
        let Some((_, kernel)) = key.kernel() else {
            return Explanation::NeverSeen;
        };
        if let Some(record) = self.record(key)
            && record.key == *key
            && fs::metadata(self.object_path(&record.object)).is_ok()
        {
            return Explanation::Held {
                stored_at: record.stored_at,
            };
        }
        let Some(stored) = self.history(kernel).and_then(|history| history.stored) else {
            return Explanation::NeverSeen;
        };
        match stored.key.first_difference(key) {
            Some(difference) => Explanation::Changed {
                difference,
                stored_at: stored.at,
            },
            None => Explanation::Gone {
                stored_at: stored.at,
            },
        }
    }

    pub(super) fn note_miss(&self, key: &StoreKey) {
        if self.inner.read_only {
            return;
        }
        let Some((name, kernel)) = key.kernel() else {
            return;
        };
        self.update_history(name, kernel, |history| {
            if history.asked.as_ref().is_some_and(|seen| seen.key == *key) {
                return false;
            }
            history.asked = Some(Seen {
                key: key.clone(),
                at: now_seconds(),
            });
            history.held_at_miss = history.stored.clone();
            true
        });
    }

    /// Reads, changes and rewrites a kernel's history. Histories explain
    /// misses and decide nothing, so they are written without syncing and
    /// a lost update between two processes costs only a vaguer explanation.
    pub(super) fn update_history(
        &self,
        name: &str,
        kernel: u128,
        change: impl FnOnce(&mut KernelHistory) -> bool,
    ) {
        let path = self.inner.layout.kernel(kernel);
        let mut history = fs::read(&path)
            .ok()
            .and_then(|sealed| KernelHistory::open(&sealed).ok())
            .unwrap_or_else(|| KernelHistory {
                name: name.to_owned(),
                digest: kernel,
                stored: None,
                asked: None,
                held_at_miss: None,
            });
        if !change(&mut history) {
            return;
        }
        let sealed = history.seal();
        if let Err(error) = within_file_size_limit(sealed.len() as u64)
            .and_then(|()| durable::publish(&self.inner.layout.staging(), &path, &sealed, false))
        {
            log::debug!("cannot update the history of {name}: {error}");
        }
    }
}
