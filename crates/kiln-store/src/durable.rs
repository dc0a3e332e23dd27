//! Atomic, durable publication (P3): a file is written whole under
//! `staging/`, synced, renamed over its final name, and the folder that
//! received it is synced. A reader opens the old file or the new one, never
//! a part of either, and a process killed at any instant leaves at most a
//! file in `staging/`, which `verify` and `gc` clean up.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Staging files written by this process so far: with the process id, a
/// name no other live writer uses.
static STAGED: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `target` atomically, and durably when `durable`.
pub(crate) fn publish(
    staging: &Path,
    target: &Path,
    bytes: &[u8],
    durable: bool,
) -> io::Result<()> {
    publish_open(staging, target, bytes, durable).map(drop)
}

/// As [`publish`], and returns the file, still open, now at `target`: for
/// setting its times once it is in place (set on the staging file, they
/// could make another process's clean-up take it for a stale one).
pub(crate) fn publish_open(
    staging: &Path,
    target: &Path,
    bytes: &[u8],
    durable: bool,
) -> io::Result<File> {
    let (staged, mut file) = create_staged(staging)?;
    let renamed = file
        .write_all(bytes)
        .and_then(|()| if durable { file.sync_all() } else { Ok(()) })
        .and_then(|()| rename_into_place(&staged, target, durable));
    if renamed.is_err() {
        let _ = fs::remove_file(&staged);
    }
    renamed.map(|()| file)
}

/// A new file in `staging`, named `<pid>-<sequence>.part`.
pub(crate) fn create_staged(staging: &Path) -> io::Result<(PathBuf, File)> {
    loop {
        let sequence = STAGED.fetch_add(1, Ordering::Relaxed);
        let path = staging.join(format!("{}-{sequence}.part", std::process::id()));
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => return Ok((path, file)),
            // Left by a dead process that had this id: take the next name.
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(staging)?;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Renames a whole, synced staging file over `target`, creating its shard
/// folders when they are missing, then syncs the folder it landed in.
pub(crate) fn rename_into_place(staged: &Path, target: &Path, durable: bool) -> io::Result<()> {
    let parent = target.parent().expect("store files live in folders");
    match fs::rename(staged, target) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            create_folders(parent, durable)?;
            fs::rename(staged, target)?;
        }
        Err(error) => return Err(error),
    }
    if durable {
        sync_folder(parent)?;
    }
    Ok(())
}

/// Creates `folder` and its missing parents, syncing each parent that
/// gained an entry so the new folder survives a crash too.
fn create_folders(folder: &Path, durable: bool) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut current = folder;
    while !current.exists() {
        missing.push(current);
        match current.parent() {
            Some(parent) => current = parent,
            None => break,
        }
    }
    fs::create_dir_all(folder)?;
    if durable {
        for created in missing.iter().rev() {
            if let Some(parent) = created.parent() {
                sync_folder(parent)?;
            }
        }
    }
    Ok(())
}

/// Makes the entries of `folder` durable.
pub(crate) fn sync_folder(folder: &Path) -> io::Result<()> {
    File::open(folder)?.sync_all()
}

/// Whether the process that wrote staging file `name` is gone.
pub(crate) fn staged_by_dead_process(name: &str) -> bool {
    let Some(pid) = name
        .split_once('-')
        .and_then(|(pid, _)| pid.parse::<libc::pid_t>().ok())
    else {
        return true;
    };
    if pid == std::process::id() as libc::pid_t {
        return false;
    }
    // SAFETY: signal 0 checks that the process exists and sends nothing.
    let status = unsafe { libc::kill(pid, 0) };
    status != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}
