//! Per-key GETs that may outlive the call that started them: a lookup
//! read through its batch's pack answers as soon as the pack covers every
//! key, and the per-key GETs still under way end by themselves, by the
//! call's deadline.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kiln_engine::store::StoreCounters;

use super::BucketStore;
use crate::client::Answer;

/// Whether the per-key GETs may be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    /// Not yet: the pack has its head start.
    Held,
    /// Send them.
    Open,
    /// The pack answered everything: send no more.
    Closed,
}

struct State {
    answers: Vec<Option<Answer>>,
    gate: Gate,
    /// How many of the GETs may be sent by now.
    allowed: usize,
    /// The next GET to send.
    next: usize,
}

/// The per-key GETs of one call, each answer landing in its place.
pub(super) struct Flight {
    store: BucketStore,
    objects: Vec<String>,
    deadline: Instant,
    state: Mutex<State>,
    changed: Condvar,
}

impl Flight {
    pub(super) fn new(store: BucketStore, objects: Vec<String>, deadline: Instant) -> Self {
        let answers = (0..objects.len()).map(|_| None).collect();
        Self {
            store,
            objects,
            deadline,
            state: Mutex::new(State {
                answers,
                gate: Gate::Held,
                allowed: 0,
                next: 0,
            }),
            changed: Condvar::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn len(&self) -> usize {
        self.objects.len()
    }

    /// Sends the GETs on up to `helpers` of the store's sending threads
    /// once the gate opens, or in waves from `delay` after `start` (when
    /// the pack's GET went) unless it closed by then (see [`released`]).
    pub(super) fn hedge(self: Arc<Self>, start: Instant, delay: Duration, helpers: usize) {
        let workers = Arc::clone(&self.store.inner.workers);
        workers.run(Box::new(move || self.release(start, delay, helpers)));
    }

    /// Sends every GET now, on up to `helpers` threads, this one among
    /// them, and answers each in its order by the call's deadline
    /// (`None` for one not answered by then).
    pub(super) fn send_all(self: Arc<Self>, helpers: usize) -> Vec<Option<Answer>> {
        self.open();
        let workers = &self.store.inner.workers;
        for _ in 1..helpers.clamp(1, self.len().max(1)) {
            let flight = Arc::clone(&self);
            workers.run(Box::new(move || flight.work()));
        }
        self.work();
        let every: Vec<usize> = (0..self.len()).collect();
        self.wait(&every)
    }

    /// The hedge's job: raises how many GETs may be sent as the waves
    /// come (all at once when [`open`](Self::open)ed), with a sending
    /// job per GET allowed, up to `helpers`; this one sends too.
    fn release(self: Arc<Self>, start: Instant, delay: Duration, helpers: usize) {
        let total = self.objects.len();
        // The sending jobs handed out besides this one.
        let mut threads = 0;
        let mut state = self.state();
        loop {
            let waited = start.elapsed();
            if state.gate == Gate::Held && waited >= delay {
                state.gate = Gate::Open;
            }
            match state.gate {
                Gate::Closed => return,
                Gate::Held => {}
                Gate::Open => {
                    state.allowed = state.allowed.max(released(total, delay, waited));
                    self.changed.notify_all();
                    // Once every GET is allowed, this thread sends too.
                    let all = state.allowed >= total;
                    let wanted = if all {
                        helpers.saturating_sub(1)
                    } else {
                        state.allowed.min(helpers)
                    };
                    if threads < wanted {
                        // Handed out without the lock: a thread may have
                        // to start for them.
                        drop(state);
                        while threads < wanted {
                            let flight = Arc::clone(&self);
                            self.store
                                .inner
                                .workers
                                .run(Box::new(move || flight.work()));
                            threads += 1;
                        }
                        // What changed meanwhile is read again.
                        state = self.state();
                        continue;
                    }
                    if all {
                        drop(state);
                        self.work();
                        return;
                    }
                }
            }
            let next = match state.gate {
                Gate::Held => delay,
                _ => next_wave(total, delay, waited),
            };
            let left = next
                .saturating_sub(start.elapsed())
                .max(Duration::from_millis(1));
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// The per-key GETs are wanted now, all of them.
    pub(super) fn open(&self) {
        let mut state = self.state();
        if state.gate != Gate::Closed {
            state.gate = Gate::Open;
            state.allowed = self.objects.len();
        }
        self.changed.notify_all();
    }

    /// No per-key GET is wanted any more.
    pub(super) fn close(&self) {
        self.state().gate = Gate::Closed;
        self.changed.notify_all();
    }

    /// Sends the next request not yet sent, as the waves allow, until
    /// none is left, the gate closed or the call's time ran out.
    pub(super) fn work(&self) {
        loop {
            let index = {
                let mut state = self.state();
                loop {
                    if state.gate == Gate::Closed || state.next >= self.objects.len() {
                        return;
                    }
                    if state.gate == Gate::Open && state.next < state.allowed {
                        break;
                    }
                    let Some(left) = self.deadline.checked_duration_since(Instant::now()) else {
                        return;
                    };
                    state = self
                        .changed
                        .wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                state.next += 1;
                state.next - 1
            };
            let object = &self.objects[index];
            StoreCounters::add(&self.store.inner.more.requests, 1);
            let answer = self.store.inner.client.get(object, self.deadline);
            self.state().answers[index] = Some(answer);
            self.changed.notify_all();
        }
    }

    /// The answers of `wanted`, in its order, waiting for them until the
    /// call's deadline; `None` for one that did not come by then.
    pub(super) fn wait(&self, wanted: &[usize]) -> Vec<Option<Answer>> {
        let mut state = self.state();
        loop {
            if wanted.iter().all(|index| state.answers[*index].is_some()) {
                break;
            }
            let Some(left) = self.deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        wanted
            .iter()
            .map(|index| state.answers[*index].take())
            .collect()
    }
}

/// How many of `total` per-key GETs may be sent `waited` after the
/// lookup began, with the head start `delay`: none before it; then
/// waves that double every eighth of a head start, from an eighth of
/// them (at least one): a pack that answers soon after its head start
/// spares most of them, and a lookup whose pack is slow or missing has
/// every GET out within 1.375 head starts (see
/// [`all_released`]; at once when the pack answered without them).
pub(crate) fn released(total: usize, delay: Duration, waited: Duration) -> usize {
    if waited < delay || total == 0 {
        return 0;
    }
    let step = wave_step(delay);
    let doublings = ((waited - delay).as_nanos() / step.as_nanos()).min(16) as u32;
    total.div_ceil(8).saturating_mul(1 << doublings).min(total)
}

/// The time between two waves: an eighth of the head start.
fn wave_step(delay: Duration) -> Duration {
    (delay / 8).max(Duration::from_millis(1))
}

/// When every one of `total` per-key GETs may be sent, after the lookup
/// began with the head start `delay`.
pub(crate) fn all_released(total: usize, delay: Duration) -> Duration {
    let mut at = delay;
    while released(total, delay, at) < total {
        at += wave_step(delay);
    }
    at
}

/// When the wave after `waited` comes.
fn next_wave(total: usize, delay: Duration, waited: Duration) -> Duration {
    let step = wave_step(delay);
    let mut at = delay;
    while at <= waited || released(total, delay, at) <= released(total, delay, waited) {
        if released(total, delay, at) >= total {
            return at.max(waited + step);
        }
        at += step;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::nowhere;

    fn flight(store: &BucketStore) -> Arc<Flight> {
        let objects = (0..3).map(|index| format!("e/{index}")).collect();
        let deadline = Instant::now() + Duration::from_secs(5);
        Arc::new(Flight::new(store.clone(), objects, deadline))
    }

    #[test]
    fn p16_per_key_gets_go_in_doubling_waves_after_the_head_start() {
        let delay = Duration::from_millis(60);
        let at = |ms| released(64, delay, Duration::from_millis(ms));
        assert_eq!(
            [
                at(0),
                at(59),
                at(60),
                at(67),
                at(68),
                at(75),
                at(82),
                at(83),
                at(500)
            ],
            [0, 0, 8, 8, 16, 32, 32, 64, 64]
        );
        assert_eq!(released(3, delay, delay), 1);
        assert_eq!(
            next_wave(64, delay, Duration::from_millis(61)),
            Duration::from_micros(67_500)
        );
        assert_eq!(all_released(64, delay), Duration::from_micros(82_500));
        assert_eq!(all_released(16, delay), Duration::from_micros(82_500));
        assert_eq!(all_released(2, delay), Duration::from_micros(67_500));
    }

    #[test]
    fn p16_per_key_gets_wait_for_their_wave() {
        // An eighth goes after the head start; the rest wait for theirs.
        let store = nowhere();
        let objects = (0..16).map(|index| format!("e/{index}")).collect();
        let deadline = Instant::now() + Duration::from_secs(8);
        let flight = Arc::new(Flight::new(store.clone(), objects, deadline));
        // The second wave comes 250 ms after the first: room for a
        // loaded machine's late wake-up.
        Arc::clone(&flight).hedge(Instant::now(), Duration::from_millis(2000), 4);
        std::thread::sleep(Duration::from_millis(2120));
        assert_eq!(store.bucket_statistics().requests, 2);
        flight.open();
        let answers = flight.wait(&(0..16).collect::<Vec<_>>());
        assert!(answers.iter().all(Option::is_some));
        assert_eq!(store.bucket_statistics().requests, 16);
    }

    #[test]
    fn p16_per_key_gets_closed_within_the_head_start_are_never_sent() {
        let store = nowhere();
        let flight = flight(&store);
        Arc::clone(&flight).hedge(Instant::now(), Duration::from_millis(200), 2);
        flight.close();
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(store.bucket_statistics().requests, 0);
    }

    #[test]
    fn p16_per_key_gets_opened_are_each_sent_and_answered() {
        let store = nowhere();
        let flight = flight(&store);
        Arc::clone(&flight).hedge(Instant::now(), Duration::from_secs(60), 2);
        flight.open();
        let answers = flight.wait(&[0, 1, 2]);
        assert!(
            answers
                .iter()
                .all(|answer| matches!(answer, Some(Answer::Failed(_)))),
            "{answers:?}"
        );
        assert_eq!(store.bucket_statistics().requests, 3);
    }
}
