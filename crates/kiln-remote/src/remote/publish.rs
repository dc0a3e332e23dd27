//! Publishing to the remote (P10): every entry of a group of artifacts
//! in one round trip, the first publish of a key winning, an entry this
//! node cannot verify left alone until its time ran out.

use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kiln_engine::{StoreKey, StoreOutcome};
use redis::{Cmd, Value, cmd};

use super::read::Read;
use crate::entry::{self, Kind};
use crate::remote::{RemoteStore, now};
use crate::statistics::{add, bump};

/// Writes an artifact entry (`ARGV[1]`, for `ARGV[2]` milliseconds) where
/// the key holds nothing, or something that is not a string (a key of the
/// wrong type, repaired): 0. Where it holds exactly these bytes, no longer
/// than `ARGV[3]` (compared whole only then: a script never reads a value
/// that may be large), that entry stays, its time renewed: 1. Anything
/// else is left to the caller, which reads it within its limit and
/// verifies it: 2. Only what verifies is kept (P10): an entry damaged,
/// extended, cut short or signed by a key this node does not trust is
/// replaced, so one write without the key never ends sharing.
const PUBLISH: &str = "local kind = redis.call('type', KEYS[1]).ok \
    if kind ~= 'string' and kind ~= 'none' then redis.call('del', KEYS[1]) kind = 'none' end \
    if kind == 'none' then redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 0 end \
    local length = redis.call('strlen', KEYS[1]) \
    if length == #ARGV[1] and length <= tonumber(ARGV[3]) \
      and redis.call('get', KEYS[1]) == ARGV[1] then \
      redis.call('pexpire', KEYS[1], ARGV[2]) return 1 end \
    return 2";

/// The longest existing value the publish script compares whole: far
/// below what keeps Redis busy for a millisecond.
const COMPARED_IN_SCRIPT: u64 = 64 << 10;

/// The longest value published by the script. A script's arguments are
/// copied into it and out again (a 60 MiB value kept Redis 7.0 busy for
/// 117–137 ms, a 1 MiB one for 1.5–2 ms; 16 KiB, under 0.1 ms): a longer
/// value goes as `SET NX` (about 15 µs of Redis for 60 MiB), and a key
/// that holds anything is settled by reading it, as the script's "other
/// bytes" are.
const SCRIPTED_VALUE: usize = 16 << 10;

/// How far below the first byte where two values differ their recipes
/// may start (a recipe names its kernel early).
const RECIPE_SEARCH: usize = 64 << 10;

/// How many of its own publishes a store remembers (two digests each).
const REMEMBERED_PUBLISHES: usize = 1 << 14;

/// An artifact entry sent with [`PUBLISH`], and where its reply is.
struct Publish {
    index: usize,
    subject: [u8; 32],
    subject_text: String,
    redis_key: String,
    value: Vec<u8>,
}

impl RemoteStore {
    /// The command that writes an artifact entry unless the key holds
    /// another publisher's different bytes (`PUBLISH`).
    fn publish(&self, redis_key: &str, value: &[u8]) -> Cmd {
        let ttl = u64::try_from(self.inner.config.ttl.as_millis()).unwrap_or(u64::MAX);
        if value.len() > SCRIPTED_VALUE {
            let mut command = cmd("SET");
            command
                .arg(redis_key)
                .arg(value)
                .arg("NX")
                .arg("PX")
                .arg(ttl.max(1));
            return command;
        }
        let mut command = cmd("EVAL");
        command
            .arg(PUBLISH)
            .arg(1)
            .arg(redis_key)
            .arg(value)
            .arg(ttl.max(1))
            .arg(COMPARED_IN_SCRIPT);
        command
    }

