//! A batch's lookup spread over a few threads (F3, F11): a warm start asks
//! for every kernel at once, and each hit is a few reads of its shard and
//! a digest of its bytes, independent of the others (each shard has its
//! own lock). One thread read 64 GEMM artifacts in 2.4 ms on an H100 host,
//! where their module loads took 2.0 ms: spread, the lookup stops being
//! the larger half of a warm start.

use std::num::NonZeroUsize;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kiln_engine::store::{ArtifactStore, Lookup, StoreKey};

use super::DiskStore;

/// Keys below which a lookup stays on the caller's thread: starting a
/// thread costs about what a few hits do.
const KEYS_PER_THREAD: usize = 16;

/// The most threads one lookup uses, the caller's among them.
const MOST_THREADS: usize = 4;

/// The threads for a lookup of `keys` keys on a machine of `cores`.
fn threads_for(keys: usize, cores: usize) -> usize {
    (keys / KEYS_PER_THREAD).clamp(1, MOST_THREADS.min(cores.max(1)))
}

/// The threads a lookup of `keys` keys takes on this machine.
fn threads_here(keys: usize) -> usize {
    // Asked of the system once: it reads files (the process's CPU quota).
    static CORES: OnceLock<usize> = OnceLock::new();
    if keys < 2 * KEYS_PER_THREAD {
        return 1;
    }
    let cores =
        *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, NonZeroUsize::get));
    threads_for(keys, cores)
}

/// Looks `keys` up in `store`, in order, on as many threads as they fill.
pub(super) fn lookup_many(store: &DiskStore, keys: &[StoreKey]) -> Vec<Lookup<Vec<u8>>> {
    let threads = threads_here(keys.len());
    let asked = Instant::now();
    if threads == 1 {
        return watched(asked, 0, keys, |_, key| store.lookup(key));
    }
    let chunk = keys.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let mut chunks = keys.chunks(chunk);
        let mine = chunks.next().unwrap_or_default();
        let others: Vec<_> = chunks
            .enumerate()
            .map(|(number, keys)| {
                // A thread the system refuses leaves its keys to the caller.
                std::thread::Builder::new()
                    .name("kiln-lookup".into())
                    .spawn_scoped(scope, move || {
                        watched(asked, number + 1, keys, |_, key| store.lookup(key))
                    })
                    .map_err(|_| keys)
            })
            .collect();
        let mut found = watched(asked, 0, mine, |_, key| store.lookup(key));
        found.reserve(keys.len() - found.len());
        for other in others {
            match other {
                Ok(handle) => match handle.join() {
                    Ok(answers) => found.extend(answers),
                    // A panic of a lookup reaches the caller as it would
                    // on one thread.
                    Err(panic) => std::panic::resume_unwind(panic),
                },
                Err(keys) => found.extend(keys.iter().map(|key| store.lookup(key))),
            }
        }
        found
    })
}

