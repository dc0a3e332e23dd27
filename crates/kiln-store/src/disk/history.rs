//! What the store remembers of each kernel id: the key it was last stored
//! under and the key it last missed under, so a miss can be explained
//! (P9). Histories explain and decide nothing.
//!
//! **Invariant:** nothing is written on a lookup's path: a miss waits in
//! memory for the put that follows it (one write) or the batch's end.

use std::collections::HashMap;
use std::fs;
use std::sync::{Mutex, MutexGuard};

use kiln_engine::{Explanation, StoreKey};

use crate::durable;
use crate::file_size::within_file_size_limit;
use crate::files::Files;
use crate::pack::{Kind, Read};
use crate::record::{KernelHistory, Seen, now_seconds};
use crate::usage::Delta;

/// The most misses a process keeps for the end of its batch; past it, a
/// miss is written at once (a program that looks up without batches never
/// ends one).
const PENDING_MISSES: usize = 1 << 16;

/// Kernel keys that missed and were not put yet, with when, by key digest.
type PendingMisses = HashMap<[u8; 32], (StoreKey, u64)>;

/// The history room: kernel keys that missed in this batch and were not
/// put yet, with when; the histories themselves are in the files it is
/// handed.
#[derive(Debug, Default)]
pub(crate) struct History {
    pending_misses: Mutex<PendingMisses>,
}

/// Records in `history` that it missed under `key` at `at`, with what was
/// held then: whether it changes the history.
pub(crate) fn note_asked(history: &mut KernelHistory, key: &StoreKey, at: u64) -> bool {
    if history.asked.as_ref().is_some_and(|seen| seen.key == *key) {
        return false;
    }
    history.asked = Some(Seen {
        key: key.clone(),
        at,
    });
    history.held_at_miss = history.stored.clone();
    true
}

impl History {
    /// What `files` know of the kernel whose id has digest `kernel_digest`.
    pub(crate) fn of(files: &Files, kernel_digest: u128) -> Option<KernelHistory> {
        read_history(files, kernel_digest).map(|(history, _)| history)
    }

