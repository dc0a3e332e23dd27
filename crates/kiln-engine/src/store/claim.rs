//! Single flight among processes (P4): the right to compile one key.

use std::fmt;

use super::lease::Renewal;

/// How long [`Claims::claim`](super::Claims::claim) may wait
/// for another compiler of the same key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimWait {
    /// Up to the store's [`claim_timeout`](super::Claims::claim_timeout).
    Patiently,
    /// Not at all: one try. For a caller that already holds other claims,
    /// which must never wait while holding (two processes each holding what
    /// the other waits for would otherwise stall until the timeout).
    Once,
}

/// The right to compile one key, held until dropped (P4), and the
/// renewal of its lease (P12) when the store gives claims leases.
pub struct ClaimGuard {
    // Declared first so it drops first: the lease stops being renewed
    // before the claim is released.
    #[allow(
        dead_code,
        reason = "held for its Drop; read by stop_renewing in tests"
    )]
    renewal: Option<Renewal>,
    #[allow(dead_code, reason = "held for its Drop")]
    release: Box<dyn Send>,
}

impl ClaimGuard {
    /// A guard that releases the claim when `release` drops.
    pub fn new(release: impl Send + 'static) -> Self {
        Self {
            renewal: None,
            release: Box::new(release),
        }
    }

    /// A guard that releases the claim when `release` drops and keeps its
    /// lease renewed by `renewal` until then (P12).
    pub fn leased(release: impl Send + 'static, renewal: Renewal) -> Self {
        Self {
            renewal: Some(renewal),
            release: Box::new(release),
        }
    }

    /// Stops renewing the claim's lease while keeping the claim, as a
    /// holder that hangs would: for tests of lease expiry (P12).
    #[cfg(any(test, feature = "testing"))]
    pub fn stop_renewing(&self) {
        if let Some(renewal) = &self.renewal {
            renewal.stop();
        }
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
    /// Another holds the key under a live lease and did not release it in
    /// time: wait for its artifact, or past the store's timeout compile
    /// anyway (a duplicate compile, never a wrong artifact).
    Busy,
    /// The store does not coordinate compiles.
    Uncoordinated,
}
