//! A [`BucketStore`]'s counts beside those every store keeps.

use std::sync::atomic::{AtomicU64, Ordering};

use kiln_engine::StoreStatistics;
use serde::{Deserialize, Serialize};

use super::BucketStore;

#[derive(Debug, Default)]
pub(super) struct MoreCounters {
    pub(super) requests: AtomicU64,
    pub(super) calls: AtomicU64,
    pub(super) failed_calls: AtomicU64,
    pub(super) breaker_opened: AtomicU64,
    pub(super) skipped_while_open: AtomicU64,
    pub(super) unverified: AtomicU64,
    pub(super) nondeterministic: AtomicU64,
    pub(super) oversize: AtomicU64,
    pub(super) packs_read: AtomicU64,
    pub(super) pack_hits: AtomicU64,
    pub(super) packs_written: AtomicU64,
}

/// A bucket store's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketStatistics {
    /// The counts every store keeps.
    pub store: StoreStatistics,
    /// HTTP requests sent: what a batch costs in requests.
    pub requests: u64,
    /// Calls (a batch's lookups, a put with its source and history) that
    /// went to the bucket.
    pub calls: u64,
    /// Calls with a request that failed: no answer in time, a broken
    /// connection, 5xx, throttling or a refusal.
    pub failed_calls: u64,
    /// How many times the breaker opened (each the start of an outage).
    pub breaker_opened: u64,
    /// Calls not sent because the breaker was open.
    pub skipped_while_open: u64,
    /// Objects (or entries of a batch pack) that did not verify: never
    /// loaded.
    pub unverified: u64,
    /// Puts that found another node's verified entry of other bytes and
    /// left it (a nondeterministic compiler).
    pub nondeterministic: u64,
    /// Entries over the entry limit, not written or not read.
    pub oversize: u64,
    /// Batch packs found for a lookup.
    #[serde(default)]
    pub packs_read: u64,
    /// Keys a batch pack answered with a verified entry.
    #[serde(default)]
    pub pack_hits: u64,
    /// Batch packs written.
    #[serde(default)]
    pub packs_written: u64,
    /// Connections opened ahead of a first request (when a tier is bound).
    #[serde(default)]
    pub connections_ahead: u64,
    /// Connections opened ahead that a request used.
    #[serde(default)]
    pub connections_ahead_used: u64,
}

impl BucketStore {
    /// Opens a connection to the bucket on a thread of its own, for the
    /// next request that would open one, and starts a sending thread
    /// that waits for it: a tier does when it is bound, so that its first
    /// batch does not wait for the connection's handshake, nor for a
    /// thread to start for its pack's GET. A connection not used within
    /// a few seconds is dropped; the thread ends after 20 s idle.
    pub fn connect_ahead(&self) {
        self.inner
            .client
            .connect_ahead(self.inner.config.timeout, 1);
        self.inner.workers.ready_one();
    }

    /// Opens up to `count` connections ahead (at most twice the
    /// concurrency) for the requests that a batch new to the fleet sends
    /// next.
    pub(crate) fn connect_ahead_for(&self, count: usize) {
        let most = self.inner.config.concurrency.saturating_mul(2);
        self.inner
            .client
            .connect_ahead(self.inner.config.timeout, count.min(most));
    }

    /// Its counts.
    pub fn bucket_statistics(&self) -> BucketStatistics {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let more = &self.inner.more;
        BucketStatistics {
            store: self.inner.counters.snapshot(),
            requests: read(&more.requests),
            calls: read(&more.calls),
            failed_calls: read(&more.failed_calls),
            breaker_opened: read(&more.breaker_opened),
            skipped_while_open: read(&more.skipped_while_open),
            unverified: read(&more.unverified),
            nondeterministic: read(&more.nondeterministic),
            oversize: read(&more.oversize),
            packs_read: read(&more.packs_read),
            pack_hits: read(&more.pack_hits),
            packs_written: read(&more.packs_written),
            connections_ahead: read(&self.inner.client.ahead.opened),
            connections_ahead_used: read(&self.inner.client.ahead.used),
        }
    }
}
