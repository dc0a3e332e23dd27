//! The generation watch: the token of the store's content that this
//! process shares with others. An import that replaces content changes
//! it, and every store of the root moves its [`Generation`] when it sees
//! the change (L10).
//!
//! **Invariant:** the handle's generation moves whenever this process
//! replaced content, and at most [`TOKEN_CHECK`] after another process did.

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kiln_engine::Generation;

use crate::files::Files;
use crate::record::now_seconds;

/// How often a store looks whether another process's import replaced
/// content (L10 across processes).
const TOKEN_CHECK: Duration = Duration::from_secs(1);

/// The generation of a store's content as this process sees it.
#[derive(Debug)]
pub(crate) struct GenerationWatch {
    /// The generation loaders compare.
    generation: Generation,
    /// The root's generation token when this store last looked.
    root_token: AtomicU64,
    /// When to look at the token next, in nanoseconds after `opened`.
    next_token_check: AtomicU64,
    opened: Instant,
}

impl GenerationWatch {
    /// A fresh generation, watching the token of `files`.
    pub(crate) fn new(files: &Files) -> Self {
        Self {
            generation: Generation::fresh(),
            root_token: AtomicU64::new(read_token(&files.layout.generation_file())),
            next_token_check: AtomicU64::new(0),
            opened: Instant::now(),
        }
    }

    /// The handle loaders keep (a clone shares its moves).
    pub(crate) fn handle(&self) -> Generation {
        self.generation.clone()
    }

    /// Moves the generation when another process replaced content in
    /// `files`, looking at most once per [`TOKEN_CHECK`].
    pub(crate) fn refresh(&self, files: &Files) {
        let now = u64::try_from(self.opened.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if now < self.next_token_check.load(Ordering::Relaxed) {
            return;
        }
        self.next_token_check
            .store(now + TOKEN_CHECK.as_nanos() as u64, Ordering::Relaxed);
        let token = read_token(&files.layout.generation_file());
        if self.root_token.swap(token, Ordering::Relaxed) != token {
            log::debug!(
                "another process replaced content in {}",
                files.root().display()
            );
            self.generation.advance();
        }
    }

    /// Moves the generation here and tells other processes to move theirs.
    pub(crate) fn content_replaced(&self, files: &Files) {
        self.generation.advance();
        if files.read_only {
            return;
        }
        let token = self.generation.current() ^ u64::from(std::process::id()) << 32 ^ now_seconds();
        let path = files.layout.generation_file();
        match files.publish(&path, &token.to_le_bytes()) {
            Ok(_) => self.root_token.store(token, Ordering::Relaxed),
            Err(error) => log::warn!("cannot tell other processes the store changed: {error}"),
        }
    }
}

fn read_token(path: &Path) -> u64 {
    fs::read(path)
        .ok()
        .and_then(|bytes| {
            bytes
                .get(..8)
                .map(|word| u64::from_le_bytes(word.try_into().expect("8 bytes")))
        })
        .unwrap_or(0)
}
