//! One worker process: started with its compiler's recipe, a request and
//! its reply over its two pipes within a timeout, closed, stopped or
//! reaped with its temporary folder.

use std::io::{self, BufReader, BufWriter};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::WorkerRecipe;
use super::protocol::{self, PROTOCOL, Reply, Request};
use super::reply::Within;
use super::temporary::TemporaryFolder;
use super::wording::describe_status;

/// How long a starting worker has to answer its first request: the program
/// starts, reaches its hook and opens the compiler's library.
pub(super) const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a worker has to exit once its request pipe closed, before it is
/// killed.
pub(super) const EXIT_GRACE: Duration = Duration::from_secs(5);

/// One worker process, its two pipes and its temporary folder.
pub(super) struct WorkerProcess {
    pub(super) pid: u32,
    child: Child,
    requests: BufWriter<ChildStdin>,
    replies: BufReader<ChildStdout>,
    temporary: Option<TemporaryFolder>,
}

/// A worker whose request pipe is closed: the process, to be waited for,
/// and its temporary folder, removed when this is dropped, after the
/// process was waited for (every path that closes a worker waits for it,
/// or kills it and waits).
pub(super) struct Closed {
    child: Child,
    _temporary: Option<TemporaryFolder>,
}

impl std::ops::Deref for Closed {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.child
    }
}

impl std::ops::DerefMut for Closed {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl WorkerProcess {
    /// Starts `program` as a worker and has it build the compiler of
    /// `recipe`.
    pub(super) fn start(program: &Path, recipe: &WorkerRecipe) -> Result<Self, String> {
        Self::spawn(program, recipe)?.started()
    }

    /// Starts `program` and sends it the start request, without waiting
    /// for its answer: [`started`](Self::started) waits.
    pub(super) fn spawn(program: &Path, recipe: &WorkerRecipe) -> Result<Self, String> {
        let temporary = TemporaryFolder::make()
            .inspect_err(|error| {
                log::debug!("a compile worker shares this process's temporary folder: {error}");
            })
            .ok();
        let mut command = Command::new(program);
        command
            .env(super::WORKER_CHANNEL_VARIABLE, PROTOCOL)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(temporary) = &temporary {
            for variable in ["TMPDIR", "TMP", "TEMP", super::temporary::VARIABLE] {
                command.env(variable, temporary.path());
            }
        }
        let mut child = command.spawn().map_err(|error| error.to_string())?;
        let pid = child.id();
        let requests = BufWriter::new(child.stdin.take().expect("stdin was piped"));
        let replies = BufReader::new(child.stdout.take().expect("stdout was piped"));
        let mut worker = Self {
            pid,
            child,
            requests,
            replies,
            temporary,
        };
        let start = Request::Start {
            protocol: PROTOCOL.to_owned(),
            compiler: recipe.compiler.to_owned(),
            recipe: recipe.recipe.clone(),
        };
        if let Err(error) = protocol::write_frame(&mut worker.requests, &start) {
            let status = worker.stop();
            return Err(format!(
                "{error} ({}); does its main call kiln_engine::worker::run_if_worker first?",
                describe_status(status.as_ref().ok())
            ));
        }
        Ok(worker)
    }

    /// Waits for the answer to the start request [`spawn`](Self::spawn)
    /// sent: the worker, once it has built its compiler.
    pub(super) fn started(mut self) -> Result<Self, String> {
        let answer =
            protocol::read_frame::<Reply>(&mut Within::new(&mut self.replies, START_TIMEOUT));
        match answer {
            Ok(Some(Reply::Started)) => Ok(self),
            Ok(Some(Reply::Refused { reason })) => {
                drop(self.stop());
                Err(format!("the worker refused: {reason}"))
            }
            Ok(Some(other)) => {
                drop(self.stop());
                Err(format!("the worker answered its start with {other:?}"))
            }
            Ok(None) => {
                let status = self.stop();
                Err(format!(
                    "it closed its pipe ({}); does its main call \
                     kiln_engine::worker::run_if_worker first?",
                    describe_status(status.as_ref().ok())
                ))
            }
            Err(error) => {
                let status = self.stop();
                Err(format!(
                    "{error} ({}); does its main call kiln_engine::worker::run_if_worker first?",
                    describe_status(status.as_ref().ok())
                ))
            }
        }
    }

