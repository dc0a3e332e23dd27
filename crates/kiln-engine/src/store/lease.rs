//! Leases (P12): a claim's holder renews its lease while it works, so a
//! holder that hangs (a compile stuck, a process stopped) loses its claims
//! after [`DEFAULT_LEASE`] or the store's own lease, and a waiter compiles
//! the key instead. A holder that dies loses them at once by other means
//! (the disk store's byte-range locks); the lease covers the holder that
//! lives and does not move.
//!
//! One thread per process renews every lease held: a [`Renewal`] registers
//! a renewing function with it and unregisters it when dropped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// How long a claim's lease lasts unless renewed, by default: long enough
/// that a loaded machine renews in time (every third of it), short enough
/// that a stopped holder costs its waiters seconds, not minutes.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// A lease being renewed by the process's renewing thread until dropped
/// (or [`stop`](Self::stop)ped, as a hung holder would stop).
#[derive(Debug)]
pub struct Renewal {
    stopped: Arc<AtomicBool>,
}

struct Entry {
    due: Instant,
    every: Duration,
    renew: Box<dyn FnMut() -> bool + Send>,
    stopped: Arc<AtomicBool>,
}

#[derive(Default)]
struct Renewer {
    entries: Mutex<Vec<Entry>>,
    added: Condvar,
}

fn renewer() -> &'static Renewer {
    static RENEWER: OnceLock<&'static Renewer> = OnceLock::new();
    RENEWER.get_or_init(|| {
        let renewer: &'static Renewer = Box::leak(Box::default());
        let spawned = std::thread::Builder::new()
            .name("kiln-lease".into())
            .spawn(move || renewer.run());
        if let Err(error) = spawned {
            // Without the thread, leases run out and a waiter compiles the
            // key too: a duplicate compile, never a wrong artifact.
            log::warn!("kiln: cannot start the lease thread ({error}); claims will not be renewed");
        }
        renewer
    })
}

impl Renewer {
    fn run(&self) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let now = Instant::now();
            entries.retain_mut(|entry| {
                if entry.stopped.load(Ordering::Acquire) {
                    return false;
                }
                if entry.due > now {
                    return true;
                }
                entry.due = now + entry.every;
                // A renewal that finds the lease taken over stops: the key
                // is another holder's now.
                (entry.renew)()
            });
            let next = entries.iter().map(|entry| entry.due).min();
            let wait = next.map_or(Duration::from_secs(1), |due| {
                due.saturating_duration_since(Instant::now())
            });
            entries = self
                .added
                .wait_timeout(entries, wait.max(Duration::from_millis(1)))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl Renewal {
    /// Calls `renew` every `every` on the process's lease thread until the
    /// renewal drops or `renew` returns `false` (the lease is no longer
    /// this holder's).
    pub fn every(every: Duration, renew: impl FnMut() -> bool + Send + 'static) -> Self {
        let stopped = Arc::new(AtomicBool::new(false));
        let renewer = renewer();
        let mut entries = renewer
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let every = every.max(Duration::from_millis(1));
        entries.push(Entry {
            due: Instant::now() + every,
            every,
            renew: Box::new(renew),
            stopped: Arc::clone(&stopped),
        });
        drop(entries);
        renewer.added.notify_all();
        Self { stopped }
    }

    /// Stops renewing: the lease runs out as a hung holder's would.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
    }
}

impl Drop for Renewal {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[test]
    fn a_renewal_renews_until_it_drops() {
        let count = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&count);
        let renewal = Renewal::every(Duration::from_millis(5), move || {
            counted.fetch_add(1, Ordering::Relaxed);
            true
        });
        let started = Instant::now();
        while count.load(Ordering::Relaxed) < 3 {
            assert!(started.elapsed() < Duration::from_secs(10), "renewed");
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(renewal);
        std::thread::sleep(Duration::from_millis(20));
        let after = count.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(
            count.load(Ordering::Relaxed),
            after,
            "no renewal after drop"
        );
    }
}
