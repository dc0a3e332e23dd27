//! The staging folder's sweep: staging files whose writer died or that
//! outlived every lock timeout are removed, and only files named as the
//! store names them.

use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::durable;
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
        let Some(pid) = name.to_str().and_then(durable::staging_pid) else {
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
