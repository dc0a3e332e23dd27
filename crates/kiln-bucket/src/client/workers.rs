//! The threads that send a bucket's GETs, kept between calls: a batch's
//! lookup hands its requests to threads already started instead of
//! starting one per request (tens of them cost milliseconds on a busy
//! machine, on the launch path), and a thread idle for
//! [`IDLE_FOR`] ends.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// How long a sending thread waits for work before it ends.
const IDLE_FOR: Duration = Duration::from_secs(20);

/// Work for a sending thread.
pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

/// A bounded set of sending threads, started as work needs them.
#[derive(Debug)]
pub(crate) struct Workers {
    state: Mutex<State>,
    wake: Condvar,
    /// The most threads at once.
    most: usize,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    /// Threads waiting for work.
    idle: usize,
    /// Threads started and not ended.
    live: usize,
}

impl std::fmt::Debug for State {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("State")
            .field("jobs", &self.jobs.len())
            .field("idle", &self.idle)
            .field("live", &self.live)
            .finish()
    }
}

impl Workers {
    /// At most `most` threads (at least one).
    pub(crate) fn new(most: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::default(),
            wake: Condvar::new(),
            most: most.max(1),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `job` on a waiting thread, or on one started for it while
    /// fewer than the bound run; past the bound it waits for the first
    /// thread free. Where no thread runs and none can start, it runs on
    /// the caller's thread.
    pub(crate) fn run(self: &Arc<Self>, job: Job) {
        let mut state = self.state();
        state.jobs.push_back(job);
        if state.idle >= state.jobs.len() || state.live >= self.most {
            self.wake.notify_one();
            return;
        }
        state.live += 1;
        drop(state);
        if self.start() {
            return;
        }
        let mut state = self.state();
        state.live -= 1;
        if state.live == 0 {
            // Nothing will take it: run what is queued here.
            let jobs: Vec<Job> = state.jobs.drain(..).collect();
            drop(state);
            for job in jobs {
                job();
            }
        }
    }

    /// Starts a thread to wait for work when none runs: the first job
    /// then finds it started.
    pub(crate) fn ready_one(self: &Arc<Self>) {
        let mut state = self.state();
        if state.live > 0 {
            return;
        }
        state.live += 1;
        drop(state);
        if !self.start() {
            self.state().live -= 1;
        }
    }

    /// Starts one thread, counted in `live` by the caller; `false` when
    /// none starts.
    fn start(self: &Arc<Self>) -> bool {
        let workers = Arc::clone(self);
        std::thread::Builder::new()
            .name("kiln-bucket-get".to_owned())
            .spawn(move || workers.work())
            .is_ok()
    }

    /// A thread's loop: the next job, until none came for [`IDLE_FOR`].
    fn work(&self) {
        let mut state = self.state();
        loop {
            if let Some(job) = state.jobs.pop_front() {
                drop(state);
                job();
                state = self.state();
                continue;
            }
            state.idle += 1;
            let (next, waited) = self
                .wake
                .wait_timeout(state, IDLE_FOR)
                .unwrap_or_else(PoisonError::into_inner);
            state = next;
            state.idle -= 1;
            if waited.timed_out() && state.jobs.is_empty() {
                state.live -= 1;
                return;
            }
        }
    }

    /// Threads started and not ended.
    #[cfg(test)]
    pub(crate) fn live(&self) -> usize {
        self.state().live
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    fn wait_for(what: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !what() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn p16_sending_threads_are_kept_between_calls_and_bounded() {
        // P16: a batch's requests go out together, bounded, on threads
        // that the next call finds started.
        let workers = Workers::new(4);
        let done = Arc::new(AtomicUsize::new(0));
        let (most, running) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let threads = Arc::new(Mutex::new(std::collections::HashSet::new()));
        for round in 1..=3 {
            for _ in 0..12 {
                let (done, most, running, threads) = (
                    Arc::clone(&done),
                    Arc::clone(&most),
                    Arc::clone(&running),
                    Arc::clone(&threads),
                );
                workers.run(Box::new(move || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    threads
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(std::thread::current().id());
                    std::thread::sleep(Duration::from_millis(20));
                    running.fetch_sub(1, Ordering::SeqCst);
                    done.fetch_add(1, Ordering::SeqCst);
                }));
            }
            wait_for(|| done.load(Ordering::SeqCst) == 12 * round);
            assert_eq!(done.load(Ordering::SeqCst), 12 * round, "every job ran");
            assert!(workers.live() >= 1, "the threads wait for the next call");
        }
        let most = most.load(Ordering::SeqCst);
        assert!((2..=4).contains(&most), "{most} jobs at once");
        let threads = threads.lock().unwrap_or_else(PoisonError::into_inner).len();
        assert!(threads <= 4, "36 jobs on {threads} threads");
    }

    #[test]
    fn p16_a_thread_readied_ahead_takes_the_first_job() {
        // P16: a tier bound starts one sending thread, which its first
        // batch's pack GET finds waiting.
        let workers = Workers::new(4);
        workers.ready_one();
        workers.ready_one();
        assert_eq!(workers.live(), 1, "one thread, readied once");
        wait_for(|| workers.state().idle == 1);
        let ran_on = Arc::new(Mutex::new(None));
        let on = Arc::clone(&ran_on);
        workers.run(Box::new(move || {
            *on.lock().unwrap_or_else(PoisonError::into_inner) =
                Some(std::thread::current().name().map(str::to_owned));
        }));
        wait_for(|| {
            ran_on
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_some()
        });
        assert_eq!(workers.live(), 1, "no thread started for the job");
        assert_eq!(
            *ran_on.lock().unwrap_or_else(PoisonError::into_inner),
            Some(Some("kiln-bucket-get".to_owned()))
        );
    }
}
