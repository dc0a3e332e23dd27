//! [`RemoteStore`]: an [`ArtifactStore`] over Redis or Redis Cluster, one
//! signed, self-describing value per key (P10).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kiln_core::store::{BlobKey, Claim, ClaimWait, Explanation, KeySubject, hex};
use kiln_core::{ArtifactStore, Generation, Lookup, Miss, StoreKey, StoreOutcome, StoreStatistics};
use redis::{Cmd, cmd};

use crate::config::RemoteConfig;
use crate::entry::{self, Kind, Rejection};
use crate::error::Result;
use crate::link::Remote;
use crate::statistics::{Counters, RemoteStatistics, add, bump};

/// The context a kernel's history key is derived under.
const HISTORY_CONTEXT: &str = "kiln remote kernel history";

/// The most a history payload (one encoded key) may take to decode.
const HISTORY_LIMIT: usize = 1 << 20;

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
    /// Who this process is in a claim's token: host and process id.
    pub(crate) holder: String,
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
            .map(|host| host.trim().to_owned())
            .filter(|host| !host.is_empty())
            .unwrap_or_else(|| "unknown host".to_owned());
        Ok(Self {
            inner: Arc::new(Inner {
                holder: format!("{host} pid {}", std::process::id()),
                config,
                remote,
                counters: Counters::default(),
                generation: Generation::fresh(),
                warned_unverified: AtomicBool::new(false),
                warned_oversize: AtomicBool::new(false),
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
            .call(&self.inner.counters, |link| {
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
        let counters = &self.inner.counters;
        let Some(value) = value else {
            bump(&counters.absent);
            return Lookup::Miss(Miss::Absent);
        };
        match entry::open(&self.inner.config.keys, kind, subject, &value) {
            Ok(verified) => {
                bump(&counters.hits);
                add(&counters.bytes_read, verified.payload.len() as u64);
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
    /// it did not.
    fn write(&self, commands: Vec<Cmd>, written: u64, artifact_bytes: u64) -> StoreOutcome {
        let counters = &self.inner.counters;
        let sent = self
            .inner
            .remote
            .call(counters, |link| link.pipeline::<()>(commands));
        match sent {
            Some(()) => {
                bump(&counters.puts);
                add(&counters.bytes_written, written);
                StoreOutcome::Stored {
                    bytes: artifact_bytes,
                }
            }
            None => {
                bump(&counters.put_failures);
                StoreOutcome::Failed {
                    detail: "the remote store did not take the write (unreachable, slow, full or \
                             refusing)"
                        .to_owned(),
                }
            }
        }
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
        let digests: Vec<[u8; 32]> = keys.iter().map(StoreKey::digest).collect();
        let commands: Vec<Cmd> = digests
            .iter()
            .map(|digest| {
                let mut command = cmd("GET");
                command.arg(self.redis_key("e", digest));
                command
            })
            .collect();
        let fetched = self.inner.remote.call(&self.inner.counters, |link| {
            link.pipeline::<Vec<Option<Vec<u8>>>>(commands)
        });
        match fetched {
            Some(values) if values.len() == keys.len() => digests
                .iter()
                .zip(values)
                .map(|(digest, value)| self.answer(Kind::Artifact, digest, value))
                .collect(),
            _ => self.unreachable_misses(keys.len()),
        }
    }

    fn claim(&self, key: &StoreKey, wait: ClaimWait) -> Claim {
        crate::claim::claim(self, key, wait)
    }

    fn claim_timeout(&self) -> Duration {
        self.inner.config.claim_timeout
    }

    fn put(
        &self,
        key: &StoreKey,
        source_key: Option<&StoreKey>,
        bytes: &[u8],
        work: Duration,
    ) -> StoreOutcome {
        let stored_at = now();
        let digest = key.digest();
        let mut commands = Vec::with_capacity(3);
        let mut written = 0u64;
        let mut entries = vec![(Kind::Artifact, "e", digest, bytes.to_vec())];
        if let Some(source) = source_key {
            entries.push((Kind::Artifact, "e", source.digest(), bytes.to_vec()));
        }
        if let Some(history) = Self::history_id(key) {
            let encoded = bincode::serde::encode_to_vec(key, bincode::config::standard())
                .expect("a key is plain data and always serializes");
            entries.push((Kind::History, "h", history, encoded));
        }
        for (kind, space, subject, payload) in entries {
            match self.sealed(kind, &subject, stored_at, work, &payload) {
                Ok(value) => {
                    written += value.len() as u64;
                    commands.push(self.set(self.redis_key(space, &subject), value));
                }
                Err(outcome) => return outcome,
            }
        }
        self.write(commands, written, bytes.len() as u64)
    }

    fn remove(&self, key: &StoreKey) {
        if !self.writes() {
            return;
        }
        let mut command = cmd("DEL");
        command.arg(self.redis_key("e", &key.digest()));
        self.inner
            .remote
            .call(&self.inner.counters, |link| link.query::<i64>(&command));
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
        let Some(values) = self.inner.remote.call(&self.inner.counters, |link| {
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
        let digest = key.digest();
        let mut command = cmd("GET");
        command.arg(self.redis_key("b", &digest));
        match self.inner.remote.call(&self.inner.counters, |link| {
            link.query::<Option<Vec<u8>>>(&command)
        }) {
            Some(value) => self.answer(Kind::Blob, &digest, value),
            None => self.unreachable_misses(1).pop().expect("one answer"),
        }
    }

    fn put_blob(&self, key: &BlobKey, bytes: &[u8]) -> StoreOutcome {
        let digest = key.digest();
        match self.sealed(Kind::Blob, &digest, now(), Duration::ZERO, bytes) {
            Ok(value) => {
                let written = value.len() as u64;
                let command = self.set(self.redis_key("b", &digest), value);
                self.write(vec![command], written, bytes.len() as u64)
            }
            Err(outcome) => outcome,
        }
    }
}