    /// Settles a publish the remote refused because the key holds other
    /// bytes: `true` when this store's value was written after all (the
    /// entry there does not verify, or is this store's own earlier put),
    /// `false` when another publisher's verified entry stays, counted and
    /// warned about once as a nondeterministic compile.
    fn settle_difference(&self, publish: &Publish, payload: &[u8]) -> bool {
        let inner = &self.inner;
        let payload_digest = *blake3::hash(payload).as_bytes();
        let limit = self.inner.config.max_entry_bytes;
        let Some(found) = self.read_values(&[("e", publish.subject)], limit) else {
            return false;
        };
        let theirs = match found.into_iter().next() {
            Some(Read::Value(value)) => {
                entry::open(&inner.config.keys, Kind::Artifact, &publish.subject, &value).ok()
            }
            // Gone since, or over the limit (nothing kiln would write or
            // read): replaced.
            Some(Read::Absent | Read::Longer(_)) | None => None,
        };
        let Some(theirs) = theirs else {
            // Nothing there that verifies (damaged, extended, cut short,
            // another key's, no kiln entry): replaced, so the fleet's
            // next readers hit again (P10).
            bump(&inner.counters.replaced_unverified);
            return self.overwrite(publish);
        };
        let theirs_digest = *blake3::hash(&theirs.payload).as_bytes();
        let is_ours = inner
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&publish.subject)
            == Some(&theirs_digest);
        if is_ours && theirs_digest != payload_digest {
            // This store's own earlier put: replaced, as any other store
            // replaces what it wrote.
            return self.overwrite(publish);
        }
        if theirs_digest == payload_digest || same_artifact(&theirs.payload, payload) {
            // The same artifact (its recipe, which names the kernel that
            // asked for it, may differ): the entry there stays, its time
            // renewed; no compile differed.
            let mut command = cmd("PEXPIRE");
            let ttl = u64::try_from(inner.config.ttl.as_millis()).unwrap_or(u64::MAX);
            command.arg(&publish.redis_key).arg(ttl.max(1));
            inner
                .remote
                .call(&inner.counters, move |link| link.query::<i64>(&command));
            return true;
        }
        bump(&inner.counters.nondeterministic);
        if !inner.warned_nondeterministic.swap(true, Ordering::Relaxed) {
            log::warn!(
                "kiln: nondeterministic compile: {} was already in the remote store with other \
                 bytes, published by another host; the remote keeps the first, this host keeps \
                 its own copy locally, and later cases are counted, not logged",
                publish.subject_text
            );
        }
        false
    }

    /// Writes `publish`'s value over whatever is there: `true` when the
    /// remote took it.
    fn overwrite(&self, publish: &Publish) -> bool {
        let inner = &self.inner;
        let command = self.set(publish.redis_key.clone(), publish.value.clone());
        inner
            .remote
            .call(&inner.counters, move |link| link.query::<()>(&command))
            .is_some()
    }

    /// Remembers that this store published `payload_digest` under
    /// `subject`, so that a later put of its own replaces it (P2) while
    /// another publisher's differing bytes do not.
    fn remember(&self, subject: [u8; 32], payload_digest: [u8; 32]) {
        let mut published = self
            .inner
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if published.len() >= REMEMBERED_PUBLISHES {
            // Forgetting costs at most a warning about this store's own
            // replaced entry, never a wrong one.
            published.clear();
        }
        published.insert(subject, payload_digest);
    }
}

/// One artifact to publish ([`RemoteStore::publish_all`]).
pub(crate) struct Outgoing<'a> {
    pub key: &'a StoreKey,
    pub source_key: Option<&'a StoreKey>,
    pub bytes: &'a [u8],
    pub work: Duration,
}

/// One artifact's sealed entries: their commands, its publishes (with
/// their places in the commands) and the bytes they write.
struct Sealed {
    commands: Vec<Cmd>,
    publishes: Vec<Publish>,
    written: u64,
}

