//! The batch packs of a [`BucketTier`]: the first lookup of a batch that
//! reaches the bucket reads the pack of its key set (`crate::pack`) with
//! or before its per-key GETs; when the bucket had no whole pack of it,
//! the entries of the set (the front's hits, the bucket's, and the
//! batch's puts) are gathered and, when the batch ends, written as the
//! set's pack from the writer's queue, off the launch path.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use kiln_engine::{Lookup, StoreKey};

use super::BucketTier;
use super::queue::{Job, Write};
use crate::config::PackOrder;
use crate::pack;
use crate::store::{PackGet, PackWrite, Seen};

/// How many packs this process read or wrote are remembered, so that a
/// removed key's packs are deleted with it.
const KNOWN_LIMIT: usize = 64;

/// What the bytes gathered for a pack cost beside its artifacts, per
/// entry (its header and authenticator, with room to spare).
const ENTRY_OVERHEAD: u64 = 256;

/// The batch's pack and the packs this process knows.
#[derive(Debug, Default)]
pub(super) struct Packing {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    stage: Stage,
    /// Packs read or written here, by set, with their members' digests.
    known: VecDeque<([u8; 32], HashSet<[u8; 32]>)>,
}

#[derive(Debug, Default)]
enum Stage {
    /// No lookup of this batch has reached the bucket.
    #[default]
    Waiting,
    /// The batch's pack is to be written when it ends: what it holds so
    /// far.
    Gathering(Gathered),
    /// Nothing to write for this batch.
    Settled,
}

#[derive(Debug)]
struct Gathered {
    set: [u8; 32],
    /// The set's key digests, sorted.
    sorted: Vec<[u8; 32]>,
    entries: HashMap<[u8; 32], (Vec<u8>, Duration)>,
    bytes: u64,
    /// The most bytes the pack may hold (the entry limit).
    limit: u64,
    /// The entries the pack read held; a pack is written only with more,
    /// or in place of a damaged one.
    held: usize,
    damaged: bool,
    /// Whether a pack of the set is in the bucket (it is replaced).
    replace: bool,
}

impl Gathered {
    /// Keeps `bytes` as the entry of `digest` if it is a member; `false`
    /// when the pack grew past its limit.
    fn add(&mut self, digest: [u8; 32], bytes: &[u8], work: Duration) -> bool {
        if self.sorted.binary_search(&digest).is_err() {
            return true;
        }
        let size = bytes.len() as u64 + ENTRY_OVERHEAD;
        if let Some((old, _)) = self.entries.get(&digest) {
            self.bytes -= old.len() as u64 + ENTRY_OVERHEAD;
        }
        self.bytes += size;
        self.entries.insert(digest, (bytes.to_vec(), work));
        self.bytes <= self.limit
    }
}

impl Packing {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether no lookup of the batch took its turn yet.
    fn waiting(&self) -> bool {
        matches!(self.state().stage, Stage::Waiting)
    }

    /// Gives the batch's turn back, taken by a lookup that did not reach
    /// the bucket after all.
    pub(super) fn give_back(&self) {
        let mut state = self.state();
        if matches!(state.stage, Stage::Settled) {
            state.stage = Stage::Waiting;
        }
    }

    /// Whether this is the batch's first lookup to reach the bucket; it
    /// takes the batch's turn.
    fn first(&self) -> bool {
        let mut state = self.state();
        let first = matches!(state.stage, Stage::Waiting);
        if first {
            state.stage = Stage::Settled;
        }
        first
    }

    fn remember(state: &mut State, set: [u8; 32], sorted: &[[u8; 32]]) {
        if state.known.iter().any(|(known, _)| *known == set) {
            return;
        }
        if state.known.len() >= KNOWN_LIMIT {
            state.known.pop_front();
        }
        state
            .known
            .push_back((set, sorted.iter().copied().collect()));
    }

