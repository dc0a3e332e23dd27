//! The record of a batch as a store keeps it (`kiln records`): which
//! process ran it, when, for which backend, and what each kernel cost, so a
//! slow start can be read after the fact.

use serde::{Deserialize, Serialize};

use crate::statistics::{BatchRecord, KernelOutcome};
use crate::store::KeyComponents;

/// The most bytes a [`StoredBatch`] encodes to: a batch with more kernels
/// keeps its costliest ones and counts the rest as
/// [`omitted`](StoredBatch::omitted).
pub const STORED_BATCH_LIMIT: usize = 30 * 1024;

/// The longest failure message a stored kernel record keeps.
const ERROR_LIMIT: usize = 240;

/// A batch's record as a store keeps it, beside those of other processes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredBatch {
    /// The process that ran the batch.
    pub process: u32,
    /// When the batch ended, in seconds since the Unix epoch.
    pub finished: u64,
    /// The backend of its kernels: `cuda`, `hip`, `wgpu`.
    pub backend: String,
    /// The compiler and its version, as the store's keys name it.
    pub compiler: String,
    /// The architecture compiled for, as the store's keys name it.
    pub architecture: String,
    /// Kernel records left out to stay within [`STORED_BATCH_LIMIT`]: the
    /// cheapest. [`BatchRecord::kernels`] still counts them.
    pub omitted: usize,
    /// The batch, its kernels' warnings left out.
    pub batch: BatchRecord,
}

impl StoredBatch {
    /// The stored form of `batch`, run now by this process with a store
    /// bound to `components`.
    pub fn of(batch: &BatchRecord, components: &KeyComponents) -> Self {
        let mut batch = batch.clone();
        for record in &mut batch.records {
            record.diagnostics = Vec::new();
            if let Some(error) = &mut record.error
                && error.len() > ERROR_LIMIT
            {
                let mut end = ERROR_LIMIT;
                while !error.is_char_boundary(end) {
                    end -= 1;
                }
                error.truncate(end);
                error.push('…');
            }
        }
        Self {
            process: std::process::id(),
            finished: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|since| since.as_secs())
                .unwrap_or(0),
            backend: components.backend.clone(),
            compiler: components.compiler.clone(),
            architecture: components.architecture.clone(),
            omitted: 0,
            batch,
        }
    }

    /// Whether a batch is worth a place among the few a store keeps: it
    /// compiled, failed or was refused something, or it took a while, or it
    /// was a warm-start profile's load. A batch that found its one kernel
    /// in the store at once is not.
    pub fn worth_keeping(batch: &BatchRecord) -> bool {
        batch.profile_hits > 0
            || batch.wall >= std::time::Duration::from_millis(1)
            || batch
                .records
                .iter()
                .any(|record| record.outcome != KernelOutcome::FromStore)
    }

    /// The encoded record, within [`STORED_BATCH_LIMIT`]: when it is too
    /// large, the cheapest kernels' records are left out (counted in
    /// [`omitted`](Self::omitted)), the order of the others kept. `None`
    /// when even a record without kernels does not encode.
    pub fn encode(mut self) -> Option<Vec<u8>> {
        let encoded = crate::encoding::encode(&self).ok()?;
        if encoded.len() <= STORED_BATCH_LIMIT {
            return Some(encoded);
        }
        // Keep the costliest kernels: the most that fit, found by halving.
        let mut by_cost: Vec<usize> = (0..self.batch.records.len()).collect();
        by_cost.sort_by_key(|&index| std::cmp::Reverse(self.batch.records[index].work));
        let records = std::mem::take(&mut self.batch.records);
        let (mut fits, mut too_many) = (0, records.len());
        let mut best = None;
        while fits < too_many {
            let keep = (fits + too_many).div_ceil(2);
            let mut kept: Vec<usize> = by_cost[..keep].to_vec();
            kept.sort_unstable();
            self.batch.records = kept.iter().map(|&index| records[index].clone()).collect();
            self.omitted = records.len() - keep;
            match crate::encoding::encode(&self) {
                Ok(bytes) if bytes.len() <= STORED_BATCH_LIMIT => {
                    fits = keep;
                    best = Some(bytes);
                }
                _ => too_many = keep - 1,
            }
        }
        if best.is_none() {
            self.batch.records = Vec::new();
            self.omitted = records.len();
            best = crate::encoding::encode(&self)
                .ok()
                .filter(|bytes| bytes.len() <= STORED_BATCH_LIMIT);
        }
        best
    }

    /// The record `bytes` encode, or `None` when they are not one. A
    /// record kept before batches counted their profile hits (its last
    /// field) reads with none.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let whole = |bytes: &[u8]| {
            crate::encoding::decode::<Self>(bytes)
                .ok()
                .filter(|(_, read)| *read == bytes.len())
                .map(|(record, _)| record)
        };
        whole(bytes).or_else(|| {
            // The encoding is positional: the older record is this one
            // without its last byte, a count of 0.
            let mut with_count = bytes.to_vec();
            with_count.push(0);
            whole(&with_count)
        })
    }
}

