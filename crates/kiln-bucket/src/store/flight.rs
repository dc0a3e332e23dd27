//! Per-key GETs that may outlive the call that started them: a lookup
//! read through its batch's pack answers as soon as the pack covers every
//! key, and the per-key GETs still under way end by themselves, by the
//! call's deadline.

use std::sync::atomic::{AtomicUsize, Ordering};
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
}

/// The per-key GETs of one call, each answer landing in its place.
pub(super) struct Flight {
    store: BucketStore,
    objects: Vec<String>,
    deadline: Instant,
    next: AtomicUsize,
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
            next: AtomicUsize::new(0),
            state: Mutex::new(State {
                answers,
                gate: Gate::Held,
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

    /// Sends the GETs on `helpers` threads once the gate opens, or
    /// `delay` after now unless it closed by then; `false` when no thread
    /// started (the caller sends them itself).
    pub(super) fn hedge(self: Arc<Self>, delay: Duration, helpers: usize) -> bool {
        let flight = Arc::clone(&self);
        let started = std::thread::Builder::new()
            .name("kiln-bucket-get".to_owned())
            .spawn(move || {
                let until = Instant::now() + delay;
                {
                    let mut state = flight.state();
                    while state.gate == Gate::Held {
                        let Some(left) = until.checked_duration_since(Instant::now()) else {
                            break;
                        };
                        state = flight
                            .changed
                            .wait_timeout(state, left)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0;
                    }
                    if state.gate == Gate::Closed {
                        return;
                    }
                    state.gate = Gate::Open;
                }
                for _ in 1..helpers {
                    let flight = Arc::clone(&flight);
                    // A thread that cannot start leaves its share to the
                    // others.
                    let _ = std::thread::Builder::new()
                        .name("kiln-bucket-get".to_owned())
                        .spawn(move || flight.work());
                }
                flight.work();
            });
        started.is_ok()
    }

    /// The per-key GETs are wanted now.
    pub(super) fn open(&self) {
        let mut state = self.state();
        if state.gate == Gate::Held {
            state.gate = Gate::Open;
        }
        self.changed.notify_all();
    }

    /// No per-key GET is wanted any more.
    pub(super) fn close(&self) {
        self.state().gate = Gate::Closed;
        self.changed.notify_all();
    }

    /// Sends the next request not yet sent, until none is left or the
    /// gate closed.
    pub(super) fn work(&self) {
        loop {
            if self.state().gate == Gate::Closed {
                return;
            }
            let index = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(object) = self.objects.get(index) else {
                return;
            };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BucketConfig;

    /// A store on a loopback port where nothing listens: every GET fails
    /// at once, and is counted.
    fn nowhere() -> BucketStore {
        let keys = kiln_remote::Keys {
            fleet: Some(kiln_remote::keygen::fleet_key().expect("randomness")),
            ..kiln_remote::Keys::default()
        };
        let endpoint = url::Url::parse("http://127.0.0.1:9").expect("a URL");
        BucketStore::open(BucketConfig::new(endpoint, "kiln-test", keys)).expect("it opens")
    }

    fn flight(store: &BucketStore) -> Arc<Flight> {
        let objects = (0..3).map(|index| format!("e/{index}")).collect();
        let deadline = Instant::now() + Duration::from_secs(5);
        Arc::new(Flight::new(store.clone(), objects, deadline))
    }

    #[test]
    fn p16_per_key_gets_closed_within_the_head_start_are_never_sent() {
        let store = nowhere();
        let flight = flight(&store);
        assert!(Arc::clone(&flight).hedge(Duration::from_millis(200), 2));
        flight.close();
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(store.bucket_statistics().requests, 0);
    }

    #[test]
    fn p16_per_key_gets_opened_are_each_sent_and_answered() {
        let store = nowhere();
        let flight = flight(&store);
        assert!(Arc::clone(&flight).hedge(Duration::from_secs(60), 2));
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