    /// A write to the bucket of the batch: kept for its pack.
    pub(super) fn note(&self, write: &Write) {
        let mut state = self.state();
        if let Stage::Gathering(gathered) = &mut state.stage
            && !gathered.add(write.key.digest(), &write.bytes, write.work)
        {
            state.stage = Stage::Settled;
        }
    }
}

/// The batch's pack, read by the lookup that took the batch's turn: its
/// key set, the set's digests sorted, and its GET (sent ahead, beside the
/// front's lookup, or not yet).
#[derive(Debug)]
pub(super) struct Early {
    set: [u8; 32],
    sorted: Vec<[u8; 32]>,
    get: PackGet,
}

/// The digests of `keys`, sorted, without repeats.
fn sorted_digests(keys: &[StoreKey]) -> Vec<[u8; 32]> {
    let mut sorted: Vec<[u8; 32]> = keys.iter().map(StoreKey::digest).collect();
    sorted.sort_unstable();
    sorted.dedup();
    sorted
}

impl BucketTier {
    /// Whether lookups read through batch packs (on, and no size split).
    fn packs_on(&self) -> bool {
        self.inner.bucket.config().packs != PackOrder::Off && self.inner.split.is_none()
    }

    /// The front's answers for `keys`; and, when this lookup will reach
    /// the bucket through its batch's pack, that pack's GET, sent beside
    /// the front's lookup rather than after it. The front is asked for
    /// the first key alone, then for the others: when it lacks the first
    /// (and the bucket did not answer it absent in this batch) the lookup
    /// reaches the bucket whatever the others answer, as the batch's
    /// first to when no lookup took its turn, so the pack's GET is one
    /// the lookup sends anyway: it goes on a sending thread while the
    /// front reads the others. A hit of the first sends nothing ahead.
    pub(super) fn ask_front(&self, keys: &[StoreKey]) -> (Vec<Lookup<Vec<u8>>>, Option<Early>) {
        let front = self.inner.front.as_ref();
        let Some(first_key) = keys.first() else {
            return (Vec::new(), None);
        };
        if !self.packs_on() || keys.len() < pack::LEAST_KEYS || !self.inner.packing.waiting() {
            return (front.lookup_many(keys), None);
        }
        let first = front.lookup(first_key);
        let early = if matches!(first, Lookup::Hit { .. }) {
            None
        } else {
            self.send_pack_ahead(keys, first_key)
        };
        let mut answers = Vec::with_capacity(keys.len());
        answers.push(first);
        answers.extend(front.lookup_many(&keys[1..]));
        (answers, early)
    }

    /// The pack of `keys`, its GET sent now, when the lookup of `keys`,
    /// whose front lacks `first_key`, takes the batch's turn to read it.
    fn send_pack_ahead(&self, keys: &[StoreKey], first_key: &StoreKey) -> Option<Early> {
        let inner = &self.inner;
        let asked = {
            let absent = inner.absent.lock().unwrap_or_else(PoisonError::into_inner);
            super::unanswered(&absent, first_key)
        };
        if !asked {
            return None;
        }
        let sorted = sorted_digests(keys);
        // A set too small for a pack is `ask_bucket`'s, as is a turn
        // another lookup took.
        if sorted.len() < pack::LEAST_KEYS || !inner.packing.first() {
            return None;
        }
        let set = pack::set_digest_of(&sorted);
        let get = inner.bucket.pack_get_of(&set, true);
        Some(Early { set, sorted, get })
    }

