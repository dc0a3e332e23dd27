//! A batch's lookup spread over a few threads (F3, F11): a warm start asks
//! for every kernel at once, and each hit is a few reads of its shard and
//! a digest of its bytes, independent of the others (each shard has its
//! own lock). One thread read 64 GEMM artifacts in 2.4 ms on an H100 host,
//! where their module loads took 2.0 ms: spread, the lookup stops being
//! the larger half of a warm start.
//!
//! The threads that help are the process's own, started once when its
//! first store opens, and asleep between lookups. A thread started for a
//! lookup costs that lookup its start, and on a virtual machine a new
//! thread may take the processor from its starter for as long as it runs
//! (measured on a 2-core machine: the caller set aside for a millisecond
//! in one start of four).

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use kiln_engine::store::{ArtifactStore, Lookup, StoreKey};

use super::DiskStore;

/// Keys below which a lookup stays on the caller's thread: handing keys to
/// a thread costs about what a few hits do.
const KEYS_PER_THREAD: usize = 16;

/// The most threads one lookup uses, the caller's among them.
const MOST_THREADS: usize = 4;

/// The threads for a lookup of `keys` keys on a machine of `cores`.
fn threads_for(keys: usize, cores: usize) -> usize {
    (keys / KEYS_PER_THREAD).clamp(1, MOST_THREADS.min(cores.max(1)))
}

/// This machine's cores, asked of the system once it is known: it reads
/// files (the process's CPU quota). Two threads that ask before it is
/// known each read them rather than one wait for the other: the helpers'
/// starter asks while the first lookup may be asking too.
fn cores() -> usize {
    static CORES: AtomicUsize = AtomicUsize::new(0);
    match CORES.load(Ordering::Relaxed) {
        0 => {
            let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
            CORES.store(cores, Ordering::Relaxed);
            cores
        }
        known => known,
    }
}

/// The threads a lookup of `keys` keys takes on this machine.
fn threads_here(keys: usize) -> usize {
    if keys < 2 * KEYS_PER_THREAD {
        return 1;
    }
    threads_for(keys, cores())
}

/// The process's lookup helpers, once started: `None` when the machine has
/// one core, or the system would start no thread.
static HELPERS: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();

/// Work handed to the helpers before they started, for the thread that
/// starts them to hand over.
type Beside = Box<dyn FnOnce() + Send>;
static PENDING: Mutex<Vec<Beside>> = Mutex::new(Vec::new());

/// Set while a thread starts the helpers.
static STARTING: AtomicBool = AtomicBool::new(false);

/// Starts the process's lookup helpers on a thread of their own, unless
/// they are started or starting: a store's open calls it, so that the
/// helpers are asleep and waiting by the time a batch asks for its
/// kernels, and the opener pays one thread's start, not theirs.
pub(super) fn start_helpers() {
    if HELPERS.get().is_some() || STARTING.swap(true, Ordering::Relaxed) {
        return;
    }
    let started = std::thread::Builder::new()
        .name("kiln-lookup-go".into())
        .spawn(|| hand_over(helpers()));
    // No thread to be had: the first lookup that needs them tries again,
    // and what was left for them is dropped.
    if started.is_err() {
        STARTING.store(false, Ordering::Relaxed);
        hand_over(None);
    }
}

/// Runs `work` on a lookup helper, beside the caller, once the helpers
/// have started; dropped undone where there are none (one core, or no
/// thread to be had): for work a later lookup does anyway when it finds
/// it undone.
pub(super) fn beside(work: Beside) {
    match HELPERS.get() {
        Some(Some(pool)) => pool.spawn(work),
        Some(None) => {}
        // Nobody is starting them: the work is left to the lookup.
        None if !STARTING.load(Ordering::Relaxed) => {}
        None => {
            pending().push(work);
            // The helpers may have started (or failed to), and handed over
            // what was pending, between the look above and the push.
            if let Some(started) = HELPERS.get() {
                hand_over(started.as_ref());
            } else if !STARTING.load(Ordering::Relaxed) {
                hand_over(None);
            }
        }
    }
}

