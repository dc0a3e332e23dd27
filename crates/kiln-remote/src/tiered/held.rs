//! What the two-level store holds on behalf of a lookup: the mark of a
//! key's local claim held by this process, and a remote lease released
//! through the write queue.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use kiln_engine::store::StoreKey;

use super::Inner;
use crate::queue::Write;

/// Marks a key's local claim as held by this process until dropped.
pub(super) struct HeldHere {
    digest: [u8; 32],
    held: Arc<Mutex<HashMap<[u8; 32], usize>>>,
}

impl HeldHere {
    pub(super) fn new(held: &Arc<Mutex<HashMap<[u8; 32], usize>>>, key: &StoreKey) -> Self {
        let digest = key.digest();
        *held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(digest)
            .or_default() += 1;
        Self {
            digest,
            held: Arc::clone(held),
        }
    }
}

impl Drop for HeldHere {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.digest) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.digest);
            }
        }
    }
}

/// A remote lease released through the write queue, behind the remote
/// write of its key's artifact when one waits there; at once otherwise (a
/// kernel that failed, or nothing queued), and when the store is gone.
pub(super) struct QueuedRelease {
    pub(super) lease: Option<crate::remote::claim::RemoteLease>,
    pub(super) key: StoreKey,
    pub(super) store: std::sync::Weak<Inner>,
}

impl Drop for QueuedRelease {
    fn drop(&mut self) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        match self.store.upgrade() {
            Some(inner) if inner.queue.state.holds(&self.key) => {
                inner.queue.push(Write::Release(lease));
            }
            _ => drop(lease),
        }
    }
}
