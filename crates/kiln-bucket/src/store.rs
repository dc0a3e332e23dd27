//! [`BucketStore`]: an [`ArtifactStore`] over an S3 bucket, one signed,
//! self-describing object per key (P10, P16).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kiln_engine::store::{BlobKey, Explanation, KeySubject, StoreCounters, hex};
use kiln_engine::{
    ArtifactStore, Generation, Lookup, Miss, StoreKey, StoreOutcome, StoreStatistics,
};
use kiln_remote::breaker::{Breaker, Permit};
use kiln_remote::entry::{self, Kind, Rejection};

use crate::client::workers::Workers;
use crate::client::{Answer, Client, concurrently};
use crate::config::BucketConfig;
use crate::error::{Error, Result};

mod flight;
mod pack;
mod pack_get;
mod statistics;

/// A store on a loopback port where nothing listens: every GET fails at
/// once, and is counted (the unit tests' store).
#[cfg(test)]
fn nowhere() -> BucketStore {
    let keys = kiln_remote::Keys {
        fleet: Some(kiln_remote::keygen::fleet_key().expect("randomness")),
        ..kiln_remote::Keys::default()
    };
    let endpoint = url::Url::parse("http://127.0.0.1:9").expect("a URL");
    BucketStore::open(crate::config::BucketConfig::new(
        endpoint,
        "kiln-test",
        keys,
    ))
    .expect("it opens")
}

use flight::Flight;

pub(crate) use pack::{PackWrite, Seen};
pub(crate) use pack_get::PackGet;
pub use statistics::BucketStatistics;
use statistics::MoreCounters;

/// What a lookup answers.
type Found = Lookup<Vec<u8>>;

/// The context a kernel's history object name is derived under: the same
/// as the Redis tier's, so both name a kernel's history alike.
const HISTORY_CONTEXT: &str = "kiln remote kernel history";

/// The most a history payload (one encoded key) may take to decode.
const HISTORY_LIMIT: usize = 1 << 20;

/// A store in an S3 bucket, shared by every machine of a fleet (P16).
///
/// - **Signed entries.** Every object is the Redis tier's entry: an
///   authenticator (keyed BLAKE3 with the fleet key, or a builder's
///   Ed25519 signature) over the key it was written for and its bytes. An
///   object that does not verify (forged, cut short, flipped, another
///   key's entry copied over it) is a counted miss, logged once, never
///   returned: a bucket anyone can write never makes a node load a forged
///   or damaged kernel. Without a key the store does not open.
/// - **Names from keys.** An object's name is the BLAKE3 digest of its
///   whole key (under the configured prefix): no rank, device, path or
///   host, so every node with the same inputs asks for the same object.
/// - **Create-once puts.** An artifact is written with `If-None-Match: *`:
///   where the server honours it (AWS S3), the first publish of a key
///   wins and a second node's other bytes are counted, never written over
///   it; where it does not (Garage), the later put replaces an entry of
///   the same key, and correctness rests on the names and the verification
///   alone.
/// - **A batch's lookups together.** [`lookup_many`](ArtifactStore::lookup_many)
///   sends its GETs at once, at most [`concurrency`](BucketConfig::concurrency)
///   in flight, all under one deadline: a batch costs about one round
///   trip, not one per kernel.
/// - **Never in the way.** Every call ends by
///   [`timeout`](BucketConfig::timeout), its requests together; after a
///   failed call (no answer, a broken connection, 5xx, throttling, a
///   refusal) a breaker leaves the bucket alone for
///   [`retry_after`](BucketConfig::retry_after), then probes it, with one
///   warning per outage.
/// - **No claims.** A bucket has no lease: claims stay with the stores in
///   front of it (the disk store's across the processes of a machine,
///   Redis's across machines); a bucket alone leaves each machine to
///   compile what no other has published yet.
#[derive(Clone, Debug)]
pub struct BucketStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: BucketConfig,
    client: Client,
    /// The threads that send GETs, kept between calls.
    workers: Arc<Workers>,
    breaker: Breaker,
    counters: StoreCounters,
    more: MoreCounters,
    generation: Generation,
    warned_unverified: AtomicBool,
    warned_oversize: AtomicBool,
    warned_nondeterministic: AtomicBool,
    /// The payload digest of the last artifact this store published under
    /// each key digest: its own earlier entry, which a put may replace.
    published: Mutex<HashMap<[u8; 32], [u8; 32]>>,
}

