//! Single flight among processes (P4): the right to compile one key.

use std::fmt;

/// How long [`ArtifactStore::claim`](super::ArtifactStore::claim) may wait
/// for another compiler of the same key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimWait {
    /// Up to the store's lock timeout.
    Patiently,
    /// Not at all: one try. For a caller that already holds other claims,
    /// which must never wait while holding (two processes each holding what
    /// the other waits for would otherwise stall until the timeout).
    Once,
}

/// The right to compile one key, held until dropped (P4).
pub struct ClaimGuard(#[allow(dead_code, reason = "held for its Drop")] Box<dyn Send>);

impl ClaimGuard {
    /// A guard that releases the claim when `release` drops.
    pub fn new(release: impl Send + 'static) -> Self {
        Self(Box::new(release))
    }
}

impl fmt::Debug for ClaimGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClaimGuard")
    }
}

/// What asking to compile a key got.
#[derive(Debug)]
pub enum Claim {
    /// This caller compiles the key; others wait until the guard drops.
    Held(ClaimGuard),
    /// Another holds the key and did not release it in time: compile anyway
    /// (a duplicate compile, never a wrong artifact).
    Busy,
    /// The store does not coordinate compiles.
    Uncoordinated,
}
