//! Claims: one byte-range lock per key across processes (P4), so one
//! process compiles a key while the others wait for its artifact.

use kiln_core::{Claim, ClaimGuard, ClaimWait, StoreKey};

use super::{DiskStore, bump};
use crate::lock::{Mode, deadline_after, key_slot};

impl DiskStore {
    /// Asks for the right to compile `key`:
    /// [`ArtifactStore::claim`](kiln_core::ArtifactStore::claim).
    pub(super) fn claim_key(&self, key: &StoreKey, wait: ClaimWait) -> Claim {
        let inner = &self.inner;
        if inner.read_only {
            // Nothing it compiles is stored, so nobody could wait for it,
            // and it waits for nobody: what others store is read as it
            // lands.
            return Claim::Uncoordinated;
        }
        let slot = key_slot(&key.digest());
        let held = |guard| Claim::Held(ClaimGuard::new(guard));
        match inner.locks.acquire(slot, Mode::Exclusive, None) {
            Ok(Some(guard)) => return held(guard),
            Ok(None) if wait == ClaimWait::Once => return Claim::Busy,
            Ok(None) => {}
            Err(error) => {
                log::warn!("kiln store: cannot lock {}: {error}", key.subject_text());
                return Claim::Uncoordinated;
            }
        }
        bump(&inner.counters.claims_waited, 1);
        let deadline = deadline_after(inner.config.lock_timeout);
        match inner.locks.acquire(slot, Mode::Exclusive, Some(deadline)) {
            Ok(Some(guard)) => held(guard),
            Ok(None) => {
                bump(&inner.counters.claims_timed_out, 1);
                log::warn!(
                    "kiln store: another process held {} for over {:?}; compiling it here too",
                    key.subject_text(),
                    inner.config.lock_timeout
                );
                Claim::Busy
            }
            Err(error) => {
                log::warn!("kiln store: cannot lock {}: {error}", key.subject_text());
                Claim::Uncoordinated
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::time::Duration;

    use kiln_core::{ArtifactStore, Claim, ClaimWait};

    use super::super::fixtures::{kernel_key, scratch};
    use crate::config::StoreConfig;
    use crate::disk::DiskStore;

    #[test]
    fn p4_a_claim_waits_under_any_lock_timeout_without_overflowing() {
        // P4: a timeout no clock can add to is cut, never a panic.
        let holder = scratch("claim-timeout");
        let waiter = DiskStore::open(StoreConfig {
            lock_timeout: Duration::from_secs(9_300_000_000_000_000_000),
            ..holder.config().clone()
        })
        .expect("a second handle");
        let Claim::Held(guard) = holder.claim(&kernel_key(1), ClaimWait::Patiently) else {
            panic!("the first claim is held");
        };
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(guard);
        });
        assert!(matches!(
            waiter.claim(&kernel_key(1), ClaimWait::Patiently),
            Claim::Held(_)
        ));
        releaser.join().expect("released");
        let _ = fs::remove_dir_all(holder.root());
    }
}
