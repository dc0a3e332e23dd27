//! The staging folder's sweep: staging files whose writer died or that
//! outlived every lock timeout are removed, and only files named as the
//! store names them: `<pid>-<sequence>.part`, as `durable` makes them.

use std::ffi::OsStr;
use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::tree::{Folder, Kind, is_absent, not_a_file, why_not_entered};
use crate::walk::Unchecked;

/// Removes from the `staging` folder of `root` (at `staging_path`) every
/// staging file for which `stale(pid, age)` holds, reaching nothing through
/// a link; returns how many. What is not a staging file is reported.
pub(crate) fn sweep_staging(
    root: &Folder,
    staging_path: &Path,
    unchecked: &mut Vec<Unchecked>,
    stale: &dyn Fn(libc::pid_t, Duration) -> bool,
) -> u64 {
    let staging = match root.folder(OsStr::new("staging")) {
        Ok(folder) => folder,
        Err(error) if is_absent(&error) => return 0,
        Err(error) => {
            let why = why_not_entered(root, OsStr::new("staging"), &error);
            unchecked.push((staging_path.to_path_buf(), why));
            return 0;
        }
    };
    let names = match staging.names() {
        Ok(names) => names,
        Err(error) => {
            unchecked.push((
                staging_path.to_path_buf(),
                format!("cannot be listed: {error}"),
            ));
            return 0;
        }
    };
    let now = SystemTime::now();
    let mut removed = 0;
    for name in names {
        let path = staging_path.join(&name);
        let Some(pid) = name.to_str().and_then(staging_pid) else {
            unchecked.push((path, "not a name the store gives: left alone".to_owned()));
            continue;
        };
        let found = match staging.status(&name) {
            Ok(found) if found.kind == Kind::File => found,
            Ok(found) => {
                let why = not_a_file(found.kind);
                unchecked.push((path, why));
                continue;
            }
            Err(_) => continue,
        };
        let age = now.duration_since(found.modified).unwrap_or(Duration::ZERO);
        if !stale(pid, age) {
            continue;
        }
        match staging.remove_file(&name) {
            Ok(()) => removed += 1,
            Err(error) if is_absent(&error) => {}
            Err(error) => unchecked.push((path, format!("stale; cannot be removed: {error}"))),
        }
    }
    removed
}

/// The process id in `name` when it is a staging file's name as the store
/// gives them, `<pid>-<sequence>.part`; `None` for any other name.
pub(crate) fn staging_pid(name: &str) -> Option<libc::pid_t> {
    let (pid, rest) = name.split_once('-')?;
    let sequence = rest.strip_suffix(".part")?;
    let digits = |text: &str| !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit());
    if !digits(pid) || !digits(sequence) {
        return None;
    }
    pid.parse().ok()
}

/// Whether the process `pid`, which wrote a staging file, is gone.
pub(crate) fn is_dead(pid: libc::pid_t) -> bool {
    if pid <= 0 {
        return true;
    }
    if pid == std::process::id() as libc::pid_t {
        return false;
    }
    // SAFETY: signal 0 checks that the process exists and sends nothing.
    let status = unsafe { libc::kill(pid, 0) };
    status != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_the_store_gives_are_staging_files() {
        assert_eq!(staging_pid("123-4.part"), Some(123));
        for name in [
            "notes.txt",
            "123-4.part.bak",
            "-4.part",
            "12a-4.part",
            "123-.part",
        ] {
            assert_eq!(staging_pid(name), None, "{name}");
        }
        assert!(!is_dead(std::process::id() as libc::pid_t));
    }
}
