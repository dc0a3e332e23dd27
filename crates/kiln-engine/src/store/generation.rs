//! Which content a store holds: the one number the loader reads on every
//! launch.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Which content a store holds, as a number the loader compares on every
/// launch (L10).
///
/// A handle to one shared atomic: cloning it is how a target keeps reading
/// the store's generation without a call into the store. Values are unique
/// in the process — a new store starts at a number no other store had, and
/// [`advance`](Self::advance) moves to another such number — so switching a
/// target from one store to another always changes what it reads.
#[derive(Debug, Clone)]
pub struct Generation(Arc<AtomicU64>);

/// The next generation value handed out in this process.
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

impl Generation {
    /// A generation no other store of this process has.
    pub fn fresh() -> Self {
        Self(Arc::new(AtomicU64::new(
            NEXT_GENERATION.fetch_add(1, Ordering::Relaxed),
        )))
    }

    /// The current value: one atomic load, no lock, no system call.
    #[inline]
    pub fn current(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Moves to a new value: the content changed.
    pub fn advance(&self) {
        self.0.store(
            NEXT_GENERATION.fetch_add(1, Ordering::Relaxed),
            Ordering::Release,
        );
    }
}

impl Default for Generation {
    fn default() -> Self {
        Self::fresh()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_store_and_an_advance_give_a_new_generation() {
        // L10
        let first = Generation::fresh();
        let second = Generation::fresh();
        assert_ne!(first.current(), second.current());
        let before = first.current();
        first.clone().advance();
        assert_ne!(first.current(), before);
        assert_ne!(first.current(), second.current());
    }
}
