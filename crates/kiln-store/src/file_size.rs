//! The process's file size limit (P5): every file the store writes is
//! checked against it before a byte is written.

use std::io;

/// Refuses a file of `length` bytes that the process's file size limit
/// (`RLIMIT_FSIZE`) would not let it write whole. Past the limit the system
/// sends SIGXFSZ, which stops a process that does not ignore it: the store
/// must not depend on how its host set that signal up (P5).
pub(crate) fn within_file_size_limit(length: u64) -> io::Result<()> {
    let mut limit = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: `limit` is a valid `rlimit` that the call fills.
    if unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit) } != 0
        || limit.rlim_cur == libc::RLIM_INFINITY
        || length <= limit.rlim_cur
    {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::FileTooLarge,
        format!(
            "a file of {length} bytes would pass the process's file size limit of {} bytes",
            limit.rlim_cur
        ),
    ))
}
