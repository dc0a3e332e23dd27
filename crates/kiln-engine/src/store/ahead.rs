//! Kernels read from a store before the device is ready (F11): making a
//! device context takes 100–300 ms, and a program that knows its kernels
//! and their compiler before then can read them on a thread of their own
//! meanwhile. [`ReadAhead`] is that read, and a store before the store:
//! a loader over it takes what was read from memory, each once, and asks
//! the store itself for everything else.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::{
    ArtifactStore, BoundStore, Generation, KeyedCompiler, Lookup, Put, StoreKey, StoreOutcome,
    StoreParts, StoreStatistics,
};
use crate::id::ArtifactId;

/// The longest a lookup waits for the read ahead to end before it asks
/// the store itself: a store that hangs never holds a program up longer
/// than it would have anyway.
const LONGEST_WAIT: Duration = Duration::from_secs(30);

/// What the thread reading ahead has done.
#[derive(Debug, Default)]
struct Reading {
    /// Whether it ended (or could not start).
    done: bool,
    /// The hits it read, each answered once.
    hits: HashMap<StoreKey, Lookup<Vec<u8>>>,
    /// The keys it found missing, each answered once to a batch's lookup
    /// (which then claims and compiles them, asking the store itself
    /// again), so that a remote tier is not asked twice for a cold batch.
    misses: HashMap<StoreKey, Lookup<Vec<u8>>>,
    /// How many of its keys missed.
    missing: usize,
}

/// A store before `store` that read a set of kernels ahead, on a thread
/// of its own, while the program made its device: a loader over it
/// ([`CompilationTarget`](crate::CompilationTarget)'s store) takes each
/// kernel's answer read from memory, once (a hit, or the miss a batch
/// then claims, which asks `store` again), and asks `store` for every
/// other key and for everything else. A lookup made before the read ends
/// waits for it (up to 30 s, then asks `store`).
///
/// ```
/// use std::sync::Arc;
///
/// use kiln_engine::fake::{FakeKernel, FakeTarget};
/// use kiln_engine::store::ReadAhead;
/// use kiln_engine::{ArtifactStore, CompilationTarget, KernelLoader, MemoryStore};
///
/// let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
/// let kernels: Vec<FakeKernel> = (0..4).map(FakeKernel::new).collect();
/// let ids: Vec<_> = kernels.iter().map(FakeKernel::artifact_id).collect();
/// {
///     let mut first = KernelLoader::new(FakeTarget::on_store(Arc::clone(&store)));
///     for kernel in &kernels {
///         first.load(kernel, &kernel.artifact_id()).expect("compiles");
///     }
/// }
/// // The next process: its kernels read while its device is made.
/// let compiler = FakeTarget::storeless().compiler().clone();
/// let ahead = ReadAhead::start(Arc::clone(&store), &*compiler, &ids);
/// let target = FakeTarget::on_store(ahead.clone()); // the device, made meanwhile
/// assert_eq!(ahead.missing(), 0);
/// let mut loader = KernelLoader::new(target);
/// for kernel in &kernels {
///     loader.load(kernel, &kernel.artifact_id()).expect("from memory");
/// }
/// assert_eq!(ahead.untaken(), 0, "every kernel read ahead was taken");
/// ```
#[derive(Debug)]
pub struct ReadAhead {
    inner: Arc<dyn ArtifactStore>,
    reading: Mutex<Reading>,
    ended: Condvar,
}

impl ReadAhead {
    /// Starts reading `ids` of `compiler` from `store` on a thread of its
    /// own, now. A thread the system refuses reads nothing: every lookup
    /// goes to `store`.
    pub fn start<C: KeyedCompiler>(
        store: Arc<dyn ArtifactStore>,
        compiler: &C,
        ids: &[ArtifactId<C::Variant>],
    ) -> Arc<Self> {
        let (ahead, keys) = Self::over(store, compiler, ids);
        let reader = Arc::clone(&ahead);
        let started = std::thread::Builder::new()
            .name("kiln-read-ahead".into())
            .spawn(move || reader.read(&keys));
        if let Err(error) = started {
            log::debug!("nothing read ahead: {error}");
            ahead.end();
        }
        ahead
    }

    /// Reads `ids` of `compiler` from `store` now, on this thread: for a
    /// caller already on a thread of its own.
    pub fn read_now<C: KeyedCompiler>(
        store: Arc<dyn ArtifactStore>,
        compiler: &C,
        ids: &[ArtifactId<C::Variant>],
    ) -> Arc<Self> {
        let (ahead, keys) = Self::over(store, compiler, ids);
        ahead.read(&keys);
        ahead
    }

