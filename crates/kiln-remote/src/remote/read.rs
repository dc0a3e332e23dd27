//! Reading the remote within bounds (P10): every value read by a script
//! that sends it only when it is short (its length otherwise), a longer
//! one read in pieces outside any script, a batch's values within a byte
//! budget, a key of the wrong type a miss.
//!
//! What Redis spends on one call is what every other client waits for. A
//! script copies what it returns (a 60 MiB value read by a script blocked
//! Redis 7.0 for 186–256 ms, a plain `GET` of it for 36–42 ms); a
//! `GETRANGE` of a 1 MiB piece costs about 0.1 ms, whatever the value's
//! length. So no call of a read holds Redis for a millisecond.

use kiln_engine::store::BlobKey;
use kiln_engine::{Lookup, Miss, StoreKey};
use redis::{Cmd, Value, cmd};

use crate::entry::Kind;
use crate::remote::RemoteStore;
use crate::statistics::bump;

/// Reads a value no longer than `ARGV[1]` bytes: the value, nothing (no
/// key, or a key of another type: no entry of kiln's), or, for a longer
/// one, its length alone. No reader fetches more than it asked for;
/// `ARGV[1]` is at most [`INLINE`].
const READ: &str = "if redis.call('type', KEYS[1]).ok ~= 'string' then return false end \
    local length = redis.call('strlen', KEYS[1]) \
    if length > tonumber(ARGV[1]) then return length end \
    return redis.call('get', KEYS[1])";

/// The most bytes one batch's lookup reads from the remote.
const BATCH_BYTES: u64 = 256 << 20;

/// The longest value the read script sends itself (about 0.2 ms of Redis
/// for 64 KiB); a longer one is read in [`PIECE`]s.
pub(crate) const INLINE: u64 = 64 << 10;

/// How much of a long value one `GETRANGE` reads (about 0.03 ms of
/// Redis).
const PIECE: u64 = 256 << 10;

/// How much of the long values one round trip asks for. Redis copies
/// every reply into the connection's output buffer before it is sent; past
/// about 8 MiB waiting there, a `GETRANGE` of a piece took 4–8 ms instead
/// of 0.03 ms (Redis 7.0, 62 MiB asked for in one round trip: every piece
/// over 0.1 ms, the slowest 8 ms; 4 MiB a round trip: the slowest 0.13 ms).
const WINDOW: u64 = 4 << 20;

/// What a lookup may read per second of the timeout: a batch's budget
/// agrees with its timeout (a gigabit link moves about 119 MiB a second),
/// so that a value over it is skipped, never read past the deadline.
const BYTES_PER_SECOND: f64 = 100.0 * 1024.0 * 1024.0;

