//! Claims across machines (P12): a claim is a Redis key holding its
//! holder's token, set with `SET NX PX` so that it runs out unless renewed,
//! renewed by the process's lease thread while held, and released by a
//! script that deletes it only if it still holds this holder's token —
//! never a plain `DEL`, which would free another holder's newer lease.
//!
//! A lease's value names its holder (`kiln-lease-2 TOKEN PID HOST`), so a
//! node that waits can say for whom ([`holder_of`]); the token makes each
//! value unique, so comparing the whole value is comparing the token.
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

/// What a lease's value starts with since it names its holder: the format
/// and the owner token, then the holder's process id and host.
const LEASE_FORMAT: &str = "kiln-lease-2";

/// The value a new lease of this process holds: `kiln-lease-2 TOKEN PID
/// HOST`. The token (random, unique per lease) is what release and renewal
/// compare, through the whole value; the process id and host are for
/// people ([`holder_of`]).
fn lease_value(inner: &crate::remote::Inner) -> String {
    let random = keygen::random_bytes().map_or_else(
        |_| format!("{:?}", Instant::now()),
        |bytes| hex(&bytes[..16]),
    );
    format!(
        "{LEASE_FORMAT} {random} {} {}",
        std::process::id(),
        inner.host
    )
}

/// The holder a lease's value names, as a person reads it: `process 4242
/// on build-3`. Reads both this format and the one before it (`HOST pid
/// PID RANDOM INSTANT`, written by earlier versions); `None` for anything
/// else.
pub(crate) fn holder_of(value: &str) -> Option<String> {
    if let Some(rest) = value.strip_prefix(LEASE_FORMAT) {
        let mut words = rest.trim_start().splitn(3, ' ');
        let (_token, pid, host) = (words.next()?, words.next()?, words.next()?);
        let pid: u32 = pid.parse().ok()?;
        return Some(format!("process {pid} on {}", host.trim()));
    }
    let (host, rest) = value.split_once(" pid ")?;
    let pid: u32 = rest.split(' ').next()?.parse().ok()?;
    Some(format!("process {pid} on {}", host.trim()))
}

/// One try at `key`'s remote claim.
pub(crate) fn attempt(store: &RemoteStore, key: &StoreKey) -> Attempt {
    if !store.writes() {
        return Attempt::Unreachable;
    }
    let inner = &store.inner;
    let token = lease_value(inner);
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

/// Who holds `key`'s claim on the remote, as [`holder_of`] names it: one
/// `GET`, under the store's timeout and breaker.
pub(crate) fn holder(store: &RemoteStore, key: &StoreKey) -> Option<String> {
    let mut command = cmd("GET");
    command.arg(store.redis_key("c", &key.digest()));
    let inner = &store.inner;
    let value = inner
        .remote
        .call(&inner.counters, |link| {
            link.query::<Option<Vec<u8>>>(&command)
        })
        .flatten()?;
    holder_of(&String::from_utf8_lossy(&value))
}

#[cfg(test)]
mod tests {
    use super::holder_of;

    #[test]
    fn a_lease_names_its_holder_in_either_format() {
        assert_eq!(
            holder_of("kiln-lease-2 00ff00ff00ff00ff00ff00ff00ff00ff 4242 build-3").as_deref(),
            Some("process 4242 on build-3")
        );
        // A host name with spaces (the fallback "unknown host") stays whole.
        assert_eq!(
            holder_of("kiln-lease-2 0a0b 7 unknown host").as_deref(),
            Some("process 7 on unknown host")
        );
        // The value an earlier version wrote.
        assert_eq!(
            holder_of("build-3 pid 4242 a1b2c3d4e5f60718 Instant { tv_sec: 1, tv_nsec: 2 }")
                .as_deref(),
            Some("process 4242 on build-3")
        );
        assert_eq!(holder_of("something else"), None);
        assert_eq!(holder_of("kiln-lease-2 token notapid host"), None);
    }
}
