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
    /// `3 kernels others compile (process 4242 on build-3)`. A holder's
    /// name is another process's or machine's word: what a terminal would
    /// take for a command (its control characters, and the invisible ones
    /// that reorder text) is left out.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plural = if self.kernels == 1 { "" } else { "s" };
        write!(f, "{} kernel{plural} others compile", self.kernels)?;
        if !self.holders.is_empty() {
            let holders: Vec<String> = self.holders.iter().map(|name| printable(name)).collect();
            write!(f, " ({})", holders.join(", "))?;
        }
        Ok(())
    }
}

/// Whether `character` is one a terminal acts on or hides instead of
/// showing it: a control character, or a mark that reorders or hides text.
pub fn is_hidden(character: char) -> bool {
    character.is_control()
        || matches!(
            character,
            '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}'
        )
}

/// `text` without what [`is_hidden`] finds: what is shown of a name that
/// came from outside (another process's, another machine's).
pub fn printable(text: &str) -> String {
    text.chars()
        .filter(|character| !is_hidden(*character))
        .collect()
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
        // A holder named by another machine never reaches the terminal
        // with its escapes or line erases.
        let forged = Waiting {
            kernels: 1,
            holders: vec!["process 1 on \u{1b}]0;owned\u{7}\r\u{1b}[2Kall ok\u{202e}".into()],
        };
        assert_eq!(
            forged.to_string(),
            "1 kernel others compile (process 1 on ]0;owned[2Kall ok)"
        );
        progress.started(1);
        assert_eq!(reader.settled(), 0, "a new batch counts from nothing");
    }
}
