//! A batch pack's GET: sent by the thread that reads the pack, or sent
//! ahead on one of the store's sending threads, beside the front's
//! lookup of the batch, when that lookup is sure to reach the bucket
//! (the tier asked the front for one of its keys first, and it missed):
//! a node with an empty disk then waits for the pack's round trip alone,
//! not for its disk's misses and then the round trip.
//!
//! A GET sent ahead answers once: to the lookup that reads it, or, if
//! that lookup never does, to the breaker alone (its answer dropped,
//! unread). Either way its call is closed once, so a probe of a breaker
//! half open is never left hanging.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kiln_engine::store::StoreCounters;
use kiln_remote::breaker::Permit;

use super::BucketStore;
use crate::client::Answer;

/// A batch pack's GET, sent or to be sent, under its call's deadline.
pub(crate) struct PackGet {
    store: BucketStore,
    object: String,
    /// The call's permit and deadline; `None` when the breaker kept the
    /// call away.
    call: Option<(Permit, Instant)>,
    /// When it was sent (or, not sent yet, made).
    pub(super) sent: Instant,
    /// Where its answer lands when it was sent ahead.
    ahead: Option<Arc<Slot>>,
    /// Whether its answer was read (its call is the reader's to close).
    read: bool,
}

impl std::fmt::Debug for PackGet {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("PackGet")
            .field("object", &self.object)
            .field("ahead", &self.ahead.is_some())
            .field("read", &self.read)
            .finish_non_exhaustive()
    }
}

/// How long the lookup waits, at most, for the sending thread to take
/// its pack's GET before it reads the disk: the disk's lookup takes this
/// thread and others of its own, and on a loaded 2-core machine a sending
/// thread woken beside them waited up to 12 ms for a core (measured),
/// where the lookup waiting lets it run at once.
const TAKEN_WITHIN: Duration = Duration::from_millis(2);

/// Where a GET sent ahead lands.
#[derive(Default)]
struct Slot {
    state: Mutex<Landing>,
    landed: Condvar,
    /// Whether a sending thread took the GET.
    taken: Mutex<bool>,
    taken_now: Condvar,
}

#[derive(Default)]
enum Landing {
    /// Under way; its reader may come.
    #[default]
    Waiting,
    /// Answered, after this long: its reader takes it.
    Landed(Answer, Duration),
    /// Its reader left without reading it: the sender closes the call.
    Unread,
    /// Its reader gave up at the deadline and closed the call: the
    /// sender drops a late answer.
    Closed,
}

impl Slot {
    fn state(&self) -> MutexGuard<'_, Landing> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl BucketStore {
    /// The GET of `object`, a batch pack, in a call of its own: sent now
    /// on a sending thread when `ahead`, else by [`PackGet::answer`] on
    /// the reader's thread. Counted as a call, and as a request once sent.
    pub(super) fn pack_get(&self, object: String, ahead: bool) -> PackGet {
        let call = self.open_call(0);
        let mut get = PackGet {
            store: self.clone(),
            object,
            call,
            sent: Instant::now(),
            ahead: None,
            read: false,
        };
        if ahead && let Some((_, deadline)) = get.call {
            let slot = Arc::new(Slot::default());
            let (store, object) = (self.clone(), get.object.clone());
            let landing = Arc::clone(&slot);
            StoreCounters::add(&self.inner.more.requests, 1);
            self.inner.workers.run(Box::new(move || {
                *landing.taken.lock().unwrap_or_else(PoisonError::into_inner) = true;
                landing.taken_now.notify_all();
                let sent = Instant::now();
                let answer = store.inner.client.get(&object, deadline);
                let took = sent.elapsed();
                let mut state = landing.state();
                match std::mem::take(&mut *state) {
                    Landing::Unread => {
                        drop(state);
                        store.close_call_by(&answer, call_permit(call));
                    }
                    Landing::Closed => *state = Landing::Closed,
                    Landing::Waiting | Landing::Landed(..) => {
                        *state = Landing::Landed(answer, took);
                        landing.landed.notify_all();
                    }
                }
            }));
            let until = Instant::now() + TAKEN_WITHIN;
            let mut taken = slot.taken.lock().unwrap_or_else(PoisonError::into_inner);
            while !*taken && let Some(left) = until.checked_duration_since(Instant::now()) {
                taken = slot
                    .taken_now
                    .wait_timeout(taken, left)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            drop(taken);
            get.ahead = Some(slot);
        }
        get
    }
}

/// The permit of a call opened (the job that sends the GET ahead is only
/// started for one).
fn call_permit(call: Option<(Permit, Instant)>) -> Permit {
    call.map_or(Permit::Closed, |(permit, _)| permit)
}

impl BucketStore {
    /// Ends a batch pack's call by its one answer.
    fn close_call_by(&self, answer: &Answer, permit: Permit) {
        self.close_call(permit, super::pack::telling(answer));
    }
}

impl PackGet {
    /// The call's permit and deadline; `None` when the breaker kept the
    /// call away (nothing is sent then).
    pub(super) fn call(&self) -> Option<(Permit, Instant)> {
        self.call
    }

