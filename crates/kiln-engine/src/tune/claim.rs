//! One measurer per tuning key (T4): a tuner claims the key's answer the
//! way a compiler claims a key (P4, P12), and a tuner that finds it claimed
//! waits for the holder's answer instead of measuring too.
//!
//! The claim is the store's own ([`Claims::claim`](crate::store::Claims::claim)), on a key made
//! for the answer's name, so the disk store coordinates the processes of a
//! machine and a remote tier its machines, with the same leases: a holder
//! that dies or hangs loses the key, and the waiter measures. A waiter
//! never waits past the store's claim timeout: then it measures anyway (a
//! second measurement, never a wrong answer).

use std::time::{Duration, Instant};

use super::answer::TuningAnswer;
use crate::id::{ArtifactId, KernelId};
use crate::store::{ArtifactStore, BlobKey, Claim, ClaimGuard, ClaimWait, KeyComponents, StoreKey};

/// What asking to measure a key got.
pub(super) enum Claimed {
    /// Measure: with the claim held until the answer is kept (`None`: the
    /// store does not coordinate, or the wait ran out).
    Mine(Option<ClaimGuard>),
    /// Another tuner's answer arrived while waiting.
    Answered(TuningAnswer),
}

/// The longest pause between two looks at the answer of a key another
/// process measures.
const LONGEST_PAUSE: Duration = Duration::from_millis(100);

/// Claims the measurement of the answer `name` on `device`, or waits for
/// the answer of whoever holds it: `answer` looks it up.
pub(super) fn claim_or_wait(
    store: &dyn ArtifactStore,
    name: &BlobKey,
    device: &str,
    answer: impl Fn() -> Option<TuningAnswer>,
) -> Claimed {
    let key = claim_key(name, device);
    let deadline = Instant::now() + store.parts().claim_timeout();
    let mut pause = Duration::from_millis(2);
    let mut waited = false;
    loop {
        match store.parts().claim(&key, ClaimWait::Once) {
            Claim::Held(guard) => {
                // An answer kept between the first look and the claim is
                // taken rather than measured again.
                return match answer() {
                    Some(found) => Claimed::Answered(found),
                    None => Claimed::Mine(Some(guard)),
                };
            }
            Claim::Uncoordinated => return Claimed::Mine(None),
            Claim::Busy => {}
        }
        if !waited {
            log::info!(
                "another process measures {}: waiting for its answer",
                name.components
                    .first()
                    .map_or(name.kind.as_str(), |(_, value)| value.as_str())
            );
            waited = true;
        }
        if Instant::now() >= deadline {
            log::warn!(
                "waited {:?} for another process's tuning answer: measuring here",
                store.parts().claim_timeout()
            );
            return Claimed::Mine(None);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(LONGEST_PAUSE);
        if let Some(found) = answer() {
            return Claimed::Answered(found);
        }
    }
}

/// The key a tuning's measurement is claimed under: its own vocabulary
/// (backend `tuning`), so it is never an artifact's key.
fn claim_key(name: &BlobKey, device: &str) -> StoreKey {
    let components = KeyComponents::new("tuning", device, "", "");
    let subject = KernelId::named("kiln.tune").bytes(&name.digest()).build();
    StoreKey::for_artifact(&components, &ArtifactId::new(subject, ()), None)
}
