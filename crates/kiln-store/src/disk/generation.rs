//! The generation token a store shares with other processes: an import
//! that replaces content changes it, and every store of the root moves its
//! [`Generation`](kiln_engine::Generation) when it sees the change (L10).

use std::fs;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::DiskStore;
use crate::record::now_seconds;

/// How often a store looks whether another process's import replaced
/// content (L10 across processes).
const TOKEN_CHECK: Duration = Duration::from_secs(1);

impl DiskStore {
    pub(super) fn refresh_generation(&self) {
        let inner = &self.inner;
        let now = u64::try_from(inner.opened.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if now < inner.next_token_check.load(Ordering::Relaxed) {
            return;
        }
        inner
            .next_token_check
            .store(now + TOKEN_CHECK.as_nanos() as u64, Ordering::Relaxed);
        let token = read_token(&inner.files.layout.generation_file());
        if inner.root_token.swap(token, Ordering::Relaxed) != token {
            log::debug!(
                "another process replaced content in {}",
                self.root().display()
            );
            inner.generation.advance();
        }
    }

    /// Moves the generation here and tells other processes to move theirs.
    pub(crate) fn content_replaced(&self) {
        let inner = &self.inner;
        inner.generation.advance();
        if inner.files.read_only {
            return;
        }
        let token =
            inner.generation.current() ^ u64::from(std::process::id()) << 32 ^ now_seconds();
        let path = inner.files.layout.generation_file();
        match self.inner.files.publish(&path, &token.to_le_bytes()) {
            Ok(_) => inner.root_token.store(token, Ordering::Relaxed),
            Err(error) => log::warn!("cannot tell other processes the store changed: {error}"),
        }
    }
}

pub(super) fn read_token(path: &Path) -> u64 {
    fs::read(path)
        .ok()
        .and_then(|bytes| {
            bytes
                .get(..8)
                .map(|word| u64::from_le_bytes(word.try_into().expect("8 bytes")))
        })
        .unwrap_or(0)
}