    /// The store before `store`, nothing read yet, and the keys of `ids`.
    fn over<C: KeyedCompiler>(
        store: Arc<dyn ArtifactStore>,
        compiler: &C,
        ids: &[ArtifactId<C::Variant>],
    ) -> (Arc<Self>, Vec<StoreKey>) {
        let bound = BoundStore::new(Arc::clone(&store), compiler);
        let keys = ids
            .iter()
            .map(|id| bound.artifact_key(compiler, id))
            .collect();
        let ahead = Arc::new(Self {
            inner: store,
            reading: Mutex::default(),
            ended: Condvar::new(),
        });
        (ahead, keys)
    }

    /// How many of the kernels read ahead the store did not hold: waits
    /// for the read to end.
    pub fn missing(&self) -> usize {
        self.ended().missing
    }

    /// How many kernels read ahead no lookup has taken yet: waits for the
    /// read to end.
    pub fn untaken(&self) -> usize {
        self.ended().hits.len()
    }

    fn read(&self, keys: &[StoreKey]) {
        let (mut hits, mut misses) = (HashMap::new(), HashMap::new());
        self.inner.lookup_each(keys, &mut |at, found| {
            let answers = match found {
                Lookup::Hit { .. } => &mut hits,
                Lookup::Miss(_) => &mut misses,
            };
            answers.insert(keys[at].clone(), found);
        });
        let mut reading = self.lock();
        reading.missing = misses.len();
        reading.hits = hits;
        reading.misses = misses;
        reading.done = true;
        self.ended.notify_all();
    }

    fn end(&self) {
        self.lock().done = true;
        self.ended.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, Reading> {
        self.reading
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The read once it ended, or past the longest wait whatever it holds
    /// (nothing, unless it ended).
    fn ended(&self) -> MutexGuard<'_, Reading> {
        let reading = self.lock();
        let (reading, waited) = self
            .ended
            .wait_timeout_while(reading, LONGEST_WAIT, |reading| !reading.done)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if waited.timed_out() {
            log::warn!("the kernels read ahead took over {LONGEST_WAIT:?}: going on without them");
        }
        reading
    }
}

impl ArtifactStore for ReadAhead {
    fn lookup_many(&self, keys: &[StoreKey]) -> Vec<Lookup<Vec<u8>>> {
        let mut answers: Vec<Option<Lookup<Vec<u8>>>> = keys.iter().map(|_| None).collect();
        self.lookup_each(keys, &mut |at, found| answers[at] = Some(found));
        answers
            .into_iter()
            .map(|answer| answer.unwrap_or(Lookup::Miss(super::Miss::Absent)))
            .collect()
    }

    fn lookup_each(&self, keys: &[StoreKey], found: &mut dyn FnMut(usize, Lookup<Vec<u8>>)) {
        let Taken { read, rest, places } = self.take(keys);
        for (at, answer) in read {
            found(at, answer);
        }
        if !rest.is_empty() {
            self.inner
                .lookup_each(&rest, &mut |at, answer| found(places[at], answer));
        }
    }

    fn lookup_each_shaped(
        &self,
        keys: &[StoreKey],
        shape: &(dyn Fn(usize, Lookup<Vec<u8>>) -> super::Shaped + Sync),
        found: &mut dyn FnMut(usize, super::Shaped),
    ) {
        let Taken { read, rest, places } = self.take(keys);
        shape_beside(read, shape, found);
        if !rest.is_empty() {
            self.inner.lookup_each_shaped(
                &rest,
                &|at, answer| shape(places[at], answer),
                &mut |at, shaped| found(places[at], shaped),
            );
        }
    }

    fn lookup(&self, key: &StoreKey) -> Lookup<Vec<u8>> {
        let hit = self.ended().hits.remove(key);
        hit.unwrap_or_else(|| self.inner.lookup(key))
    }