impl RemoteStore {
    /// Publishes `puts` in one round trip (one per shard of a cluster):
    /// every entry of every artifact, then `after` (the releases of their
    /// leases), then what settling a difference needs for the few keys
    /// that held other bytes. An outcome per put.
    pub(crate) fn publish_all(&self, puts: &[Outgoing<'_>], after: Vec<Cmd>) -> Vec<StoreOutcome> {
        let stored_at = now();
        let mut outcomes: Vec<Option<StoreOutcome>> = puts.iter().map(|_| None).collect();
        let mut commands = Vec::new();
        let mut sealed = Vec::new();
        for (index, put) in puts.iter().enumerate() {
            match self.seal_artifact(put, stored_at) {
                Ok(mut one) => {
                    for publish in &mut one.publishes {
                        publish.index += commands.len();
                    }
                    commands.append(&mut one.commands);
                    sealed.push((index, one.publishes, one.written));
                }
                Err(outcome) => outcomes[index] = Some(outcome),
            }
        }
        if sealed.is_empty() {
            if !after.is_empty() {
                self.inner.remote.call(&self.inner.counters, move |link| {
                    link.pipeline::<Vec<Value>>(after)
                });
            }
        } else {
            commands.extend(after);
            let written: u64 = sealed.iter().map(|(_, _, written)| written).sum();
            let artifact_bytes: u64 = sealed
                .iter()
                .map(|(index, _, _)| puts[*index].bytes.len() as u64)
                .sum();
            let (outcome, replies) = self.write(commands, written, artifact_bytes);
            // `write` counted the round trip as one put: count each.
            let more = sealed.len().saturating_sub(1) as u64;
            match &outcome {
                StoreOutcome::Stored { .. } => add(&self.inner.counters.puts, more),
                _ => add(&self.inner.counters.put_failures, more),
            }
            for (index, publishes, _) in sealed {
                let put = &puts[index];
                outcomes[index] = Some(match &outcome {
                    StoreOutcome::Stored { .. } => self.settle(put, publishes, &replies),
                    failed => failed.clone(),
                });
            }
        }
        outcomes
            .into_iter()
            .map(|outcome| outcome.expect("every put has its outcome"))
            .collect()
    }

    /// The entries of one artifact: under its key and its source's, the
    /// listed keys and the kernel's history.
    fn seal_artifact(
        &self,
        put: &Outgoing<'_>,
        stored_at: u64,
    ) -> std::result::Result<Sealed, StoreOutcome> {
        let encode = |key: &StoreKey| {
            bincode::serde::encode_to_vec(key, bincode::config::standard())
                .expect("a key is plain data and always serializes")
        };
        let (key, source_key, bytes) = (put.key, put.source_key, put.bytes);
        let mut entries = vec![(Kind::Artifact, "e", key.digest(), bytes.to_vec(), key)];
        if let Some(source) = source_key {
            entries.push((Kind::Artifact, "e", source.digest(), bytes.to_vec(), source));
        }
        for listed in std::iter::once(key).chain(source_key) {
            entries.push((Kind::Key, "k", listed.digest(), encode(listed), listed));
        }
        if let Some(history) = Self::history_id(key) {
            entries.push((Kind::History, "h", history, encode(key), key));
        }
        let mut sealed = Sealed {
            commands: Vec::with_capacity(entries.len()),
            publishes: Vec::new(),
            written: 0,
        };
        for (kind, space, subject, payload, subject_key) in entries {
            let value = self.sealed(kind, &subject, stored_at, put.work, &payload)?;
            sealed.written += value.len() as u64;
            let redis_key = self.redis_key(space, &subject);
            if kind == Kind::Artifact {
                sealed.commands.push(self.publish(&redis_key, &value));
                sealed.publishes.push(Publish {
                    index: sealed.commands.len() - 1,
                    subject,
                    subject_text: subject_key.subject_text(),
                    redis_key,
                    value,
                });
            } else {
                sealed.commands.push(self.set(redis_key, value));
            }
        }
        Ok(sealed)
    }

    /// The outcome of one artifact's publishes, given the replies.
    fn settle(
        &self,
        put: &Outgoing<'_>,
        publishes: Vec<Publish>,
        replies: &[Value],
    ) -> StoreOutcome {
        let payload_digest = *blake3::hash(put.bytes).as_bytes();
        let mut kept_another = false;
        for publish in publishes {
            match publishes_reply(replies, publish.index) {
                // Written new: this store's from now on.
                Some(0) => self.remember(publish.subject, payload_digest),
                // Other bytes were there.
                Some(2) => {
                    if self.settle_difference(&publish, put.bytes) {
                        self.remember(publish.subject, payload_digest);
                    } else {
                        kept_another = true;
                    }
                }
                // The same bytes, kept and renewed (their publisher stays
                // whoever wrote them first), or a reply this store does
                // not understand.
                _ => {}
            }
        }
        if kept_another {
            StoreOutcome::Skipped
        } else {
            StoreOutcome::Stored {
                bytes: put.bytes.len() as u64,
            }
        }
    }
}

/// The reply of `PUBLISH` at `index` of `replies`, as the script's: a
/// long value's `SET NX` written is 0, refused (the key holds something)
/// 2.
fn publishes_reply(replies: &[Value], index: usize) -> Option<i64> {
    match replies.get(index) {
        Some(Value::Int(reply)) => Some(*reply),
        Some(Value::Okay) => Some(0),
        Some(Value::Nil) => Some(2),
        _ => None,
    }
}

/// Whether two stored values hold the same artifact with different
/// recipes after it: a value is the encoded artifact, then, when kept,
/// the encoded recipe (`kiln_engine::store::decode_value`). The recipe
/// names the kernel that asked for the artifact, so two kernels of one
/// text (two files, one source) store the same artifact under one source
/// key with different recipes: no compile differed (P10).
fn same_artifact(theirs: &[u8], ours: &[u8]) -> bool {
    let common = theirs
        .iter()
        .zip(ours)
        .take_while(|(one, other)| one == other)
        .count();
    let whole_recipe = |bytes: &[u8]| {
        bincode::serde::decode_from_slice::<kiln_engine::store::Recipe, _>(
            bytes,
            bincode::config::standard().with_limit::<{ 64 << 20 }>(),
        )
        .is_ok_and(|(_, used)| used == bytes.len())
    };
    (common.saturating_sub(RECIPE_SEARCH)..=common)
        .rev()
        .filter(|start| *start > 0)
        .any(|start| whole_recipe(&theirs[start..]) && whole_recipe(&ours[start..]))
}
