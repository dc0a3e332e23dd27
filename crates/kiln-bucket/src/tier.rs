//! [`BucketTier`]: a store (the disk store, or the disk store with Redis
//! behind it) in front of a [`BucketStore`] (P16).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kiln_engine::store::{BlobKey, Claim, ClaimGuard, ClaimWait, Explanation, StoreCounters};
use kiln_engine::{
    ArtifactStore, Generation, Lookup, Miss, StoreKey, StoreOutcome, StoreStatistics,
};

use crate::store::{BucketStore, Put};

mod memories;
mod packing;
mod queue;

use memories::Memories;
use packing::Packing;
use queue::{Job, Queue, ReleasedBehindWrites, Write};

/// How many writes wait for the bucket at most; past it a write is
/// dropped and counted, never waited for.
const QUEUE_LIMIT: usize = 1024;

/// How long a key the bucket said it lacks is not asked of it again
/// within a batch, unless another holds its claim.
const ABSENT_FRESH: Duration = Duration::from_secs(60);

/// The most absences remembered at once; past it they are forgotten.
const ABSENT_LIMIT: usize = 1 << 16;

/// A two-level store: `front` (the disk store, or the disk store with
/// Redis behind it) before a [`BucketStore`].
///
/// - **Reads** go to the front, then, for what it misses, to the bucket
///   in one call (the batch's GETs together); the verified bucket hits
///   are copied to the front by a background thread, a batch's in one
///   durable write (the next lookup waits for it, within the timeout),
///   and so, when Redis is there and the split leaves them to it, to
///   Redis: a kernel read from the bucket is hot for the fleet again.
/// - **Writes** go to the front on the caller's thread and, unless it
///   refused them, to the bucket through a bounded background queue: the
///   launch never waits for the bucket. [`flush`](Self::flush) and
///   dropping the last handle write what is queued.
/// - **A size split** ([`with_split`](Self::with_split)), with Redis in
///   the front: artifacts of at most the split go to the front alone (the
///   disk and Redis), larger ones to the disk and the bucket; what Redis
///   misses is asked of the bucket, since a lookup cannot know an entry's
///   size before it reads it. The front must have been made with the same
///   split ([`TieredStore::with_split`](kiln_remote::TieredStore::with_split)),
///   so that it keeps large artifacts out of Redis.
/// - **One question per key and batch**: a key the bucket answered absent
///   is not asked of it again until the batch ends
///   ([`batch_finished`](kiln_engine::Groups::batch_finished)), at most a minute,
///   unless another holds its claim: the loader's check after taking a
///   claim reads the front only, not one GET per kernel in sequence; a
///   waiter's polls for a key another compiles ask the bucket too (with
///   Redis in front and the size split, a large artifact is published
///   there alone). The failure memories of the kernels the
///   bucket lacks (which this node may compile) are read in one call in
///   the background while the batch goes on, and taken from it when the
///   loader asks (waiting for it, within the timeout).
/// - **Batch packs**, without the size split: the batch's first lookup
///   that reaches the bucket (4 keys or more) reads the pack of its set
///   of keys too ([`BucketConfig::packs`](crate::BucketConfig::packs)),
///   its GET sent beside the front's lookup when the front lacks the
///   lookup's first key (asked of it alone, first), else after it;
///   when the bucket held no whole pack of it, the set's artifacts (the
///   front's hits, the bucket's, the batch's puts) are kept until
///   [`batch_finished`](kiln_engine::Groups::batch_finished) queues the
///   pack for the writer. A key removed deletes the packs this process
///   read or wrote that hold it.
/// - **Claims** are the front's (with the size split, each let go once
///   the bucket writes queued before it are done, so a machine waiting
///   for a large artifact finds it in the bucket): the disk store's across a machine's
///   processes, Redis's across machines. With a bucket alone there is no
///   lease across machines: single flight holds within each machine, and
///   machines that start the same kernel at the same time each compile
///   it, the first put kept where the server honours conditional puts.
#[derive(Clone, Debug)]
pub struct BucketTier {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    front: Arc<dyn ArtifactStore>,
    bucket: BucketStore,
    answers: StoreCounters,
    queue: Arc<Queue<Job>>,
    /// The bucket's hits waiting to be copied to the front, off the
    /// caller's thread.
    copies: Arc<Queue>,
    /// Whether the copier thread started.
    copier: bool,
    /// The largest artifact left to the front alone; `None` when the
    /// bucket takes every artifact.
    split: Option<u64>,
    /// The keys (by digest) the bucket answered absent in this batch, and
    /// when.
    absent: Mutex<HashMap<[u8; 32], Instant>>,
    /// The failure memories of the batch's kernels the bucket lacks, read
    /// in the background, each taken once by the loader's question.
    memories: Arc<Memories>,
    /// The batch's pack and the packs this process knows.
    packing: Packing,
}