    /// Its answer, and how long after it was sent it came: sent now, on
    /// this thread, unless it was sent ahead; then waited for until the
    /// call's deadline. The call is the caller's to close.
    pub(super) fn answer(mut self) -> (Answer, Duration) {
        self.read = true;
        let Some((_, deadline)) = self.call else {
            return (
                Answer::Failed("the bucket is left alone after a failure".to_owned()),
                Duration::ZERO,
            );
        };
        let Some(slot) = self.ahead.take() else {
            StoreCounters::add(&self.store.inner.more.requests, 1);
            let sent = Instant::now();
            let answer = self.store.inner.client.get(&self.object, deadline);
            return (answer, sent.elapsed());
        };
        let mut state = slot.state();
        loop {
            if matches!(*state, Landing::Landed(..))
                && let Landing::Landed(answer, took) = std::mem::take(&mut *state)
            {
                return (answer, took);
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                *state = Landing::Closed;
                let late = "no answer within the call's time".to_owned();
                return (Answer::Failed(late), self.sent.elapsed());
            };
            state = slot
                .landed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl Drop for PackGet {
    /// A GET sent ahead and never read: its answer, once it lands, closes
    /// its call (one outage warning if it failed) and is dropped.
    fn drop(&mut self) {
        if self.read {
            return;
        }
        let Some(slot) = self.ahead.take() else {
            return;
        };
        let mut state = slot.state();
        match std::mem::take(&mut *state) {
            Landing::Landed(answer, _) => {
                *state = Landing::Closed;
                drop(state);
                self.store.close_call_by(&answer, call_permit(self.call));
            }
            Landing::Waiting | Landing::Unread => *state = Landing::Unread,
            Landing::Closed => *state = Landing::Closed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::nowhere;

    fn wait_for(what: impl Fn() -> bool) -> bool {
        let until = Instant::now() + Duration::from_secs(5);
        while !what() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(2));
        }
        what()
    }

    #[test]
    fn p16_a_pack_get_sent_ahead_and_never_read_still_closes_its_call() {
        // Dropped before it answered, and after: either way its failure
        // reaches the breaker once (one outage), and nothing waits for it.
        for read_late in [false, true] {
            let store = nowhere();
            let get = store.pack_get("p/set".to_owned(), true);
            assert_eq!(store.bucket_statistics().requests, 1, "sent at once");
            if read_late {
                assert!(wait_for(|| matches!(
                    *get.ahead.as_ref().expect("sent ahead").state(),
                    Landing::Landed(..)
                )));
            }
            drop(get);
            assert!(
                wait_for(|| store.bucket_statistics().breaker_opened == 1),
                "late {read_late}: {:?}",
                store.bucket_statistics()
            );
            assert_eq!(store.bucket_statistics().calls, 1);
        }
    }

    #[test]
    fn p16_a_pack_get_sent_ahead_is_read_once_by_its_lookup() {
        let store = nowhere();
        let get = store.pack_get("p/set".to_owned(), true);
        let (answer, _) = get.answer();
        assert!(matches!(answer, Answer::Failed(_)), "{answer:?}");
        // The reader closes the call: the sender does not close it again.
        std::thread::sleep(Duration::from_millis(50));
        let counts = store.bucket_statistics();
        assert_eq!(
            (counts.requests, counts.breaker_opened),
            (1, 0),
            "{counts:?}"
        );
    }
}
