//! How a lost worker is told in a kernel's error: a crash with its
//! signal or status, and whether the loss is held against the kernel.

use std::io;
use std::process::ExitStatus;
use std::time::Duration;

use super::exit::Blame;

/// The error of a kernel whose worker died while compiling it.
pub(super) fn crash_message(
    pid: u32,
    status: Option<&ExitStatus>,
    error: &io::Error,
    after: Duration,
) -> String {
    let how = match status {
        Some(status) => describe_status(Some(status)),
        None => format!("its pipe failed ({error})"),
    };
    let what = if status.is_some_and(ExitStatus::success) {
        "the worker ended mid-request"
    } else {
        "the compiler crashed"
    };
    format!(
        "{what}: worker process {pid} {how} after {:.1} s on this kernel; the rest of the \
         batch went on and the worker was replaced",
        after.as_secs_f64()
    )
}

/// `message`, saying when the loss is not held against the kernel.
pub(super) fn with_blame(message: String, blame: &Blame) -> String {
    match blame {
        Blame::Kernel => message,
        Blame::Environment(why) => {
            format!("{message}; not held against the kernel, since {why}")
        }
    }
}

/// How a process ended: `was killed by signal 6 (SIGABRT)`, or `exited with
/// status 3`.
pub(super) fn describe_status(status: Option<&ExitStatus>) -> String {
    let Some(status) = status else {
        return "ended in an unknown way".to_owned();
    };
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("was killed by signal {signal} ({})", signal_name(signal));
        }
    }
    match status.code() {
        Some(code) => format!("exited with status {code}"),
        None => format!("ended: {status}"),
    }
}

#[cfg(unix)]
fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGABRT => "SIGABRT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGXCPU => "SIGXCPU",
        _ => "a signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_crash_message_names_the_compiler_crash_and_its_signal() {
        use std::os::unix::process::ExitStatusExt;
        let status = ExitStatus::from_raw(libc::SIGABRT);
        let error = io::Error::new(io::ErrorKind::UnexpectedEof, "closed");
        let message = crash_message(42, Some(&status), &error, Duration::from_millis(1500));
        assert!(message.starts_with("the compiler crashed"), "{message}");
        assert!(message.contains("signal 6 (SIGABRT)"), "{message}");
        assert!(message.contains("worker process 42"), "{message}");
    }
}
