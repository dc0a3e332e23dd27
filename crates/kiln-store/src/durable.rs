//! Atomic, durable publication (P3): a file is written whole under
//! `staging/`, synced, renamed over its final name, and the folder that
//! received it is synced. A reader opens the old file or the new one, never
//! a part of either, and a process killed at any instant leaves at most a
//! file in `staging/`, which `verify`, `gc` and an hourly sweep at open
//! clean up.
//!
//! Every folder on the way is reached from the root's descriptor without
//! following a link ([`crate::tree`]): a link where the store's own folder
//! should be is replaced by a real folder, so no write lands outside the
//! store.

use std::cell::RefCell;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::layout;
use crate::tree::{Folder, relative_names};

/// The fsync-class calls (`fsync`, `fdatasync`, `syncfs`) the store's code
/// made in this process: its durability budget, counted without tracing
/// the process.
static SYNCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The same calls, made on this thread.
    static THREAD_SYNCS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts one fsync-class call.
pub(crate) fn count_sync() {
    SYNCS.fetch_add(1, Ordering::Relaxed);
    THREAD_SYNCS.with(|count| count.set(count.get() + 1));
}

/// `file`'s data made durable (`fdatasync`), counted.
pub(crate) fn sync_data(file: &File) -> io::Result<()> {
    count_sync();
    file.sync_data()
}

/// `file`'s data and metadata made durable (`fsync`), counted.
pub(crate) fn sync_all(file: &File) -> io::Result<()> {
    count_sync();
    file.sync_all()
}

/// A group commit (P3, F11): while one is open on a thread, the store's
/// writes that thread makes are published as they are made (whole to any
/// reader, and to every later reader however the writer ends: the system
/// keeps what was written) and made durable together when the group
/// commits, with one sync of each store's file system, instead of a sync
/// of every file and folder as it is written. The stores' roots that a
/// deferred sync was due in.
struct Group {
    roots: Vec<PathBuf>,
}

thread_local! {
    /// The calling thread's open group, if any.
    static GROUP: RefCell<Option<Group>> = const { RefCell::new(None) };
}

/// Opens a group commit on the calling thread, or keeps the one open.
pub(crate) fn begin_group() {
    GROUP.with(|group| {
        group
            .borrow_mut()
            .get_or_insert_with(|| Group { roots: Vec::new() });
    });
}

/// Whether the calling thread has a group open: a sync due now in the
/// store at `root` is then left to the group's commit, which is told of
/// it. Without a group, the caller syncs now.
pub(crate) fn deferred(root: &Path) -> bool {
    GROUP.with(|group| match group.borrow_mut().as_mut() {
        Some(group) => {
            if !group.roots.iter().any(|known| known == root) {
                group.roots.push(root.to_path_buf());
            }
            true
        }
        None => false,
    })
}

