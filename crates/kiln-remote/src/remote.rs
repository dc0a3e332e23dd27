//! [`RemoteStore`]: an [`ArtifactStore`] over Redis or Redis Cluster, one
//! signed, self-describing value per key (P10).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kiln_core::store::{BlobKey, Claim, ClaimWait, Explanation, KeySubject, hex};
use kiln_core::{ArtifactStore, Generation, Lookup, Miss, StoreKey, StoreOutcome, StoreStatistics};
use redis::{Cmd, Value, cmd};

use crate::config::RemoteConfig;
use crate::entry::{self, Kind, Rejection};
use crate::error::Result;
use crate::link::Remote;
use crate::statistics::{Counters, RemoteStatistics, add, bump};

/// The context a kernel's history key is derived under.
const HISTORY_CONTEXT: &str = "kiln remote kernel history";

/// The most a history payload (one encoded key) may take to decode.
const HISTORY_LIMIT: usize = 1 << 20;

/// Writes an artifact entry (`ARGV[1]`, for `ARGV[2]` milliseconds) where
/// the key holds nothing, or something that is not a string (a key of the
/// wrong type, repaired): 0. Where it holds an entry whose payload
/// (`ARGV[3]` bytes after the 66-byte header) is the same, that entry stays
/// as it is, its time renewed: 1, whoever signed it. Where it holds other
/// bytes, nothing is written: 2, settled by the caller, which can verify
/// what is there. The first publish of a key wins (P10): two hosts whose
/// compiles differ never overwrite each other in silence, and a node with
/// another key never replaces the fleet's entries.
const PUBLISH: &str = "local kind = redis.call('type', KEYS[1]).ok \
    if kind ~= 'string' and kind ~= 'none' then redis.call('del', KEYS[1]) kind = 'none' end \
    if kind == 'none' then redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 0 end \
    local old = redis.call('get', KEYS[1]) \
    local last = 66 + tonumber(ARGV[3]) \
    if #old > last and string.sub(old, 1, 9) == string.sub(ARGV[1], 1, 9) \
      and string.sub(old, 59, last) == string.sub(ARGV[1], 59, last) then \
      redis.call('pexpire', KEYS[1], ARGV[2]) return 1 end \
    return 2";

/// Reads a value no longer than `ARGV[1]` bytes: the value, nothing (no
/// key, or a key of another type: no entry of kiln's), or, for a longer
/// one, its length alone. No reader fetches more than it asked for.
const READ: &str = "if redis.call('type', KEYS[1]).ok ~= 'string' then return false end \
    local length = redis.call('strlen', KEYS[1]) \
    if length > tonumber(ARGV[1]) then return length end \
    return redis.call('get', KEYS[1])";

/// The most bytes one batch's lookup reads from the remote.
const BATCH_BYTES: u64 = 256 << 20;

/// The least each key of a batch may bring in the lookup's first round,
/// whatever the batch's size.
const FIRST_ROUND_FLOOR: u64 = 1 << 20;

/// How long after its time ran out an entry that this node cannot verify
/// may be written over, and how far in the future its time may be before
/// it is taken for garbage.
const FOREIGN_SLACK: u64 = 24 * 60 * 60;

/// One lookup's answer.
pub(crate) type Found = Lookup<Vec<u8>>;

/// A value read with [`READ`].
enum Read {
    Absent,
    Value(Vec<u8>),
    /// Longer than asked: its length.
    Longer(u64),
}

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