impl BucketTier {
    /// `front` before `bucket`, with a writer thread for the bucket.
    pub fn new(front: Arc<dyn ArtifactStore>, bucket: BucketStore) -> Self {
        Self::split(front, bucket, None)
    }

    /// [`new`](Self::new), with Redis in `front`: artifacts of at most
    /// `largest` bytes are left to it, and only larger ones written to the
    /// bucket (the size split; `largest` as
    /// [`BucketConfig::split_bytes`](crate::BucketConfig::split_bytes)).
    pub fn with_split(front: Arc<dyn ArtifactStore>, bucket: BucketStore, largest: u64) -> Self {
        Self::split(front, bucket, Some(largest))
    }

    fn split(front: Arc<dyn ArtifactStore>, bucket: BucketStore, split: Option<u64>) -> Self {
        // The first batch's first request (its pack's GET) finds a
        // connection open.
        bucket.connect_ahead();
        let queue = Arc::new(Queue::default());
        let (writer_queue, writer_bucket) = (Arc::clone(&queue), bucket.clone());
        // A writer that cannot start leaves writes queued, then dropped
        // and counted: the front still holds everything.
        let _ = std::thread::Builder::new()
            .name("kiln-bucket-writer".to_owned())
            .spawn(move || write_queued(&writer_queue, &writer_bucket));
        let copies = Arc::new(Queue::default());
        let (copier_queue, copier_front) = (Arc::clone(&copies), Arc::clone(&front));
        // Without a copier, hits are copied on the caller's thread.
        let copier = std::thread::Builder::new()
            .name("kiln-bucket-copier".to_owned())
            .spawn(move || copy_queued(&copier_queue, copier_front.as_ref()))
            .is_ok();
        Self {
            inner: Arc::new(Inner {
                front,
                bucket,
                answers: StoreCounters::default(),
                queue,
                copies,
                copier,
                split,
                absent: Mutex::default(),
                memories: Arc::default(),
                packing: Packing::default(),
            }),
        }
    }

    /// The bucket.
    pub fn bucket(&self) -> &BucketStore {
        &self.inner.bucket
    }

    /// Waits until every queued bucket write, and every copy of a bucket
    /// hit to the front, is done, at most `timeout`; `true` when nothing
    /// is left.
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let copied = self.inner.copies.wait_empty(deadline);
        self.inner.queue.wait_empty(deadline) && copied
    }

    /// Bucket writes dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.inner.queue.dropped()
    }

    fn enqueue(&self, write: Write) {
        if !self.inner.bucket.config().writes() {
            return;
        }
        // The size split: a small artifact is the front's (Redis's) alone.
        if self
            .inner
            .split
            .is_some_and(|largest| write.bytes.len() as u64 <= largest)
        {
            return;
        }
        self.inner.packing.note(&write);
        self.inner
            .queue
            .push(Job::Write(Box::new(write)), QUEUE_LIMIT);
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle writes what is queued, within a few timeouts.
        let deadline = Instant::now() + self.bucket.config().timeout * 4;
        self.copies.wait_empty(deadline);
        self.queue.wait_empty(deadline);
        self.copies.close();
        self.queue.close();
    }
}

/// The copier: copies the bucket's hits to the front, a batch's at once
/// (one durable write for them), until the queue is closed.
fn copy_queued(queue: &Queue, front: &dyn ArtifactStore) {
    while let Some((copies, _)) = queue.take() {
        let copied: Vec<kiln_engine::Put<'_>> = copies
            .iter()
            .map(|copy| kiln_engine::Put {
                key: &copy.key,
                bytes: &copy.bytes,
                work: copy.work,
                origin: kiln_engine::Origin::Copied,
            })
            .collect();
        front.put_many(&copied);
        queue.done();
    }
}

/// The writer: takes every queued write at once and sends them in one
/// call, then the queued batch packs, until the queue is closed.
fn write_queued(queue: &Queue<Job>, bucket: &BucketStore) {
    while let Some((jobs, releases)) = queue.take() {
        let (mut writes, mut packs) = (Vec::new(), Vec::new());
        for job in jobs {
            match job {
                Job::Write(write) => writes.push(*write),
                Job::Pack(pack) => packs.push(pack),
            }
        }
        let puts: Vec<Put<'_>> = writes
            .iter()
            .map(|write| Put {
                key: &write.key,
                source_key: write.source_key.as_ref(),
                bytes: &write.bytes,
                work: write.work,
                with_history: write.with_history,
            })
            .collect();
        if !puts.is_empty() {
            bucket.put_all(&puts);
        }
        for pack in &packs {
            bucket.put_pack(pack);
        }
        // Claims let go behind these writes: a waiter reads them.
        drop(releases);
        queue.done();
    }
}

