//! Eviction as a store fills: on a thread of its own when a put takes the
//! store over a limit, and within the limits before a batch returns (P6).
//! The walk that evicts is `maintenance.rs`'s `collect`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use crate::config::StoreConfig;
use crate::error::Result;
use crate::files::Files;
use crate::lock::{COLLECT_SLOT, Mode, deadline_after};
use crate::maintenance::CollectReport;
use crate::usage::Usage;

/// The limits a collection brings the store under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// The most bytes to keep.
    pub max_bytes: u64,
    /// The most entries to keep.
    pub max_entries: u64,
}

impl Limits {
    /// The store's configured limits.
    pub fn of(config: &StoreConfig) -> Self {
        Self {
            max_bytes: config.max_bytes,
            max_entries: config.max_entries,
        }
    }

    /// 90 % of the configured limits: where automatic eviction stops, so
    /// that it does not run again at the next put.
    pub fn low_water(config: &StoreConfig) -> Self {
        Self {
            max_bytes: config.max_bytes / 10 * 9,
            max_entries: config.max_entries / 10 * 9,
        }
    }
}

/// Age buckets of eviction: bucket `b` holds ages in `[1.25^b, 1.25^(b+1))`
/// seconds, so 200 buckets span past a century with a fixed, small table.
pub(crate) const AGE_BUCKETS: usize = 200;

pub(crate) fn age_bucket(accessed: SystemTime, now: SystemTime) -> usize {
    let age = now
        .duration_since(accessed)
        .unwrap_or(Duration::ZERO)
        .as_secs_f64();
    ((age + 1.0).ln() / 1.25f64.ln())
        .floor()
        .min((AGE_BUCKETS - 1) as f64) as usize
}

/// The eviction room: whether this process is evicting, and what its
/// batch wrote and collected since it last ended.
///
/// **Invariant:** one collection at a time per process, and a batch that
/// stored something ends within the limits (P6).
#[derive(Debug, Default)]
pub(crate) struct Eviction {
    /// Whether a collection runs on this process's own thread.
    collecting: Arc<AtomicBool>,
    /// Whether a collection started on this process's own thread since the
    /// end of the last batch: its recount may have missed the puts made
    /// while it walked.
    collected_since_batch: AtomicBool,
    /// Whether a put stored something since the end of the last batch.
    wrote_since_batch: AtomicBool,
}

impl Eviction {
    /// Notes that a put stored something in this batch.
    pub(crate) fn wrote(&self) {
        self.wrote_since_batch.store(true, Ordering::Release);
    }

    /// Starts `collect` (evicting down to [`Limits::low_water`]) on a
    /// thread of its own when `usage` is over a limit of `config`, unless
    /// this process already is evicting.
    pub(crate) fn collect_if_over(
        &self,
        config: &StoreConfig,
        usage: Usage,
        collect: impl FnOnce() + Send + 'static,
    ) {
        if !config.collects_automatically
            || (usage.allocated_bytes <= config.max_bytes && usage.entries <= config.max_entries)
            || self.collecting.swap(true, Ordering::AcqRel)
        {
            return;
        }
        self.collected_since_batch.store(true, Ordering::Release);
        let collecting = Arc::clone(&self.collecting);
        let spawned = std::thread::Builder::new()
            .name("kiln-store-collect".into())
            .spawn(move || {
                collect();
                collecting.store(false, Ordering::Release);
            });
        if let Err(error) = spawned {
            log::warn!("cannot start evicting: {error}");
            self.collecting.store(false, Ordering::Release);
        }
    }