/// Ends the calling thread's group, making durable what it deferred: one
/// `syncfs` of each store's file system that a sync was due in, and
/// nothing when none was (a warm batch writes nothing it must wait for).
/// One file's sync would cost as much as the whole step's, and a sync of
/// every file a batch touched would cost one per shard.
pub(crate) fn commit_group() -> io::Result<()> {
    let Some(group) = GROUP.with(|group| group.borrow_mut().take()) else {
        return Ok(());
    };
    let mut first_error = None;
    for root in group.roots {
        if let Err(error) = sync_file_system(&root) {
            first_error.get_or_insert(error);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// One `syncfs` of the file system that holds `root`, counted.
pub(crate) fn sync_file_system(root: &Path) -> io::Result<()> {
    let folder = File::open(if root.as_os_str().is_empty() {
        Path::new(".")
    } else {
        root
    })?;
    count_sync();
    // SAFETY: the descriptor is open for as long as `folder` lives.
    if unsafe { libc::syncfs(folder.as_raw_fd()) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The fsync-class calls every store of this process made so far.
pub fn syncs() -> u64 {
    SYNCS.load(Ordering::Relaxed)
}

/// The fsync-class calls the stores made on the calling thread so far: a
/// loader's batch puts on its own thread, so the difference around a batch
/// step is what that step cost.
pub fn syncs_on_this_thread() -> u64 {
    THREAD_SYNCS.with(std::cell::Cell::get)
}

/// Staging files written by this process so far: with the process id, a
/// name no other live writer uses.
static STAGED: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `target` atomically, and durably when `durable`.
/// `staging` is the store's staging folder, right under its root, and
/// `target` a path under that root.
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
    publish_from(staging, target, durable, |file| file.write_all(bytes))
}

/// As [`publish_open`], with the syncs left to the calling thread's group
/// commit when one is open ([`begin_group`]): a put of a batch.
pub(crate) fn publish_open_grouped(
    staging: &Path,
    target: &Path,
    bytes: &[u8],
    durable: bool,
) -> io::Result<File> {
    place(staging, target, durable, true, |file| file.write_all(bytes))
}

/// As [`publish_open`], for bytes that `fill` writes to the staging file:
/// an object streamed from a bundle need not fit in memory. What `fill`
/// fails with is returned as it is, and nothing is published then.
pub(crate) fn publish_from<E: From<io::Error>>(
    staging: &Path,
    target: &Path,
    durable: bool,
    fill: impl FnOnce(&mut File) -> Result<(), E>,
) -> Result<File, E> {
    place(staging, target, durable, false, fill)
}

/// [`publish_from`]; when `grouped` and the thread has a group open, the
/// file, its folder and any folder made on the way are synced by the
/// group's commit instead of here. The order readers rely on holds
/// either way: the file is whole before its name appears.
fn place<E: From<io::Error>>(
    staging: &Path,
    target: &Path,
    durable: bool,
    grouped: bool,
    fill: impl FnOnce(&mut File) -> Result<(), E>,
) -> Result<File, E> {
    let root_path = staging.parent().ok_or_else(|| outside(staging))?;
    let durable = durable && !(grouped && deferred(root_path));
    // A relative root of one name has an empty parent: the current folder.
    let root = Folder::open(if root_path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        root_path
    })?;
    let staging = folder_at(&root, &[name_of(staging)?], durable)?;
    let (staged, mut file) = create_staged(&staging)?;
    let placed = fill(&mut file).and_then(|()| {
        if durable {
            sync_all(&file)?;
        }
        let relative = relative_names(root_path, target)?;
        let (name, folders) = relative.split_last().ok_or_else(|| outside(target))?;
        let folder = folder_at(&root, folders, durable)?;
        staging.rename(&staged, &folder, OsStr::new(name))?;
        if durable {
            folder.sync()?;
        }
        Ok(())
    });
    if placed.is_err() {
        let _ = staging.remove_file(&staged);
    }
    placed.map(|()| file)
}

/// A new file without a name in `staging`, to write and read back: for
/// what one operation holds only while it runs (a compressed bundle's
/// plain form), so that nothing is left behind however the process ends.
pub(crate) fn unnamed(staging: &Path) -> io::Result<File> {
    let root_path = staging.parent().ok_or_else(|| outside(staging))?;
    let root = Folder::open(if root_path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        root_path
    })?;
    let staging = folder_at(&root, &[name_of(staging)?], false)?;
    loop {
        let sequence = STAGED.fetch_add(1, Ordering::Relaxed);
        let name = OsString::from(format!("{}-{sequence}.part", std::process::id()));
        match staging.create_file_to_reread(&name) {
            Ok(file) => {
                staging.remove_file(&name)?;
                return Ok(file);
            }
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(error),
        }
    }
}

fn outside(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{} is not inside the store", path.display()),
    )
}

fn name_of(path: &Path) -> io::Result<&str> {
    path.file_name()
        .and_then(OsStr::to_str)
        .ok_or_else(|| outside(path))
}

/// The folder at `names` under `root`, each made when missing and synced
/// into its parent when `durable`. A link or file where one of the store's
/// own folders should be is replaced by a folder; anywhere else it is an
/// error. Nothing is followed.
fn folder_at(root: &Folder, names: &[&str], durable: bool) -> io::Result<Folder> {
    let mut current: Option<Folder> = None;
    for depth in 0..names.len() {
        let parent = current.as_ref().unwrap_or(root);
        let own = layout::is_own_folder(&names[..=depth]);
        let (next, made) = parent.folder_made(OsStr::new(names[depth]), own)?;
        if made && durable {
            parent.sync()?;
        }
        current = Some(next);
    }
    // A file at the root itself: a descriptor of the root of its own.
    current.map_or_else(|| root.reopen(), Ok)
}

/// A new file in `staging`, named `<pid>-<sequence>.part`.
fn create_staged(staging: &Folder) -> io::Result<(OsString, File)> {
    loop {
        let sequence = STAGED.fetch_add(1, Ordering::Relaxed);
        let name = OsString::from(format!("{}-{sequence}.part", std::process::id()));
        match staging.create_file(&name) {
            Ok(file) => return Ok((name, file)),
            // Left by a dead process that had this id: take the next name.
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // P3: in a group, a publication is in place at once and synced by the
    // group's one commit; outside one, it syncs as it is made.
    #[test]
    fn p3_a_grouped_publication_is_in_place_at_once_and_synced_once_by_its_commit() {
        let root = std::env::temp_dir().join(format!("kiln-durable-group-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("a store folder");
        let staging = root.join("staging");
        let target = |number: u8| root.join("records/ab/c").join(format!("{number:02x}"));

        let before = syncs_on_this_thread();
        publish_open_grouped(&staging, &target(0), b"alone", true).expect("published");
        assert!(
            syncs_on_this_thread() - before >= 2,
            "outside a group: the file and its folder"
        );

        begin_group();
        let before = syncs_on_this_thread();
        for number in 1..=8 {
            publish_open_grouped(&staging, &target(number), b"grouped", true).expect("published");
            assert_eq!(
                std::fs::read(target(number)).expect("in place at once"),
                b"grouped"
            );
        }
        assert_eq!(
            syncs_on_this_thread(),
            before,
            "nothing synced before the commit"
        );
        commit_group().expect("committed");
        assert_eq!(syncs_on_this_thread() - before, 1, "one sync for the group");
        commit_group().expect("nothing left");
        assert_eq!(
            syncs_on_this_thread() - before,
            1,
            "a second commit syncs nothing"
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_streamed_publication_that_fails_publishes_nothing_and_leaves_no_staging_file() {
        let root = std::env::temp_dir().join(format!("kiln-durable-stream-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("a store folder");
        let target = root.join("objects/ab/c").join("ab".repeat(32));
        let failed = publish_from(&root.join("staging"), &target, false, |file| {
            file.write_all(b"half an object")?;
            Err(io::Error::other("the bundle ended early"))
        });
        assert!(failed.is_err());
        assert!(!target.exists());
        assert_eq!(
            std::fs::read_dir(root.join("staging"))
                .expect("lists")
                .count(),
            0
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_publication_replaces_a_link_at_a_shard_and_writes_nothing_through_it() {
        let scratch =
            std::env::temp_dir().join(format!("kiln-durable-link-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&scratch);
        let (root, outside) = (scratch.join("store"), scratch.join("outside"));
        std::fs::create_dir_all(root.join("records")).expect("a store");
        std::fs::create_dir_all(&outside).expect("a folder outside");
        std::os::unix::fs::symlink(&outside, root.join("records/ab")).expect("a link");
        let target = root.join("records/ab/c").join("ab".repeat(32));
        publish(&root.join("staging"), &target, b"record", true).expect("published");
        assert_eq!(std::fs::read(&target).expect("in place"), b"record");
        assert!(
            !root.join("records/ab").is_symlink(),
            "the link was replaced"
        );
        assert_eq!(std::fs::read_dir(&outside).expect("lists").count(), 0);
        let _ = std::fs::remove_dir_all(&scratch);
    }
}