impl BucketTier {
    /// Remembers the keys of `asked` the bucket answered absent in `found`.
    fn remember_absent(&self, asked: &[StoreKey], found: &[Lookup<Vec<u8>>]) {
        let mut absent = self
            .inner
            .absent
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if absent.len() >= ABSENT_LIMIT {
            absent.clear();
        }
        let now = Instant::now();
        for (key, lookup) in asked.iter().zip(found) {
            if matches!(lookup, Lookup::Miss(Miss::Absent)) {
                absent.insert(key.digest(), now);
            }
        }
    }
}

/// Whether the bucket is to be asked for `key`, which the front missed:
/// unless it answered it absent within [`ABSENT_FRESH`] in this batch.
fn unanswered(absent: &HashMap<[u8; 32], Instant>, key: &StoreKey) -> bool {
    absent
        .get(&key.digest())
        .is_none_or(|since| since.elapsed() > ABSENT_FRESH)
}

/// Whether the front refused a write: then the bucket is not asked
/// either, so a refused put leaves nothing anywhere (P5).
fn refused(outcome: &StoreOutcome) -> bool {
    matches!(outcome, StoreOutcome::Failed { .. })
}

impl ArtifactStore for BucketTier {
    fn lookup(&self, key: &StoreKey) -> Lookup<Vec<u8>> {
        self.lookup_many(std::slice::from_ref(key))
            .pop()
            .expect("one answer per key")
    }

    fn lookup_many(&self, keys: &[StoreKey]) -> Vec<Lookup<Vec<u8>>> {
        let inner = &self.inner;
        // The last batch's hits are on the front before it is asked again.
        inner
            .copies
            .wait_empty(Instant::now() + inner.bucket.config().timeout);
        // The front's answers; and the batch pack's GET, sent beside the
        // front's lookup when this lookup is sure to read it.
        let (mut answers, early) = self.ask_front(keys);
        let missed: Vec<usize> = {
            let absent = inner.absent.lock().unwrap_or_else(PoisonError::into_inner);
            answers
                .iter()
                .enumerate()
                .filter(|(_, answer)| !matches!(answer, Lookup::Hit { .. }))
                .map(|(index, _)| index)
                .filter(|index| unanswered(&absent, &keys[*index]))
                .collect()
        };
        if missed.is_empty() {
            if early.is_some() {
                // Only when another lookup of the batch found the probed
                // key absent meanwhile: the pack's answer is dropped
                // unread (it closes its call), and the batch's turn to
                // read its pack is given back.
                drop(early);
                inner.packing.give_back();
            }
        } else {
            let asked: Vec<StoreKey> = missed.iter().map(|index| keys[*index].clone()).collect();
            let found = self.ask_bucket(keys, &answers, &asked, early);
            self.remember_absent(&asked, &found);
            // The failure memories of the kernels the bucket lacks, which
            // this node may compile, read in the background while the batch
            // goes on: the loader asks for each before its compile.
            let memories = memories::of_absent(&asked, &found);
            if !memories.is_empty() {
                inner.memories.read(&inner.bucket, memories);
            }
            let mut copies = Vec::new();
            for ((index, key), lookup) in missed.iter().zip(&asked).zip(found) {
                if let Lookup::Hit { .. } = &lookup {
                    inner.front.parts().found_elsewhere(key);
                    copies.push(*index);
                }
                // Where the bucket has nothing to say, the front's own
                // miss (corrupt, removed) is the answer.
                if matches!(lookup, Lookup::Hit { .. }) {
                    answers[*index] = lookup;
                }
            }
            // Copied to the front by the copier: a durable write of the
            // batch's hits would cost a warm start more than the round trip.
            let copied: Vec<kiln_engine::Put<'_>> = copies
                .iter()
                .filter_map(|index| match &answers[*index] {
                    Lookup::Hit { artifact, work, .. } => Some(kiln_engine::Put {
                        key: &keys[*index],
                        bytes: artifact,
                        work: *work,
                        origin: kiln_engine::Origin::Copied,
                    }),
                    Lookup::Miss(_) => None,
                })
                .collect();
            if inner.copier {
                for copy in &copied {
                    // Unbounded: a batch's hits are in memory already.
                    inner.copies.push(
                        Write {
                            key: copy.key.clone(),
                            source_key: None,
                            bytes: copy.bytes.to_vec(),
                            work: copy.work,
                            with_history: false,
                        },
                        usize::MAX,
                    );
                }
            } else {
                inner.front.put_many(&copied);
            }
        }
        for answer in &answers {
            inner.answers.count_lookup(answer);
        }
        answers
    }