/// Looks `keys` up in `store` and hands each answer to `found`, with its
/// place in `keys`, on the caller's thread as soon as it is ready (F11):
/// the caller makes a hit's device object while the rest are still read.
/// A lookup of many keys runs wholly on threads of its own, so that the
/// caller is free to take each answer; one of few keys runs on the
/// caller's thread, answer by answer. Each answer is first given to
/// `shape` on the thread that read it (the loader decodes its artifact
/// there).
///
/// The threads take the keys in their order, each the next one nobody
/// took, so the answers come about in order, and a thread that starts late
/// leaves nothing undone behind it. The caller starts them all before it
/// takes an answer.
pub(super) fn lookup_each<A: Send>(
    store: &DiskStore,
    keys: &[StoreKey],
    shape: &(dyn Fn(usize, Lookup<Vec<u8>>) -> A + Sync),
    found: &mut dyn FnMut(usize, A),
) {
    let threads = threads_here(keys.len());
    let asked = Instant::now();
    if threads == 1 {
        watched(asked, 0, keys, |at, key| {
            found(at, shape(at, store.lookup(key)))
        });
        return;
    }
    let work = Work {
        store,
        keys,
        shape,
        next: AtomicUsize::new(0),
        asked,
    };
    std::thread::scope(|scope| {
        let (sender, answers) = std::sync::mpsc::channel();
        let started = (1..=threads)
            .take_while(|&number| work.start(scope, number, sender.clone()))
            .count();
        drop(sender);
        if started == 0 {
            // No thread to be had: every key answered here.
            while let Some((at, answer)) = work.answer_next() {
                found(at, answer);
            }
            return;
        }
        for (at, answer) in answers {
            found(at, answer);
        }
        // A panic of a lookup reaches the caller when the scope ends, as
        // it would on one thread.
    });
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

impl<'a, A: Send> Work<'a, A> {
    /// The next key nobody took, answered and shaped; `None` once every
    /// key is taken.
    fn answer_next(&self) -> Option<(usize, A)> {
        let at = self.next.fetch_add(1, Ordering::Relaxed);
        let key = self.keys.get(at)?;
        Some((at, (self.shape)(at, self.store.lookup(key))))
    }

    /// Starts thread `number`, which sends its answers on `sender`;
    /// `false` when the system gives no thread (the others take its keys).
    fn start<'scope>(
        &'scope self,
        scope: &'scope std::thread::Scope<'scope, '_>,
        number: usize,
        sender: std::sync::mpsc::Sender<(usize, A)>,
    ) -> bool {
        std::thread::Builder::new()
            .name("kiln-lookup".into())
            .spawn_scoped(scope, move || {
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
                        "lookup thread {number}: started {:?} after the call, answered \
                         {answered} keys in {:?}, on a processor {:?}, {} waits, {} \
                         preemptions, {} page faults ({} from disk)",
                        started.duration_since(self.asked),
                        started.elapsed(),
                        after.processor.saturating_sub(before.processor),
                        after.waits - before.waits,
                        after.preemptions - before.preemptions,
                        after.faults - before.faults,
                        after.disk_faults - before.disk_faults,
                    );
                }
            })
            .is_ok()
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

    // F11, P10: a lookup of many keys on several threads answers each key,
    // in the order asked, hits and misses alike.
    #[test]
    fn f11_a_spread_lookup_answers_every_key_in_order() {
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
    // it) on the thread that read it, not the caller's, and hands the
    // caller each shaped answer once, at its place.
    #[test]
    fn f11_a_spread_lookup_shapes_each_answer_where_it_was_read() {
        let store = scratch("spread-shaped");
        for number in 0..96 {
            let bytes = format!("artifact {number}").into_bytes();
            store.put(&kernel_key(number), None, &bytes, Duration::ZERO);
        }
        let keys: Vec<_> = (0..96).map(kernel_key).collect();
        let caller = std::thread::current().id();
        let shape = |at: usize, answer: Lookup<Vec<u8>>| -> kiln_engine::store::Shaped {
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
        });
        assert!(answered.iter().all(|answered| *answered));
        assert_eq!(on_caller, 0, "answers shaped on the caller's thread");
        drop(std::fs::remove_dir_all(store.root()));
    }

    // F11: a lookup of many keys spreads over several threads that take
    // the keys in turn (here each answer takes a millisecond to shape),
    // and answers each key once.
    #[test]
    fn f11_lookup_threads_share_the_keys_in_turn() {
        let store = scratch("spread-chain");
        for number in 0..64 {
            store.put(&kernel_key(number), None, b"artifact", Duration::ZERO);
        }
        let keys: Vec<_> = (0..64).map(kernel_key).collect();
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
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        if cores > 1 {
            assert!(threads.len() > 1, "one thread answered every key");
        }
        assert!(!threads.contains(&std::thread::current().id()));
        drop(std::fs::remove_dir_all(store.root()));
    }

    // F10, F11: a lookup of many packed keys, over most of the store's
    // shards, answers every one while keeping few of the shards' files
    // open (each open view holds two descriptors; a view closed to make
    // room opens again when its shard is read again).
    #[test]
    fn f11_a_large_packed_lookup_keeps_few_files_open_and_answers_every_key() {
        use crate::{DiskStore, StoreConfig};
        let root = std::env::temp_dir().join(format!("kiln-store-views-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let config = StoreConfig {
            collects_automatically: false,
            ..StoreConfig::at(root.clone())
        };
        let store = DiskStore::open(config.clone()).expect("a store");
        for number in 0..700 {
            let bytes = format!("packed artifact {number}").into_bytes();
            store.put(&kernel_key(number), None, &bytes, Duration::ZERO);
        }
        drop(store);
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