/// What the kernels of the store's kept batches of `backend` took to
/// compile, by kernel id digest, the newest record of each kept: what a
/// batch hands out by, longest first, when it compiles them again (a new
/// compiler version, an evicted entry). Records that do not decode are
/// left out.
pub(crate) fn past_work(
    kept: &[Vec<u8>],
    backend: &str,
) -> rustc_hash::FxHashMap<u128, std::time::Duration> {
    let mut work = rustc_hash::FxHashMap::default();
    for stored in kept.iter().filter_map(|bytes| StoredBatch::decode(bytes)) {
        if stored.backend != backend {
            continue;
        }
        for record in &stored.batch.records {
            if record.outcome == KernelOutcome::Compiled {
                work.insert(record.kernel.digest(), record.work);
            }
        }
    }
    work
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::statistics::KernelRecord;
    use crate::{KernelId, WorkerMode};

    fn batch(kernels: usize, error: usize) -> BatchRecord {
        BatchRecord {
            kernels,
            workers: 2,
            mode: WorkerMode::Processes,
            wall: Duration::from_millis(40),
            stored: true,
            background: false,
            health: crate::statistics::Health::default(),
            profile_hits: 0,
            records: (0..kernels)
                .map(|number| KernelRecord {
                    kernel: KernelId::named(format!("kernel-{number}"))
                        .parameter(&number)
                        .build(),
                    outcome: KernelOutcome::Compiled,
                    work: Duration::from_micros(number as u64),
                    stored: true,
                    diagnostics: Vec::new(),
                    error: (error > 0).then(|| "é".repeat(error)),
                    remembered: false,
                })
                .collect(),
        }
    }

    fn components() -> KeyComponents {
        KeyComponents::new("cuda", "nvrtc 13.0", "sm_90", "-O3")
    }

    #[test]
    fn a_small_batch_is_kept_whole() {
        let stored = StoredBatch::of(&batch(3, 0), &components());
        let decoded = StoredBatch::decode(&stored.encode().expect("encodes")).expect("decodes");
        assert_eq!(decoded.omitted, 0);
        assert_eq!(decoded.batch.records.len(), 3);
        assert_eq!(decoded.backend, "cuda");
        assert_eq!(decoded.process, std::process::id());
    }

    #[test]
    fn a_large_batch_keeps_its_costliest_kernels_within_the_limit() {
        let stored = StoredBatch::of(&batch(5_000, 0), &components());
        let bytes = stored.encode().expect("encodes");
        assert!(bytes.len() <= STORED_BATCH_LIMIT);
        let decoded = StoredBatch::decode(&bytes).expect("decodes");
        assert!(decoded.omitted > 0);
        assert_eq!(decoded.omitted + decoded.batch.records.len(), 5_000);
        assert_eq!(decoded.batch.kernels, 5_000);
        let cheapest_kept = decoded
            .batch
            .records
            .iter()
            .map(|record| record.work)
            .min()
            .expect("some kept");
        assert_eq!(
            cheapest_kept,
            Duration::from_micros(decoded.omitted as u64),
            "the cheapest are the ones left out"
        );
        assert!(
            decoded
                .batch
                .records
                .windows(2)
                .all(|pair| pair[0].work < pair[1].work),
            "in the batch's order"
        );
    }

    #[test]
    fn long_failures_are_cut_at_a_character() {
        let stored = StoredBatch::of(&batch(1, 1_000), &components());
        let error = stored.batch.records[0].error.as_deref().expect("an error");
        assert!(error.len() <= ERROR_LIMIT + '…'.len_utf8());
        assert!(error.ends_with('…'));
    }

    #[test]
    fn bytes_that_are_not_a_record_decode_to_nothing() {
        assert!(StoredBatch::decode(b"").is_none());
        assert!(StoredBatch::decode(&[0xff; 64]).is_none());
        let bytes = StoredBatch::of(&batch(2, 0), &components())
            .encode()
            .expect("encodes");
        assert!(StoredBatch::decode(&bytes[..bytes.len() - 2]).is_none());
    }

    #[test]
    fn a_record_kept_before_profile_hits_were_counted_reads_with_none() {
        let mut batch = batch(2, 0);
        batch.profile_hits = 7;
        let bytes = StoredBatch::of(&batch, &components())
            .encode()
            .expect("encodes");
        let decoded = StoredBatch::decode(&bytes).expect("decodes");
        assert_eq!(decoded.batch.profile_hits, 7);
        // The older form: the same fields without the count at the end.
        batch.profile_hits = 0;
        let bytes = StoredBatch::of(&batch, &components())
            .encode()
            .expect("encodes");
        let older = &bytes[..bytes.len() - 1];
        let decoded = StoredBatch::decode(older).expect("an older record decodes");
        assert_eq!(decoded.batch.profile_hits, 0);
        assert_eq!(decoded.batch.records.len(), 2);
    }

    #[test]
    fn only_batches_that_did_something_are_worth_keeping() {
        let mut quick_hit = batch(1, 0);
        quick_hit.wall = Duration::from_micros(30);
        quick_hit.records[0].outcome = KernelOutcome::FromStore;
        assert!(!StoredBatch::worth_keeping(&quick_hit));
        quick_hit.records[0].outcome = KernelOutcome::Failed;
        assert!(StoredBatch::worth_keeping(&quick_hit));
        assert!(StoredBatch::worth_keeping(&batch(1, 0)));
    }
}
