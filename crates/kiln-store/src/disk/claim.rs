//! Claims: one byte-range lock per key across processes (P4), so one
//! process compiles a key while the others wait for its artifact, and a
//! lease beside it (P12), so a holder that hangs loses the key.
//!
//! The lock says the holder lives: a dead holder's lock goes with it. The
//! lease, a record in the `locks` file renewed every third of
//! [`StoreConfig::lease`](crate::StoreConfig::lease), says it moves: a
//! claimant that finds the lock held and the lease run out takes the key
//! over by writing its own lease, without the lock. Taking the lock and
//! writing the lease, reading and replacing a lease, and releasing both
//! happen under the key's lease slot, so two claimants never both take a
//! key over, and a fresh holder's lease is always written before anyone
//! reads it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kiln_engine::store::Renewal;
use kiln_engine::{Claim, ClaimGuard, ClaimWait, StoreKey};

use crate::files::{Files, bump};
use crate::lock::{
    LeaseRecord, LockFile, Mode, SlotGuard, deadline_after, key_slot, lease_slot, lease_tag,
};

/// How long a claimant waits for a key's lease slot, held only for a read
/// and a write; past it the key counts as busy.
const LEASE_SLOT_WAIT: Duration = Duration::from_millis(500);

/// The claims room: single flight across processes over the `locks` file
/// of the files it is handed. Its own state is what it said of failed
/// claims.
///
/// **Invariant:** a key is held by one live claimant at a time, and a
/// holder that stops renewing loses it once its lease runs out (P4, P12).
#[derive(Debug, Default)]
pub(crate) struct KeyClaims {
    /// The causes of failed claims said so far, each said once.
    lock_failures_said: Mutex<Vec<crate::WriteCause>>,
}

impl KeyClaims {
    /// Asks for the right to compile `key`:
    /// [`Claims::claim`](kiln_engine::Claims::claim).
    pub(crate) fn claim(&self, files: &Files, key: &StoreKey, wait: ClaimWait) -> Claim {
        if files.read_only {
            // Nothing it compiles is stored, so nobody could wait for it,
            // and it waits for nobody: what others store is read as it
            // lands.
            return Claim::Uncoordinated;
        }
        let digest = key.digest();
        let lease = files.config.lease;
        let try_claim = || match try_claim(&files.locks, &digest, lease) {
            Ok(claim) => claim,
            Err(error) => {
                self.say_lock_failure(key, &error);
                Some(Claim::Uncoordinated)
            }
        };
        match try_claim() {
            Some(claim) => return claim,
            None if wait == ClaimWait::Once => return Claim::Busy,
            None => {}
        }
        bump(&files.counters.claims_waited, 1);
        let deadline = deadline_after(files.config.lock_timeout);
        let mut pause = Duration::from_millis(5);
        loop {
            let now = Instant::now();
            if now >= deadline {
                bump(&files.counters.claims_timed_out, 1);
                log::warn!(
                    "kiln store: another process held {} for over {:?}; compiling it here too",
                    key.subject_text(),
                    files.config.lock_timeout
                );
                return Claim::Busy;
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(50));
            if let Some(claim) = try_claim() {
                return claim;
            }
        }
    }

    /// How long a caller may wait for another holder of a claim.
    pub(crate) fn timeout(files: &Files) -> Duration {
        files.config.lock_timeout
    }
}

/// One try: the key's lock, or the key's run-out lease; `None` when another
/// holds it under a live lease.
fn try_claim(
    locks: &Arc<LockFile>,
    digest: &[u8; 32],
    lease: Duration,
) -> std::io::Result<Option<Claim>> {
    let Some(_lease_slot) = lock_lease(locks, digest)? else {
        return Ok(None);
    };
    let tag = lease_tag(digest);
    let key_lock = locks.acquire(key_slot(digest), Mode::Exclusive, None)?;
    if key_lock.is_none() {
        let record = locks.read_lease(digest)?;
        if record.tag != tag || record.expires_ms > now_ms() {
            return Ok(None);
        }
        log::debug!("kiln store: a claim's lease ran out; taking the key over");
    }
    let holder = next_holder();
    locks.write_lease(
        digest,
        LeaseRecord {
            tag,
            holder,
            expires_ms: expiry(lease),
        },
    )?;
    // Weak, so a renewal the lease thread has not yet dropped never keeps
    // the `locks` file open after the store closes.
    let renewed = (Arc::downgrade(locks), *digest);
    let renewal = Renewal::every(lease / 3, move || {
        let (locks, digest) = &renewed;
        let Some(locks) = locks.upgrade() else {
            return false;
        };
        renew(&locks, digest, holder, lease).unwrap_or(true)
    });
    Ok(Some(Claim::Held(ClaimGuard::leased(
        Release {
            locks: Arc::clone(locks),
            digest: *digest,
            holder,
            key_lock,
        },
        renewal,
    ))))
}

