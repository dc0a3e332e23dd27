//! The counters behind [`StoreStatistics`], shared by every store that
//! counts from several threads (the disk store, the remote store, the two
//! levels in front of both): one field per count, read together as a
//! snapshot, so a count added to the statistics is added to every store.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{Lookup, Miss, StoreStatistics};

/// [`StoreStatistics`] as counters that any thread adds to.
#[derive(Debug, Default)]
pub struct StoreCounters {
    /// [`StoreStatistics::hits`].
    pub hits: AtomicU64,
    /// [`StoreStatistics::absent`].
    pub absent: AtomicU64,
    /// [`StoreStatistics::corrupt`].
    pub corrupt: AtomicU64,
    /// [`StoreStatistics::foreign`].
    pub foreign: AtomicU64,
    /// [`StoreStatistics::unreadable`].
    pub unreadable: AtomicU64,
    /// [`StoreStatistics::claims_waited`].
    pub claims_waited: AtomicU64,
    /// [`StoreStatistics::claims_timed_out`].
    pub claims_timed_out: AtomicU64,
    /// [`StoreStatistics::puts`].
    pub puts: AtomicU64,
    /// [`StoreStatistics::put_failures`].
    pub put_failures: AtomicU64,
    /// [`StoreStatistics::writes_skipped`].
    pub writes_skipped: AtomicU64,
    /// [`StoreStatistics::bytes_read`].
    pub bytes_read: AtomicU64,
    /// [`StoreStatistics::bytes_written`].
    pub bytes_written: AtomicU64,
    /// [`StoreStatistics::evicted`].
    pub evicted: AtomicU64,
}

impl StoreCounters {
    /// Adds `amount` to `counter` (one of this struct's fields).
    pub fn add(counter: &AtomicU64, amount: u64) {
        counter.fetch_add(amount, Ordering::Relaxed);
    }

    /// Counts what a lookup answered: a hit and its bytes, or its miss
    /// under the miss's cause.
    pub fn count_lookup<T>(&self, lookup: &Lookup<T>) {
        let counter = match lookup {
            Lookup::Hit { bytes, .. } => {
                Self::add(&self.bytes_read, *bytes);
                &self.hits
            }
            Lookup::Miss(Miss::Absent) => &self.absent,
            Lookup::Miss(Miss::Corrupt { .. }) => &self.corrupt,
            Lookup::Miss(Miss::ForeignKey { .. }) => &self.foreign,
            Lookup::Miss(Miss::Unreadable { .. }) => &self.unreadable,
        };
        Self::add(counter, 1);
    }

    /// Every count as it is now.
    pub fn snapshot(&self) -> StoreStatistics {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        StoreStatistics {
            hits: read(&self.hits),
            absent: read(&self.absent),
            corrupt: read(&self.corrupt),
            foreign: read(&self.foreign),
            unreadable: read(&self.unreadable),
            claims_waited: read(&self.claims_waited),
            claims_timed_out: read(&self.claims_timed_out),
            puts: read(&self.puts),
            put_failures: read(&self.put_failures),
            writes_skipped: read(&self.writes_skipped),
            bytes_read: read(&self.bytes_read),
            bytes_written: read(&self.bytes_written),
            evicted: read(&self.evicted),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    // S4: each answer is counted under its own count, a hit with its bytes.
    #[test]
    fn s4_each_lookup_answer_is_counted_under_its_cause() {
        let counters = StoreCounters::default();
        counters.count_lookup(&Lookup::Hit {
            artifact: (),
            bytes: 12,
            work: Duration::ZERO,
        });
        counters.count_lookup::<()>(&Lookup::Miss(Miss::Absent));
        counters.count_lookup::<()>(&Lookup::Miss(Miss::Corrupt {
            detail: String::new(),
        }));
        counters.count_lookup::<()>(&Lookup::Miss(Miss::Unreadable {
            detail: String::new(),
        }));
        StoreCounters::add(&counters.evicted, 3);
        let counted = counters.snapshot();
        assert_eq!(
            (counted.hits, counted.bytes_read, counted.absent),
            (1, 12, 1)
        );
        assert_eq!(
            (counted.corrupt, counted.foreign, counted.unreadable),
            (1, 0, 1)
        );
        assert_eq!(counted.evicted, 3);
    }
}