/// The process's lookup helpers as a lookup finds them.
enum Helpers {
    Ready(&'static rayon::ThreadPool),
    /// Being started on a thread of their own: not waited for.
    Starting,
    /// None to be had.
    Absent,
}

/// The helpers now: started here if nobody is starting them, never waited
/// for while another thread starts them (a thread's start may take a
/// processor for half a millisecond on a virtual machine, three of them
/// more).
fn helpers_now() -> Helpers {
    match HELPERS.get() {
        Some(Some(pool)) => Helpers::Ready(pool),
        Some(None) => Helpers::Absent,
        None if STARTING.load(Ordering::Relaxed) => Helpers::Starting,
        None => helpers().map_or(Helpers::Absent, Helpers::Ready),
    }
}

/// Hands the work pending to the helpers, or drops it where there are
/// none.
fn hand_over(helpers: Option<&rayon::ThreadPool>) {
    for work in std::mem::take(&mut *pending()) {
        if let Some(pool) = helpers {
            pool.spawn(work);
        }
    }
}

fn pending() -> std::sync::MutexGuard<'static, Vec<Beside>> {
    PENDING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The process's lookup helpers, started here if nobody started them.
fn helpers() -> Option<&'static rayon::ThreadPool> {
    HELPERS
        .get_or_init(|| {
            #[cfg(test)]
            tests::hold_the_start();
            let helpers = MOST_THREADS.min(cores()) - 1;
            if helpers == 0 {
                return None;
            }
            rayon::ThreadPoolBuilder::new()
                .num_threads(helpers)
                .thread_name(|_| "kiln-lookup".into())
                // Work handed over beside a store's open (`beside`) that
                // panics is said, not the end of the program (rayon's
                // default); a lookup's own panic reaches its caller.
                .panic_handler(|_| {
                    log::error!("kiln store: work beside a store's open panicked; it is dropped")
                })
                .build()
                .map_err(|error| {
                    log::debug!(
                        "kiln store: no lookup threads ({error}); lookups stay on the caller's"
                    )
                })
                .ok()
        })
        .as_ref()
}

/// Looks `keys` up in `store`, in order, on as many threads as they fill.
pub(super) fn lookup_many(store: &DiskStore, keys: &[StoreKey]) -> Vec<Lookup<Vec<u8>>> {
    let mut answers: Vec<Option<Lookup<Vec<u8>>>> = keys.iter().map(|_| None).collect();
    lookup_each(store, keys, &|_, answer| answer, &mut |at, answer| {
        answers[at] = Some(answer);
    });
    answers
        .into_iter()
        .map(|answer| answer.expect("every key is answered"))
        .collect()
}

/// Looks `keys` up in `store` and hands each answer to `found`, with its
/// place in `keys`, on the caller's thread as soon as it is ready (F11):
/// the caller makes a hit's device object while the rest are still read.
/// A lookup of many keys is spread over the process's lookup helpers, and
/// the caller reads a key itself only when no helper has an answer ready
/// for it (at the start, while the helpers wake); one of few keys runs on
/// the caller's thread, answer by answer. Each answer is first given to
/// `shape` on the thread that read it (the loader decodes its artifact
/// there).
///
/// The threads take the keys in their order, each the next one nobody
/// took, so the answers come about in order, and a helper that comes late
/// (or never: another lookup keeps it) leaves nothing undone behind it.
pub(super) fn lookup_each<A: Send>(
    store: &DiskStore,
    keys: &[StoreKey],
    shape: &(dyn Fn(usize, Lookup<Vec<u8>>) -> A + Sync),
    found: &mut dyn FnMut(usize, A),
) {
    let threads = threads_here(keys.len());
    let asked = Instant::now();
    let work = Work {
        store,
        keys,
        shape,
        next: AtomicUsize::new(0),
        asked,
    };
    // While the helpers are still starting (the store opened just
    // before), the caller reads keys, and takes the helpers for the rest
    // once they are there.
    let mut answered = 0;
    let pool = if threads > 1 {
        loop {
            match helpers_now() {
                Helpers::Ready(pool) => break Some(pool),
                Helpers::Absent => break None,
                Helpers::Starting => match work.answer_next() {
                    Some((at, answer)) => {
                        found(at, answer);
                        answered += 1;
                    }
                    None => return,
                },
            }
        }
    } else {
        None
    };
    let Some(pool) = pool else {
        let rest = &keys[answered..];
        watched(asked, 0, rest, |at, key| {
            found(answered + at, shape(answered + at, store.lookup(key)));
        });
        return;
    };
    // Only helpers no other lookup holds: a lookup never waits for
    // another's to end before its own helpers come to it.
    let helping: Vec<Held> = (0..hold_helpers(threads - 1, pool.current_num_threads()))
        .map(|_| Held)
        .collect();
    pool.in_place_scope(|scope| {
        let (sender, answers) = std::sync::mpsc::channel();
        for (number, held) in (1..).zip(helping) {
            let (work, sender) = (&work, sender.clone());
            scope.spawn(move |_| {
                work.help(number, &sender);
                drop(held);
            });
        }
        drop(sender);
        // The caller never waits while a key is left that nobody took: it
        // takes each answer a helper has ready, and when none is, reads the
        // next key itself. Its first answer does not wait for a helper to
        // wake (on a virtual machine, a thread woken on an idle processor
        // may take half a millisecond to run).
        loop {
            let (at, answer) = match answers.try_recv() {
                Ok(ready) => ready,
                Err(_) => match work.answer_next() {
                    Some(read_here) => read_here,
                    None => break,
                },
            };
            found(at, answer);
            answered += 1;
        }
        // Every key is taken: the rest come from the helpers that took
        // them. A helper that never started holds a sender, so the count
        // ends the wait, not the channel.
        while answered < keys.len() {
            let Ok((at, answer)) = answers.recv() else {
                // Only a helper's panic drops a taken key; the scope's end
                // hands it to the caller, as on one thread.
                break;
            };
            found(at, answer);
            answered += 1;
        }
    });
}

