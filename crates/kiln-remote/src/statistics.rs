//! The remote tier's counts: what [`StoreStatistics`] says of every store,
//! and what only a remote has (timeouts, the breaker, verification).

use std::sync::atomic::{AtomicU64, Ordering};

use kiln_engine::{StoreCounters, StoreStatistics};
use serde::{Deserialize, Serialize};

/// A remote store's counts since it was opened (S4's remote side; `kiln
/// stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteStatistics {
    /// What every store counts: hits, misses by cause, puts, bytes.
    pub store: StoreStatistics,
    /// Entries that did not verify (forged, cut, another key's, unsigned,
    /// signed by an untrusted key): never loaded, counted here and under
    /// `store.corrupt` or `store.foreign`.
    pub unverified: u64,
    /// Calls that ran past the timeout.
    pub timeouts: u64,
    /// Calls that failed otherwise: refused, reset, not Redis, an error
    /// reply.
    pub errors: u64,
    /// Calls not made because the breaker was open.
    pub skipped_while_open: u64,
    /// Times the breaker opened.
    pub breaker_opened: u64,
    /// Whether the breaker is open now.
    pub breaker_open: bool,
    /// Writes refused because the entry was over the size limit.
    pub oversize: u64,
    /// Claims held on the remote (P12).
    pub claims_held: u64,
    /// Claims found held by another machine.
    pub claims_busy: u64,
    /// Lease values found under a claim that did not verify, or claimed
    /// to outlive a lease's length: ignored and written over (P12).
    pub leases_ignored: u64,
    /// Claims this node took on a key found without a lease, then gave
    /// back because the fleet's channel said another lease, still held,
    /// came first (someone deleted it): compiles this node did not
    /// duplicate (P12).
    pub claims_yielded: u64,
    /// Values left in the remote unread by a lookup: over the entry
    /// limit, or over what one batch reads.
    pub oversize_reads: u64,
    /// Publishes that left in place an entry this node cannot verify.
    /// None since entries heal: one that does not verify is replaced
    /// (`replaced_unverified`); kept for readers of older counts.
    pub kept_unverifiable: u64,
    /// Artifacts another publisher had already stored under the same key
    /// with other bytes (a nondeterministic compile): the remote kept the
    /// first, this one was not written.
    pub nondeterministic: u64,
    /// Round trips taken to claim keys in groups (P12): each group of a
    /// batch's keys is one, whatever its size.
    #[serde(default)]
    pub claim_round_trips: u64,
    /// Claims lost to a value that does not verify, written between this
    /// node's read and its write (a writer without the key rotating
    /// forged leases): compiled here at once, without a lease (P12).
    #[serde(default)]
    pub claims_contested: u64,
    /// Commands sent to the remote (each command of a pipeline counts):
    /// what a node costs its Redis, FLEET.md's bound per kernel.
    #[serde(default)]
    pub commands: u64,
    /// Calls still in flight when another call's failure opened the
    /// breaker: ended then, not each at its own timeout.
    #[serde(default)]
    pub ended_by_breaker: u64,
    /// Lookups whose answer came after more than half the timeout: a
    /// remote that far away should be given a longer timeout
    /// (`KILN_REMOTE_TIMEOUT`, FLEET.md).
    #[serde(default)]
    pub slow_lookups: u64,
    /// The slowest lookup's round trip, in milliseconds.
    #[serde(default)]
    pub slowest_lookup_ms: u64,
    /// Publishes that found an entry that does not verify (damaged,
    /// extended, cut short, another key's) and replaced it (P10).
    #[serde(default)]
    pub replaced_unverified: u64,
}

/// The counters behind [`RemoteStatistics`]: every store's
/// ([`StoreCounters`], which it derefs to) and the remote's own.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub store: StoreCounters,
    pub unverified: AtomicU64,
    pub leases_ignored: AtomicU64,
    pub leases_yielded: AtomicU64,
    pub oversize_reads: AtomicU64,
    pub kept_unverifiable: AtomicU64,
    pub timeouts: AtomicU64,
    pub errors: AtomicU64,
    pub skipped_while_open: AtomicU64,
    pub breaker_opened: AtomicU64,
    pub oversize: AtomicU64,
    pub claims_held: AtomicU64,
    pub claims_busy: AtomicU64,
    pub nondeterministic: AtomicU64,
    pub claim_round_trips: AtomicU64,
    pub claims_contested: AtomicU64,
    pub ended_by_breaker: AtomicU64,
    pub slow_lookups: AtomicU64,
    pub slowest_lookup_ms: AtomicU64,
    pub replaced_unverified: AtomicU64,
}

impl std::ops::Deref for Counters {
    type Target = StoreCounters;

    fn deref(&self) -> &StoreCounters {
        &self.store
    }
}

/// Adds one to `counter`.
pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Adds `amount` to `counter`.
pub(crate) fn add(counter: &AtomicU64, amount: u64) {
    counter.fetch_add(amount, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn snapshot(&self, breaker_open: bool, commands: u64) -> RemoteStatistics {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        RemoteStatistics {
            store: self.store.snapshot(),
            unverified: read(&self.unverified),
            leases_ignored: read(&self.leases_ignored),
            claims_yielded: read(&self.leases_yielded),
            oversize_reads: read(&self.oversize_reads),
            kept_unverifiable: read(&self.kept_unverifiable),
            timeouts: read(&self.timeouts),
            errors: read(&self.errors),
            skipped_while_open: read(&self.skipped_while_open),
            breaker_opened: read(&self.breaker_opened),
            breaker_open,
            oversize: read(&self.oversize),
            claims_held: read(&self.claims_held),
            claims_busy: read(&self.claims_busy),
            claim_round_trips: read(&self.claim_round_trips),
            nondeterministic: read(&self.nondeterministic),
            claims_contested: read(&self.claims_contested),
            commands,
            ended_by_breaker: read(&self.ended_by_breaker),
            slow_lookups: read(&self.slow_lookups),
            slowest_lookup_ms: read(&self.slowest_lookup_ms),
            replaced_unverified: read(&self.replaced_unverified),
        }
    }
}
