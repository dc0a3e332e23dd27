//! Claims across machines (P12): a claim is a Redis key holding its
//! holder's token, set with `SET NX PX` so that it runs out unless renewed,
//! renewed by the process's lease thread while held, and released by a
//! script that deletes it only if it still holds this holder's token —
//! never a plain `DEL`, which would free another holder's newer lease.
//!
//! The lease only ever saves work: a remote that cannot be reached gives
//! [`Claim::Uncoordinated`] and the key compiles here, and a lost lease
//! costs at most one duplicate compile.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_core::StoreKey;
use kiln_core::store::{Claim, ClaimGuard, ClaimWait, Renewal, hex};
use redis::{Cmd, Value, cmd};

use crate::keygen;
use crate::remote::{Inner, RemoteStore};
use crate::statistics::bump;

/// Deletes the claim only while it holds this holder's token.
const RELEASE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
                       return redis.call('del', KEYS[1]) else return 0 end";

/// Extends the claim's lease only while it holds this holder's token.
const RENEW: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
                     return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";

/// The first pause of a patient claimant between tries; it doubles up to
/// [`LONGEST_POLL`].
const FIRST_POLL: Duration = Duration::from_millis(5);
const LONGEST_POLL: Duration = Duration::from_millis(100);

/// What one try at the remote claim got.
pub(crate) enum Attempt {
    /// Held: release with the token.
    Held(RemoteLease),
    /// Another holder's.
    Busy,
    /// The remote did not answer, or this node does not write.
    Unreachable,
}

/// A held remote claim: released by compare-and-delete when dropped.
pub(crate) struct RemoteLease {
    inner: Arc<Inner>,
    claim_key: String,
    token: String,
}

impl Drop for RemoteLease {
    fn drop(&mut self) {
        let mut command = cmd("EVAL");
        command
            .arg(RELEASE)
            .arg(1)
            .arg(&self.claim_key)
            .arg(&self.token);
        // A release that cannot reach the remote leaves the lease to run
        // out: waiters lose at most the lease.
        self.inner
            .remote
            .call(&self.inner.counters, |link| link.query::<i64>(&command));
    }
}

impl RemoteLease {
    /// Renews the lease every third of it on the process's lease thread.
    pub(crate) fn renewal(&self) -> Renewal {
        let inner = Arc::clone(&self.inner);
        let lease = inner.config.lease;
        let mut command = cmd("EVAL");
        command
            .arg(RENEW)
            .arg(1)
            .arg(&self.claim_key)
            .arg(&self.token)
            .arg(millis(lease));
        Renewal::every(lease / 3, move || {
            match inner
                .remote
                .call(&inner.counters, |link| link.query::<i64>(&command))
            {
                // Taken over: the key is another holder's now.
                Some(0) => false,
                // Renewed, or the remote did not answer: try again later.
                _ => true,
            }
        })
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// One try at `key`'s remote claim.
pub(crate) fn attempt(store: &RemoteStore, key: &StoreKey) -> Attempt {
    if !store.writes() {
        return Attempt::Unreachable;
    }
    let inner = &store.inner;
    let random = keygen::random_bytes().map_or_else(|_| String::new(), |bytes| hex(&bytes[..8]));
    let token = format!("{} {random} {:?}", inner.holder, Instant::now());
    let claim_key = store.redis_key("c", &key.digest());
    let mut command: Cmd = cmd("SET");
    command
        .arg(&claim_key)
        .arg(&token)
        .arg("NX")
        .arg("PX")
        .arg(millis(inner.config.lease));
    match inner
        .remote
        .call(&inner.counters, |link| link.query::<Value>(&command))
    {
        Some(Value::Okay) => {
            bump(&inner.counters.claims_held);
            Attempt::Held(RemoteLease {
                inner: Arc::clone(inner),
                claim_key,
                token,
            })
        }
        Some(Value::Nil) => {
            bump(&inner.counters.claims_busy);
            Attempt::Busy
        }
        // Anything else is no Redis this store understands.
        _ => Attempt::Unreachable,
    }
}

/// A patient or single try at `key`'s remote claim, as
/// [`ArtifactStore::claim`](kiln_core::ArtifactStore::claim) describes.
pub(crate) fn attempt_waiting(store: &RemoteStore, key: &StoreKey, wait: ClaimWait) -> Attempt {
    let first = attempt(store, key);
    if !matches!(first, Attempt::Busy) || wait == ClaimWait::Once {
        return first;
    }
    let counters = &store.inner.counters;
    bump(&counters.claims_waited);
    let deadline = Instant::now() + store.inner.config.claim_timeout;
    let mut pause = FIRST_POLL;
    loop {
        let now = Instant::now();
        if now >= deadline {
            bump(&counters.claims_timed_out);
            log::info!(
                "kiln: gave up waiting for another machine's claim after {:?}; compiling here \
                 too",
                store.inner.config.claim_timeout
            );
            return Attempt::Busy;
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(LONGEST_POLL);
        match attempt(store, key) {
            Attempt::Busy => {}
            other => return other,
        }
    }
}

/// The remote store's own claim: a lease on Redis.
pub(crate) fn claim(store: &RemoteStore, key: &StoreKey, wait: ClaimWait) -> Claim {
    match attempt_waiting(store, key, wait) {
        Attempt::Held(lease) => {
            let renewal = lease.renewal();
            Claim::Held(ClaimGuard::leased(lease, renewal))
        }
        Attempt::Busy => Claim::Busy,
        Attempt::Unreachable => Claim::Uncoordinated,
    }
}

impl RemoteStore {
    /// Who holds `key`'s claim on the remote now, as `host pid N ...`, or
    /// `None`: for a waiting node's progress line and log.
    pub fn claim_holder(&self, key: &StoreKey) -> Option<String> {
        let mut command = cmd("GET");
        command.arg(self.redis_key("c", &key.digest()));
        self.inner
            .remote
            .call(&self.inner.counters, |link| {
                link.query::<Option<String>>(&command)
            })
            .flatten()
    }
}