/// Helpers held by lookups in progress.
static HELPING: AtomicUsize = AtomicUsize::new(0);

/// Holds up to `wanted` of the `helpers`, as many as no other lookup
/// holds; each is given back by the [`Held`] of the part it runs.
fn hold_helpers(wanted: usize, helpers: usize) -> usize {
    let mut held = HELPING.load(Ordering::Relaxed);
    loop {
        let count = wanted.min(helpers.saturating_sub(held));
        match HELPING.compare_exchange_weak(held, held + count, Ordering::AcqRel, Ordering::Relaxed)
        {
            Ok(_) => return count,
            Err(now) => held = now,
        }
    }
}

/// One helper held by a lookup, given back when its part ends, even by a
/// panic.
struct Held;

impl Drop for Held {
    fn drop(&mut self) {
        HELPING.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A lookup spread over threads that take its keys in turn.
struct Work<'a, A> {
    store: &'a DiskStore,
    keys: &'a [StoreKey],
    shape: &'a (dyn Fn(usize, Lookup<Vec<u8>>) -> A + Sync),
    /// The place of the next key nobody took.
    next: AtomicUsize,
    asked: Instant,
}

impl<A: Send> Work<'_, A> {
    /// The next key nobody took, answered and shaped; `None` once every
    /// key is taken.
    fn answer_next(&self) -> Option<(usize, A)> {
        let at = self.next.fetch_add(1, Ordering::Relaxed);
        let key = self.keys.get(at)?;
        Some((at, (self.shape)(at, self.store.lookup(key))))
    }

    /// Helper `number`'s part: the next key nobody took, until none is
    /// left, each answer sent to the caller on `sender`.
    fn help(&self, number: usize, sender: &Sender<(usize, A)>) {
        let traced = log::log_enabled!(log::Level::Trace);
        let (started, before) = (Instant::now(), traced.then(ThreadUsage::now));
        let mut answered = 0;
        while let Some(answer) = self.answer_next() {
            answered += 1;
            // The caller stopped listening only by unwinding.
            if sender.send(answer).is_err() {
                break;
            }
        }
        if let Some(before) = before {
            let after = ThreadUsage::now();
            log::trace!(
                "lookup helper {number}: started {:?} after the call, answered {answered} keys \
                 in {:?}, on a processor {:?}, {} waits, {} preemptions, {} page faults ({} \
                 from disk)",
                started.duration_since(self.asked),
                started.elapsed(),
                after.processor.saturating_sub(before.processor),
                after.waits - before.waits,
                after.preemptions - before.preemptions,
                after.faults - before.faults,
                after.disk_faults - before.disk_faults,
            );
        }
    }
}

