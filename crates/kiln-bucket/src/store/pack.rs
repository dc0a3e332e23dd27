//! A [`BucketStore`]'s batch packs (`crate::pack`): a lookup read through
//! the pack of its batch beside or before the per-key objects, and a
//! pack written, created once, when a batch ends.

use std::sync::Arc;
use std::time::Duration;

use kiln_engine::store::{StoreCounters, hex};
use kiln_engine::{Lookup, StoreKey};
use kiln_remote::entry::{self, Kind, Rejection};

use super::flight::Flight;
use super::pack_get::PackGet;
use super::{BucketStore, Found, now, unreadable};
use crate::client::Answer;
use crate::config::PackOrder;
use crate::pack;

/// How long the pack's GET goes alone before the per-key GETs follow it
/// (`beside`), in waves that double every eighth of a head start from an
/// eighth of them: long enough for a bucket nearby (up to some 55 ms
/// away) to answer it first, so a warm batch costs one request and its
/// answer does not share the machine with needless GETs, and for its
/// request to reach a bucket far away before theirs; a pack that answers
/// soon after spares most of them, and a cold batch's lookup has 64
/// per-key GETs out within 82.5 ms, or at once when the pack answered
/// without its keys.
pub(crate) const HEAD_START: Duration = Duration::from_millis(60);

/// What a lookup learned of its batch's pack: whether one should be
/// written when the batch ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// No pack of the set: one is written.
    Absent,
    /// A pack was read. It is replaced when it was damaged (it did not
    /// open: a stranger's, cut, altered, another set's) or when the batch
    /// ends with more of the set's artifacts than it held.
    Found {
        /// Artifacts of the set it held.
        held: usize,
        /// Whether it was refused.
        damaged: bool,
    },
    /// The bucket did not answer for it: nothing is written.
    Unknown,
}

/// A pack to write: the set it answers and its keys' artifacts.
#[derive(Debug)]
pub(crate) struct PackWrite {
    pub(crate) set: [u8; 32],
    /// The set's key digests, sorted.
    pub(crate) sorted: Vec<[u8; 32]>,
    /// Each key digest with its artifact and the work it saved.
    pub(crate) entries: Vec<([u8; 32], Vec<u8>, Duration)>,
    /// Whether it replaces a pack read damaged or lacking (else it is
    /// created only where none is).
    pub(crate) replace: bool,
}

impl BucketStore {
    /// The object name of the pack of the key set `set`.
    fn pack_object(&self, set: &[u8; 32]) -> String {
        format!("{}p/{}", self.inner.config.prefix, hex(set))
    }

    /// The GET of the pack of the key set `set`, for
    /// [`lookup_packed`](Self::lookup_packed): sent now, on a sending
    /// thread, when `ahead` (the tier knows its lookup will read it),
    /// else by the lookup.
    pub(crate) fn pack_get_of(&self, set: &[u8; 32], ahead: bool) -> PackGet {
        self.pack_get(self.pack_object(set), ahead)
    }

    /// The lookups of `asked` (the keys a batch's first lookup of the set
    /// `set`, whose digests sorted are `sorted`, did not find in front),
    /// read through the set's pack as the settings order it; the pack
    /// verified as any object is, and every answer counted. `absent` is
    /// called once the bucket said it holds no pack of the set (a batch
    /// new to the fleet), while the per-key GETs are still under way,
    /// with how long to wait before sending more requests: a third of a
    /// round trip after the last per-key GET went out, so that the
    /// bucket answers those first.
    pub(crate) fn lookup_packed(
        &self,
        set: &[u8; 32],
        sorted: &[[u8; 32]],
        asked: &[StoreKey],
        get: PackGet,
        absent: &dyn Fn(Duration),
    ) -> (Vec<Found>, Seen) {
        let digests: Vec<[u8; 32]> = asked.iter().map(StoreKey::digest).collect();
        let objects: Vec<String> = digests
            .iter()
            .map(|digest| self.object(Kind::Artifact, digest))
            .collect();
        let (found, seen) = match self.inner.config.packs {
            PackOrder::Beside => self.pack_beside(set, sorted, &digests, objects, get, absent),
            PackOrder::First | PackOrder::Off => {
                self.pack_first(set, sorted, &digests, &objects, get)
            }
        };
        for lookup in &found {
            self.inner.counters.count_lookup(lookup);
        }
        (found, seen)
    }

