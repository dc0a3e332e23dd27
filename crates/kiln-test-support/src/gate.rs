//! A gate that holds every thread but one until that one opens it: for
//! tests of work spread over threads which prove that the calling thread
//! never waits for the others (its first answer comes while they are
//! held).

use std::sync::{Condvar, Mutex, PoisonError};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

/// Holds every thread but its owner's at [`hold`](Self::hold) until the
/// owner [`open`](Self::open)s it, or a bound passes: a test whose code
/// under test waits for the held threads ends after the bound, failing,
/// instead of hanging.
pub struct Gate {
    owner: ThreadId,
    opened: Mutex<bool>,
    changed: Condvar,
    bound: Duration,
}

impl Gate {
    /// A gate owned by the calling thread, holding the others at most
    /// `bound`.
    pub fn owned_here(bound: Duration) -> Self {
        Self {
            owner: thread::current().id(),
            opened: Mutex::new(false),
            changed: Condvar::new(),
            bound,
        }
    }

    /// Returns at once on the owner's thread; on any other, once the gate
    /// is open or the bound has passed.
    pub fn hold(&self) {
        if thread::current().id() == self.owner {
            return;
        }
        let opened = self.opened.lock().unwrap_or_else(PoisonError::into_inner);
        drop(
            self.changed
                .wait_timeout_while(opened, self.bound, |opened| !*opened)
                .unwrap_or_else(PoisonError::into_inner),
        );
    }

    /// Opens the gate: every thread held goes on, and none is held again.
    pub fn open(&self) {
        *self.opened.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.changed.notify_all();
    }
}

/// The first answer of a call spread over threads held at a [`Gate`]:
/// where it was made and how long after the call it came. Noting it opens
/// the gate.
pub struct FirstAnswer<'a> {
    gate: &'a Gate,
    asked: Instant,
    first: Option<(Duration, ThreadId)>,
    answered: usize,
}

impl<'a> FirstAnswer<'a> {
    /// Starts the clock: the call is made now.
    pub fn asked(gate: &'a Gate) -> Self {
        Self {
            gate,
            asked: Instant::now(),
            first: None,
            answered: 0,
        }
    }

    /// An answer made on `thread`; the first opens the gate.
    pub fn note(&mut self, thread: ThreadId) {
        if self.first.is_none() {
            self.first = Some((self.asked.elapsed(), thread));
            self.gate.open();
        }
        self.answered += 1;
    }

    /// Asserts that `answers` answers came, the first made on the gate's
    /// owner's thread within a second of the call; `elsewhere` says where
    /// the first answer came from when it was not.
    pub fn assert_made_by_the_caller(&self, answers: usize, elsewhere: &str) {
        assert_eq!(self.answered, answers);
        let (waited, thread) = self.first.expect("an answer");
        assert_eq!(thread, self.gate.owner, "{elsewhere}");
        assert!(
            waited < Duration::from_secs(1),
            "the first answer came {waited:?} after the call"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::Gate;

    #[test]
    fn the_owner_passes_and_the_others_wait_until_it_opens() {
        let gate = Gate::owned_here(Duration::from_secs(5));
        gate.hold();
        std::thread::scope(|scope| {
            let held = scope.spawn(|| {
                let started = Instant::now();
                gate.hold();
                started.elapsed()
            });
            std::thread::sleep(Duration::from_millis(50));
            gate.open();
            let waited = held.join().expect("the held thread");
            assert!(waited >= Duration::from_millis(40), "held {waited:?}");
            assert!(waited < Duration::from_secs(5), "held {waited:?}");
        });
    }

    #[test]
    fn a_gate_never_opened_lets_the_others_go_after_its_bound() {
        let gate = Gate::owned_here(Duration::from_millis(20));
        std::thread::scope(|scope| {
            let held = scope.spawn(|| {
                let started = Instant::now();
                gate.hold();
                started.elapsed()
            });
            let waited = held.join().expect("the held thread");
            assert!(waited >= Duration::from_millis(20), "held {waited:?}");
        });
    }
}