    fn put_many(&self, puts: &[kiln_engine::Put<'_>]) -> Vec<StoreOutcome> {
        let outcomes = self.inner.front.put_many(puts);
        for (put, _) in puts
            .iter()
            .zip(&outcomes)
            .filter(|(_, outcome)| !refused(outcome))
        {
            // A compile with its text's key, a rekeyed kernel with its
            // history, a copy alone.
            let (source_key, with_history) = match put.origin {
                kiln_engine::Origin::Compiled { source_key } => (source_key.cloned(), true),
                kiln_engine::Origin::Rekeyed { .. } => (None, true),
                kiln_engine::Origin::Copied => (None, false),
            };
            self.enqueue(Write {
                key: put.key.clone(),
                source_key,
                bytes: put.bytes.to_vec(),
                work: put.work,
                with_history,
            });
        }
        outcomes
    }

    fn remove(&self, key: &StoreKey) {
        // A queued write of the key would land after the removal and bring
        // it back: drop it, and let a write already sent finish first.
        self.inner.queue.forget(key);
        self.flush(self.inner.bucket.config().timeout);
        self.inner.front.remove(key);
        self.inner.bucket.remove(key);
        self.forget_packs(key);
    }

    fn generation(&self) -> Generation {
        self.inner.front.generation()
    }

    /// The front's counts, with lookups as this store answered them (a
    /// front miss the bucket answered is a hit).
    fn statistics(&self) -> StoreStatistics {
        let answered = self.inner.answers.snapshot();
        StoreStatistics {
            hits: answered.hits,
            absent: answered.absent,
            corrupt: answered.corrupt,
            foreign: answered.foreign,
            unreadable: answered.unreadable,
            bytes_read: answered.bytes_read,
            ..self.inner.front.statistics()
        }
    }

    fn parts(&self) -> kiln_engine::StoreParts<'_> {
        // Claims are the front's (a bucket has no lease); blobs, records
        // and the batch's end over both.
        kiln_engine::StoreParts::all(self)
    }
}

impl kiln_engine::Claims for BucketTier {
    fn claim(&self, key: &StoreKey, wait: ClaimWait) -> Claim {
        let claim = match self.inner.front.parts().claim(key, wait) {
            // With the size split, a large artifact is the bucket's alone:
            // its claim (Redis's lease) is let go once the bucket writes
            // queued before it are done, so a waiter that takes it finds
            // the artifact there.
            Claim::Held(guard) if self.inner.split.is_some() => Claim::Held(ClaimGuard::new(
                ReleasedBehindWrites::new(guard, Arc::clone(&self.inner.queue)),
            )),
            claim => claim,
        };
        if matches!(claim, Claim::Busy) {
            // Another holds it: its publish may land in the bucket (a large
            // artifact, with Redis in front), so the waiter's polls ask.
            self.inner
                .absent
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&key.digest());
        }
        claim
    }

    fn claim_timeout(&self) -> Duration {
        self.inner.front.parts().claim_timeout()
    }

    fn holder(&self, key: &StoreKey) -> Option<String> {
        self.inner.front.parts().holder(key)
    }
}

impl kiln_engine::Blobs for BucketTier {
    fn lookup_blob(&self, key: &BlobKey) -> Lookup<Vec<u8>> {
        match self.inner.front.parts().lookup_blob(key) {
            Lookup::Miss(_) => {
                let deadline = Instant::now() + self.inner.bucket.config().timeout;
                self.inner
                    .memories
                    .take(key, deadline)
                    .unwrap_or_else(|| kiln_engine::Blobs::lookup_blob(&self.inner.bucket, key))
            }
            hit => hit,
        }
    }

    fn put_blob(&self, key: &BlobKey, bytes: &[u8]) -> StoreOutcome {
        self.inner.memories.forget(key);
        let outcome = self.inner.front.parts().put_blob(key, bytes);
        // Blobs are few and small: written through, on the caller's thread.
        kiln_engine::Blobs::put_blob(&self.inner.bucket, key, bytes);
        outcome
    }
}

impl kiln_engine::Records for BucketTier {
    fn keep_batch(&self, record: &[u8]) {
        self.inner.front.parts().keep_batch(record);
    }

    fn kept_batches(&self) -> Vec<Vec<u8>> {
        self.inner.front.parts().kept_batches()
    }

    fn explain(&self, key: &StoreKey) -> Explanation {
        match self.inner.front.parts().explain(key) {
            Explanation::NeverSeen => kiln_engine::Records::explain(&self.inner.bucket, key),
            known => known,
        }
    }

    fn found_elsewhere(&self, key: &StoreKey) {
        self.inner.front.parts().found_elsewhere(key);
    }
}

impl kiln_engine::Groups for BucketTier {
    fn begin_group(&self) {
        self.inner.front.parts().begin_group();
    }

    fn commit_group(&self) {
        self.inner.front.parts().commit_group();
    }

    fn batch_finished(&self) {
        self.inner
            .absent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        self.inner.memories.batch_finished();
        self.pack_batch_finished();
        self.inner.front.parts().batch_finished();
    }
}
