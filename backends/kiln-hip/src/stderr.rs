//! What comgr writes to the process's standard error while hipRTC
//! compiles, caught and handed back as part of the compile's log.
//!
//! Some of comgr's errors (an `<inline asm>` instruction the GPU does not
//! have) bypass hipRTC's log and go straight to file descriptor 2, so they
//! would appear in the middle of a program's or `kiln warm`'s output, away
//! from the kernel they are about, and the log would say only "cannot
//! compile inline asm". While a compile runs (the process's hipRTC lock is
//! held, so no other compile does), descriptor 2 points at an anonymous
//! in-memory file; afterwards it is restored and what was written joins
//! the log. Anything else the process writes to standard error meanwhile
//! joins it too, which is the price of a descriptor being the process's:
//! nothing is lost. Where the in-memory file cannot be made, nothing is
//! caught and the compile runs as before.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::{FromRawFd, RawFd};

/// The most of it kept: a compiler that writes without end fills no memory.
const MAX_CAUGHT: u64 = 1 << 20;

/// Standard error redirected into memory until [`finish`](Self::finish).
pub struct Caught {
    saved: RawFd,
    file: Option<File>,
}

impl Caught {
    /// Points standard error at a fresh in-memory file; `None` when it
    /// cannot, and then nothing changed.
    pub fn start() -> Option<Self> {
        // SAFETY: the name is a NUL-terminated literal; memfd_create only
        // returns a new descriptor or -1.
        let memory =
            unsafe { libc::memfd_create(c"kiln-hiprtc-stderr".as_ptr(), libc::MFD_CLOEXEC) };
        if memory < 0 {
            return None;
        }
        // SAFETY: `memory` is a descriptor this function owns from here.
        let file = unsafe { File::from_raw_fd(memory) };
        // SAFETY: dup of descriptor 2 returns a new descriptor or -1.
        let saved = unsafe { libc::dup(libc::STDERR_FILENO) };
        if saved < 0 {
            return None;
        }
        // SAFETY: both descriptors are open; dup2 makes 2 a copy of
        // `memory` atomically, or fails and leaves 2 alone.
        if unsafe { libc::dup2(memory, libc::STDERR_FILENO) } < 0 {
            // SAFETY: `saved` is ours and used nowhere else.
            unsafe { libc::close(saved) };
            return None;
        }
        Some(Self {
            saved,
            file: Some(file),
        })
    }

    /// Restores standard error and returns what was written to it.
    pub fn finish(mut self) -> String {
        self.restore();
        let Some(mut file) = self.file.take() else {
            return String::new();
        };
        let mut bytes = Vec::new();
        if file.seek(SeekFrom::Start(0)).is_ok() {
            let _ = file.take(MAX_CAUGHT).read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn restore(&mut self) {
        if self.saved >= 0 {
            // SAFETY: `saved` is the descriptor 2 was; dup2 puts it back,
            // and it is closed once, here.
            unsafe {
                libc::dup2(self.saved, libc::STDERR_FILENO);
                libc::close(self.saved);
            }
            self.saved = -1;
        }
    }
}

impl Drop for Caught {
    fn drop(&mut self) {
        self.restore();
    }
}