/// Runs one thread's share of a lookup; at trace level, says when it
/// started and what it cost the thread: its wall, its processor time, the
/// times it waited (voluntary switches) or was put aside (involuntary
/// ones), and its page faults. A warm start's lookup that is slow on one
/// machine and not another is told apart this way: blocked, starved or
/// working.
fn watched<T>(
    asked: Instant,
    thread: usize,
    keys: &[StoreKey],
    mut lookup: impl FnMut(usize, &StoreKey) -> T,
) -> Vec<T> {
    if !log::log_enabled!(log::Level::Trace) {
        return keys
            .iter()
            .enumerate()
            .map(|(at, key)| lookup(at, key))
            .collect();
    }
    let started = Instant::now();
    let before = ThreadUsage::now();
    let (mut longest, mut longest_at) = (Duration::ZERO, Duration::ZERO);
    let answer = keys
        .iter()
        .enumerate()
        .map(|(at, key)| {
            let one = Instant::now();
            let answer = lookup(at, key);
            if one.elapsed() > longest {
                (longest, longest_at) = (one.elapsed(), one.duration_since(asked));
            }
            answer
        })
        .collect();
    let (took, after) = (started.elapsed(), ThreadUsage::now());
    log::trace!(
        "lookup thread {thread}: started {:?} after the call, took {took:?} (its longest key \
         {longest:?}, {longest_at:?} after the call), on a processor {:?}, {} waits, {} \
         preemptions, {} page faults ({} from disk)",
        started.duration_since(asked),
        after.processor.saturating_sub(before.processor),
        after.waits - before.waits,
        after.preemptions - before.preemptions,
        after.faults - before.faults,
        after.disk_faults - before.disk_faults,
    );
    answer
}

/// What the system counts of the calling thread.
struct ThreadUsage {
    processor: Duration,
    waits: i64,
    preemptions: i64,
    faults: i64,
    disk_faults: i64,
}

