//! Why a worker process was lost, and whether that is the kernel's doing
//! (P11): only a crash or a hang that nothing outside the compile explains
//! is counted against the kernel, so that a machine's limits never
//! quarantine a good kernel.
//!
//! What rules the kernel out:
//!
//! - a signal that comes from outside the compile: `SIGKILL` (the
//!   out-of-memory killer, a CPU time hard limit, another program),
//!   `SIGXCPU` and `SIGXFSZ` (the CPU time and file size limits), and the
//!   signals of a shutdown (`SIGTERM`, `SIGINT`, `SIGHUP`, `SIGQUIT`);
//! - a limit a compiler may run into, set on the process: a file size limit
//!   (`ulimit -f`; hipRTC exits from inside when a temporary file passes
//!   it, `EFBIG`), or an address-space or data limit (`ulimit -v`, `-d`),
//!   under which an allocation fails and the compiler aborts;
//! - a machine short of memory: less than [`LOW_MEMORY_PART`] of it
//!   available when the worker was lost;
//! - for a hang: a timeout below [`TIMEOUT_FLOOR`] (the user asked for a
//!   short one; a good compile may take longer), or a machine overloaded
//!   (a load average over [`OVERLOAD`] times its cores);
//! - another worker of the same loader lost while this one compiled: two
//!   at once is the machine, not two kernels.
//!
//! Everything else (`SIGSEGV`, `SIGABRT`, `SIGILL`, `SIGFPE`, `SIGBUS`, an
//! exit with a status, a hang past the floor on a machine with headroom) is
//! the kernel's, and counted.

use std::process::ExitStatus;
use std::time::Duration;

/// The shortest compile timeout whose passing is held against a kernel: a
/// shorter `KILN_COMPILE_TIMEOUT` is the user's choice for this run, and a
/// good kernel may need longer.
pub const TIMEOUT_FLOOR: Duration = Duration::from_secs(60);

/// How many times its cores a machine's one-minute load average must pass
/// for a hang on it not to count against the kernel.
pub const OVERLOAD: f64 = 2.0;

/// Below this part of its memory available (one sixteenth), a machine is
/// short of memory: a crash then is not counted against the kernel.
pub const LOW_MEMORY_PART: u64 = 16;

/// Whose doing a lost worker is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Blame {
    /// Nothing outside the compile explains it: counted against the kernel.
    Kernel,
    /// This explains it, in words; never remembered.
    Environment(String),
}

/// What the machine looked like when a worker was lost.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Headroom {
    /// Bytes of memory available and in all, when known.
    pub(crate) memory: Option<(u64, u64)>,
    /// The one-minute load average and the cores, when known.
    pub(crate) load: Option<(f64, usize)>,
    /// The file size limit of this process (and so of its workers), in
    /// bytes, when there is one.
    pub(crate) file_size_limit: Option<u64>,
    /// The address-space or data limit of this process, in bytes, when
    /// there is one.
    pub(crate) memory_limit: Option<u64>,
    /// Whether another worker of the same pool was lost while this one
    /// compiled.
    pub(crate) another_lost: bool,
}

impl Headroom {
    /// The machine now, `another_lost` told by the pool.
    pub(crate) fn now(another_lost: bool) -> Self {
        Self {
            memory: memory(),
            load: load(),
            file_size_limit: limit(libc::RLIMIT_FSIZE),
            memory_limit: limit(libc::RLIMIT_AS).or_else(|| limit(libc::RLIMIT_DATA)),
            another_lost,
        }
    }

    /// What outside the compile may have ended any worker, crash or hang.
    fn shared_cause(&self) -> Option<String> {
        if self.another_lost {
            return Some("another compile worker was lost at the same time".to_owned());
        }
        if let Some((available, total)) = self.memory
            && available < total / LOW_MEMORY_PART
        {
            return Some(format!(
                "the machine was short of memory ({} MiB of {} MiB available)",
                available >> 20,
                total >> 20
            ));
        }
        None
    }
}

/// Whose doing a worker that died with `status` is, on a machine in
/// `headroom`.
pub(crate) fn crashed(status: Option<&ExitStatus>, headroom: &Headroom) -> Blame {
    #[cfg(unix)]
    if let Some(signal) = status.and_then(std::os::unix::process::ExitStatusExt::signal)
        && let Some(sender) = outside_signal(signal)
    {
        return Blame::Environment(sender.to_owned());
    }
    if status.is_none() {
        return Blame::Environment("how it ended could not be seen".to_owned());
    }
    // A compiler that crashes does not exit cleanly: a worker that exited
    // with status 0 while it held a kernel was ended by its program.
    if status.is_some_and(ExitStatus::success) {
        return Blame::Environment(
            "it exited with status 0 while it held the kernel: its program ended it, not the \
             compiler"
                .to_owned(),
        );
    }
    if let Some(bytes) = headroom.file_size_limit {
        return Blame::Environment(format!(
            "a file size limit of {} KiB is set (ulimit -f), which a compiler's temporary \
             files may pass",
            bytes >> 10
        ));
    }
    if let Some(bytes) = headroom.memory_limit {
        return Blame::Environment(format!(
            "a memory limit of {} MiB is set (ulimit -v or -d), under which a compiler's \
             allocations may fail",
            bytes >> 20
        ));
    }
    match headroom.shared_cause() {
        Some(cause) => Blame::Environment(cause),
        None => Blame::Kernel,
    }
}