    fn put_many(&self, puts: &[Put<'_>]) -> Vec<StoreOutcome> {
        self.inner.put_many(puts)
    }

    fn remove(&self, key: &StoreKey) {
        let mut reading = self.lock();
        reading.hits.remove(key);
        reading.misses.remove(key);
        drop(reading);
        self.inner.remove(key);
    }

    fn generation(&self) -> Generation {
        self.inner.generation()
    }

    fn statistics(&self) -> StoreStatistics {
        self.inner.statistics()
    }

    fn parts(&self) -> StoreParts<'_> {
        self.inner.parts()
    }
}

/// What a lookup of some keys takes of what was read ahead: the answers
/// read, by place, and the keys left to the store, with their places.
struct Taken {
    read: Vec<(usize, Lookup<Vec<u8>>)>,
    rest: Vec<StoreKey>,
    places: Vec<usize>,
}

impl ReadAhead {
    /// Takes the answers read ahead for `keys` (each once), once the read
    /// ended; the other keys are left to the store.
    fn take(&self, keys: &[StoreKey]) -> Taken {
        let mut taken = Taken {
            read: Vec::new(),
            rest: Vec::new(),
            places: Vec::new(),
        };
        let mut reading = self.ended();
        for (at, key) in keys.iter().enumerate() {
            let hit = reading.hits.remove(key);
            match hit.or_else(|| reading.misses.remove(key)) {
                Some(answer) => taken.read.push((at, answer)),
                None => {
                    taken.rest.push(key.clone());
                    taken.places.push(at);
                }
            }
        }
        taken
    }
}

/// Hands each of `read` to `found` shaped: on a thread beside the
/// caller's when there are enough of them (F11), so that the caller loads
/// one artifact while the next is decoded, the caller shaping one itself
/// whenever the thread has none ready; on the caller's thread when a
/// thread would cost more than it saves, or none is to be had.
fn shape_beside(
    read: Vec<(usize, Lookup<Vec<u8>>)>,
    shape: &(dyn Fn(usize, Lookup<Vec<u8>>) -> super::Shaped + Sync),
    found: &mut dyn FnMut(usize, super::Shaped),
) {
    /// Fewer answers than this are shaped on the caller's thread.
    const WORTH_A_THREAD: usize = 8;
    if read.len() < WORTH_A_THREAD {
        for (at, answer) in read {
            found(at, shape(at, answer));
        }
        return;
    }
    std::thread::scope(|scope| {
        let (sender, shaped) = std::sync::mpsc::channel();
        let queue = Arc::new(Mutex::new(read.into_iter()));
        let shaper = Arc::clone(&queue);
        let spawned = std::thread::Builder::new()
            .name("kiln-decode".into())
            .spawn_scoped(scope, move || {
                loop {
                    let next = shaper.lock().unwrap_or_else(PoisonError::into_inner).next();
                    let Some((at, answer)) = next else { break };
                    // The caller stopped listening only by unwinding.
                    if sender.send((at, shape(at, answer))).is_err() {
                        break;
                    }
                }
            });
        // The caller shapes the next answer itself whenever none is ready
        // (at the start, while the thread starts, or with no thread to be
        // had): it never waits while an answer is left unshaped.
        let next = || queue.lock().unwrap_or_else(PoisonError::into_inner).next();
        loop {
            match shaped.try_recv() {
                Ok((at, answer)) => found(at, answer),
                Err(_) => match next() {
                    Some((at, answer)) => found(at, shape(at, answer)),
                    None => break,
                },
            }
        }
        // Every answer is taken: the rest come from the thread.
        if spawned.is_ok() {
            for (at, answer) in shaped {
                found(at, answer);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::ReadAhead;
    use crate::fake::FakeCompiler;
    use crate::fake::{FakeKernel, FakeTarget};
    use crate::id::ArtifactId;
    use crate::store::{
        ArtifactStore, ArtifactStoreExt, BoundStore, Lookup, MemoryStore, StoreKey,
    };
    use crate::target::CompilationTarget;

    /// An empty memory store, and `count` fake kernels' ids and keys.
    #[allow(clippy::type_complexity)]
    fn kernels(
        count: u32,
    ) -> (
        Arc<dyn ArtifactStore>,
        Arc<FakeCompiler>,
        Vec<ArtifactId<()>>,
        Vec<StoreKey>,
    ) {
        let inner: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
        let target = FakeTarget::storeless();
        let compiler = Arc::clone(target.compiler());
        let ids: Vec<_> = (0..count)
            .map(|number| FakeKernel::new(number).artifact_id())
            .collect();
        let bound = BoundStore::new(Arc::clone(&inner), &*compiler);
        let keys = ids
            .iter()
            .map(|id| bound.artifact_key(&*compiler, id))
            .collect();
        (inner, compiler, ids, keys)
    }

    // F11: what was read ahead is answered from memory, once, at its
    // place; every other key is the store's answer.
    #[test]
    fn f11_what_was_read_ahead_is_answered_once_from_memory_and_the_rest_by_the_store() {
        let (inner, compiler, ids, keys) = kernels(3);
        inner.put(&keys[0], None, b"zero", Duration::ZERO);
        inner.put(&keys[1], None, b"one", Duration::ZERO);

        let ahead = ReadAhead::start(Arc::clone(&inner), &*compiler, &ids);
        assert_eq!((ahead.missing(), ahead.untaken()), (1, 2));
        // Gone from the store since: the answer read ahead still serves.
        inner.remove(&keys[0]);
        // Stored since: the batch's lookup takes the miss read ahead (and
        // claims it), a single lookup (the claim's) asks the store.
        inner.put(&keys[2], None, b"two", Duration::ZERO);

        let mut answers: Vec<Option<Lookup<Vec<u8>>>> = vec![None, None, None];
        ahead.lookup_each(&keys, &mut |at, found| {
            assert!(
                answers[at].replace(found).is_none(),
                "key {at} answered twice"
            );
        });
        let bytes: Vec<Option<Vec<u8>>> = answers
            .into_iter()
            .map(|answer| match answer.expect("every key answered") {
                Lookup::Hit { artifact, .. } => Some(artifact),
                Lookup::Miss(_) => None,
            })
            .collect();
        assert_eq!(bytes, [Some(b"zero".to_vec()), Some(b"one".to_vec()), None]);
        assert_eq!(ahead.untaken(), 0);
        // Answered once: asked again, the store answers.
        assert!(matches!(ahead.lookup(&keys[0]), Lookup::Miss(_)));
        assert!(matches!(ahead.lookup(&keys[1]), Lookup::Hit { .. }));
        assert!(matches!(ahead.lookup(&keys[2]), Lookup::Hit { .. }));
        let mut again = Vec::new();
        ahead.lookup_each(&keys[2..], &mut |_, found| again.push(found));
        assert!(
            matches!(again[..], [Lookup::Hit { .. }]),
            "the miss was answered once"
        );
    }

    // F11: the artifacts read ahead are shaped (decoded) on a thread beside
    // the caller's, each handed over once at its place, so that the
    // caller's thread loads one while the next is decoded; a key not read
    // ahead is the store's answer, shaped as well.
    #[test]
    fn f11_what_was_read_ahead_is_decoded_beside_the_callers_thread() {
        let (inner, compiler, ids, keys) = kernels(24);
        for (number, key) in keys.iter().enumerate() {
            inner.put(
                key,
                None,
                format!("artifact {number}").as_bytes(),
                Duration::ZERO,
            );
        }
        let ahead = ReadAhead::start(Arc::clone(&inner), &*compiler, &ids[..20]);
        let caller = std::thread::current().id();
        // Shaping takes a while, and so does the caller's own work on each
        // answer (its device load): the thread beside has answers ready.
        let shape = |at: usize, answer: Lookup<Vec<u8>>| -> crate::store::Shaped {
            std::thread::sleep(Duration::from_micros(200));
            let artifact = match answer {
                Lookup::Hit { artifact, .. } => artifact,
                Lookup::Miss(_) => Vec::new(),
            };
            Box::new((at, artifact, std::thread::current().id() == caller))
        };
        let mut answered = vec![None; keys.len()];
        ahead.lookup_each_shaped(&keys, &shape, &mut |at, shaped| {
            let (shaped_at, artifact, here) = *shaped
                .downcast::<(usize, Vec<u8>, bool)>()
                .expect("the shape asked for");
            assert_eq!(shaped_at, at);
            assert!(
                answered[at].replace((artifact, here)).is_none(),
                "{at} twice"
            );
            std::thread::sleep(Duration::from_micros(400));
        });
        let mut on_caller = 0;
        for (at, answer) in answered.into_iter().enumerate() {
            let (artifact, here) = answer.expect("every key answered");
            assert_eq!(artifact, format!("artifact {at}").into_bytes());
            if at < 20 {
                on_caller += usize::from(here);
            }
        }
        assert!(
            on_caller < 10,
            "{on_caller} of 20 read ahead decoded on the caller's thread"
        );
        assert_eq!(ahead.untaken(), 0);
    }

    // F11: the caller's first answer read ahead does not wait for the
    // thread beside it to start: while that thread has none ready, the
    // caller decodes the next itself. Here the thread holds each answer
    // until the caller has its first (at most two seconds).
    #[test]
    fn f11_the_first_answer_read_ahead_does_not_wait_for_the_decoding_thread() {
        let (inner, compiler, ids, keys) = kernels(16);
        for key in &keys {
            inner.put(key, None, b"artifact", Duration::ZERO);
        }
        let ahead = ReadAhead::read_now(Arc::clone(&inner), &*compiler, &ids);
        let gate = kiln_test_support::gate::Gate::owned_here(Duration::from_secs(2));
        let shape = |_: usize, _: Lookup<Vec<u8>>| -> crate::store::Shaped {
            gate.hold();
            Box::new(std::thread::current().id())
        };
        let mut first = kiln_test_support::gate::FirstAnswer::asked(&gate);
        ahead.lookup_each_shaped(&keys, &shape, &mut |_, shaped| {
            first.note(
                *shaped
                    .downcast::<std::thread::ThreadId>()
                    .expect("the shape asked for"),
            );
        });
        first.assert_made_by_the_caller(16, "the first answer was decoded on the thread beside");
    }
}