    /// The bucket's answers for `asked`, the keys of the lookup of `keys`
    /// the front did not find (it answered `answers`): through the pack
    /// of `keys` when this is the batch's first lookup to reach the
    /// bucket and packs are on (`early` when its GET went ahead).
    pub(super) fn ask_bucket(
        &self,
        keys: &[StoreKey],
        answers: &[Lookup<Vec<u8>>],
        asked: &[StoreKey],
        early: Option<Early>,
    ) -> Vec<Lookup<Vec<u8>>> {
        use kiln_engine::ArtifactStore;
        let inner = &self.inner;
        let config = inner.bucket.config();
        let Early { set, sorted, get } = match early {
            Some(early) => early,
            None => {
                if !self.packs_on() || !inner.packing.first() {
                    return inner.bucket.lookup_many(asked);
                }
                let sorted = sorted_digests(keys);
                if sorted.len() < pack::LEAST_KEYS {
                    return inner.bucket.lookup_many(asked);
                }
                let set = pack::set_digest_of(&sorted);
                let get = inner.bucket.pack_get_of(&set, false);
                Early { set, sorted, get }
            }
        };
        // A batch new to the fleet (no pack of its set): the failure
        // memories of its kernels, which this node will likely compile,
        // are read now, beside the per-key GETs, rather than beside the
        // lookup of the lowered sources that follows this one.
        // Connections for them and for that lookup are opened meanwhile.
        let absent = |after| {
            inner
                .bucket
                .connect_ahead_for(asked.len().saturating_mul(2));
            let memories = super::memories::of_kernels(asked);
            if !memories.is_empty() {
                inner.memories.read_after(&inner.bucket, memories, after);
            }
        };
        let (found, seen) = inner
            .bucket
            .lookup_packed(&set, &sorted, asked, get, &absent);
        if matches!(seen, Seen::Found { .. }) {
            Packing::remember(&mut inner.packing.state(), set, &sorted);
        }
        let (held, damaged) = match seen {
            Seen::Absent => (0, false),
            Seen::Found { held, damaged } if damaged || held < sorted.len() => (held, damaged),
            Seen::Found { .. } | Seen::Unknown => return found,
        };
        if !config.writes() {
            return found;
        }
        let mut gathered = Gathered {
            set,
            sorted,
            entries: HashMap::new(),
            bytes: 0,
            limit: config.max_entry_bytes,
            held,
            damaged,
            replace: seen != Seen::Absent,
        };
        let hits = keys.iter().zip(answers).chain(asked.iter().zip(&found));
        let mut within = true;
        for (key, answer) in hits {
            if let Lookup::Hit { artifact, work, .. } = answer {
                within &= gathered.add(key.digest(), artifact, *work);
            }
        }
        let mut state = inner.packing.state();
        if within && matches!(state.stage, Stage::Settled) {
            state.stage = Stage::Gathering(gathered);
        }
        found
    }

    /// The batch ended: its pack, if it has one to write, goes to the
    /// writer's queue.
    pub(super) fn pack_batch_finished(&self) {
        let inner = &self.inner;
        let write = {
            let mut state = inner.packing.state();
            let stage = std::mem::take(&mut state.stage);
            let Stage::Gathering(gathered) = stage else {
                return;
            };
            if gathered.entries.is_empty()
                || (!gathered.damaged && gathered.entries.len() <= gathered.held)
            {
                return;
            }
            Packing::remember(&mut state, gathered.set, &gathered.sorted);
            PackWrite {
                set: gathered.set,
                sorted: gathered.sorted,
                replace: gathered.replace,
                entries: gathered
                    .entries
                    .into_iter()
                    .map(|(digest, (bytes, work))| (digest, bytes, work))
                    .collect(),
            }
        };
        inner.queue.push(Job::Pack(write), super::QUEUE_LIMIT);
    }

    /// `key` was removed: the packs this process knows that hold it are
    /// deleted, and the batch's pack is gathered without it until it is
    /// put again.
    pub(super) fn forget_packs(&self, key: &StoreKey) {
        let digest = key.digest();
        let sets: Vec<[u8; 32]> = {
            let mut state = self.inner.packing.state();
            if let Stage::Gathering(gathered) = &mut state.stage
                && let Some((bytes, _)) = gathered.entries.remove(&digest)
            {
                gathered.bytes -= bytes.len() as u64 + ENTRY_OVERHEAD;
            }
            let sets = state
                .known
                .iter()
                .filter(|(_, members)| members.contains(&digest))
                .map(|(set, _)| *set)
                .collect();
            state
                .known
                .retain(|(_, members)| !members.contains(&digest));
            sets
        };
        for set in sets {
            self.inner.bucket.remove_pack(&set);
        }
    }
}