    /// Brings the store of `files` within its limits before a batch
    /// returns, when this process's puts took it over (P6): a run that
    /// fills the store ends within its limits, where eviction on its own
    /// thread alone could end the process long before it caught up. Waits
    /// for a collection that is running, then evicts (`collect`) down to
    /// 90 % of the limits when still over. A collection that ran on this
    /// process's thread during the batch may have counted before the
    /// batch's last puts, so the store is then recounted (evicting down to
    /// the limits only).
    pub(crate) fn hold_limits(
        &self,
        files: &Files,
        collect: impl FnOnce(Limits) -> Result<CollectReport>,
    ) {
        let config = &files.config;
        if files.read_only
            || !config.collects_automatically
            || !self.wrote_since_batch.swap(false, Ordering::AcqRel)
        {
            return;
        }
        let deadline = deadline_after(config.lock_timeout);
        while self.collecting.load(Ordering::Acquire) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        // Another process collecting holds the slot until it is done.
        drop(
            files
                .locks
                .acquire(COLLECT_SLOT, Mode::Exclusive, Some(deadline)),
        );
        let recount = self.collected_since_batch.swap(false, Ordering::AcqRel);
        let usage = files.usage.read();
        let limits =
            if usage.allocated_bytes > config.max_bytes || usage.entries > config.max_entries {
                Limits::low_water(config)
            } else if recount {
                Limits::of(config)
            } else {
                return;
            };
        match collect(limits) {
            Ok(report) if report.skipped => {
                log::debug!(
                    "another process is evicting from {}",
                    files.root().display()
                );
            }
            Ok(_) => {}
            Err(error) => log::warn!("evicting from {}: {error}", files.root().display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kiln_engine::StoreOutcome;
    use kiln_engine::{ArtifactStoreExt, Groups};

    use super::Limits;
    use crate::fixtures::{kernel_key, scratch};
    use crate::{DiskStore, StoreConfig};

    // P6: a store opened to evict only when asked stays over its entry
    // limit through puts and the batch's end; asked, it evicts; the same
    // store with the defaults holds its limit by itself.
    #[test]
    fn p6_a_store_evicting_only_when_asked_keeps_what_it_holds_until_asked() {
        let root = std::env::temp_dir().join(format!(
            "kiln-store-evict-when-asked-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        let fill = |config: StoreConfig| {
            let store = DiskStore::open(StoreConfig {
                max_entries: 4,
                durable: false,
                ..config
            })
            .expect("a store");
            for number in 0..10 {
                let put = store.put(
                    &kernel_key(number),
                    None,
                    &[number as u8; 64],
                    Duration::ZERO,
                );
                assert!(matches!(put, StoreOutcome::Stored { .. }), "{put:?}");
            }
            store.batch_finished();
            store
        };
        let asked = fill(StoreConfig::evicting_only_when_asked(root.join("asked")));
        assert_eq!(asked.usage().entries, 10, "nothing evicted unasked");
        let limits = Limits {
            max_bytes: u64::MAX,
            max_entries: 4,
        };
        let report = asked.collect(limits, &mut |_| {}).expect("collects");
        assert_eq!(report.after.entries, 4, "{report:?}");
        let by_itself = fill(StoreConfig::at(root.join("by-itself")));
        assert!(by_itself.usage().entries <= 4, "{:?}", by_itself.usage());
        let _ = std::fs::remove_dir_all(&root);
    }

    // P6, F10: a hundred small entries as files hold a few dozen KiB and
    // take 800 KiB of blocks; a 200 KiB limit is over for the disk, so
    // collect evicts until the blocks fit, and the counters carry both.
    #[test]
    fn p6_the_size_limit_counts_allocated_bytes_not_lengths() {
        let store = scratch("allocated-limit");
        for number in 0..100 {
            let put = store.put(
                &kernel_key(number),
                None,
                &[number as u8; 100],
                Duration::ZERO,
            );
            assert!(matches!(put, StoreOutcome::Stored { .. }), "{put:?}");
        }
        let usage = store.usage();
        assert_eq!(usage.entries, 100);
        assert!(
            usage.allocated_bytes >= 100 * 2 * 4096 && usage.bytes < 100 * 1024,
            "an object and a record file of a block each: {usage:?}"
        );
        let limits = Limits {
            max_bytes: 200 << 10,
            max_entries: 1_000,
        };
        assert!(usage.bytes < limits.max_bytes, "the lengths alone fit");
        let report = store.collect(limits, &mut |_| {}).expect("collects");
        assert!(report.evicted >= 70, "{report:?}");
        assert!(
            report.before.allocated_bytes > limits.max_bytes,
            "{report:?}"
        );
        assert!(
            report.after.allocated_bytes <= limits.max_bytes,
            "{report:?}"
        );
        // The recount is the blocks the files really take.
        let recounted = store.usage();
        assert_eq!(recounted, report.after);
        let footprint = store.footprint();
        assert!(
            recounted.allocated_bytes <= footprint.allocated_bytes,
            "{recounted:?} within {footprint:?}"
        );
        let _ = std::fs::remove_dir_all(store.root());
    }
}