/// The least one batch's lookup may read, however short its timeout.
const LEAST_BATCH_BYTES: u64 = 1 << 20;

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
    /// The command that reads the value at `redis_key` with [`READ`]: the
    /// value when it is no longer than `limit` and [`INLINE`], its length
    /// otherwise ([`complete_reads`](Self::complete_reads) reads the
    /// longer ones within `limit`).
    pub(crate) fn read_command(redis_key: &str, limit: u64) -> Cmd {
        let mut command = cmd("EVAL");
        command
            .arg(READ)
            .arg(1)
            .arg(redis_key)
            .arg(limit.min(INLINE));
        command
    }

    /// Reads the values [`read_command`]'s `replies` (to the reads of
    /// `keys`, in order) gave only the length of, where that length is
    /// within `limit` and, in order, within `budget` bytes: each in
    /// `GETRANGE` pieces, outside any script, [`WINDOW`] bytes a round
    /// trip. A value whose pieces
    /// do not add up to its length (written again meanwhile) keeps its
    /// length for a reply, as does every one when the remote does not
    /// answer.
    ///
    /// [`read_command`]: Self::read_command
    pub(crate) fn complete_reads(
        &self,
        keys: &[String],
        replies: &mut [Value],
        limit: u64,
        mut budget: u64,
    ) {
        let mut wanted = Vec::new();
        for (index, reply) in replies.iter().enumerate() {
            if let Value::Int(length) = reply {
                let length = length.unsigned_abs();
                if length > limit.min(INLINE) && length <= limit && length <= budget {
                    budget -= length;
                    wanted.push((index, length));
                }
            }
        }
        if wanted.is_empty() || keys.len() < replies.len() {
            return;
        }
        // Every piece: whose, and its first and last byte.
        let mut pieces = Vec::new();
        for (index, length) in &wanted {
            let mut start = 0;
            while start < *length {
                let end = (start + PIECE).min(*length) - 1;
                pieces.push((*index, start, end));
                start = end + 1;
            }
        }
        let mut values: Vec<Vec<u8>> = wanted
            .iter()
            .map(|(_, length)| Vec::with_capacity(usize::try_from(*length).unwrap_or(0)))
            .collect();
        let slot = |index: usize| wanted.iter().position(|(wanted, _)| *wanted == index);
        for round in pieces.chunks(usize::try_from(WINDOW / PIECE).unwrap_or(1)) {
            let commands: Vec<Cmd> = round
                .iter()
                .map(|(index, start, end)| {
                    let mut command = cmd("GETRANGE");
                    command.arg(&keys[*index]).arg(*start).arg(*end);
                    command
                })
                .collect();
            let Some(replies) = self.inner.remote.call(&self.inner.counters, move |link| {
                link.pipeline::<Vec<Value>>(commands)
            }) else {
                // Not answered: the values not read whole keep their
                // lengths.
                break;
            };
            for ((index, _, _), reply) in round.iter().zip(replies) {
                if let (Some(slot), Value::BulkString(bytes)) = (slot(*index), reply) {
                    values[slot].extend_from_slice(&bytes);
                }
            }
        }
        for ((index, length), value) in wanted.into_iter().zip(values) {
            if value.len() as u64 == length {
                replies[index] = Value::BulkString(value);
            }
        }
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

    /// Reads the values of `subjects` (each in its space), each at most
    /// `limit` bytes: [`READ`] in one round trip, and the long ones in a
    /// second; `None` when the remote did not answer.
    pub(crate) fn read_values(
        &self,
        subjects: &[(&str, [u8; 32])],
        limit: u64,
    ) -> Option<Vec<Read>> {
        let values = self.read_replies(subjects, limit, u64::MAX, false)?;
        Some(values.into_iter().map(Self::read_reply).collect())
    }

    /// The replies of [`read_values`](Self::read_values), the long values
    /// read as far as `budget` goes; `lookup`: the first round trip is a
    /// lookup's, timed.
    fn read_replies(
        &self,
        subjects: &[(&str, [u8; 32])],
        limit: u64,
        budget: u64,
        lookup: bool,
    ) -> Option<Vec<Value>> {
        let keys: Vec<String> = subjects
            .iter()
            .map(|(space, subject)| self.redis_key(space, subject))
            .collect();
        let commands: Vec<Cmd> = keys
            .iter()
            .map(|key| Self::read_command(key, limit))
            .collect();
        let asked = std::time::Instant::now();
        let mut values = self.inner.remote.call(&self.inner.counters, move |link| {
            link.pipeline::<Vec<Value>>(commands)
        })?;
        if lookup {
            self.lookup_took(asked.elapsed());
        }
        if values.len() != subjects.len() {
            return None;
        }
        let inline: u64 = values
            .iter()
            .map(|value| match value {
                Value::BulkString(bytes) => bytes.len() as u64,
                _ => 0,
            })
            .sum();
        self.complete_reads(&keys, &mut values, limit, budget.saturating_sub(inline));
        Some(values)
    }

    /// The lookup of `subjects` (each of its kind) within the batch's
    /// byte budget: a first round that brings the short values and the
    /// lengths of the others, then one round for the long ones, in
    /// pieces, as far as the budget goes. A value over the entry limit is
    /// never fetched.
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
        let spaced: Vec<(&str, [u8; 32])> = subjects
            .iter()
            .map(|(kind, subject)| (kind.space(), *subject))
            .collect();
        let Some(replies) = self.read_replies(&spaced, limit, self.batch_bytes(), true) else {
            return self.unreachable_misses(subjects.len());
        };
        let read = replies.into_iter().map(Self::read_reply);
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
        (moved as u64).clamp(LEAST_BATCH_BYTES, BATCH_BYTES)
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