    /// Why `key` is or is not held (P9):
    /// [`Records::explain`](kiln_engine::Records::explain). `held_at` says
    /// when `key`'s entry was stored, if it is held whole.
    pub(crate) fn explain(
        files: &Files,
        key: &StoreKey,
        held_at: impl FnOnce() -> Option<u64>,
    ) -> Explanation {
        let Some((_, kernel)) = key.kernel() else {
            return Explanation::NeverSeen;
        };
        if let Some(stored_at) = held_at() {
            return Explanation::Held { stored_at };
        }
        let Some(stored) = Self::of(files, kernel).and_then(|history| history.stored) else {
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

    /// Notes that a kernel's key missed, for its history. Nothing is
    /// written on the lookup's path: the miss is kept in memory and goes
    /// into the history with the put that follows it (one write), or at the
    /// end of the batch ([`write_misses`](Self::write_misses)) for a key
    /// that was not put.
    pub(crate) fn note_miss(&self, files: &Files, key: &StoreKey) {
        if files.read_only || key.kernel().is_none() {
            return;
        }
        let mut pending = self.pending_misses();
        if pending.len() < PENDING_MISSES {
            pending.insert(key.digest(), (key.clone(), now_seconds()));
            return;
        }
        drop(pending);
        write_miss(files, key, now_seconds());
    }

    /// The miss of `key` noted in this batch, if any, taken: what its put
    /// writes into the history with what it stores.
    pub(crate) fn take_miss(&self, key: &StoreKey) -> Option<u64> {
        self.pending_misses()
            .remove(&key.digest())
            .map(|(_, at)| at)
    }

    /// Writes into `files` that `key` was stored now, with the miss it
    /// follows: one write.
    pub(crate) fn stored(&self, files: &Files, key: &StoreKey) {
        let Some((name, kernel)) = key.kernel() else {
            return;
        };
        let missed = self.take_miss(key);
        update(files, name, kernel, |history| {
            if let Some(at) = missed {
                note_asked(history, key, at);
            }
            history.stored = Some(Seen {
                key: key.clone(),
                at: now_seconds(),
            });
            true
        });
    }

    /// The sealed history of `key`'s kernel once `key` is stored now (with
    /// the miss it follows), and its pack key, for a batched put that
    /// appends it beside its entry; `None` for a key of lowered source.
    pub(crate) fn after_put(&self, files: &Files, key: &StoreKey) -> Option<([u8; 16], Vec<u8>)> {
        let (name, kernel) = key.kernel()?;
        let missed = self.take_miss(key);
        let mut history = read_history(files, kernel)
            .map(|(history, _)| history)
            .unwrap_or_else(|| KernelHistory {
                name: name.to_owned(),
                digest: kernel,
                stored: None,
                asked: None,
                held_at_miss: None,
            });
        if let Some(at) = missed {
            note_asked(&mut history, key, at);
        }
        history.stored = Some(Seen {
            key: key.clone(),
            at: now_seconds(),
        });
        Some((kernel.to_be_bytes(), history.seal()))
    }

    /// Writes the misses noted since the last batch ended and not put
    /// since: at the end of a batch, and when the store is dropped.
    pub(crate) fn write_misses(&self, files: &Files) {
        if files.read_only {
            return;
        }
        let pending = std::mem::take(&mut *self.pending_misses());
        for (key, at) in pending.into_values() {
            write_miss(files, &key, at);
        }
    }

    fn pending_misses(&self) -> MutexGuard<'_, PendingMisses> {
        self.pending_misses
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The history of the kernel with id digest `kernel`, packed or in its
/// file, and whether it is packed.
fn read_history(files: &Files, kernel: u128) -> Option<(KernelHistory, bool)> {
    if let Read::Found { payload, .. } = files.packs.read(Kind::History, &kernel.to_be_bytes())
        && let Ok(history) = KernelHistory::open(&payload)
        && history.digest == kernel
    {
        return Some((history, true));
    }
    let sealed = fs::read(files.layout.kernel(kernel)).ok()?;
    KernelHistory::open(&sealed)
        .ok()
        .map(|history| (history, false))
}

fn write_miss(files: &Files, key: &StoreKey, at: u64) {
    let Some((name, kernel)) = key.kernel() else {
        return;
    };
    update(files, name, kernel, |history| note_asked(history, key, at));
}

/// Reads, changes and rewrites a kernel's history. Histories explain
/// misses and decide nothing, so they are written without syncing and
/// a lost update between two processes costs only a vaguer explanation.
pub(crate) fn update(
    files: &Files,
    name: &str,
    kernel: u128,
    change: impl FnOnce(&mut KernelHistory) -> bool,
) {
    let path = files.layout.kernel(kernel);
    let (held, packed) = match read_history(files, kernel) {
        Some((history, packed)) => (Some(history), packed),
        None => (None, false),
    };
    let mut history = held.unwrap_or_else(|| KernelHistory {
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
    // Beside the kernel's entries: packed when the store packs, or when
    // the history already is.
    let written = if packed || files.config.pack_below > 0 {
        let key = kernel.to_be_bytes();
        let frame = crate::pack::Frame {
            kind: Kind::History,
            key,
            payload: &sealed,
        };
        // Packed, a history takes the store's space as its entries do, and
        // a rewrite's recount includes it: counted here too.
        files
            .packs
            .append(&files.locks, crate::pack::shard_of(&key), &[frame], &[])
            .and_then(|written| {
                files
                    .usage
                    .adjust(&files.locks, Delta::of(written, written, 0))
                    .map(drop)
            })
    } else {
        within_file_size_limit(sealed.len() as u64)
            .and_then(|()| durable::publish(&files.layout.staging(), &path, &sealed, false))
    };
    if let Err(error) = written {
        log::debug!("cannot update the history of {name}: {error}");
    }
}
