//! The circuit breaker (P10): after a failed call the remote is left alone
//! for a while, then one call probes it. A success closes the breaker; a
//! failure opens it again for twice as long, up to a minute. One error
//! never turns the remote off for the rest of the process, and a dead
//! remote costs each launch nothing once the breaker is open.
//!
//! One warning per outage: when the breaker first opens. A failed probe
//! stays quiet, and the remote coming back is logged at `info`.
//!
//! Public for the other shared tiers (the object-store tier), whose calls
//! it guards alike.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The longest the breaker stays open between probes.
const LONGEST: Duration = Duration::from_secs(60);

/// A circuit breaker over the calls to one remote tier.
#[derive(Debug)]
pub struct Breaker {
    /// What the tier is called in the line logged when it answers again.
    name: &'static str,
    first: Duration,
    state: Mutex<State>,
    /// How many times it opened: a call in flight ends when this changes.
    opened: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    /// When the breaker may let a probe through; `None` while closed.
    open_until: Option<Instant>,
    /// How long it opens for next.
    backoff: Duration,
    /// Whether a probe is in flight: only one call probes at a time.
    probing: bool,
}

/// Whether a call may go to the remote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permit {
    /// Closed: go ahead.
    Closed,
    /// Half open: this call is the probe.
    Probe,
    /// Open: do not call.
    Open,
}

impl Breaker {
    /// A closed breaker of the Redis tier that, once opened, first waits
    /// `retry_after` before a probe.
    pub fn new(retry_after: Duration) -> Self {
        Self::named("the remote store", retry_after)
    }

    /// [`new`](Self::new), for the tier `name` (as a sentence says it:
    /// "the bucket").
    pub fn named(name: &'static str, retry_after: Duration) -> Self {
        Self {
            name,
            first: retry_after,
            state: Mutex::new(State {
                backoff: retry_after,
                ..State::default()
            }),
            opened: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a call may go now; a [`Permit::Probe`] must be ended by
    /// [`succeeded_after`](Self::succeeded_after) or [`failed`](Self::failed).
    pub fn permit(&self) -> Permit {
        let mut state = self.state();
        match state.open_until {
            None => Permit::Closed,
            Some(until) if Instant::now() >= until && !state.probing => {
                state.probing = true;
                Permit::Probe
            }
            Some(_) => Permit::Open,
        }
    }

    /// How many times the breaker opened (a failed probe opening it again
    /// counts too).
    pub fn times_opened(&self) -> u64 {
        self.opened.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether the breaker is open now.
    pub fn is_open(&self) -> bool {
        self.state().open_until.is_some()
    }

    /// A call succeeded: the breaker closes, whatever let the call go.
    pub fn succeeded(&self) {
        let mut state = self.state();
        if state.open_until.take().is_some() {
            log::info!("kiln: {} answers again; using it", self.name);
        }
        state.probing = false;
        state.backoff = self.first;
    }

    /// A call that went with `permit` succeeded: a probe closes the
    /// breaker; a call let through while it was closed closes nothing that
    /// another call's failure opened meanwhile (calls that overlap).
    pub fn succeeded_after(&self, permit: Permit) {
        let mut state = self.state();
        if permit != Permit::Probe && state.open_until.is_some() {
            return;
        }
        if state.open_until.take().is_some() {
            log::info!("kiln: {} answers again; using it", self.name);
        }
        state.probing = false;
        state.backoff = self.first;
    }

    /// Opens the breaker after a failed call; `true` when this opened it
    /// (the start of an outage, the one time to warn).
    pub fn failed(&self, permit: Permit) -> bool {
        let mut state = self.state();
        let was_closed = state.open_until.is_none();
        if permit == Permit::Probe || was_closed {
            self.opened
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            state.open_until = Some(Instant::now() + state.backoff);
            if !was_closed {
                state.backoff = (state.backoff * 2).min(LONGEST);
            }
        }
        if permit == Permit::Probe {
            state.probing = false;
        }
        was_closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_breaker_lets_one_probe_through_after_its_wait_and_closes_on_success() {
        // P10: one error never turns the remote off for good.
        let breaker = Breaker::new(Duration::from_millis(20));
        assert_eq!(breaker.permit(), Permit::Closed);
        assert!(breaker.failed(Permit::Closed), "the first failure opens it");
        assert!(
            !breaker.failed(Permit::Closed),
            "and is the only one to say so"
        );
        assert_eq!(breaker.permit(), Permit::Open);
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(breaker.permit(), Permit::Probe);
        assert_eq!(breaker.permit(), Permit::Open, "one probe at a time");
        assert!(!breaker.failed(Permit::Probe), "a failed probe stays quiet");
        assert_eq!(breaker.permit(), Permit::Open, "and waits longer");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(breaker.permit(), Permit::Probe);
        breaker.succeeded();
        assert_eq!(breaker.permit(), Permit::Closed);
        assert!(!breaker.is_open());
    }

    #[test]
    fn a_call_let_through_while_closed_does_not_close_what_another_opened() {
        // P10: calls that overlap: the later failure's outage stands.
        let breaker = Breaker::named("the bucket", Duration::from_millis(20));
        let early = breaker.permit();
        assert!(breaker.failed(breaker.permit()));
        breaker.succeeded_after(early);
        assert!(breaker.is_open(), "an earlier call's success is stale");
        std::thread::sleep(Duration::from_millis(30));
        let probe = breaker.permit();
        assert_eq!(probe, Permit::Probe);
        breaker.succeeded_after(probe);
        assert!(!breaker.is_open());
    }
}
