//! Renewing a store's remote leases together (P12): one round trip per
//! renewal period for every lease the store holds, not one per lease, so
//! that a remote far away renews a batch's leases in time.
//!
//! Each lease still has its own [`Renewal`] on the process's lease
//! thread, a beat that costs nothing: a lease whose beat stopped (its
//! holder hung, its renewal stopped) is left out of the store's renewals
//! and runs out, as a lease renewed alone would.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use kiln_engine::store::Renewal;
use redis::{Cmd, Value, cmd};

use super::{RENEW, claim_command, judge, lease_value, millis};
use crate::lease::{self, Word};
use crate::remote::Inner;
use crate::statistics::bump;

/// The leases a store renews, by token, and the one renewal that renews
/// them all.
#[derive(Default)]
pub(crate) struct Renewing {
    leases: Mutex<HashMap<String, Renewed>>,
    every_lease: Mutex<Option<Renewal>>,
    /// A renewal asked for out of turn is running, and whether another
    /// was asked for since it began.
    out_of_turn: AtomicBool,
    again: AtomicBool,
}

impl std::fmt::Debug for Renewing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renewing")
            .field("leases", &self.lock().len())
            .finish_non_exhaustive()
    }
}

#[derive(Clone)]
struct Renewed {
    subject: [u8; 32],
    claim_key: String,
    /// When its own renewal last beat.
    beat: Arc<Mutex<Instant>>,
    /// Set once another verified holder has the key.
    lost: Arc<AtomicBool>,
}

impl Renewing {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Renewed>> {
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Renews the lease `token` of `subject` with the store's others
    /// until the renewal returned drops, stops, or the key is another's.
    pub(crate) fn add(
        inner: &Arc<Inner>,
        subject: [u8; 32],
        claim_key: String,
        token: String,
    ) -> Renewal {
        let period = inner.config.lease / 3;
        let beat = Arc::new(Mutex::new(Instant::now()));
        let lost = Arc::new(AtomicBool::new(false));
        inner.renewing.lock().insert(
            token,
            Renewed {
                subject,
                claim_key,
                beat: Arc::clone(&beat),
                lost: Arc::clone(&lost),
            },
        );
        {
            let mut every_lease = inner
                .renewing
                .every_lease
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if every_lease.is_none() {
                let store: Weak<Inner> = Arc::downgrade(inner);
                *every_lease = Some(Renewal::every(period, move || match store.upgrade() {
                    Some(inner) => {
                        renew_all(&inner);
                        true
                    }
                    None => false,
                }));
            }
        }
        Renewal::every(period, move || {
            *beat.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
            !lost.load(Ordering::Acquire)
        })
    }

    /// The lease `token` is let go: no longer renewed.
    pub(crate) fn remove(&self, token: &str) {
        self.lock().remove(token);
    }
}

/// Renews (and so announces) every lease of the store now, on a thread of
/// its own, for a node that started listening: at most one such renewal
/// runs at a time, and asks made while it runs give one more.
pub(crate) fn renew_soon(inner: &Arc<Inner>) {
    let renewing = &inner.renewing;
    if renewing.lock().is_empty() {
        return;
    }
    renewing.again.store(true, Ordering::Release);
    if renewing.out_of_turn.swap(true, Ordering::AcqRel) {
        return;
    }
    let store = Arc::downgrade(inner);
    let run = move || {
        loop {
            let Some(inner) = store.upgrade() else {
                return;
            };
            if inner.renewing.again.swap(false, Ordering::AcqRel) {
                renew_all(&inner);
                continue;
            }
            inner.renewing.out_of_turn.store(false, Ordering::Release);
            // Asked again between the look and the end: go on, unless
            // another run took it.
            if !inner.renewing.again.load(Ordering::Acquire)
                || inner.renewing.out_of_turn.swap(true, Ordering::AcqRel)
            {
                return;
            }
        }
    };
    if std::thread::Builder::new()
        .name("kiln-remote-announce".into())
        .spawn(run)
        .is_err()
    {
        // The next renewal announces them.
        renewing.out_of_turn.store(false, Ordering::Release);
    }
}

/// One renewal of every lease of the store whose own renewal still beats:
/// one round trip, and one more for the few whose key holds a value that
/// does not verify (written over).
fn renew_all(inner: &Arc<Inner>) {
    let period = inner.config.lease / 3;
    // Two beats missed: its holder stopped renewing it.
    let stale = period * 2 + Duration::from_millis(100);
    let leases: Vec<(String, Renewed)> = inner
        .renewing
        .lock()
        .iter()
        .filter(|(_, renewed)| {
            !renewed.lost.load(Ordering::Acquire)
                && renewed
                    .beat
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .elapsed()
                    <= stale
        })
        .map(|(token, renewed)| (token.clone(), renewed.clone()))
        .collect();
    let mut values = Vec::with_capacity(leases.len());
    let mut commands: Vec<Cmd> = Vec::with_capacity(leases.len());
    for (token, renewed) in &leases {
        let Some(value) = lease_value(inner, &renewed.subject, token) else {
            return;
        };
        let mut command = cmd("EVAL");
        command
            .arg(RENEW)
            .arg(1)
            .arg(&renewed.claim_key)
            .arg(lease::prefix(token))
            .arg(&value)
            .arg(millis(inner.config.lease))
            .arg(crate::announce::script_arguments(
                inner.announcements.channel(),
                &renewed.subject,
            ));
        commands.push(command);
        values.push(value);
    }
    if commands.is_empty() {
        return;
    }
    let Some(replies) = inner.remote.call(&inner.counters, move |link| {
        link.pipeline::<Vec<Value>>(commands)
    }) else {
        // The remote did not answer: tried again next period.
        return;
    };
    let mut over = Vec::new();
    for (((token, renewed), value), reply) in leases.iter().zip(&values).zip(replies) {
        let Value::BulkString(found) = reply else {
            continue;
        };
        let first_heard = inner.announcements.listening()
            && inner.announcements.holder(&renewed.subject).as_deref() == Some(token.as_str());
        if let (Word::Held { .. }, false) =
            (judge(inner, &renewed.subject, &found, None), first_heard)
        {
            // Taken over: the key is another holder's now.
            renewed.lost.store(true, Ordering::Release);
            inner.renewing.remove(token);
            continue;
        }
        bump(&inner.counters.leases_ignored);
        // Written over, or lost to whoever came first: either way this
        // holder goes on, and a lost lease costs one duplicate at most.
        over.push(claim_command(
            inner,
            &renewed.subject,
            &renewed.claim_key,
            value,
            Some(&found),
            false,
        ));
    }
    if !over.is_empty() {
        inner.remote.call(&inner.counters, move |link| {
            link.pipeline::<Vec<Value>>(over)
        });
    }
}
