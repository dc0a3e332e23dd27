//! Reading the remote within bounds (P10): every value read by a script
//! that sends it only within a limit (its length otherwise), a batch's
//! values within a byte budget, a key of the wrong type a miss.

use kiln_engine::store::BlobKey;
use kiln_engine::{Lookup, Miss, StoreKey};
use redis::{Cmd, Value, cmd};

use crate::entry::Kind;
use crate::remote::RemoteStore;
use crate::statistics::bump;

/// Reads a value no longer than `ARGV[1]` bytes: the value, nothing (no
/// key, or a key of another type: no entry of kiln's), or, for a longer
/// one, its length alone. No reader fetches more than it asked for.
const READ: &str = "if redis.call('type', KEYS[1]).ok ~= 'string' then return false end \
    local length = redis.call('strlen', KEYS[1]) \
    if length > tonumber(ARGV[1]) then return length end \
    return redis.call('get', KEYS[1])";

/// The most bytes one batch's lookup reads from the remote.
const BATCH_BYTES: u64 = 256 << 20;

/// What a lookup may read per second of the timeout: a batch's budget
/// agrees with its timeout (a gigabit link moves about 119 MiB a second),
/// so that a value over it is skipped, never read past the deadline.
const BYTES_PER_SECOND: f64 = 100.0 * 1024.0 * 1024.0;

/// The least each key of a batch may bring in the lookup's first round,
/// whatever the batch's size.
const FIRST_ROUND_FLOOR: u64 = 1 << 20;

/// One lookup's answer.
pub(crate) type Found = Lookup<Vec<u8>>;

/// A value read with [`READ`].
pub(crate) enum Read {
    Absent,
    Value(Vec<u8>),
    /// Longer than asked: its length.
    Longer(u64),
}

impl RemoteStore {
    /// The command that reads the value at `redis_key` with [`READ`], at
    /// most `limit` bytes of it.
    pub(crate) fn read_command(redis_key: &str, limit: u64) -> Cmd {
        let mut command = cmd("EVAL");
        command.arg(READ).arg(1).arg(redis_key).arg(limit);
        command
    }

    /// What a reply to [`read_command`](Self::read_command) says.
    pub(crate) fn read_reply(value: Value) -> Read {
        match value {
            Value::BulkString(bytes) => Read::Value(bytes),
            Value::Int(length) => Read::Longer(length.unsigned_abs()),
            _ => Read::Absent,
        }
    }

    /// The lookup of an artifact entry of `subject` read with
    /// [`read_command`](Self::read_command) at the entry limit, answered
    /// from its `reply`.
    pub(crate) fn answer_read(&self, subject: &[u8; 32], reply: Value) -> Lookup<Vec<u8>> {
        match Self::read_reply(reply) {
            Read::Absent => self.answer(Kind::Artifact, subject, None),
            Read::Value(value) => self.answer(Kind::Artifact, subject, Some(value)),
            Read::Longer(length) => self.too_long(length, self.inner.config.max_entry_bytes),
        }
    }

    /// Whether `reply`, a [`read_command`](Self::read_command) of the
    /// artifact entry of `subject`, holds an entry that verifies (nothing
    /// counted).
    pub(crate) fn read_verifies(&self, subject: &[u8; 32], reply: &Value) -> bool {
        match reply {
            Value::BulkString(value) => {
                crate::entry::open(&self.inner.config.keys, Kind::Artifact, subject, value).is_ok()
            }
            _ => false,
        }
    }

    /// Reads the values of `subjects` (each in its space) with [`READ`],
    /// each at most `limit` bytes, in one round trip; `None` when the
    /// remote did not answer.
    pub(crate) fn read_values(
        &self,
        subjects: &[(&str, [u8; 32])],
        limit: u64,
    ) -> Option<Vec<Read>> {
        let commands: Vec<Cmd> = subjects
            .iter()
            .map(|(space, subject)| Self::read_command(&self.redis_key(space, subject), limit))
            .collect();
        let values = self.inner.remote.call(&self.inner.counters, move |link| {
            link.pipeline::<Vec<Value>>(commands)
        })?;
        if values.len() != subjects.len() {
            return None;
        }
        Some(values.into_iter().map(Self::read_reply).collect())
    }

    /// The lookup of `subjects` (each of its kind) within the batch's
    /// byte budget: a first round in which each may bring its share of the
    /// budget, then one round for those longer than that, as far as the
    /// budget goes. A value over the entry limit is never fetched.
    pub(crate) fn lookup_subjects(&self, subjects: &[(Kind, [u8; 32])]) -> Vec<Lookup<Vec<u8>>> {
        self.lookup_subjects_counting(subjects, subjects.len())
    }