/// Whose doing a compile that passed `timeout` is, on a machine in
/// `headroom`.
pub(crate) fn timed_out(timeout: Duration, headroom: &Headroom) -> Blame {
    if timeout < TIMEOUT_FLOOR {
        return Blame::Environment(format!(
            "the timeout ({} s) is below the {} s under which a timeout is never held \
             against a kernel",
            timeout.as_secs_f64(),
            TIMEOUT_FLOOR.as_secs()
        ));
    }
    if let Some((load, cores)) = headroom.load
        && load > OVERLOAD * cores as f64
    {
        return Blame::Environment(format!(
            "the machine was overloaded (load {load:.1} on {cores} cores)"
        ));
    }
    match headroom.shared_cause() {
        Some(cause) => Blame::Environment(cause),
        None => Blame::Kernel,
    }
}

/// Who sends `signal`, when it comes from outside the compile.
#[cfg(unix)]
fn outside_signal(signal: i32) -> Option<&'static str> {
    Some(match signal {
        libc::SIGKILL => {
            "it was killed by SIGKILL from outside the compile: the out-of-memory killer, a \
             CPU time limit or another program"
        }
        libc::SIGXCPU => "it passed the CPU time limit (ulimit -t)",
        libc::SIGXFSZ => "it passed the file size limit (ulimit -f)",
        libc::SIGTERM | libc::SIGINT | libc::SIGHUP | libc::SIGQUIT => {
            "it was stopped by a signal from outside the compile"
        }
        _ => return None,
    })
}

/// A limit of this process, in bytes; `None` when unlimited or unknown.
fn limit(resource: libc::__rlimit_resource_t) -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a live rlimit the call fills.
    if unsafe { libc::getrlimit(resource, &mut limit) } != 0 {
        return None;
    }
    (limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// Bytes of memory available and in all (`/proc/meminfo`).
fn memory() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|line| line.starts_with(name))?;
        let kib: u64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kib << 10)
    };
    Some((field("MemAvailable:")?, field("MemTotal:")?))
}

/// The one-minute load average and the cores (`/proc/loadavg`).
fn load() -> Option<(f64, usize)> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let load = text.split_whitespace().next()?.parse().ok()?;
    let cores = std::thread::available_parallelism().ok()?.get();
    Some((load, cores))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roomy() -> Headroom {
        Headroom {
            memory: Some((8 << 30, 16 << 30)),
            load: Some((1.0, 8)),
            ..Headroom::default()
        }
    }

    #[cfg(unix)]
    fn signalled(signal: i32) -> ExitStatus {
        std::os::unix::process::ExitStatusExt::from_raw(signal)
    }

    // P11
    #[cfg(unix)]
    #[test]
    fn a_crash_alone_with_headroom_is_the_kernel_s() {
        for signal in [libc::SIGSEGV, libc::SIGABRT, libc::SIGILL, libc::SIGBUS] {
            assert_eq!(crashed(Some(&signalled(signal)), &roomy()), Blame::Kernel);
        }
        let exited = std::os::unix::process::ExitStatusExt::from_raw(3 << 8);
        assert_eq!(crashed(Some(&exited), &roomy()), Blame::Kernel);
    }

    // P11
    #[cfg(unix)]
    #[test]
    fn a_signal_or_a_limit_from_outside_is_not_the_kernel_s() {
        for signal in [libc::SIGKILL, libc::SIGXCPU, libc::SIGXFSZ, libc::SIGTERM] {
            assert!(
                matches!(
                    crashed(Some(&signalled(signal)), &roomy()),
                    Blame::Environment(_)
                ),
                "signal {signal}"
            );
        }
        let abort = signalled(libc::SIGABRT);
        let limited = Headroom {
            file_size_limit: Some(64 << 10),
            ..roomy()
        };
        let Blame::Environment(why) = crashed(Some(&abort), &limited) else {
            panic!("a file size limit is the machine's");
        };
        assert!(why.contains("ulimit -f"), "{why}");
        let limited = Headroom {
            memory_limit: Some(1 << 30),
            ..roomy()
        };
        assert!(matches!(
            crashed(Some(&abort), &limited),
            Blame::Environment(_)
        ));
        let short = Headroom {
            memory: Some((100 << 20, 16 << 30)),
            ..roomy()
        };
        assert!(matches!(
            crashed(Some(&abort), &short),
            Blame::Environment(_)
        ));
        let together = Headroom {
            another_lost: true,
            ..roomy()
        };
        assert!(matches!(
            crashed(Some(&abort), &together),
            Blame::Environment(_)
        ));
        assert!(matches!(crashed(None, &roomy()), Blame::Environment(_)));
    }

    // P11
    #[test]
    fn a_hang_counts_only_past_the_floor_on_a_machine_with_headroom() {
        assert_eq!(timed_out(TIMEOUT_FLOOR, &roomy()), Blame::Kernel);
        let Blame::Environment(why) = timed_out(Duration::from_secs(5), &roomy()) else {
            panic!("a short timeout is the user's");
        };
        assert!(why.contains("below the 60 s"), "{why}");
        let busy = Headroom {
            load: Some((40.0, 8)),
            ..roomy()
        };
        let Blame::Environment(why) = timed_out(TIMEOUT_FLOOR, &busy) else {
            panic!("an overloaded machine is not the kernel");
        };
        assert!(why.contains("overloaded"), "{why}");
        let together = Headroom {
            another_lost: true,
            ..roomy()
        };
        assert!(matches!(
            timed_out(TIMEOUT_FLOOR * 2, &together),
            Blame::Environment(_)
        ));
    }

    #[test]
    fn this_machine_s_headroom_reads() {
        let headroom = Headroom::now(false);
        if let Some((available, total)) = headroom.memory {
            assert!(available <= total, "{headroom:?}");
        }
    }
}
