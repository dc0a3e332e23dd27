//! Real processes in tests: this test binary started again to run one test
//! as a child, under rlimits or as an unprivileged user, and any child
//! waited for under a deadline.
//!
//! A child set up here is judged by its exit status and what it printed,
//! the way a user sees a program.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// The unprivileged user and group a child drops to (`nobody`).
pub const NOBODY: u32 = 65534;

/// Whether this process is the child half of a test: `variable` is set to
/// `value`.
pub fn is_child(variable: &str, value: &str) -> bool {
    std::env::var(variable).is_ok_and(|set| set == value)
}

/// This test binary, set to run only `test`, alone and printing, with
/// `variable` set to `value` so that the test knows it is the child.
pub fn rerun(test: &str, variable: &str, value: impl AsRef<std::ffi::OsStr>) -> Command {
    let program = std::env::current_exe().expect("the test binary knows its own path");
    let mut command = Command::new(program);
    command
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(variable, value);
    command
}

/// Runs `test` of this test binary again as a second process, with
/// `variable` set to `folder` (what the first process filled), and fails
/// with what it printed unless it passes its one test within `deadline`.
pub fn run_second_process(test: &str, variable: &str, folder: &Path, deadline: Duration) {
    let child = rerun(test, variable, folder)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the test binary runs again");
    let finished = wait(child, deadline);
    let output = finished.stdout + &finished.stderr;
    assert!(
        finished.status.success(),
        "the second process failed ({}):\n{output}",
        finished.status
    );
    assert!(
        output.contains("1 passed"),
        "the second process ran its test:\n{output}"
    );
}

/// A limit a child runs under, set between fork and exec: the soft and
/// the hard limit both, as `prlimit` sets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// `RLIMIT_FSIZE` in bytes, with `SIGXFSZ` at its default: a write
    /// past it kills a process that does not ignore the signal.
    FileSize(u64),
    /// `RLIMIT_AS` in bytes: an allocation past it fails.
    AddressSpace(u64),
    /// `RLIMIT_NPROC`: the threads and processes of the child's user. The
    /// kernel does not enforce it for root, so pair it with [`run_as`].
    Processes(u64),
}

/// Makes `command`'s child run under `limit`.
pub fn limit(command: &mut Command, limit: Limit) {
    let (resource, value) = match limit {
        Limit::FileSize(bytes) => (libc::RLIMIT_FSIZE, bytes),
        Limit::AddressSpace(bytes) => (libc::RLIMIT_AS, bytes),
        Limit::Processes(count) => (libc::RLIMIT_NPROC, count),
    };
    // SAFETY: between fork and exec the closure calls only `setrlimit` and
    // `signal`, both async-signal-safe; it allocates nothing and touches no
    // lock.
    unsafe {
        command.pre_exec(move || {
            let rlimit = libc::rlimit {
                rlim_cur: value,
                rlim_max: value,
            };
            if libc::setrlimit(resource, &rlimit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if resource == libc::RLIMIT_FSIZE {
                libc::signal(libc::SIGXFSZ, libc::SIG_DFL);
            }
            Ok(())
        });
    }
}

/// Makes `command`'s child drop every supplementary group and run as user
/// and group `id`. Only root may; the child then fails to start, so a
/// caller that cannot be sure turns the spawn error into a skip.
///
/// Limits set with [`limit`] before this call are set while the child is
/// still root, so a limit the user could not raise still applies.
pub fn run_as(command: &mut Command, id: u32) {
    // SAFETY: between fork and exec the closure calls only `setgroups`,
    // `setgid` and `setuid`, each async-signal-safe; it allocates nothing
    // and touches no lock.
    unsafe {
        command.pre_exec(move || {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(id) != 0
                || libc::setuid(id) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A child's exit status and both its outputs, for a failure message.
pub fn describe(output: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// What a finished child left.
#[derive(Debug)]
pub struct Finished {
    /// How it ended.
    pub status: ExitStatus,
    /// Its standard output, lossily decoded.
    pub stdout: String,
    /// Its standard error, lossily decoded.
    pub stderr: String,
}

/// Waits for `child`, reading its pipes, up to `deadline`; past it, kills
/// the child and fails the test, so a child that hangs fails the test
/// rather than hanging the suite.
pub fn wait(mut child: Child, deadline: Duration) -> Finished {
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut text);
            }
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|pipe| Box::new(pipe) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|pipe| Box::new(pipe) as Box<dyn Read + Send>),
    );
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            break status;
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = stderr.join().unwrap_or_default();
            panic!("the child ran past {deadline:?} and was killed; it printed:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Finished {
        status,
        stdout: stdout.join().expect("standard output was read"),
        stderr: stderr.join().expect("standard error was read"),
    }
}