/// Extends the lease `holder` holds on `digest`; `false` once another
/// took it over.
fn renew(
    locks: &Arc<LockFile>,
    digest: &[u8; 32],
    holder: u64,
    lease: Duration,
) -> std::io::Result<bool> {
    let Some(_lease_slot) = lock_lease(locks, digest)? else {
        // Try again at the next renewal.
        return Ok(true);
    };
    let record = locks.read_lease(digest)?;
    if record.tag != lease_tag(digest) || record.holder != holder {
        return Ok(false);
    }
    locks.write_lease(
        digest,
        LeaseRecord {
            expires_ms: expiry(lease),
            ..record
        },
    )?;
    Ok(true)
}

/// Releases a claim: its lease is marked run out, so a claimant that finds
/// the key's lock held by a holder this one took over from may take it,
/// then the lock (when this holder had it) is let go.
struct Release {
    locks: Arc<LockFile>,
    digest: [u8; 32],
    holder: u64,
    key_lock: Option<SlotGuard>,
}

impl Drop for Release {
    fn drop(&mut self) {
        let locks = &self.locks;
        let digest = &self.digest;
        if let Ok(Some(_lease_slot)) = lock_lease(locks, digest) {
            if let Ok(record) = locks.read_lease(digest)
                && record.tag == lease_tag(digest)
                && record.holder == self.holder
            {
                let released = LeaseRecord {
                    expires_ms: 0,
                    ..record
                };
                if let Err(error) = locks.write_lease(digest, released) {
                    log::warn!("kiln store: cannot release a claim's lease: {error}");
                }
            }
            // Under the lease slot, so nobody reads the old lease with the
            // lock already free.
            self.key_lock.take();
        }
    }
}

/// The key's lease slot, held while its lease record is read and written;
/// `None` when another held it past [`LEASE_SLOT_WAIT`].
fn lock_lease(locks: &Arc<LockFile>, digest: &[u8; 32]) -> std::io::Result<Option<SlotGuard>> {
    locks.acquire(
        lease_slot(digest),
        Mode::Exclusive,
        Some(deadline_after(LEASE_SLOT_WAIT)),
    )
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

fn expiry(lease: Duration) -> u64 {
    now_ms().saturating_add(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX))
}

/// A holder's mark: unique among processes (the process id) and among
/// this process's claims (a counter).
fn next_holder() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    (u64::from(std::process::id()) << 32) | (NEXT.fetch_add(1, Ordering::Relaxed) & 0xffff_ffff)
}

impl KeyClaims {
    /// Who holds the claim of `key` under a live lease: the process its
    /// lease names, on this host ([`Claims::holder`]); `None` when
    /// nobody does or the lease cannot be read.
    ///
    /// [`Claims::holder`]: kiln_engine::Claims::holder
    pub(crate) fn holder(files: &Files, key: &StoreKey) -> Option<String> {
        let digest = key.digest();
        let record = files.locks.read_lease(&digest).ok()?;
        if record.tag != lease_tag(&digest) || record.expires_ms <= now_ms() {
            return None;
        }
        let process = record.holder >> 32;
        Some(match host_name() {
            Some(host) => format!("process {process} on {host}"),
            None => format!("process {process} on this host"),
        })
    }

    /// Says once per cause, as failed writes are ([`crate::WriteCause`]),
    /// that a key could not be locked (a full disk, a file size limit), so
    /// that a batch of many keys does not bury the cause under a line per
    /// key; the later ones go to the debug log.
    fn say_lock_failure(&self, key: &StoreKey, error: &std::io::Error) {
        let cause = crate::WriteCause::of(error);
        let first = {
            let mut said = self
                .lock_failures_said
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let first = !said.contains(&cause);
            if first {
                said.push(cause);
            }
            first
        };
        if first {
            log::warn!(
                "kiln store: cannot lock {}: {error}; kernels compile without coordinating with \
             other processes while it lasts",
                key.subject_text()
            );
        } else {
            log::debug!("kiln store: cannot lock {}: {error}", key.subject_text());
        }
    }
}

/// This machine's name, as `gethostname` gives it.
pub(crate) fn host_name() -> Option<String> {
    let mut buffer = [0u8; 256];
    // SAFETY: the buffer is valid for its length, which is what is passed.
    let result = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) };
    if result != 0 {
        return None;
    }
    let end = buffer.iter().position(|&byte| byte == 0)?;
    let name = String::from_utf8_lossy(&buffer[..end]).into_owned();
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::time::Duration;

    use kiln_engine::Claims;
    use kiln_engine::{Claim, ClaimWait};

    use crate::DiskStore;
    use crate::config::StoreConfig;
    use crate::fixtures::{kernel_key, scratch};

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