    /// [`lookup_subjects`](Self::lookup_subjects), counting the hits and
    /// misses of the first `counted` subjects only: the rest are read
    /// ahead of being asked for.
    pub(crate) fn lookup_subjects_counting(
        &self,
        subjects: &[(Kind, [u8; 32])],
        counted: usize,
    ) -> Vec<Lookup<Vec<u8>>> {
        let limit = self.inner.config.max_entry_bytes;
        let batch_bytes = self.batch_bytes();
        let share = (batch_bytes / subjects.len().max(1) as u64)
            .max(FIRST_ROUND_FLOOR)
            .min(limit);
        let spaced: Vec<(&str, [u8; 32])> = subjects
            .iter()
            .map(|(kind, subject)| (kind.space(), *subject))
            .collect();
        let asked = std::time::Instant::now();
        let Some(mut read) = self.read_values(&spaced, share) else {
            return self.unreachable_misses(subjects.len());
        };
        self.lookup_took(asked.elapsed());
        let mut budget = batch_bytes.saturating_sub(
            read.iter()
                .map(|read| match read {
                    Read::Value(value) => value.len() as u64,
                    _ => 0,
                })
                .sum(),
        );
        let mut again = Vec::new();
        for (index, found) in read.iter().enumerate() {
            if let Read::Longer(length) = found
                && *length <= limit
                && *length <= budget
            {
                budget -= length;
                again.push(index);
            }
        }
        if !again.is_empty() {
            let later: Vec<(&str, [u8; 32])> = again.iter().map(|index| spaced[*index]).collect();
            match self.read_values(&later, limit) {
                Some(values) => {
                    for (index, value) in again.into_iter().zip(values) {
                        read[index] = value;
                    }
                }
                // The first round's answers stand: only the long values
                // are misses.
                None => {
                    for index in again {
                        read[index] = Read::Longer(u64::MAX);
                    }
                }
            }
        }
        subjects
            .iter()
            .zip(read)
            .enumerate()
            .map(|(index, ((kind, subject), read))| match read {
                Read::Absent => self.answer_counted(*kind, subject, None, index < counted),
                Read::Value(value) => {
                    self.answer_counted(*kind, subject, Some(value), index < counted)
                }
                Read::Longer(length) => self.too_long(length, limit),
            })
            .collect()
    }

    /// The most bytes one batch's lookup reads: [`BATCH_BYTES`], and no
    /// more than half the timeout moves at [`BYTES_PER_SECOND`].
    fn batch_bytes(&self) -> u64 {
        let moved = self.inner.config.timeout.as_secs_f64() / 2.0 * BYTES_PER_SECOND;
        (moved as u64).clamp(FIRST_ROUND_FLOOR, BATCH_BYTES)
    }

    /// Counts a lookup's round trip that took `took`: one past half the
    /// timeout is slow, a remote too far for the timeout it was given
    /// (`kiln stats` shows it, logged once at info; FLEET.md says when to
    /// raise the timeout).
    fn lookup_took(&self, took: std::time::Duration) {
        let counters = &self.inner.counters;
        let millis = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
        counters
            .slowest_lookup_ms
            .fetch_max(millis, std::sync::atomic::Ordering::Relaxed);
        if took * 2 > self.inner.config.timeout {
            bump(&counters.slow_lookups);
            if !self
                .inner
                .warned_slow
                .swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                // Said once, at info: a remote that stops answering has
                // its one warning, and `kiln stats` shows these counts.
                log::info!(
                    "kiln: a lookup of the remote store took {took:?}, more than half its timeout \
                     of {:?}; a remote this far away needs a longer KILN_REMOTE_TIMEOUT",
                    self.inner.config.timeout
                );
            }
        }
    }

    /// The lookups of `keys` and of the named blobs `blobs` in one round
    /// trip (one per shard of a cluster): a batch's artifacts and the
    /// failure memories of those it may compile.
    pub(crate) fn lookup_with_blobs(
        &self,
        keys: &[StoreKey],
        blobs: &[BlobKey],
    ) -> (Vec<Found>, Vec<Found>) {
        let subjects: Vec<(Kind, [u8; 32])> = keys
            .iter()
            .map(|key| (Kind::Artifact, key.digest()))
            .chain(blobs.iter().map(|blob| (Kind::Blob, blob.digest())))
            .collect();
        let mut found = self.lookup_subjects_counting(&subjects, keys.len());
        let blobs = found.split_off(keys.len());
        (found, blobs)
    }

    /// The miss of a value of `length` bytes left in the remote: over the
    /// entry limit, or over what the batch may still read.
    pub(crate) fn too_long(&self, length: u64, limit: u64) -> Lookup<Vec<u8>> {
        bump(&self.inner.counters.oversize_reads);
        if length > limit && length != u64::MAX {
            bump(&self.inner.counters.corrupt);
            Lookup::Miss(Miss::Corrupt {
                detail: format!(
                    "a remote entry of {length} bytes is over the limit of {limit} bytes \
                     (KILN_REMOTE_MAX_ENTRY); it was not read"
                ),
            })
        } else {
            bump(&self.inner.counters.unreadable);
            Lookup::Miss(Miss::Unreadable {
                detail: format!(
                    "a remote entry of {} bytes did not fit in what one batch reads within \
                     its timeout ({} bytes); a longer KILN_REMOTE_TIMEOUT reads it",
                    if length == u64::MAX {
                        "many".to_owned()
                    } else {
                        length.to_string()
                    },
                    self.batch_bytes()
                ),
            })
        }
    }
}
