//! What a loader's batch is doing, readable from another thread while it
//! runs: how many of its kernels are settled, and what it waits for when
//! other processes or hosts compile some of them (P12), naming them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A handle on the progress of a loader's batches
/// ([`KernelLoader::progress`](super::KernelLoader::progress)): clone it,
/// hand it to a thread that draws a progress bar, and read it while the
/// loader compiles. Reading takes no lock of the loader's.
#[derive(Debug, Clone, Default)]
pub struct BatchProgress {
    state: Arc<State>,
}

#[derive(Debug, Default)]
struct State {
    kernels: AtomicUsize,
    settled: AtomicUsize,
    waiting: Mutex<Option<Waiting>>,
}

/// What a batch waits for: kernels other processes hold claims on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// How many of its kernels others are compiling.
    pub kernels: usize,
    /// Who holds them, as their stores name the holders (`process 4242 on
    /// build-3`), at most a few; empty when the store cannot say.
    pub holders: Vec<String>,
}

impl BatchProgress {
    /// The kernels of the batch running, or of the last one.
    pub fn kernels(&self) -> usize {
        self.state.kernels.load(Ordering::Relaxed)
    }

    /// How many of them are loaded or failed.
    pub fn settled(&self) -> usize {
        self.state.settled.load(Ordering::Relaxed)
    }

    /// What the batch waits for, while it waits for others.
    pub fn waiting(&self) -> Option<Waiting> {
        self.state
            .waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    pub(super) fn started(&self, kernels: usize) {
        self.state.settled.store(0, Ordering::Relaxed);
        self.state.kernels.store(kernels, Ordering::Relaxed);
    }

    pub(super) fn settled_one(&self) {
        self.state.settled.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn wait(&self, waiting: Option<Waiting>) {
        *self
            .state
            .waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = waiting;
    }
}

impl std::fmt::Display for Waiting {
    /// `3 kernels others compile (process 4242 on build-3)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plural = if self.kernels == 1 { "" } else { "s" };
        write!(f, "{} kernel{plural} others compile", self.kernels)?;
        if !self.holders.is_empty() {
            write!(f, " ({})", self.holders.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clone_reads_what_the_batch_writes() {
        let progress = BatchProgress::default();
        let reader = progress.clone();
        progress.started(3);
        progress.settled_one();
        assert_eq!((reader.kernels(), reader.settled()), (3, 1));
        let waiting = Waiting {
            kernels: 2,
            holders: vec!["process 7 on node-a".into()],
        };
        progress.wait(Some(waiting.clone()));
        assert_eq!(reader.waiting(), Some(waiting.clone()));
        assert_eq!(
            waiting.to_string(),
            "2 kernels others compile (process 7 on node-a)"
        );
        progress.wait(None);
        assert_eq!(reader.waiting(), None);
        progress.started(1);
        assert_eq!(reader.settled(), 0, "a new batch counts from nothing");
    }
}
