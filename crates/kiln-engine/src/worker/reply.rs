//! Reading a worker's replies under a deadline: every byte of a reply,
//! not only its first, waits at most what is left of the timeout, so a
//! worker that sends part of a frame and stops costs one timeout.

use std::io::{self, BufReader};
use std::process::ChildStdout;
use std::time::{Duration, Instant};

/// A worker's reply pipe, read with every byte under one deadline: a read
/// that would wait past it fails with `TimedOut` instead.
pub(super) struct Within<'a> {
    replies: &'a mut BufReader<ChildStdout>,
    deadline: Instant,
    limit: Duration,
}

impl<'a> Within<'a> {
    pub(super) fn new(replies: &'a mut BufReader<ChildStdout>, limit: Duration) -> Self {
        Self {
            replies,
            deadline: Instant::now() + limit,
            limit,
        }
    }
}

impl io::Read for Within<'_> {
    fn read(&mut self, bytes: &mut [u8]) -> io::Result<usize> {
        if self.replies.buffer().is_empty() {
            let left = self.deadline.saturating_duration_since(Instant::now());
            let waited = if left.is_zero() {
                Err(io::ErrorKind::TimedOut.into())
            } else {
                wait_readable(self.replies.get_ref(), left)
            };
            waited.map_err(|error| {
                if error.kind() == io::ErrorKind::TimedOut {
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no whole answer within {} s", self.limit.as_secs_f64()),
                    )
                } else {
                    error
                }
            })?;
        }
        self.replies.read(bytes)
    }
}

/// Waits until `pipe` has something to read (or is closed), up to `limit`.
#[cfg(unix)]
fn wait_readable(pipe: &ChildStdout, limit: Duration) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut poll = libc::pollfd {
        fd: pipe.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let milliseconds = libc::c_int::try_from(limit.as_millis()).unwrap_or(libc::c_int::MAX);
    loop {
        // SAFETY: `poll` is one live pollfd and the count says one.
        let ready = unsafe { libc::poll(&mut poll, 1, milliseconds) };
        match ready {
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no answer within {} s", limit.as_secs_f64()),
                ));
            }
            ready if ready > 0 => return Ok(()),
            _ => {
                let error = io::Error::last_os_error();
                if error.kind() != io::ErrorKind::Interrupted {
                    return Err(error);
                }
            }
        }
    }
}

#[cfg(not(unix))]
fn wait_readable(_pipe: &ChildStdout, _limit: Duration) -> io::Result<()> {
    Ok(())
}
