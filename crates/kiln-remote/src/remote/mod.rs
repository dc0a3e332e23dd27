//! [`RemoteStore`]: an [`ArtifactStore`] over Redis or Redis Cluster, one
//! signed, self-describing value per key (P10).

// A remote store's parts: its claims (and their renewals), its reads
// and its puts, each an `impl RemoteStore` of its own.
pub(crate) mod claim;
pub(crate) mod publish;
mod read;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kiln_engine::store::{
    BlobKey, Blobs, Claim, ClaimWait, Claims, Explanation, KeySubject, Records, StoreParts, hex,
};
use kiln_engine::{
    ArtifactStore, Generation, Lookup, Miss, Origin, Put, StoreKey, StoreOutcome, StoreStatistics,
};
use redis::{Cmd, Value, cmd};

use crate::config::RemoteConfig;
use crate::entry::{self, Kind, Rejection};
use crate::error::Result;
use crate::link::Remote;
use crate::statistics::{Counters, RemoteStatistics, add, bump};
use publish::Outgoing;

/// The context a kernel's history key is derived under.
const HISTORY_CONTEXT: &str = "kiln remote kernel history";

/// How often a key another holds is read again while the fleet's channel
/// is not heard.
const UNHEARD_POLL: Duration = Duration::from_millis(250);

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
///   reads every value in one pipeline (one per shard of a cluster), each
///   within the entry limit and the batch's byte budget.
/// - **Never in the way.** Every call is bounded by
///   [`timeout`](RemoteConfig::timeout); after a failure a breaker leaves
///   the remote alone for [`retry_after`](RemoteConfig::retry_after), then
///   probes it. A remote that is down, slow, full or not Redis gives
///   misses and counted failed writes, with one warning.
/// - **Bounded.** Entries live [`ttl`](RemoteConfig::ttl) and are at most
///   [`max_entry_bytes`](RemoteConfig::max_entry_bytes).
/// - **Claims across machines** (P12): leases authenticated like entries,
///   renewed together while held, let go by a signed release; a lease that
///   does not verify is written over, never waited for.
///
/// ```no_run
/// use kiln_engine::ArtifactStore;
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
    pub(crate) warned_slow: AtomicBool,
    pub(crate) warned_nondeterministic: AtomicBool,
    /// The payload digest of the last artifact this store published under
    /// each key digest.
    pub(crate) published: Mutex<HashMap<[u8; 32], [u8; 32]>>,
    /// This machine's name, as a claim's value carries it for people:
    /// printable, without line breaks, at most 255 bytes.
    pub(crate) host: String,
    /// Verified leases of other holders seen, honoured until they run out.
    pub(crate) seen: crate::lease::Seen,
    /// The leases this store holds, renewed together.
    pub(crate) renewing: claim::renewal::Renewing,
    /// The fleet's claims as announced, in the order every node hears them.
    pub(crate) announcements: crate::announce::Announcements,
}

impl RemoteStore {
    /// A store on the remote `config` names. Connects to nothing yet: the
    /// first call does, within the timeout.
    ///
    /// # Errors
    ///
    /// No key to sign or verify with ([`Error::NoKey`](crate::Error::NoKey)),
    /// an address that cannot be understood, or a `KILN_REMOTE_CA` that
    /// cannot be read ([`Error::Ca`](crate::Error::Ca)).
    pub fn open(config: RemoteConfig) -> Result<Self> {
        config.keys.check()?;
        let ca = config
            .ca_file
            .as_ref()
            .map(|path| {
                std::fs::read(path).map_err(|error| crate::Error::Ca {
                    problem: format!("{}: {error}", path.display()),
                })
            })
            .transpose()?;
        let remote = Remote::new(
            &config.url,
            ca.as_deref(),
            config.timeout,
            config.retry_after,
        )?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|host| crate::lease::printable_host(&host))
            .filter(|host| !host.is_empty())
            .unwrap_or_else(|| "unknown host".to_owned());
        let announcements = crate::announce::Announcements::new(
            format!("{}claims", config.prefix),
            remote.listen_at.clone(),
            ca.as_deref(),
            config.keys.clone(),
            config.lease,
            config.timeout,
        );
        let inner = Arc::new(Inner {
            announcements,
            host,
            config,
            remote,
            counters: Counters::default(),
            generation: Generation::fresh(),
            warned_unverified: AtomicBool::new(false),
            warned_oversize: AtomicBool::new(false),
            warned_slow: AtomicBool::new(false),
            warned_nondeterministic: AtomicBool::new(false),
            published: Mutex::new(HashMap::new()),
            seen: crate::lease::Seen::default(),
            renewing: claim::renewal::Renewing::default(),
        });
        let store = Arc::downgrade(&inner);
        inner.announcements.on_hello(move || {
            if let Some(inner) = store.upgrade() {
                claim::renewal::renew_soon(&inner);
            }
        });
        Ok(Self { inner })
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
        self.inner.counters.snapshot(
            self.inner.remote.breaker.is_open(),
            self.inner.remote.commands(),
        )
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