impl ThreadUsage {
    fn now() -> Self {
        // SAFETY: `getrusage` writes the struct it is handed, which is
        // plain data, and fails only for an unknown `who`.
        let usage = unsafe {
            let mut usage = std::mem::zeroed::<libc::rusage>();
            libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
            usage
        };
        // SAFETY: as above: `clock_gettime` writes the struct it is handed.
        let processor = unsafe {
            let mut time = std::mem::zeroed::<libc::timespec>();
            libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time);
            Duration::new(
                time.tv_sec.max(0) as u64,
                time.tv_nsec.clamp(0, 999_999_999) as u32,
            )
        };
        Self {
            processor,
            waits: usage.ru_nvcsw,
            preemptions: usage.ru_nivcsw,
            faults: usage.ru_minflt + usage.ru_majflt,
            disk_faults: usage.ru_majflt,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kiln_engine::ArtifactStoreExt;
    use kiln_engine::store::{ArtifactStore, Lookup};

    use super::threads_for;
    use crate::fixtures::{kernel_key, scratch};

    /// The keys of `count` kernels, each put in `store`.
    fn stored(store: &crate::DiskStore, count: u32) -> Vec<kiln_engine::store::StoreKey> {
        (0..count)
            .map(|number| {
                let key = kernel_key(number);
                store.put(&key, None, b"artifact", Duration::ZERO);
                key
            })
            .collect()
    }

    /// Held by each test whose lookup needs the process's helpers: the
    /// tests of this binary run side by side, and a lookup that finds
    /// every helper held by another's answers its keys alone.
    fn serial() -> std::sync::MutexGuard<'static, ()> {
        static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
        SERIAL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    // F11, P10: a lookup of many keys on several threads answers each key,
    // in the order asked, hits and misses alike.
    #[test]
    fn f11_a_spread_lookup_answers_every_key_in_order() {
        let _serial = serial();
        let store = scratch("spread-order");
        for number in (0..96).filter(|number| number % 3 != 0) {
            let bytes = format!("artifact {number}").into_bytes();
            store.put(&kernel_key(number), None, &bytes, Duration::ZERO);
        }
        let keys: Vec<_> = (0..96).map(kernel_key).collect();
        let found = store.lookup_many(&keys);
        assert_eq!(found.len(), 96);
        for (number, lookup) in found.into_iter().enumerate() {
            match lookup {
                Lookup::Hit { artifact, .. } => {
                    assert_ne!(number % 3, 0, "key {number} was never put");
                    assert_eq!(artifact, format!("artifact {number}").into_bytes());
                }
                Lookup::Miss(_) => assert_eq!(number % 3, 0, "key {number} was put"),
            }
        }
        drop(std::fs::remove_dir_all(store.root()));
    }

    // F11: a lookup handed over answer by answer, on several threads,
    // answers every key once, at its place, as the lookup in order does.
    #[test]
    fn f11_a_lookup_handed_over_answer_by_answer_answers_each_key_once() {
        let _serial = serial();
        let store = scratch("spread-each");
        for number in (0..96).filter(|number| number % 3 != 0) {
            let bytes = format!("artifact {number}").into_bytes();
            store.put(&kernel_key(number), None, &bytes, Duration::ZERO);
        }
        let keys: Vec<_> = (0..96).map(kernel_key).collect();
        let mut answered: Vec<Option<Lookup<Vec<u8>>>> = (0..96).map(|_| None).collect();
        let caller = std::thread::current().id();
        store.lookup_each(&keys, &mut |at, answer| {
            assert_eq!(std::thread::current().id(), caller, "handed to the caller");
            assert!(
                answered[at].replace(answer).is_none(),
                "key {at} answered twice"
            );
        });
        let in_order = store.lookup_many(&keys);
        for (number, (each, ordered)) in answered.into_iter().zip(in_order).enumerate() {
            match (each.expect("every key answered"), ordered) {
                (Lookup::Hit { artifact, .. }, Lookup::Hit { artifact: same, .. }) => {
                    assert_eq!(artifact, format!("artifact {number}").into_bytes());
                    assert_eq!(artifact, same);
                }
                (Lookup::Miss(_), Lookup::Miss(_)) => assert_eq!(number % 3, 0),
                _ => panic!("key {number} answered otherwise than in order"),
            }
        }
        drop(std::fs::remove_dir_all(store.root()));
    }

    // F11: a lookup of many keys shapes each answer (the loader decodes
    // it) on the thread that read it, mostly not the caller's, and hands
    // the caller each shaped answer once, at its place.
    #[test]
    fn f11_a_spread_lookup_shapes_each_answer_where_it_was_read() {
        let _serial = serial();
        let store = scratch("spread-shaped");
        for number in 0..96 {
            let bytes = format!("artifact {number}").into_bytes();
            store.put(&kernel_key(number), None, &bytes, Duration::ZERO);
        }
        let keys: Vec<_> = (0..96).map(kernel_key).collect();
        let caller = std::thread::current().id();
        // Each answer is shaped slowly, so that the threads have answers
        // ready while the caller takes one.
        let shape = |at: usize, answer: Lookup<Vec<u8>>| -> kiln_engine::store::Shaped {
            std::thread::sleep(Duration::from_micros(200));
            let shaped_here = std::thread::current().id() == caller;
            let length = match answer {
                Lookup::Hit { artifact, .. } => artifact.len(),
                Lookup::Miss(_) => 0,
            };
            Box::new((at, length, shaped_here))
        };
        let mut answered = [false; 96];
        let mut on_caller = 0;
        store.lookup_each_shaped(&keys, &shape, &mut |at, shaped| {
            let (shaped_at, length, here) = *shaped
                .downcast::<(usize, usize, bool)>()
                .expect("the shape asked for");
            assert_eq!(shaped_at, at, "shaped at its own place");
            assert_eq!(length, format!("artifact {at}").len());
            assert!(!std::mem::replace(&mut answered[at], true), "{at} twice");
            on_caller += usize::from(here);
            // The caller's own work on each answer (the device load).
            std::thread::sleep(Duration::from_micros(400));
        });
        assert!(answered.iter().all(|answered| *answered));
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        if cores > 1 {
            assert!(
                on_caller < 48,
                "{on_caller} of 96 answers shaped on the caller's thread"
            );
        }
        drop(std::fs::remove_dir_all(store.root()));
    }

    // F11: the caller's first answer does not wait for a lookup thread to
    // start: while no thread has an answer ready, the caller reads the
    // next key itself. Here the threads hold each answer until the caller
    // has its first one (at most two seconds).
    #[test]
    fn f11_the_first_answer_does_not_wait_for_a_lookup_thread() {
        let _serial = serial();
        let store = scratch("spread-first");
        let keys = stored(&store, 64);
        let gate = kiln_test_support::gate::Gate::owned_here(Duration::from_secs(2));
        let shape = |_: usize, _: Lookup<Vec<u8>>| -> std::thread::ThreadId {
            gate.hold();
            std::thread::current().id()
        };
        let mut first = kiln_test_support::gate::FirstAnswer::asked(&gate);
        super::lookup_each(&store, &keys, &shape, &mut |_, thread| first.note(thread));
        first.assert_made_by_the_caller(64, "the first answer came from a lookup thread");
        drop(std::fs::remove_dir_all(store.root()));
    }

    // F11: a lookup of many keys spreads over the caller's thread and the
    // process's lookup helpers, which take the keys in turn (here each
    // answer takes a millisecond to shape), and answers each key once.
    #[test]
    fn f11_lookup_threads_share_the_keys_in_turn() {
        let _serial = serial();
        let store = scratch("spread-chain");
        let keys = stored(&store, 64);
        let shape = |_: usize, _: Lookup<Vec<u8>>| -> std::thread::ThreadId {
            std::thread::sleep(Duration::from_millis(1));
            std::thread::current().id()
        };
        let mut threads = std::collections::HashSet::new();
        let mut answered = [false; 64];
        super::lookup_each(&store, &keys, &shape, &mut |at, thread| {
            assert!(!std::mem::replace(&mut answered[at], true), "{at} twice");
            threads.insert(thread);
        });
        assert!(answered.iter().all(|answered| *answered));
        threads.remove(&std::thread::current().id());
        // Beside the caller's, a helper for each further core, up to three.
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let helpers = cores.min(super::MOST_THREADS) - 1;
        assert!(
            threads.len() <= helpers,
            "{} lookup threads beside the caller's, on {cores} cores",
            threads.len()
        );
        if helpers > 0 {
            assert!(!threads.is_empty(), "the caller answered every key");
        }
        drop(std::fs::remove_dir_all(store.root()));
    }

    // F10, F11: a lookup of many packed keys, over most of the store's
    // shards, answers every one while keeping few of the shards' files
    // open (each open view holds two descriptors; a view closed to make
    // room opens again when its shard is read again).
    #[test]
    fn f11_a_large_packed_lookup_keeps_few_files_open_and_answers_every_key() {
        let _serial = serial();
        use crate::DiskStore;
        let (root, config) = closed_store("views", 700, |number| {
            format!("packed artifact {number}").into_bytes()
        });
        let packs = root.join("packs");
        let open_in_packs = || {
            std::fs::read_dir("/proc/self/fd")
                .expect("this process's descriptors")
                .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
                .filter(|target| target.starts_with(&packs))
                .count()
        };
        let store = DiskStore::open(config).expect("the store again");
        let keys: Vec<_> = (0..700).map(kernel_key).collect();
        for round in 0..2 {
            let found = store.lookup_many(&keys);
            for (number, lookup) in found.into_iter().enumerate() {
                match lookup {
                    Lookup::Hit { artifact, .. } => assert_eq!(
                        artifact,
                        format!("packed artifact {number}").into_bytes(),
                        "round {round}"
                    ),
                    Lookup::Miss(miss) => panic!("round {round}: key {number} missed: {miss:?}"),
                }
            }
            let open = open_in_packs();
            assert!(
                open <= 2 * crate::pack::OPEN_VIEWS,
                "round {round}: {open} of the packs' files open"
            );
        }
        drop(store);
        drop(std::fs::remove_dir_all(root));
    }

    // F11: a store's open starts the process's lookup helpers, asleep,
    // before any lookup; a lookup of many keys starts no thread of its
    // own. Run in a fresh process, where no store was opened before.
    #[test]
    fn f11_a_store_open_starts_the_lookup_helpers_every_lookup_shares() {
        const CHILD: &str = "KILN_TEST_LOOKUP_HELPERS";
        const NAME: &str =
            "disk::spread::tests::f11_a_store_open_starts_the_lookup_helpers_every_lookup_shares";
        let named = || {
            std::fs::read_dir("/proc/self/task")
                .expect("this process's threads")
                .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
                .filter(|name| name.trim_end() == "kiln-lookup")
                .count()
        };
        if std::env::var_os(CHILD).is_none() {
            let output = std::process::Command::new(std::env::current_exe().expect("this test"))
                .args(["--exact", NAME, "--test-threads=1"])
                .env(CHILD, "1")
                .output()
                .expect("a fresh process of this test");
            let said = String::from_utf8_lossy(&output.stdout);
            assert!(output.status.success(), "{said}");
            assert!(said.contains("1 passed"), "the fresh process ran the check");
            return;
        }
        let helpers = super::cores().min(super::MOST_THREADS) - 1;
        assert_eq!(named(), 0, "lookup threads before any store");
        let store = scratch("spread-helpers");
        let waited = std::time::Instant::now();
        while named() < helpers && waited.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(named(), helpers, "lookup helpers after the open");
        let keys = stored(&store, 64);
        for _ in 0..3 {
            let found = store.lookup_many(&keys);
            assert!(
                found
                    .iter()
                    .all(|found| matches!(found, Lookup::Hit { .. }))
            );
        }
        assert_eq!(named(), helpers, "lookup threads after three lookups");
        drop(std::fs::remove_dir_all(store.root()));
    }

    /// A store in a fresh folder named for `label`, collecting nothing on
    /// its own, holding kernels `0..count` (their bytes from `bytes`),
    /// closed: its root, and how to open it again.
    fn closed_store(
        label: &str,
        count: u32,
        bytes: impl Fn(u32) -> Vec<u8>,
    ) -> (std::path::PathBuf, crate::StoreConfig) {
        let root = std::env::temp_dir().join(format!("kiln-store-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let config = crate::StoreConfig {
            collects_automatically: false,
            ..crate::StoreConfig::at(root.clone())
        };
        let store = crate::DiskStore::open(config.clone()).expect("a store");
        for number in 0..count {
            store.put(&kernel_key(number), None, &bytes(number), Duration::ZERO);
        }
        (root, config)
    }

    /// Looks `keys` up, each answer a hit: how many were answered, and how
    /// long the lookup took.
    fn hits_timed(
        store: &crate::DiskStore,
        keys: &[kiln_engine::store::StoreKey],
    ) -> (usize, Duration) {
        let started = std::time::Instant::now();
        let mut answered = 0;
        super::lookup_each(store, keys, &|_, answer| answer, &mut |_, answer| {
            assert!(matches!(answer, Lookup::Hit { .. }));
            answered += 1;
        });
        (answered, started.elapsed())
    }

    /// Holds the helpers' start while a test's gate is set.
    static START_GATE: std::sync::Mutex<Option<std::sync::Arc<kiln_test_support::gate::Gate>>> =
        std::sync::Mutex::new(None);

    pub(super) fn hold_the_start() {
        let gate = START_GATE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(gate) = gate {
            gate.hold();
        }
    }

    // F11: the first lookup after a store's open does not wait for the
    // lookup helpers to start (on a thread of their own, begun by the
    // open): while they start, the caller reads the keys itself, and a
    // later lookup has the helpers. Here their start is held until the
    // first lookup is over (at most 10 s). Run in a fresh process, where
    // no store was opened before.
    #[test]
    fn f11_the_first_lookup_does_not_wait_for_the_helpers_to_start() {
        const CHILD: &str = "KILN_TEST_HELPERS_STARTING";
        const NAME: &str =
            "disk::spread::tests::f11_the_first_lookup_does_not_wait_for_the_helpers_to_start";
        if std::env::var_os(CHILD).is_none() {
            let output = std::process::Command::new(std::env::current_exe().expect("this test"))
                .args(["--exact", NAME, "--test-threads=1", "--nocapture"])
                .env(CHILD, "1")
                .output()
                .expect("a fresh process of this test");
            let said = String::from_utf8_lossy(&output.stdout);
            eprint!("{}", String::from_utf8_lossy(&output.stderr));
            assert!(output.status.success(), "{said}");
            assert!(said.contains("1 passed"), "the fresh process ran the check");
            return;
        }
        if super::cores() < 2 {
            eprintln!("skipped: one core, no lookup helper to wait for");
            return;
        }
        let gate = std::sync::Arc::new(kiln_test_support::gate::Gate::owned_here(
            Duration::from_secs(10),
        ));
        *START_GATE.lock().expect("the gate's lock") = Some(std::sync::Arc::clone(&gate));
        let store = scratch("spread-starting");
        let keys = stored(&store, 64);
        let (answered, took) = hits_timed(&store, &keys);
        gate.open();
        assert_eq!(answered, 64);
        assert!(
            took < Duration::from_secs(5),
            "the first lookup waited {took:?} for the helpers to start"
        );
        let waited = std::time::Instant::now();
        while super::HELPERS.get().is_none() && waited.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            matches!(super::helpers_now(), super::Helpers::Ready(_)),
            "the helpers started once let go"
        );
        let mut threads = std::collections::HashSet::new();
        let shape = |_: usize, _: Lookup<Vec<u8>>| -> std::thread::ThreadId {
            std::thread::sleep(Duration::from_millis(1));
            std::thread::current().id()
        };
        super::lookup_each(&store, &keys, &shape, &mut |_, thread| {
            threads.insert(thread);
        });
        assert!(threads.len() > 1, "a later lookup had the helpers");
        drop(std::fs::remove_dir_all(store.root()));
    }

    // F11: a store's open has a lookup helper read its home shard's index
    // (every entry of a small store is there) beside the opener, before
    // any lookup: the index is held open with nothing asked of the store.
    #[test]
    fn f11_a_store_open_reads_its_home_shard_beside_the_opener() {
        use crate::DiskStore;
        let (root, config) = closed_store("home", 8, |_| b"packed artifact".to_vec());
        let home_index = root.join("packs").join("000.idx");
        assert!(home_index.is_file(), "the entries went to the home shard");
        let held = || {
            std::fs::read_dir("/proc/self/fd")
                .expect("this process's descriptors")
                .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
                .any(|target| target == home_index)
        };
        let store = DiskStore::open(config).expect("the store again");
        if super::helpers().is_none() {
            eprintln!("skipped: one core, no lookup helper to read beside the opener");
            return;
        }
        let waited = std::time::Instant::now();
        while !held() && waited.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            held(),
            "the home shard's index was not read beside the open"
        );
        assert!(matches!(store.lookup(&kernel_key(3)), Lookup::Hit { .. }));
        drop(store);
        drop(std::fs::remove_dir_all(root));
    }