/// One artifact to publish: under its key, its source's key, and the
/// kernel's history.
pub(crate) struct Put<'a> {
    pub key: &'a StoreKey,
    pub source_key: Option<&'a StoreKey>,
    pub bytes: &'a [u8],
    pub work: Duration,
    /// Whether it is a compile's (with a history) rather than a copy.
    pub with_history: bool,
}

/// One object of a put.
struct Request {
    put: usize,
    kind: Kind,
    subject: [u8; 32],
    object: String,
    value: Vec<u8>,
    payload_digest: [u8; 32],
}

impl BucketStore {
    /// A store on the bucket `config` names. Sends nothing yet.
    ///
    /// # Errors
    ///
    /// No key to sign or verify with, or an endpoint that cannot address
    /// the bucket.
    pub fn open(config: BucketConfig) -> Result<Self> {
        if !config.keys.can_write() && config.keys.trusted.is_empty() {
            return Err(Error::Remote(kiln_remote::Error::NoKey));
        }
        let client = Client::new(&config).map_err(|problem| Error::Address {
            address: config.endpoint.to_string(),
            problem,
        })?;
        Ok(Self {
            inner: Arc::new(Inner {
                breaker: Breaker::named("the bucket", config.retry_after),
                client,
                // A batch's lookup and the failure memories read beside it.
                workers: Workers::new(config.concurrency.saturating_mul(2).saturating_add(1)),
                config,
                counters: StoreCounters::default(),
                more: MoreCounters::default(),
                generation: Generation::fresh(),
                warned_unverified: AtomicBool::new(false),
                warned_oversize: AtomicBool::new(false),
                warned_nondeterministic: AtomicBool::new(false),
                published: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The store `KILN_REMOTE_URL` names when it is `s3://...`, with the
    /// keys and AWS variables of the environment; `None` when it names no
    /// bucket.
    ///
    /// # Errors
    ///
    /// As [`BucketConfig::from_env`] and [`open`](Self::open).
    pub fn from_env() -> Result<Option<Self>> {
        BucketConfig::from_env()?.map(Self::open).transpose()
    }

    /// Its settings.
    pub fn config(&self) -> &BucketConfig {
        &self.inner.config
    }

    fn writes(&self) -> bool {
        self.inner.config.writes()
    }

    /// The object name of `subject` in `kind`'s space.
    fn object(&self, kind: Kind, subject: &[u8; 32]) -> String {
        let space = match kind {
            Kind::Artifact => "e",
            Kind::Blob => "b",
            Kind::History => "h",
            Kind::Key => "k",
        };
        format!("{}{space}/{}", self.inner.config.prefix, hex(subject))
    }

    /// Sends one request per item at once, bounded, under one deadline;
    /// `None` when the breaker kept the call away. Updates the breaker and
    /// warns once when an outage begins.
    fn call<T: Sync>(
        &self,
        items: &[T],
        each: impl Fn(&T, Instant) -> Answer + Sync,
    ) -> Option<Vec<Answer>> {
        let (permit, deadline) = self.open_call(items.len())?;
        let limit = self.inner.config.concurrency;
        let answers = concurrently(items, limit, |item| each(item, deadline));
        self.close_call(permit, &answers);
        Some(answers)
    }

    /// GETs every one of `objects` in one call, as [`call`](Self::call)
    /// does, on the store's kept sending threads.
    fn call_gets(&self, objects: Vec<String>) -> Option<Vec<Answer>> {
        let (permit, deadline) = self.open_call(0)?;
        let answers = self.gets(objects, deadline);
        self.close_call(permit, &answers);
        Some(answers)
    }

    /// GETs every one of `objects` by `deadline`, at most
    /// [`concurrency`](BucketConfig::concurrency) at once, on the store's
    /// kept sending threads and this one, counting each request sent;
    /// answered in their order.
    pub(crate) fn gets(&self, objects: Vec<String>, deadline: Instant) -> Vec<Answer> {
        let helpers = self.inner.config.concurrency.min(objects.len());
        let flight = Arc::new(Flight::new(self.clone(), objects, deadline));
        flight
            .send_all(helpers)
            .into_iter()
            .map(|answer| {
                answer.unwrap_or_else(|| {
                    Answer::Failed("no answer within the call's time".to_owned())
                })
            })
            .collect()
    }

    /// Starts a call of `requests` requests (more may be counted as they
    /// are sent): its permit and deadline, or `None` when the breaker
    /// keeps it away.
    fn open_call(&self, requests: usize) -> Option<(Permit, Instant)> {
        let inner = &self.inner;
        let permit = inner.breaker.permit();
        if permit == Permit::Open {
            StoreCounters::add(&inner.more.skipped_while_open, 1);
            return None;
        }
        StoreCounters::add(&inner.more.calls, 1);
        StoreCounters::add(&inner.more.requests, requests as u64);
        Some((permit, Instant::now() + inner.config.timeout))
    }

    /// Ends a call by the answers it waited for: the breaker, and one
    /// warning when an outage begins.
    fn close_call<'a>(&self, permit: Permit, answers: impl IntoIterator<Item = &'a Answer>) {
        let inner = &self.inner;
        let failure = answers.into_iter().find_map(|answer| match answer {
            Answer::Failed(what) | Answer::Refused(what) => Some(what.clone()),
            _ => None,
        });
        let Some(what) = failure else {
            inner.breaker.succeeded_after(permit);
            return;
        };
        StoreCounters::add(&inner.more.failed_calls, 1);
        if inner.breaker.failed(permit) {
            StoreCounters::add(&inner.more.breaker_opened, 1);
            log::warn!(
                "kiln: the bucket {} did not answer in time or refused ({what}); kiln goes on \
                 with its local store and asks the bucket again in {:?}",
                inner.config.address(),
                inner.config.retry_after
            );
        }
    }

    /// The lookups of `keys` and of the named blobs `blobs` in one call:
    /// a batch's artifacts and the failure memories of those it may
    /// compile. Only the artifacts' answers are counted as lookups.
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
        let mut found = self.lookup_counting(&subjects, keys.len());
        let blobs = found.split_off(keys.len());
        (found, blobs)
    }

    /// Looks up each subject in its kind's space, counting each answer.
    fn lookup_subjects(&self, subjects: &[(Kind, [u8; 32])]) -> Vec<Lookup<Vec<u8>>> {
        self.lookup_counting(subjects, subjects.len())
    }

    /// Looks up each subject in its kind's space, counting the answers of
    /// the first `counted`.
    fn lookup_counting(
        &self,
        subjects: &[(Kind, [u8; 32])],
        counted: usize,
    ) -> Vec<Lookup<Vec<u8>>> {
        let objects: Vec<String> = subjects
            .iter()
            .map(|(kind, subject)| self.object(*kind, subject))
            .collect();
        let answers = self.call_gets(objects);
        let lookups: Vec<Lookup<Vec<u8>>> = match answers {
            None => subjects
                .iter()
                .map(|_| unreadable("the bucket is left alone after a failure"))
                .collect(),
            Some(answers) => subjects
                .iter()
                .zip(answers)
                .map(|((kind, subject), answer)| self.answer(*kind, subject, answer))
                .collect(),
        };
        for lookup in lookups.iter().take(counted) {
            self.inner.counters.count_lookup(lookup);
        }
        lookups
    }

    /// What one GET's answer is to the store.
    fn answer(&self, kind: Kind, subject: &[u8; 32], answer: Answer) -> Lookup<Vec<u8>> {
        match answer {
            Answer::Done(value) => {
                match entry::open(&self.inner.config.keys, kind, subject, &value) {
                    Ok(verified) => Lookup::Hit {
                        bytes: verified.payload.len() as u64,
                        artifact: verified.payload,
                        work: if kind == Kind::Blob {
                            Duration::ZERO
                        } else {
                            verified.work
                        },
                    },
                    Err(rejection) => self.refused(&rejection),
                }
            }
            Answer::Absent => Lookup::Miss(Miss::Absent),
            Answer::TooLong => {
                StoreCounters::add(&self.inner.more.oversize, 1);
                Lookup::Miss(Miss::Corrupt {
                    detail: format!(
                        "an object over the entry limit of {} bytes (KILN_REMOTE_MAX_ENTRY)",
                        self.inner.config.max_entry_bytes
                    ),
                })
            }
            Answer::Exists | Answer::Refused(_) | Answer::Failed(_) => {
                unreadable("the bucket did not answer in time, failed or refused")
            }
        }
    }

    /// A refused entry: counted, warned about once, never loaded.
    fn refused(&self, rejection: &Rejection) -> Lookup<Vec<u8>> {
        StoreCounters::add(&self.inner.more.unverified, 1);
        let detail = rejection.detail();
        if !self.inner.warned_unverified.swap(true, Ordering::Relaxed) {
            log::warn!(
                "kiln: an object of the bucket was refused ({detail}); it is never loaded, the \
                 kernel compiles here instead, and refusals are counted"
            );
        }
        if *rejection == Rejection::ForeignKey {
            Lookup::Miss(Miss::ForeignKey { detail })
        } else {
            Lookup::Miss(Miss::Corrupt { detail })
        }
    }

    /// The history object's subject of a kernel's key.
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

    /// Publishes each of `puts` (its key, its source's, its history) in
    /// one call, and answers each in their order.
    pub(crate) fn put_all(&self, puts: &[Put<'_>]) -> Vec<StoreOutcome> {
        let inner = &self.inner;
        let mut outcomes: Vec<Option<StoreOutcome>> = (0..puts.len()).map(|_| None).collect();
        if !self.writes() {
            StoreCounters::add(&inner.counters.writes_skipped, puts.len() as u64);
            return puts.iter().map(|_| StoreOutcome::Skipped).collect();
        }
        let stored_at = now();
        let mut requests = Vec::new();
        for (index, put) in puts.iter().enumerate() {
            match self.seal(index, put, stored_at) {
                Ok(mut sealed) => requests.append(&mut sealed),
                Err(outcome) => outcomes[index] = Some(outcome),
            }
        }
        let client = &inner.client;
        let answers = self.call(&requests, |request, deadline| {
            // Artifacts are written once; a history is the latest put's.
            let create_only = request.kind == Kind::Artifact;
            client.put(&request.object, &request.value, create_only, deadline)
        });
        let answers: Vec<Option<Answer>> = match answers {
            Some(answers) => answers.into_iter().map(Some).collect(),
            None => requests.iter().map(|_| None).collect(),
        };
        let mut written: Vec<u64> = vec![0; puts.len()];
        for (request, answer) in requests.iter().zip(answers) {
            let slot = &mut outcomes[request.put];
            if matches!(slot, Some(StoreOutcome::Failed { .. })) {
                continue;
            }
            let settled = match answer {
                Some(Answer::Done(_)) => {
                    if request.kind == Kind::Artifact {
                        self.remember(request.subject, request.payload_digest);
                    }
                    written[request.put] += request.value.len() as u64;
                    None
                }
                Some(Answer::Exists) => self.settle(request),
                // A history that did not land costs an explanation only.
                _ if request.kind == Kind::History => None,
                _ => Some(StoreOutcome::Failed {
                    detail: "the bucket did not take the write (unreachable, slow, throttling or \
                             refusing)"
                        .to_owned(),
                }),
            };
            if let Some(settled) = settled {
                *slot = Some(settled);
            }
        }
        outcomes
            .into_iter()
            .zip(puts)
            .zip(written)
            .map(|((outcome, put), written)| {
                let outcome = outcome.unwrap_or(StoreOutcome::Stored {
                    bytes: put.bytes.len() as u64,
                });
                match &outcome {
                    StoreOutcome::Stored { .. } => {
                        StoreCounters::add(&inner.counters.puts, 1);
                        StoreCounters::add(&inner.counters.bytes_written, written);
                    }
                    StoreOutcome::Failed { .. } => {
                        StoreCounters::add(&inner.counters.put_failures, 1);
                    }
                    StoreOutcome::Skipped => {}
                }
                outcome
            })
            .collect()
    }

    /// The objects of one put, sealed, or why it will not be written.
    fn seal(
        &self,
        index: usize,
        put: &Put<'_>,
        stored_at: u64,
    ) -> std::result::Result<Vec<Request>, StoreOutcome> {
        let encode = |key: &StoreKey| {
            bincode::serde::encode_to_vec(key, bincode::config::standard())
                .expect("a key is plain data and always serializes")
        };
        let mut entries = vec![(Kind::Artifact, put.key.digest(), put.bytes.to_vec())];
        if let Some(source) = put.source_key {
            entries.push((Kind::Artifact, source.digest(), put.bytes.to_vec()));
        }
        if put.with_history
            && let Some(history) = Self::history_id(put.key)
        {
            entries.push((Kind::History, history, encode(put.key)));
        }
        let payload_digest = *blake3::hash(put.bytes).as_bytes();
        let limit = self.inner.config.max_entry_bytes;
        let mut requests = Vec::with_capacity(entries.len());
        for (kind, subject, payload) in entries {
            let Some(value) = entry::seal(
                &self.inner.config.keys,
                kind,
                &subject,
                stored_at,
                put.work,
                &payload,
            ) else {
                StoreCounters::add(&self.inner.counters.writes_skipped, 1);
                return Err(StoreOutcome::Skipped);
            };
            if value.len() as u64 > limit {
                StoreCounters::add(&self.inner.more.oversize, 1);
                StoreCounters::add(&self.inner.counters.put_failures, 1);
                let detail = format!(
                    "an entry of {} bytes is over the bucket's limit of {limit} bytes \
                     (KILN_REMOTE_MAX_ENTRY)",
                    value.len()
                );
                if !self.inner.warned_oversize.swap(true, Ordering::Relaxed) {
                    log::warn!("kiln: {detail}; it stays in the local store only");
                }
                return Err(StoreOutcome::Failed { detail });
            }
            requests.push(Request {
                put: index,
                kind,
                subject,
                object: self.object(kind, &subject),
                value,
                payload_digest,
            });
        }
        Ok(requests)
    }

    fn remember(&self, subject: [u8; 32], payload_digest: [u8; 32]) {
        let mut published = self
            .inner
            .published
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Bounded: past this many, the oldest knowledge is dropped at
        // once, which costs at most a replace refused as another's.
        if published.len() >= 1 << 14 {
            published.clear();
        }
        published.insert(subject, payload_digest);
    }

    /// Settles a create-once put the bucket refused because the object
    /// exists: `None` when this store's bytes are there after all (the
    /// same bytes, or written over an entry that does not verify or is
    /// this store's own earlier put), else the outcome. Only what verifies
    /// is kept, as in the Redis tier: an object damaged, cut short or
    /// signed by a key this node does not trust is replaced, so one write
    /// without the key never ends sharing.
    fn settle(&self, request: &Request) -> Option<StoreOutcome> {
        let inner = &self.inner;
        let client = &inner.client;
        let object = [request.object.clone()];
        let found = self
            .call(&object, |object, deadline| client.get(object, deadline))
            .and_then(|mut answers| answers.pop());
        let replace = match found {
            Some(Answer::Done(value)) => {
                match entry::open(&inner.config.keys, Kind::Artifact, &request.subject, &value) {
                    Ok(verified) => {
                        let theirs = *blake3::hash(&verified.payload).as_bytes();
                        if theirs == request.payload_digest {
                            return None;
                        }
                        let ours = inner
                            .published
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .get(&request.subject)
                            == Some(&theirs);
                        if !ours {
                            StoreCounters::add(&inner.more.nondeterministic, 1);
                            if !inner.warned_nondeterministic.swap(true, Ordering::Relaxed) {
                                log::warn!(
                                    "kiln: the bucket holds other bytes for a kernel compiled \
                                     here (a compiler that is not deterministic); the first \
                                     publish stays, and this machine keeps its own copy locally"
                                );
                            }
                            return Some(StoreOutcome::Skipped);
                        }
                        true
                    }
                    Err(_) => true,
                }
            }
            Some(Answer::Absent | Answer::TooLong) => true,
            _ => false,
        };
        if !replace {
            return Some(StoreOutcome::Failed {
                detail: "the bucket did not answer while a put was settled".to_owned(),
            });
        }
        let written = self
            .call(std::slice::from_ref(request), |request, deadline| {
                client.put(&request.object, &request.value, false, deadline)
            })
            .and_then(|mut answers| answers.pop());
        match written {
            Some(Answer::Done(_)) => {
                self.remember(request.subject, request.payload_digest);
                None
            }
            _ => Some(StoreOutcome::Failed {
                detail: "the bucket did not take the write".to_owned(),
            }),
        }
    }
}

fn unreadable(detail: &str) -> Lookup<Vec<u8>> {
    Lookup::Miss(Miss::Unreadable {
        detail: detail.to_owned(),
    })
}

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

impl ArtifactStore for BucketStore {
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

    fn put_many(&self, puts: &[kiln_engine::Put<'_>]) -> Vec<StoreOutcome> {
        // A compile under its key and its text's, a rekeyed kernel under
        // its own with its history, a copy under its own alone.
        let puts: Vec<Put<'_>> = puts
            .iter()
            .map(|put| {
                let (source_key, with_history) = match put.origin {
                    kiln_engine::Origin::Compiled { source_key } => (source_key, true),
                    kiln_engine::Origin::Rekeyed { .. } => (None, true),
                    kiln_engine::Origin::Copied => (None, false),
                };
                Put {
                    key: put.key,
                    source_key,
                    bytes: put.bytes,
                    work: put.work,
                    with_history,
                }
            })
            .collect();
        self.put_all(&puts)
    }

    fn remove(&self, key: &StoreKey) {
        if !self.writes() {
            return;
        }
        let object = [self.object(Kind::Artifact, &key.digest())];
        let client = &self.inner.client;
        self.call(&object, |object, deadline| client.delete(object, deadline));
    }

    fn generation(&self) -> Generation {
        self.inner.generation.clone()
    }

    fn statistics(&self) -> StoreStatistics {
        self.inner.counters.snapshot()
    }

    fn parts(&self) -> kiln_engine::StoreParts<'_> {
        // A bucket has no lease: claims are the front's (BucketTier).
        kiln_engine::StoreParts {
            blobs: Some(self),
            records: Some(self),
            ..kiln_engine::StoreParts::default()
        }
    }
}

impl kiln_engine::Records for BucketStore {
    fn explain(&self, key: &StoreKey) -> Explanation {
        let digest = key.digest();
        let Some(history) = Self::history_id(key) else {
            return Explanation::NeverSeen;
        };
        let objects = [
            self.object(Kind::Artifact, &digest),
            self.object(Kind::History, &history),
        ];
        let client = &self.inner.client;
        let Some(mut answers) =
            self.call(&objects, |object, deadline| client.get(object, deadline))
        else {
            return Explanation::NeverSeen;
        };
        let keys = &self.inner.config.keys;
        let history_answer = answers.pop();
        if let Some(Answer::Done(value)) = answers.pop()
            && let Ok(verified) = entry::open(keys, Kind::Artifact, &digest, &value)
        {
            return Explanation::Held {
                stored_at: verified.stored_at,
            };
        }
        let Some(Answer::Done(value)) = history_answer else {
            return Explanation::NeverSeen;
        };
        let Ok(verified) = entry::open(keys, Kind::History, &history, &value) else {
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

impl kiln_engine::Blobs for BucketStore {
    fn lookup_blob(&self, key: &BlobKey) -> Lookup<Vec<u8>> {
        self.lookup_subjects(&[(Kind::Blob, key.digest())])
            .pop()
            .expect("one answer per key")
    }

    fn put_blob(&self, key: &BlobKey, bytes: &[u8]) -> StoreOutcome {
        let inner = &self.inner;
        if !self.writes() {
            StoreCounters::add(&inner.counters.writes_skipped, 1);
            return StoreOutcome::Skipped;
        }
        let digest = key.digest();
        let Some(value) = entry::seal(
            &inner.config.keys,
            Kind::Blob,
            &digest,
            now(),
            Duration::ZERO,
            bytes,
        ) else {
            StoreCounters::add(&inner.counters.writes_skipped, 1);
            return StoreOutcome::Skipped;
        };
        let object = [(self.object(Kind::Blob, &digest), value)];
        let client = &inner.client;
        // A blob is replaced by each put, as every store's is.
        let answer = self
            .call(&object, |(object, value), deadline| {
                client.put(object, value, false, deadline)
            })
            .and_then(|mut answers| answers.pop());
        if let Some(Answer::Done(_)) = answer {
            StoreCounters::add(&inner.counters.puts, 1);
            StoreCounters::add(&inner.counters.bytes_written, object[0].1.len() as u64);
            StoreOutcome::Stored {
                bytes: bytes.len() as u64,
            }
        } else {
            StoreCounters::add(&inner.counters.put_failures, 1);
            StoreOutcome::Failed {
                detail: "the bucket did not take the write".to_owned(),
            }
        }
    }
}