    /// The pack's GET, then the per-key GETs for what it lacks, in one
    /// call under one deadline.
    fn pack_first(
        &self,
        set: &[u8; 32],
        sorted: &[[u8; 32]],
        digests: &[[u8; 32]],
        objects: &[String],
        get: PackGet,
    ) -> (Vec<Found>, Seen) {
        let Some((permit, deadline)) = get.call() else {
            return (left_alone(digests), Seen::Unknown);
        };
        let (answer, _) = get.answer();
        let (mut found, seen) = self.read_pack(&answer, set, sorted, digests);
        let lacking: Vec<usize> = (0..digests.len())
            .filter(|index| found[*index].is_none())
            .collect();
        let wanted: Vec<String> = lacking
            .iter()
            .map(|index| objects[*index].clone())
            .collect();
        let answers = self.gets(wanted, deadline);
        self.close_call(permit, answers.iter().chain(telling(&answer)));
        for (index, answer) in lacking.into_iter().zip(answers) {
            found[index] = Some(self.answer(Kind::Artifact, &digests[index], answer));
        }
        (settled(found), seen)
    }

    /// The pack's GET beside the per-key GETs, in one call: the per-key
    /// GETs go all at once when the pack answered without every key, or
    /// in waves from [`HEAD_START`] without an answer; the call is answered once the pack
    /// covered every key (per-key GETs under way are left to end by
    /// themselves) or every GET needed answered.
    fn pack_beside(
        &self,
        set: &[u8; 32],
        sorted: &[[u8; 32]],
        digests: &[[u8; 32]],
        objects: Vec<String>,
        get: PackGet,
        absent: &dyn Fn(Duration),
    ) -> (Vec<Found>, Seen) {
        let Some((permit, deadline)) = get.call() else {
            return (left_alone(digests), Seen::Unknown);
        };
        let flight = Arc::new(Flight::new(self.clone(), objects, deadline));
        // The pack's request goes first (on this thread, unless it went
        // ahead beside the front's lookup); the per-key ones a head start
        // after it, on the store's sending threads, which end them after
        // this call if the pack answers everything.
        let helpers = self.inner.config.concurrency.min(flight.len());
        let sent = get.sent;
        Arc::clone(&flight).hedge(sent, HEAD_START, helpers);
        let (answer, round_trip) = get.answer();
        // When this thread learned the pack's answer (later than its
        // round trip when it went ahead and answered before its reader).
        let learned = sent.elapsed();
        let (mut found, seen) = self.read_pack(&answer, set, sorted, digests);
        let lacking: Vec<usize> = (0..digests.len())
            .filter(|index| found[*index].is_none())
            .collect();
        if lacking.is_empty() {
            flight.close();
            self.close_call(permit, [&answer]);
        } else {
            flight.open();
            if seen == Seen::Absent {
                // Every per-key GET is out now, or was when the waves
                // ended.
                let all_out = learned.min(super::flight::all_released(flight.len(), HEAD_START));
                absent((all_out + round_trip / 3).saturating_sub(learned));
            }
            // This thread sends too.
            flight.work();
            let answers: Vec<Answer> = flight
                .wait(&lacking)
                .into_iter()
                .map(|answer| {
                    answer.unwrap_or_else(|| {
                        Answer::Failed("no answer within the call's time".to_owned())
                    })
                })
                .collect();
            self.close_call(permit, answers.iter().chain(telling(&answer)));
            for (index, answer) in lacking.into_iter().zip(answers) {
                found[index] = Some(self.answer(Kind::Artifact, &digests[index], answer));
            }
        }
        (settled(found), seen)
    }

