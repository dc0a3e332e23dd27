//! A batch's lookup spread over a few threads (F3, F11): a warm start asks
//! for every kernel at once, and each hit is a few reads of its shard and
//! a digest of its bytes, independent of the others (each shard has its
//! own lock). One thread read 64 GEMM artifacts in 2.4 ms on an H100 host,
//! where their module loads took 2.0 ms: spread, the lookup stops being
//! the larger half of a warm start.

use std::num::NonZeroUsize;
use std::sync::OnceLock;

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

/// Looks `keys` up in `store`, in order, on as many threads as they fill.
pub(super) fn lookup_many(store: &DiskStore, keys: &[StoreKey]) -> Vec<Lookup<Vec<u8>>> {
    // Asked of the system once: it reads files (the process's CPU quota).
    static CORES: OnceLock<usize> = OnceLock::new();
    let threads = if keys.len() < 2 * KEYS_PER_THREAD {
        1
    } else {
        let cores = *CORES
            .get_or_init(|| std::thread::available_parallelism().map_or(1, NonZeroUsize::get));
        threads_for(keys.len(), cores)
    };
    if threads == 1 {
        return keys.iter().map(|key| store.lookup(key)).collect();
    }
    let chunk = keys.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let mut chunks = keys.chunks(chunk);
        let mine = chunks.next().unwrap_or_default();
        let others: Vec<_> = chunks
            .map(|keys| {
                // A thread the system refuses leaves its keys to the caller.
                std::thread::Builder::new()
                    .name("kiln-lookup".into())
                    .spawn_scoped(scope, move || {
                        keys.iter().map(|key| store.lookup(key)).collect::<Vec<_>>()
                    })
                    .map_err(|_| keys)
            })
            .collect();
        let mut found: Vec<Lookup<Vec<u8>>> = mine.iter().map(|key| store.lookup(key)).collect();
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