/// A store in Redis or Redis Cluster, shared by every machine of a fleet
/// (P10).
///
/// - **Signed entries.** Every value carries an authenticator over the key
///   it was written for and its bytes: keyed BLAKE3 with the fleet key, or
///   an Ed25519 signature by a builder's key. An entry that does not
///   verify (forged, cut short, written under another key, unsigned,
///   signed by a key this node does not trust) is a counted miss, logged
///   once, and never returned. Without a key the store does not open.
/// - **One value per key.** A key's value holds everything a reader needs,
///   written with one `SET`: readers see all of it or nothing. Keys are
///   derived from [`StoreKey::digest`] alone: no rank, device, path or
///   host.
/// - **One round trip per batch.** [`lookup_many`](ArtifactStore::lookup_many)
///   sends every `GET` in one pipeline (one per shard of a cluster).
/// - **Never in the way.** Every call is bounded by
///   [`timeout`](RemoteConfig::timeout); after a failure a breaker leaves
///   the remote alone for [`retry_after`](RemoteConfig::retry_after), then
///   probes it. A remote that is down, slow, full or not Redis gives
///   misses and counted failed writes, with one warning.
/// - **Bounded.** Entries live [`ttl`](RemoteConfig::ttl) and are at most
///   [`max_entry_bytes`](RemoteConfig::max_entry_bytes).
/// - **Claims across machines** (P12): `SET NX PX` leases, renewed while
///   held, released by compare-and-delete on the holder's token.
///
/// ```no_run
/// use kiln_core::ArtifactStore;
/// use kiln_remote::{Keys, RemoteConfig, RemoteStore, keygen};
///
/// let keys = Keys { fleet: Some(keygen::fleet_key()?), ..Keys::default() };
/// let store = RemoteStore::open(RemoteConfig::new("redis://127.0.0.1:6379", keys))?;
/// // Opening connects to nothing; a lookup asks, within the timeout.
/// println!("{:?}", store.statistics());
/// # Ok::<(), kiln_remote::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct RemoteStore {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) config: RemoteConfig,
    pub(crate) remote: Remote,
    pub(crate) counters: Counters,
    generation: Generation,
    warned_unverified: AtomicBool,
    warned_oversize: AtomicBool,
    warned_nondeterministic: AtomicBool,
    /// The payload digest of the last artifact this store published under
    /// each key digest.
    published: Mutex<HashMap<[u8; 32], [u8; 32]>>,
    /// This machine's name, as a claim's value carries it for people:
    /// printable, without line breaks, at most [`HOST_LENGTH`] bytes.
    pub(crate) host: String,
    /// Verified leases of other holders seen, honoured until they run out.
    pub(crate) seen: crate::claim::Seen,
    /// The leases this store holds, renewed together.
    pub(crate) renewing: crate::renewal::Renewing,
}