    /// What the pack's GET `answer` gives each of `digests`: a verified
    /// hit, or `None` for a per-key GET to answer.
    fn read_pack(
        &self,
        answer: &Answer,
        set: &[u8; 32],
        sorted: &[[u8; 32]],
        digests: &[[u8; 32]],
    ) -> (Vec<Option<Found>>, Seen) {
        let mut found: Vec<Option<Found>> = digests.iter().map(|_| None).collect();
        let body = match answer {
            Answer::Done(body) => body,
            Answer::Absent => return (found, Seen::Absent),
            Answer::TooLong => {
                let seen = Seen::Found {
                    held: 0,
                    damaged: true,
                };
                return (found, seen);
            }
            Answer::Exists | Answer::Refused(_) | Answer::Failed(_) => {
                return (found, Seen::Unknown);
            }
        };
        let config = &self.inner.config;
        let damaged = Seen::Found {
            held: 0,
            damaged: true,
        };
        let payload = match entry::open(&config.keys, Kind::Blob, set, body) {
            Ok(verified) => verified.payload,
            Err(rejection) => {
                // Counted and warned about once, as any object's refusal.
                drop(self.refused(&rejection));
                return (found, damaged);
            }
        };
        let Some(packed) = pack::decode(&payload, sorted.len(), config.max_entry_bytes) else {
            drop(self.refused(&Rejection::Malformed("a batch pack that does not decode")));
            return (found, damaged);
        };
        StoreCounters::add(&self.inner.more.packs_read, 1);
        for (index, digest) in digests.iter().enumerate() {
            let Ok(place) = sorted.binary_search(digest) else {
                continue;
            };
            if let Some(Some(hit)) = packed.get(place) {
                StoreCounters::add(&self.inner.more.pack_hits, 1);
                found[index] = Some(Lookup::Hit {
                    bytes: hit.artifact.len() as u64,
                    artifact: hit.artifact.clone(),
                    work: hit.work,
                });
            }
        }
        let held = packed.iter().filter(|packed| packed.is_some()).count();
        let seen = Seen::Found {
            held,
            damaged: false,
        };
        (found, seen)
    }

    /// Writes `write` as its set's pack, in one call; `true` when the
    /// bucket took it or holds one already.
    pub(crate) fn put_pack(&self, write: &PackWrite) -> bool {
        let inner = &self.inner;
        if !self.writes() || write.entries.is_empty() {
            return false;
        }
        let Some(payload) = pack::encode(&write.sorted, &write.entries) else {
            return false;
        };
        let Some(body) = entry::seal(
            &inner.config.keys,
            Kind::Blob,
            &write.set,
            now(),
            Duration::ZERO,
            &payload,
        ) else {
            return false;
        };
        if body.len() as u64 > inner.config.max_entry_bytes {
            return false;
        }
        let object = [(self.pack_object(&write.set), body)];
        let client = &inner.client;
        // Created once, as an artifact's object is; a pack read damaged
        // or lacking is replaced.
        let create_only = !write.replace;
        let answer = self
            .call(&object, |(object, body), deadline| {
                client.put(object, body, create_only, deadline)
            })
            .and_then(|mut answers| answers.pop());
        match answer {
            Some(Answer::Done(_)) => {
                StoreCounters::add(&inner.more.packs_written, 1);
                true
            }
            Some(Answer::Exists) => true,
            _ => false,
        }
    }

    /// Deletes the pack of the set `set` (one of its keys was removed).
    pub(crate) fn remove_pack(&self, set: &[u8; 32]) {
        if !self.writes() {
            return;
        }
        let object = [self.pack_object(set)];
        let client = &self.inner.client;
        self.call(&object, |object, deadline| client.delete(object, deadline));
    }
}

/// The pack's answer, as the breaker hears it: a refusal of the pack
/// alone (a policy on its name) is no outage; the per-key GETs say
/// whether the bucket refuses this node.
pub(super) fn telling(answer: &Answer) -> Option<&Answer> {
    (!matches!(answer, Answer::Refused(_))).then_some(answer)
}

/// Every key's answer when the breaker kept the call away.
fn left_alone(digests: &[[u8; 32]]) -> Vec<Found> {
    digests
        .iter()
        .map(|_| unreadable("the bucket is left alone after a failure"))
        .collect()
}

/// Every answer, none left open.
fn settled(found: Vec<Option<Found>>) -> Vec<Found> {
    found
        .into_iter()
        .map(|found| found.unwrap_or_else(|| unreadable("the bucket gave no answer")))
        .collect()
}