    // F11: two lookups at once share the process's helpers without
    // waiting for each other: the second, started while the first holds
    // every helper (its answers slow to shape), is answered by its own
    // caller at once, not after the first has ended.
    #[test]
    fn f11_a_lookup_never_waits_for_another_lookup_s_helpers() {
        let _serial = serial();
        let store = scratch("spread-two");
        let keys = stored(&store, 64);
        let (first_began, began) = std::sync::mpsc::channel();
        let slow = |_: usize, _: Lookup<Vec<u8>>| {
            let _ = first_began.send(());
            std::thread::sleep(Duration::from_millis(20));
        };
        std::thread::scope(|scope| {
            let first = scope.spawn(|| {
                let started = std::time::Instant::now();
                super::lookup_each(&store, &keys, &slow, &mut |_, ()| {});
                started.elapsed()
            });
            began
                .recv_timeout(Duration::from_secs(5))
                .expect("the first lookup began");
            // The first lookup's helpers take their first keys.
            std::thread::sleep(Duration::from_millis(5));
            let (answered, second) = hits_timed(&store, &keys);
            let first = first.join().expect("the first lookup");
            assert_eq!(answered, 64);
            assert!(
                second < first / 3,
                "the second lookup took {second:?}, the first {first:?}"
            );
        });
        drop(std::fs::remove_dir_all(store.root()));
    }

    // Work handed to the helpers beside a store's open that panics is
    // dropped, and the helpers go on (rayon's default ends the program).
    #[test]
    fn work_beside_an_open_that_panics_does_not_end_the_program() {
        if super::helpers().is_none() {
            eprintln!("skipped: one core, no lookup helper to hand work to");
            return;
        }
        super::beside(Box::new(|| panic!("a panic beside a store's open")));
        let (done, ran) = std::sync::mpsc::channel();
        super::beside(Box::new(move || {
            let _ = done.send(());
        }));
        ran.recv_timeout(Duration::from_secs(5))
            .expect("the helpers run work after a panic");
    }

    // F11: a few keys stay on the caller's thread; many use at most four
    // threads, never more than the machine's cores.
    #[test]
    fn f11_a_lookup_spreads_only_what_fills_a_thread() {
        assert_eq!(threads_for(1, 16), 1);
        assert_eq!(threads_for(31, 16), 1);
        assert_eq!(threads_for(64, 16), 4);
        assert_eq!(threads_for(256, 16), 4);
        assert_eq!(threads_for(256, 2), 2);
        assert_eq!(threads_for(256, 0), 1);
    }
}