impl RemoteStore {
    /// A store on the remote `config` names. Connects to nothing yet: the
    /// first call does, within the timeout.
    ///
    /// # Errors
    ///
    /// No key to sign or verify with ([`Error::NoKey`](crate::Error::NoKey)),
    /// or an address that cannot be understood.
    pub fn open(config: RemoteConfig) -> Result<Self> {
        config.keys.check()?;
        let remote = Remote::new(&config.url, config.timeout, config.retry_after)?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|host| printable_host(&host))
            .filter(|host| !host.is_empty())
            .unwrap_or_else(|| "unknown host".to_owned());
        Ok(Self {
            inner: Arc::new(Inner {
                host,
                config,
                remote,
                counters: Counters::default(),
                generation: Generation::fresh(),
                warned_unverified: AtomicBool::new(false),
                warned_oversize: AtomicBool::new(false),
                warned_nondeterministic: AtomicBool::new(false),
                published: Mutex::new(HashMap::new()),
                seen: crate::claim::Seen::default(),
                renewing: crate::renewal::Renewing::default(),
            }),
        })
    }

    /// The store `KILN_REMOTE_*` describes, or `None` when `KILN_REMOTE_URL`
    /// is not set.
    ///
    /// ```
    /// // With no KILN_REMOTE_URL there is no remote tier.
    /// # if std::env::var_os("KILN_REMOTE_URL").is_none() {
    /// assert!(kiln_remote::RemoteStore::from_env()?.is_none());
    /// # }
    /// # Ok::<(), kiln_remote::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`RemoteConfig::from_env`] and [`open`](Self::open).
    pub fn from_env() -> Result<Option<Self>> {
        RemoteConfig::from_env()?.map(Self::open).transpose()
    }

    /// Connects to the remote on a thread of its own, so that the first
    /// lookup finds a connection ready instead of paying for one on the
    /// launch path (a process's warm start); returns at once. A remote that
    /// cannot be reached is counted and its breaker opened, as for a call.
    pub fn connect_in_background(&self) {
        let store = self.clone();
        let started = std::thread::Builder::new()
            .name("kiln-remote-connect".into())
            .spawn(move || store.inner.remote.prepare(&store.inner.counters));
        // Without a thread the first call connects, as it would anyway.
        drop(started);
    }

    /// The settings the store was opened with.
    pub fn config(&self) -> &RemoteConfig {
        &self.inner.config
    }

    /// Whether this node writes the remote: not read-only, and holding a
    /// key that signs. A node that does not never writes, removes or
    /// claims.
    pub fn writes(&self) -> bool {
        self.inner.config.writes()
    }

    /// Everything counted since the store was opened, the breaker's state
    /// included.
    pub fn remote_statistics(&self) -> RemoteStatistics {
        self.inner
            .counters
            .snapshot(self.inner.remote.breaker.is_open())
    }

    /// Whether the remote answers a `PING` now (within the timeout, and
    /// unless the breaker is open).
    pub fn is_reachable(&self) -> bool {
        self.inner
            .remote
            .call(&self.inner.counters, move |link| {
                link.query::<String>(&cmd("PING"))
            })
            .is_some()
    }

    /// The Redis key an artifact stored under `key` lives at:
    /// the prefix, `e:` and the key's digest in hex. The same on every
    /// machine and in every process, whatever its rank or device.
    pub fn entry_key(&self, key: &StoreKey) -> String {
        self.redis_key("e", &key.digest())
    }

    pub(crate) fn redis_key(&self, space: &str, digest: &[u8; 32]) -> String {
        format!("{}{space}:{}", self.inner.config.prefix, hex(digest))
    }

    fn history_id(key: &StoreKey) -> Option<[u8; 32]> {
        let KeySubject::Kernel { name, digest } = &key.subject else {
            return None;
        };
        let mut hasher = blake3::Hasher::new_derive_key(HISTORY_CONTEXT);
        hasher.update(&(name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        hasher.update(&digest.to_le_bytes());
        Some(*hasher.finalize().as_bytes())
    }

    fn set(&self, redis_key: String, value: Vec<u8>) -> Cmd {
        let mut command = cmd("SET");
        let ttl = u64::try_from(self.inner.config.ttl.as_millis()).unwrap_or(u64::MAX);
        command.arg(redis_key).arg(value).arg("PX").arg(ttl.max(1));
        command
    }

    /// Answers one fetched value of `kind` for `subject`, counting it.
    fn answer(&self, kind: Kind, subject: &[u8; 32], value: Option<Vec<u8>>) -> Lookup<Vec<u8>> {
        self.answer_counted(kind, subject, value, true)
    }

    /// Answers one fetched value; a value read ahead of being asked for
    /// (`counted` false) is not counted as a hit or a miss, and a refusal
    /// always is.
    fn answer_counted(
        &self,
        kind: Kind,
        subject: &[u8; 32],
        value: Option<Vec<u8>>,
        counted: bool,
    ) -> Lookup<Vec<u8>> {
        let counters = &self.inner.counters;
        let Some(value) = value else {
            if counted {
                bump(&counters.absent);
            }
            return Lookup::Miss(Miss::Absent);
        };
        match entry::open(&self.inner.config.keys, kind, subject, &value) {
            Ok(verified) => {
                if counted {
                    bump(&counters.hits);
                    add(&counters.bytes_read, verified.payload.len() as u64);
                }
                Lookup::Hit {
                    bytes: verified.payload.len() as u64,
                    artifact: verified.payload,
                    work: if kind == Kind::Blob {
                        Duration::ZERO
                    } else {
                        verified.work
                    },
                }
            }
            Err(rejection) => {
                bump(&counters.unverified);
                let detail = rejection.detail();
                if !self.inner.warned_unverified.swap(true, Ordering::Relaxed) {
                    log::warn!(
                        "kiln: an entry of the remote store was refused ({detail}); it is never \
                         loaded, the kernel compiles here instead, and refusals are counted"
                    );
                }
                if rejection == Rejection::ForeignKey {
                    bump(&counters.foreign);
                    Lookup::Miss(Miss::ForeignKey { detail })
                } else {
                    bump(&counters.corrupt);
                    Lookup::Miss(Miss::Corrupt { detail })
                }
            }
        }
    }

    fn unreachable_misses(&self, count: usize) -> Vec<Lookup<Vec<u8>>> {
        add(&self.inner.counters.unreadable, count as u64);
        (0..count)
            .map(|_| {
                Lookup::Miss(Miss::Unreadable {
                    detail: "the remote store did not answer".to_owned(),
                })
            })
            .collect()
    }

    /// Sends `commands` (whole entries) in one round trip, or counts why
    /// it did not; gives the replies of a write that went through.
    fn write(
        &self,
        commands: Vec<Cmd>,
        written: u64,
        artifact_bytes: u64,
    ) -> (StoreOutcome, Vec<Value>) {
        let counters = &self.inner.counters;
        let sent = self
            .inner
            .remote
            .call(counters, move |link| link.pipeline::<Vec<Value>>(commands));
        match sent {
            Some(replies) => {
                bump(&counters.puts);
                add(&counters.bytes_written, written);
                let stored = StoreOutcome::Stored {
                    bytes: artifact_bytes,
                };
                (stored, replies)
            }
            None => {
                bump(&counters.put_failures);
                let failed = StoreOutcome::Failed {
                    detail: "the remote store did not take the write (unreachable, slow, full or \
                             refusing)"
                        .to_owned(),
                };
                (failed, Vec::new())
            }
        }
    }

    /// The command that writes an artifact entry unless the key holds
    /// another publisher's different bytes (`PUBLISH`).
    fn publish(&self, redis_key: &str, value: &[u8], payload_length: usize) -> Cmd {
        let mut command = cmd("EVAL");
        let ttl = u64::try_from(self.inner.config.ttl.as_millis()).unwrap_or(u64::MAX);
        command
            .arg(PUBLISH)
            .arg(1)
            .arg(redis_key)
            .arg(value)
            .arg(ttl.max(1))
            .arg(payload_length);
        command
    }

    /// Settles a publish the remote refused because the key holds other
    /// bytes: `true` when this store's value was written after all (the
    /// entry there does not verify, or is this store's own earlier put),
    /// `false` when another publisher's verified entry stays, counted and
    /// warned about once as a nondeterministic compile.
    fn settle_difference(&self, publish: &Publish, payload_digest: &[u8; 32]) -> bool {
        let inner = &self.inner;
        let limit = self.inner.config.max_entry_bytes;
        let Some(found) = self.read_values(&[("e", publish.subject)], limit) else {
            return false;
        };
        let found = match found.into_iter().next() {
            Some(Read::Value(value)) => Some(value),
            // Gone since: a plain write.
            Some(Read::Absent) => None,
            // Over the limit: nothing kiln would write or read.
            Some(Read::Longer(_)) | None => None,
        };
        let opened = found.as_deref().map(|value| {
            (
                value,
                entry::open(&inner.config.keys, Kind::Artifact, &publish.subject, value),
            )
        });
        let theirs = match opened {
            Some((_, Ok(verified))) => Some(*blake3::hash(&verified.payload).as_bytes()),
            Some((value, Err(Rejection::Unverified(_)))) => {
                // Another key's entry, or a forgery this node cannot tell
                // from one: kept until its time has run out, so that a node
                // with the wrong key never wipes the fleet's cache.
                let stale = entry::stored_at_unverified(value).is_none_or(|stored_at| {
                    let ttl = self.inner.config.ttl.as_secs();
                    stored_at.saturating_add(ttl).saturating_add(FOREIGN_SLACK) < now()
                        || stored_at > now().saturating_add(FOREIGN_SLACK)
                });
                if !stale {
                    bump(&inner.counters.kept_unverifiable);
                    return false;
                }
                None
            }
            // Not an entry, or written for another key: replaced.
            Some((_, Err(_))) | None => None,
        };
        let is_ours = theirs.is_some_and(|theirs| {
            inner
                .published
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&publish.subject)
                == Some(&theirs)
        });
        if theirs.is_none() || is_ours || theirs == Some(*payload_digest) {
            // Nothing there that verifies, or what is there is this store's
            // own: a plain write, as for any other put.
            let command = self.set(publish.redis_key.clone(), publish.value.clone());
            return inner
                .remote
                .call(&inner.counters, move |link| link.query::<()>(&command))
                .is_some();
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

    /// The command that reads the value at `redis_key` with [`READ`], at
    /// most `limit` bytes of it.
    pub(crate) fn read_command(redis_key: &str, limit: u64) -> Cmd {
        let mut command = cmd("EVAL");
        command.arg(READ).arg(1).arg(redis_key).arg(limit);
        command
    }

    /// What a reply to [`read_command`](Self::read_command) says.
    fn read_reply(value: Value) -> Read {
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

    /// Reads the values of `subjects` (each in its space) with [`READ`],
    /// each at most `limit` bytes, in one round trip; `None` when the
    /// remote did not answer.
    fn read_values(&self, subjects: &[(&str, [u8; 32])], limit: u64) -> Option<Vec<Read>> {
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
    fn lookup_subjects_counting(
        &self,
        subjects: &[(Kind, [u8; 32])],
        counted: usize,
    ) -> Vec<Lookup<Vec<u8>>> {
        let limit = self.inner.config.max_entry_bytes;
        let share = (BATCH_BYTES / subjects.len().max(1) as u64)
            .max(FIRST_ROUND_FLOOR)
            .min(limit);
        let spaced: Vec<(&str, [u8; 32])> = subjects
            .iter()
            .map(|(kind, subject)| (kind.space(), *subject))
            .collect();
        let Some(mut read) = self.read_values(&spaced, share) else {
            return self.unreachable_misses(subjects.len());
        };
        let mut budget = BATCH_BYTES.saturating_sub(
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
                None => return self.unreachable_misses(subjects.len()),
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
    fn too_long(&self, length: u64, limit: u64) -> Lookup<Vec<u8>> {
        bump(&self.inner.counters.oversize_reads);
        if length > limit {
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
                    "a remote entry of {length} bytes did not fit in what one batch reads \
                     ({BATCH_BYTES} bytes); a later batch reads it"
                ),
            })
        }
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

    /// Seals an entry, or says why it will not be written.
    fn sealed(
        &self,
        kind: Kind,
        subject: &[u8; 32],
        stored_at: u64,
        work: Duration,
        payload: &[u8],
    ) -> std::result::Result<Vec<u8>, StoreOutcome> {
        let counters = &self.inner.counters;
        if !self.writes() {
            bump(&counters.writes_skipped);
            return Err(StoreOutcome::Skipped);
        }
        let Some(value) = entry::seal(
            &self.inner.config.keys,
            kind,
            subject,
            stored_at,
            work,
            payload,
        ) else {
            bump(&counters.writes_skipped);
            return Err(StoreOutcome::Skipped);
        };
        let limit = self.inner.config.max_entry_bytes;
        if value.len() as u64 > limit {
            bump(&counters.oversize);
            bump(&counters.put_failures);
            let detail = format!(
                "an entry of {} bytes is over the remote's limit of {limit} bytes \
                 (KILN_REMOTE_MAX_ENTRY)",
                value.len()
            );
            if !self.inner.warned_oversize.swap(true, Ordering::Relaxed) {
                log::warn!("kiln: {detail}; it stays in the local store only");
            }
            return Err(StoreOutcome::Failed { detail });
        }
        Ok(value)
    }
}

/// One artifact to publish ([`RemoteStore::put_many`]).
pub(crate) struct Put<'a> {
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
    pub(crate) fn put_many(&self, puts: &[Put<'_>], after: Vec<Cmd>) -> Vec<StoreOutcome> {
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
        put: &Put<'_>,
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
                sealed
                    .commands
                    .push(self.publish(&redis_key, &value, payload.len()));
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
    fn settle(&self, put: &Put<'_>, publishes: Vec<Publish>, replies: &[Value]) -> StoreOutcome {
        let payload_digest = *blake3::hash(put.bytes).as_bytes();
        let mut kept_another = false;
        for publish in publishes {
            match publishes_reply(replies, publish.index) {
                // Written new: this store's from now on.
                Some(0) => self.remember(publish.subject, payload_digest),
                // Other bytes were there.
                Some(2) => {
                    if self.settle_difference(&publish, &payload_digest) {
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

/// The longest host name a claim's value carries.
const HOST_LENGTH: usize = 255;

/// `host` trimmed, its control characters (and the invisible ones that
/// reorder or hide text) dropped, cut to [`HOST_LENGTH`] bytes: what a
/// claim's value may carry of it, and what is shown of another machine's.
pub(crate) fn printable_host(host: &str) -> String {
    let mut printable = String::new();
    for character in host
        .trim()
        .chars()
        .filter(|character| !kiln_core::loader::is_hidden(*character))
    {
        if printable.len() + character.len_utf8() > HOST_LENGTH {
            break;
        }
        printable.push(character);
    }
    printable
}

/// The integer reply of `PUBLISH` at `index` of `replies`.
fn publishes_reply(replies: &[Value], index: usize) -> Option<i64> {
    match replies.get(index) {
        Some(Value::Int(reply)) => Some(*reply),
        _ => None,
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

impl ArtifactStore for RemoteStore {
    fn lookup(&self, key: &StoreKey) -> Lookup<Vec<u8>> {
        self.lookup_many(std::slice::from_ref(key))
            .pop()
            .expect("one answer per key")
    }

    fn lookup_many(&self, keys: &[StoreKey]) -> Vec<Lookup<Vec<u8>>> {
        if keys.is_empty() {
            return Vec::new();
        }
        let subjects: Vec<(Kind, [u8; 32])> = keys
            .iter()
            .map(|key| (Kind::Artifact, key.digest()))
            .collect();
        self.lookup_subjects(&subjects)
    }

    fn claim(&self, key: &StoreKey, wait: ClaimWait) -> Claim {
        crate::claim::claim(self, key, wait)
    }

    fn claim_timeout(&self) -> Duration {
        self.inner.config.claim_timeout
    }

    fn holder(&self, key: &StoreKey) -> Option<String> {
        crate::claim::holder(self, key)
    }

    fn put(
        &self,
        key: &StoreKey,
        source_key: Option<&StoreKey>,
        bytes: &[u8],
        work: Duration,
    ) -> StoreOutcome {
        self.put_many(
            &[Put {
                key,
                source_key,
                bytes,
                work,
            }],
            Vec::new(),
        )
        .pop()
        .expect("one outcome per put")
    }

    fn remove(&self, key: &StoreKey) {
        if !self.writes() {
            return;
        }
        let mut command = cmd("DEL");
        command.arg(self.redis_key("e", &key.digest()));
        self.inner.remote.call(&self.inner.counters, move |link| {
            link.query::<i64>(&command)
        });
    }

    fn generation(&self) -> Generation {
        self.inner.generation.clone()
    }

    fn statistics(&self) -> StoreStatistics {
        self.remote_statistics().store
    }

    fn explain(&self, key: &StoreKey) -> Explanation {
        let digest = key.digest();
        let Some(history) = Self::history_id(key) else {
            return Explanation::NeverSeen;
        };
        let commands = [("e", digest), ("h", history)]
            .into_iter()
            .map(|(space, subject)| {
                let mut command = cmd("GET");
                command.arg(self.redis_key(space, &subject));
                command
            })
            .collect();
        let keys = &self.inner.config.keys;
        let Some(values) = self.inner.remote.call(&self.inner.counters, move |link| {
            link.pipeline::<Vec<Option<Vec<u8>>>>(commands)
        }) else {
            return Explanation::NeverSeen;
        };
        let mut values = values.into_iter();
        let (entry_value, history_value) = (values.next().flatten(), values.next().flatten());
        if let Some(verified) =
            entry_value.and_then(|value| entry::open(keys, Kind::Artifact, &digest, &value).ok())
        {
            return Explanation::Held {
                stored_at: verified.stored_at,
            };
        }
        let Some(verified) =
            history_value.and_then(|value| entry::open(keys, Kind::History, &history, &value).ok())
        else {
            return Explanation::NeverSeen;
        };
        let config = bincode::config::standard().with_limit::<HISTORY_LIMIT>();
        let Ok((stored, _)) =
            bincode::serde::decode_from_slice::<StoreKey, _>(&verified.payload, config)
        else {
            return Explanation::NeverSeen;
        };
        match stored.first_difference(key) {
            None => Explanation::Gone {
                stored_at: verified.stored_at,
            },
            Some(difference) => Explanation::Changed {
                difference,
                stored_at: verified.stored_at,
            },
        }
    }

    fn lookup_blob(&self, key: &BlobKey) -> Lookup<Vec<u8>> {
        self.lookup_subjects(&[(Kind::Blob, key.digest())])
            .pop()
            .expect("one answer per key")
    }

    fn put_blob(&self, key: &BlobKey, bytes: &[u8]) -> StoreOutcome {
        let digest = key.digest();
        match self.sealed(Kind::Blob, &digest, now(), Duration::ZERO, bytes) {
            Ok(value) => {
                let written = value.len() as u64;
                let command = self.set(self.redis_key("b", &digest), value);
                self.write(vec![command], written, bytes.len() as u64).0
            }
            Err(outcome) => outcome,
        }
    }
}