    /// Whether a verified holder other than this node still holds the
    /// claim of `subject`, by what this node heard (the fleet's channel:
    /// renewals keep it, a release ends it) or judged (a lease read, until
    /// its word or its key runs out, unless heard let go): no round trip.
    pub(crate) fn still_held(&self, subject: &[u8; 32]) -> bool {
        let announcements = &self.inner.announcements;
        if announcements.holder(subject).is_some() {
            return true;
        }
        self.inner
            .seen
            .honoured(subject)
            .is_some_and(|token| !announcements.was_freed(&token))
    }

    /// How long a key another holds may go without being read again while
    /// nothing is heard of it: half a lease while the fleet's channel is
    /// heard (a release or a lease run out is heard or known sooner), a
    /// short poll while it is not.
    pub(crate) fn recheck_period(&self) -> Duration {
        if self.inner.announcements.listening() {
            self.inner.config.lease / 2
        } else {
            UNHEARD_POLL
        }
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

    pub(crate) fn history_id(key: &StoreKey) -> Option<[u8; 32]> {
        let KeySubject::Kernel { name, digest } = &key.subject else {
            return None;
        };
        let mut hasher = blake3::Hasher::new_derive_key(HISTORY_CONTEXT);
        hasher.update(&(name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        hasher.update(&digest.to_le_bytes());
        Some(*hasher.finalize().as_bytes())
    }

    pub(crate) fn set(&self, redis_key: String, value: Vec<u8>) -> Cmd {
        let mut command = cmd("SET");
        let ttl = u64::try_from(self.inner.config.ttl.as_millis()).unwrap_or(u64::MAX);
        command.arg(redis_key).arg(value).arg("PX").arg(ttl.max(1));
        command
    }

    /// Answers one fetched value of `kind` for `subject`, counting it.
    pub(crate) fn answer(
        &self,
        kind: Kind,
        subject: &[u8; 32],
        value: Option<Vec<u8>>,
    ) -> Lookup<Vec<u8>> {
        self.answer_counted(kind, subject, value, true)
    }

    /// Answers one fetched value; a value read ahead of being asked for
    /// (`counted` false) is not counted as a hit or a miss, and a refusal
    /// always is.
    pub(crate) fn answer_counted(
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

    pub(crate) fn unreachable_misses(&self, count: usize) -> Vec<Lookup<Vec<u8>>> {
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
    pub(crate) fn write(
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

    /// Seals an entry, or says why it will not be written.
    pub(crate) fn sealed(
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

pub(crate) fn now() -> u64 {
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

    fn put_many(&self, puts: &[Put<'_>]) -> Vec<StoreOutcome> {
        // One round trip for them all; a copy and a rekeyed kernel under
        // their own keys only, a compile under its text's too.
        let outgoing: Vec<Outgoing<'_>> = puts
            .iter()
            .map(|put| Outgoing {
                key: put.key,
                source_key: match put.origin {
                    Origin::Compiled { source_key } => source_key,
                    Origin::Rekeyed { .. } | Origin::Copied => None,
                },
                bytes: put.bytes,
                work: put.work,
            })
            .collect();
        if outgoing.is_empty() {
            return Vec::new();
        }
        self.publish_all(&outgoing, Vec::new())
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

    fn parts(&self) -> StoreParts<'_> {
        StoreParts {
            claims: Some(self),
            blobs: Some(self),
            records: Some(self),
            groups: None,
        }
    }
}

impl Claims for RemoteStore {
    fn claim(&self, key: &StoreKey, wait: ClaimWait) -> Claim {
        self.claim_lease(key, wait)
    }

    fn claim_timeout(&self) -> Duration {
        self.inner.config.claim_timeout
    }

    fn holder(&self, key: &StoreKey) -> Option<String> {
        self.lease_holder(key)
    }
}

impl Records for RemoteStore {
    fn explain(&self, key: &StoreKey) -> Explanation {
        let digest = key.digest();
        let Some(history) = Self::history_id(key) else {
            return Explanation::NeverSeen;
        };
        let keys = &self.inner.config.keys;
        // Read as a lookup reads: a long value in pieces, none over the
        // entry limit.
        let limit = self.inner.config.max_entry_bytes;
        let Some(values) = self.read_values(&[("e", digest), ("h", history)], limit) else {
            return Explanation::NeverSeen;
        };
        let mut values = values.into_iter().map(|read| match read {
            read::Read::Value(value) => Some(value),
            read::Read::Absent | read::Read::Longer(_) => None,
        });
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
}

impl Blobs for RemoteStore {
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
