//! Waiting for the keys others hold (P12): who holds them, and a batched
//! lookup with a short back-off until one is published or let go, or the
//! store's claim timeout passes.

use std::time::{Duration, Instant};

use super::super::KernelLoader;
use super::super::progress::Waiting;
use super::Job;
use crate::store::BoundStore;
use crate::target::CompilationTarget;

/// How often a batch waiting for keys others hold tries to claim them
/// (P12): a released key or a lease run out is taken over within it, and
/// a remote tier is not asked for a lease per key at every poll.
const CLAIM_RETRY: Duration = Duration::from_millis(100);

impl<T: CompilationTarget> KernelLoader<T> {
    /// What the batch is about to wait for: its kernels others hold, and
    /// the first few holders the store can name.
    pub(in crate::loader) fn waiting_for(
        &self,
        jobs: &[Job<'_, T>],
        store: &BoundStore<T::Compiler>,
    ) -> Waiting {
        /// The most holders named: a line, not a list.
        const NAMED: usize = 3;
        /// The most keys asked for their holder: a remote tier answers
        /// each with a round trip, and a batch waits for many.
        const ASKED: usize = 8;
        let held: Vec<&Job<'_, T>> = jobs.iter().filter(|job| job.is_elsewhere()).collect();
        let mut holders: Vec<String> = Vec::new();
        for job in held.iter().take(ASKED) {
            if holders.len() == NAMED {
                break;
            }
            if let Some(holder) = store.holder(self.target.compiler(), &job.id)
                && !holders.contains(&holder)
            {
                holders.push(holder);
            }
        }
        Waiting {
            kernels: held.len(),
            holders,
        }
    }

    /// Waits until another holder published, released or lost at least one
    /// of the keys it holds (P12), polling with a short back-off; past
    /// `deadline` (the store's claim timeout) compiles them all here too.
    pub(in crate::loader) fn wait_for_others(
        &mut self,
        jobs: &mut [Job<'_, T>],
        deadline: Option<Instant>,
    ) {
        let Some(store) = self.store.as_ref() else {
            for job in jobs.iter_mut().filter(|job| job.is_elsewhere()) {
                job.compile_anyway(&mut self.statistics);
            }
            return;
        };
        let waiting = self.waiting_for(jobs, store);
        log::info!("waiting for {waiting}");
        self.progress.wait(Some(waiting));
        let mut pause = Duration::from_millis(5);
        // The workers just tried to claim them.
        let mut claims_tried = Instant::now();
        loop {
            // One batched lookup of every key still held (P10: a round
            // trip to a remote tier, not one per key)...
            let held: Vec<usize> = (0..jobs.len())
                .filter(|&index| jobs[index].is_elsewhere())
                .collect();
            let ids: Vec<_> = held.iter().map(|&index| &jobs[index].id).collect();
            let found = store.lookup_many(self.target.compiler(), &ids);
            let mut taken = false;
            for (&index, found) in held.iter().zip(found) {
                if matches!(found, crate::store::Lookup::Hit { .. }) {
                    jobs[index].take_hit(&mut self.target, found, &mut self.statistics);
                    taken = true;
                }
            }
            // ...and, now and then, a claim of each: a holder that released
            // a key unpublished or whose lease ran out lost it.
            if !taken && claims_tried.elapsed() >= CLAIM_RETRY {
                claims_tried = Instant::now();
                for job in jobs.iter_mut().filter(|job| job.is_elsewhere()) {
                    taken |= job.take_published(&mut self.target, store, &mut self.statistics);
                }
            }
            if taken {
                self.progress.wait(None);
                return;
            }
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                let held: Vec<_> = jobs.iter_mut().filter(|job| job.is_elsewhere()).collect();
                log::warn!(
                    "{} kernels were still claimed elsewhere past the store's claim timeout (by \
                     another process or machine, or by a claim a remote store that stopped \
                     answering could not let go); compiling them here too",
                    held.len()
                );
                for job in held {
                    job.compile_anyway(&mut self.statistics);
                }
                self.progress.wait(None);
                return;
            }
            let left = deadline.map_or(pause, |deadline| deadline - now);
            std::thread::sleep(pause.min(left));
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }
}