    /// Sends `request` and reads its reply, waiting at most `timeout` for
    /// the whole reply, every byte of it (an error of kind `TimedOut` past
    /// it): a worker that sends part of a frame and stops costs one
    /// timeout.
    pub(super) fn round_trip(&mut self, request: &Request, timeout: Duration) -> io::Result<Reply> {
        protocol::write_frame(&mut self.requests, request)?;
        protocol::read_frame(&mut Within::new(&mut self.replies, timeout))?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the worker closed its pipe mid-request",
            )
        })
    }

    /// Closes the request pipe, leaving the process to exit on its own.
    pub(super) fn close(self) -> Closed {
        let Self {
            child, temporary, ..
        } = self;
        Closed {
            child,
            _temporary: temporary,
        }
    }

    /// Stops the worker: closes its pipe, kills it when it does not exit.
    pub(super) fn stop(self) -> io::Result<ExitStatus> {
        let mut child = self.close();
        if let Some(status) = wait_within(&mut child, Duration::from_millis(200)) {
            return Ok(status);
        }
        drop(child.kill());
        child.wait()
    }

    /// The exit status of a worker whose pipe broke: it is dead or dying.
    pub(super) fn reap(self) -> Option<ExitStatus> {
        let mut child = self.close();
        match wait_within(&mut child, EXIT_GRACE) {
            Some(status) => Some(status),
            None => {
                drop(child.kill());
                child.wait().ok()
            }
        }
    }
}

/// Waits up to `limit` for `child` to exit: woken by the exit itself
/// where the system says when a process ends (a pidfd, Linux 5.3 and
/// later), else looking again after 1, 2, 4 ... ms, which saw an exit up
/// to half the wait late (1.5-3.4 ms at the end of a `kiln warm`).
pub(super) fn wait_within(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    #[cfg(target_os = "linux")]
    if let Some(exit) = ExitWatch::open(child.id()) {
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) => {}
                Err(_) => return None,
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !exit.wait(left) {
                return child.try_wait().ok().flatten();
            }
        }
    }
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            _ => return None,
        }
    }
}

/// A process's exit, watched through a pidfd: readable once it has ended.
#[cfg(target_os = "linux")]
struct ExitWatch(std::os::fd::OwnedFd);

#[cfg(target_os = "linux")]
impl ExitWatch {
    /// Watches the unreaped child `pid` (its id cannot be reused before it
    /// is waited for); `None` where the system has no pidfd.
    fn open(pid: u32) -> Option<Self> {
        use std::os::fd::FromRawFd;
        let pid = libc::pid_t::try_from(pid).ok()?;
        // SAFETY: pidfd_open takes a process id and flags and returns a
        // new descriptor or -1; it touches no memory of this process.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        let fd = libc::c_int::try_from(fd).ok().filter(|fd| *fd >= 0)?;
        // SAFETY: `fd` was just opened and is owned by nothing else.
        Some(Self(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }))
    }

    /// Waits up to `limit` for the exit; whether the process ended (or the
    /// wait failed, for the caller to look).
    fn wait(&self, limit: Duration) -> bool {
        use std::os::fd::AsRawFd;
        let mut poll = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // Rounded up: a wait of less than a millisecond still waits.
        let milliseconds =
            libc::c_int::try_from(limit.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX);
        loop {
            // SAFETY: `poll` is one live pollfd and the count says one.
            let ready = unsafe { libc::poll(&mut poll, 1, milliseconds) };
            if ready >= 0 {
                return ready > 0;
            }
            if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use super::wait_within;

    /// A `cat` that waits on its input: it exits when the input closes.
    fn cat() -> std::process::Child {
        Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("cat starts")
    }

    #[test]
    fn a_worker_s_exit_is_seen_as_it_happens_not_at_the_next_look() {
        // `cat` exits when its input closes, 70 ms in: looking again after
        // 1, 2, 4 ... ms saw it at 127 ms, 57 ms late.
        let mut child = cat();
        let input = child.stdin.take().expect("piped");
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(70));
            drop(input);
            Instant::now()
        });
        let status = wait_within(&mut child, Duration::from_secs(10)).expect("cat exits");
        let seen = Instant::now();
        let closed = closer.join().expect("the closing thread");
        assert!(status.success());
        let late = seen.saturating_duration_since(closed);
        assert!(
            late < Duration::from_millis(25),
            "seen {late:?} after it could end"
        );
    }

    #[test]
    fn a_worker_that_does_not_exit_is_waited_for_no_longer_than_the_limit() {
        let mut child = cat();
        let started = Instant::now();
        assert!(wait_within(&mut child, Duration::from_millis(50)).is_none());
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(50), "{waited:?}");
        assert!(waited < Duration::from_secs(2), "{waited:?}");
        drop(child.kill());
        drop(child.wait());
    }
}
