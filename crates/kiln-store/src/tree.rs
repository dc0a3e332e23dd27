//! File-system access that never follows a symbolic link below the root.
//!
//! The store's root is the folder the user named, links and all. Every
//! folder below it is reached from the root's descriptor one name at a
//! time, with `O_NOFOLLOW | O_DIRECTORY`, and every file is opened, looked
//! at, renamed and removed relative to the descriptor of the folder that
//! holds it. A link put where a shard folder should be is therefore seen as
//! a link, never walked through: nothing the store writes or removes can
//! land outside its root, and a folder swapped for a link while a pass
//! runs cannot redirect it either, because the pass holds the folder
//! itself, not its path.
//!
//! A removal takes a name only while it is still the file the caller
//! judged: the same device and inode ([`Folder::remove_if_same`]) or the
//! same bytes ([`Folder::remove_if_holds`]). Only "not found" says a file
//! is gone ([`Removal::Changed`]); any other error is a failure, reported
//! by the caller and never taken for success.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path};
use std::time::{Duration, SystemTime};

/// What a name in a folder is, looked at without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A regular file.
    File,
    /// A folder.
    Folder,
    /// A symbolic link.
    Link,
    /// Anything else: a pipe, a socket, a device.
    Other,
}

impl Kind {
    /// How a report names it.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Self::File => "a file",
            Self::Folder => "a folder",
            Self::Link => "a symbolic link (not followed)",
            Self::Other => "a special file",
        }
    }
}

/// What `fstatat(AT_SYMLINK_NOFOLLOW)` says of a name.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Status {
    pub(crate) kind: Kind,
    pub(crate) len: u64,
    /// Bytes the file system allocated to it: its blocks, not its length.
    pub(crate) allocated: u64,
    pub(crate) device: u64,
    pub(crate) inode: u64,
    pub(crate) modified: SystemTime,
    pub(crate) accessed: SystemTime,
}

/// A folder held by its descriptor.
#[derive(Debug)]
pub(crate) struct Folder {
    descriptor: OwnedFd,
}

/// How a removal went.
#[derive(Debug)]
pub(crate) enum Removal {
    /// The file was removed.
    Removed,
    /// The file went, or was replaced, meanwhile: another process's doing,
    /// and nothing of this caller's to remove.
    Changed,
    /// The name could not be looked at or removed. Never taken for "gone".
    Failed(io::Error),
}

impl Removal {
    /// The outcome of unlinking a name that was just seen to be the file.
    pub(crate) fn of(unlinked: io::Result<()>) -> Self {
        match unlinked {
            Ok(()) => Self::Removed,
            Err(error) if is_absent(&error) => Self::Changed,
            Err(error) => Self::Failed(error),
        }
    }
}

/// The names from `root` down to `target`, which must lie under it: each a
/// plain component, so that walking them from the root's descriptor can
/// only go down.
pub(crate) fn relative_names<'a>(root: &Path, target: &'a Path) -> io::Result<Vec<&'a str>> {
    let outside = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not inside the store", target.display()),
        )
    };
    let relative = target.strip_prefix(root).map_err(|_| outside())?;
    relative
        .components()
        .map(|component| match component {
            Component::Normal(name) => name.to_str().ok_or_else(outside),
            _ => Err(outside()),
        })
        .collect()
}

/// `name` as a C string, refused unless it is one plain component: a name
/// with a `/`, `.` or `..` would leave the folder it is looked up in.
fn component(name: &OsStr) -> io::Result<CString> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a name inside a folder", name.to_string_lossy()),
        ));
    }
    CString::new(bytes).map_err(|error| io::Error::new(io::ErrorKind::InvalidInput, error))
}

/// The result of a call that returns `-1` and sets `errno` on failure.
fn check(status: libc::c_int) -> io::Result<libc::c_int> {
    if status == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(status)
    }
}

fn time(seconds: i64, nanoseconds: i64) -> SystemTime {
    let nanoseconds = u32::try_from(nanoseconds).unwrap_or(0);
    match u64::try_from(seconds) {
        Ok(seconds) => SystemTime::UNIX_EPOCH + Duration::new(seconds, nanoseconds),
        Err(_) => SystemTime::UNIX_EPOCH,
    }
}

/// Whether `error` says a name is not there (as opposed to unreadable).
pub(crate) fn is_absent(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::NotFound
}

/// Whether `error` came from opening a link or a non-folder with
/// `O_NOFOLLOW | O_DIRECTORY`.
fn is_not_a_folder(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR))
}

impl Folder {
    /// Opens the folder at `path`. Only the root is opened by path: a link
    /// on the way to it is the user's choice of where the store lives.
    pub(crate) fn open(path: &Path) -> io::Result<Self> {
        let path = CString::new(path.as_os_str().as_bytes())
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidInput, error))?;
        // SAFETY: `path` is a valid C string; the flags open a folder
        // read-only, and the descriptor returned is owned by nothing else.
        let descriptor = check(unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: `open` just returned this descriptor, open and unowned.
        let descriptor = unsafe { OwnedFd::from_raw_fd(descriptor) };
        Ok(Self { descriptor })
    }

    /// The folder `name` in this one; a link or a file there is an error
    /// (`ELOOP` or `ENOTDIR`), never followed.
    pub(crate) fn folder(&self, name: &OsStr) -> io::Result<Self> {
        let name = component(name)?;
        // SAFETY: `name` is a valid C string of one component and
        // `self.descriptor` an open folder; `O_NOFOLLOW` refuses a link.
        let descriptor = check(unsafe {
            libc::openat(
                self.descriptor.as_raw_fd(),
                name.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: `openat` just returned this descriptor, open and unowned.
        let descriptor = unsafe { OwnedFd::from_raw_fd(descriptor) };
        Ok(Self { descriptor })
    }

    /// The folder `names` below this one, each entered as [`folder`]
    /// enters it: nothing is made, and a link on the way is an error.
    ///
    /// [`folder`]: Self::folder
    pub(crate) fn descend(&self, names: &[&str]) -> io::Result<Self> {
        let Some((first, rest)) = names.split_first() else {
            return self.reopen();
        };
        let mut current = self.folder(OsStr::new(first))?;
        for name in rest {
            current = current.folder(OsStr::new(name))?;
        }
        Ok(current)
    }

    /// A second descriptor of this folder, with an offset of its own.
    pub(crate) fn reopen(&self) -> io::Result<Self> {
        // SAFETY: `self.descriptor` is an open folder and "." a valid C
        // string naming it.
        let descriptor = check(unsafe {
            libc::openat(
                self.descriptor.as_raw_fd(),
                c".".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: `openat` just returned this descriptor, open and unowned.
        let descriptor = unsafe { OwnedFd::from_raw_fd(descriptor) };
        Ok(Self { descriptor })
    }

    /// The folder `name` in this one, made when missing. A link or a file
    /// where it should be is replaced by a real folder when `replace`
    /// says the name is the store's own; else it is an error.
    pub(crate) fn folder_made(&self, name: &OsStr, replace: bool) -> io::Result<(Self, bool)> {
        let mut made = false;
        // A few rounds: another process may make or replace it meanwhile.
        for _ in 0..4 {
            match self.folder(name) {
                Ok(folder) => return Ok((folder, made)),
                Err(error) if is_absent(&error) => {}
                Err(error) if is_not_a_folder(&error) && replace => {
                    let found = self.status(name)?;
                    if found.kind == Kind::Folder {
                        continue;
                    }
                    log::warn!(
                        "replacing {} at the store's own name {} with a folder",
                        found.kind.describe(),
                        name.to_string_lossy()
                    );
                    match self.remove_file(name) {
                        Ok(()) => {}
                        Err(error) if is_absent(&error) => {}
                        Err(error) => return Err(error),
                    }
                }
                Err(error) => return Err(error),
            }
            match self.make_folder(name) {
                Ok(()) => made = true,
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
                Err(error) => return Err(error),
            }
        }
        self.folder(name).map(|folder| (folder, made))
    }

    /// What `name` is, without following it.
    #[allow(
        clippy::useless_conversion,
        reason = "the field types of `stat` differ between platforms"
    )]
    pub(crate) fn status(&self, name: &OsStr) -> io::Result<Status> {
        let name = component(name)?;
        // SAFETY: all-zero bytes are a valid `stat`, filled in by the call.
        let mut found: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `name` is a valid C string, `found` a writable `stat`,
        // `self.descriptor` an open folder.
        check(unsafe {
            libc::fstatat(
                self.descriptor.as_raw_fd(),
                name.as_ptr(),
                &mut found,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })?;
        let kind = match found.st_mode & libc::S_IFMT {
            libc::S_IFREG => Kind::File,
            libc::S_IFDIR => Kind::Folder,
            libc::S_IFLNK => Kind::Link,
            _ => Kind::Other,
        };
        Ok(Status {
            kind,
            len: u64::try_from(found.st_size).unwrap_or(0),
            allocated: u64::try_from(found.st_blocks).unwrap_or(0) * 512,
            device: u64::from(found.st_dev),
            inode: u64::from(found.st_ino),
            modified: time(found.st_mtime.into(), found.st_mtime_nsec.into()),
            accessed: time(found.st_atime.into(), found.st_atime_nsec.into()),
        })
    }

    /// Opens the file `name` to read, never through a link, and never
    /// waiting on a pipe: the caller checks it is a regular file.
    pub(crate) fn open_file(&self, name: &OsStr) -> io::Result<File> {
        self.open_with(
            name,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    }

    /// Creates the file `name` to write; fails if anything is there.
    pub(crate) fn create_file(&self, name: &OsStr) -> io::Result<File> {
        self.open_with(
            name,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    }

    /// Creates the file `name` to write and read back; fails if anything
    /// is there.
    pub(crate) fn create_file_to_reread(&self, name: &OsStr) -> io::Result<File> {
        self.open_with(
            name,
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    }

    /// Opens the file `name` to write, creating it when missing, never
    /// through a link.
    pub(crate) fn open_or_create_file(&self, name: &OsStr) -> io::Result<File> {
        self.open_with(
            name,
            libc::O_WRONLY | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    }

    /// Opens the file `name` to read and write, never through a link and
    /// never waiting on a pipe: the caller checks it is a regular file.
    pub(crate) fn open_read_write(&self, name: &OsStr) -> io::Result<File> {
        self.open_with(
            name,
            libc::O_RDWR | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    }

    fn open_with(&self, name: &OsStr, flags: libc::c_int) -> io::Result<File> {
        let name = component(name)?;
        // SAFETY: `name` is a valid C string of one component,
        // `self.descriptor` an open folder; the mode is read only with
        // `O_CREAT`, and is then the usual 0666 less the umask.
        let descriptor = check(unsafe {
            libc::openat(
                self.descriptor.as_raw_fd(),
                name.as_ptr(),
                flags,
                0o666 as libc::c_uint,
            )
        })?;
        // SAFETY: `openat` just returned this descriptor, open and unowned.
        Ok(unsafe { File::from_raw_fd(descriptor) })
    }

    /// Removes the name `name` (a file or a link, never what a link points
    /// to).
    pub(crate) fn remove_file(&self, name: &OsStr) -> io::Result<()> {
        self.unlink(name, 0)
    }

    /// Removes the file `name` if it is still the file `(device, inode)`
    /// that the caller looked at.
    pub(crate) fn remove_if_same(&self, name: &OsStr, device: u64, inode: u64) -> Removal {
        match self.status(name) {
            Ok(now) if now.kind == Kind::File && now.device == device && now.inode == inode => {
                Removal::of(self.remove_file(name))
            }
            Ok(_) => Removal::Changed,
            Err(error) if is_absent(&error) => Removal::Changed,
            Err(error) => Removal::Failed(error),
        }
    }

    /// Removes the file `name` if it still holds exactly `bytes`: a writer
    /// may have published a good file there since the caller read it.
    pub(crate) fn remove_if_holds(&self, name: &OsStr, bytes: &[u8]) -> Removal {
        let file = match self.open_file(name) {
            Ok(file) => file,
            // A link there now (`ELOOP`) is not the file that was read.
            Err(error) if is_absent(&error) || error.raw_os_error() == Some(libc::ELOOP) => {
                return Removal::Changed;
            }
            Err(error) => return Removal::Failed(error),
        };
        let read = file.metadata().and_then(|found| {
            let mut now = Vec::with_capacity(bytes.len());
            // One byte more than expected is enough to see a longer file.
            (&file).take(bytes.len() as u64 + 1).read_to_end(&mut now)?;
            Ok((found, now))
        });
        match read {
            Ok((found, now)) if found.is_file() && now == bytes => {
                self.remove_if_same(name, found.dev(), found.ino())
            }
            Ok(_) => Removal::Changed,
            Err(error) => Removal::Failed(error),
        }
    }

    /// Clears the name `name` for a file to be published there: a link or
    /// special file is removed (never what a link points to), and a folder
    /// with everything in it, reached from this folder's descriptor so that
    /// nothing inside is followed. Says whether anything was removed.
    pub(crate) fn clear_for_file(&self, name: &OsStr) -> io::Result<bool> {
        let found = match self.status(name) {
            Ok(found) => found,
            Err(error) if is_absent(&error) => return Ok(false),
            Err(error) => return Err(error),
        };
        match found.kind {
            Kind::File => return Ok(false),
            Kind::Folder => self.remove_tree(name)?,
            Kind::Link | Kind::Other => self.remove_file(name)?,
        }
        Ok(true)
    }

    /// Removes the folder `name` and what it holds, one name at a time
    /// from descriptors: a link inside is removed, never entered.
    fn remove_tree(&self, name: &OsStr) -> io::Result<()> {
        match self.remove_folder(name) {
            Err(error) if matches!(error.raw_os_error(), Some(libc::ENOTEMPTY | libc::EEXIST)) => {}
            done => return done,
        }
        let folder = self.folder(name)?;
        for inner in folder.names()? {
            let removed = match folder.status(&inner) {
                Ok(found) if found.kind == Kind::Folder => folder.remove_tree(&inner),
                Ok(_) => folder.remove_file(&inner),
                Err(error) => Err(error),
            };
            match removed {
                Err(error) if !is_absent(&error) => return Err(error),
                _ => {}
            }
        }
        self.remove_folder(name)
    }

    /// Removes the folder `name` if it is empty.
    pub(crate) fn remove_folder(&self, name: &OsStr) -> io::Result<()> {
        self.unlink(name, libc::AT_REMOVEDIR)
    }

    fn unlink(&self, name: &OsStr, flags: libc::c_int) -> io::Result<()> {
        let name = component(name)?;
        // SAFETY: `name` is a valid C string of one component and
        // `self.descriptor` an open folder.
        check(unsafe { libc::unlinkat(self.descriptor.as_raw_fd(), name.as_ptr(), flags) })
            .map(drop)
    }

    /// Makes the folder `name`.
    pub(crate) fn make_folder(&self, name: &OsStr) -> io::Result<()> {
        let name = component(name)?;
        // SAFETY: `name` is a valid C string of one component and
        // `self.descriptor` an open folder.
        check(unsafe { libc::mkdirat(self.descriptor.as_raw_fd(), name.as_ptr(), 0o777) }).map(drop)
    }

    /// Renames `name` in this folder to `to` in folder `target`, replacing
    /// what is there.
    pub(crate) fn rename(&self, name: &OsStr, target: &Folder, to: &OsStr) -> io::Result<()> {
        let (name, to) = (component(name)?, component(to)?);
        // SAFETY: both names are valid C strings of one component and both
        // descriptors open folders.
        check(unsafe {
            libc::renameat(
                self.descriptor.as_raw_fd(),
                name.as_ptr(),
                target.descriptor.as_raw_fd(),
                to.as_ptr(),
            )
        })
        .map(drop)
    }

    /// Makes this folder's entries durable.
    pub(crate) fn sync(&self) -> io::Result<()> {
        crate::durable::count_sync();
        // SAFETY: `self.descriptor` is an open folder.
        check(unsafe { libc::fsync(self.descriptor.as_raw_fd()) }).map(drop)
    }

    /// The names in this folder, `.` and `..` left out.
    pub(crate) fn names(&self) -> io::Result<Vec<OsString>> {
        let entries = self.entries()?;
        Ok(entries.into_iter().map(|(name, _)| name).collect())
    }

    /// The names in this folder with what the listing says each is, without
    /// a look of its own: `None` where the file system does not say
    /// (`DT_UNKNOWN`), for the caller to look with [`status`](Self::status).
    pub(crate) fn entries(&self) -> io::Result<Vec<(OsString, Option<Kind>)>> {
        // `fdopendir` takes the descriptor it is given and its offset:
        // list through a descriptor of its own.
        let own = self.reopen()?;
        let raw = own.descriptor.as_raw_fd();
        // SAFETY: `raw` is an open folder descriptor; on success the stream
        // owns it, so it is released from `own` without being closed.
        let stream = unsafe { libc::fdopendir(raw) };
        if stream.is_null() {
            return Err(io::Error::last_os_error());
        }
        std::mem::forget(own);
        let mut names = Vec::new();
        let listed = loop {
            set_errno(0);
            // SAFETY: `stream` is an open directory stream.
            let entry = unsafe { libc::readdir(stream) };
            if entry.is_null() {
                let error = io::Error::last_os_error();
                break if error.raw_os_error() == Some(0) {
                    Ok(())
                } else {
                    Err(error)
                };
            }
            // SAFETY: a non-null entry from `readdir` holds a NUL-terminated
            // name, valid until the next call on the stream.
            let name = unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) }.to_bytes();
            // SAFETY: as above, the entry is valid until the next call.
            let kind = match unsafe { (*entry).d_type } {
                libc::DT_REG => Some(Kind::File),
                libc::DT_DIR => Some(Kind::Folder),
                libc::DT_LNK => Some(Kind::Link),
                libc::DT_UNKNOWN => None,
                _ => Some(Kind::Other),
            };
            if name != b"." && name != b".." {
                names.push((OsString::from_vec(name.to_vec()), kind));
            }
        };
        // SAFETY: `stream` is open, and closed once, here.
        unsafe { libc::closedir(stream) };
        listed.map(|()| names)
    }
}

/// Sets `errno`, which `readdir` leaves alone at the end of a folder.
fn set_errno(value: libc::c_int) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    // SAFETY: the location of this thread's `errno`, always valid.
    unsafe {
        *libc::__errno_location() = value;
    }
    #[cfg(any(target_os = "macos", target_os = "ios", target_os = "freebsd"))]
    // SAFETY: the location of this thread's `errno`, always valid.
    unsafe {
        *libc::__error() = value;
    }
    // Elsewhere a failed listing reads as its end: what it missed is then
    // only not checked, never removed.
    #[cfg(not(any(
        target_os = "linux",
        target_os = "android",
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd"
    )))]
    let _ = value;
}

/// Why a name where a file should be, which is a `kind`, was not checked.
pub(crate) fn not_a_file(kind: Kind) -> String {
    format!("{} where a file should be: left alone", kind.describe())
}

/// Why the folder `name` in `parent` could not be entered.
pub(crate) fn why_not_entered(parent: &Folder, name: &OsStr, error: &io::Error) -> String {
    match parent.status(name) {
        Ok(found) if found.kind != Kind::Folder => {
            format!(
                "{} where a folder should be: left alone",
                found.kind.describe()
            )
        }
        _ => format!("cannot be listed: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::fs;
    use std::os::unix::fs::symlink;

    /// A fresh folder holding `store/`, and `outside/file` (`kept`) for a
    /// link in the store to point at.
    fn scratch(test: &str) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("kiln-tree-{test}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(path.join("outside")).expect("a folder");
        fs::write(path.join("outside/file"), b"kept").expect("a file");
        fs::create_dir_all(path.join("store")).expect("a folder");
        path
    }

    #[test]
    fn a_link_is_seen_as_a_link_and_never_entered() {
        let root = scratch("link");
        symlink(root.join("outside"), root.join("store/ab")).expect("a link");
        let store = Folder::open(&root.join("store")).expect("opens");
        let error = store
            .folder(OsStr::new("ab"))
            .expect_err("a link is no folder");
        assert!(is_not_a_folder(&error), "{error}");
        assert_eq!(
            store.status(OsStr::new("ab")).expect("a status").kind,
            Kind::Link
        );
        assert!(store.folder(OsStr::new("..")).is_err(), "never leaves");
        let (made, replaced) = store
            .folder_made(OsStr::new("ab"), true)
            .expect("replaced by a folder");
        assert!(replaced);
        assert_eq!(made.names().expect("lists"), Vec::<OsString>::new());
        assert!(
            root.join("outside/file").exists(),
            "the link's target stays"
        );
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn a_removal_takes_only_the_file_that_was_read_and_never_enters_a_link() {
        let root = scratch("removal");
        fs::create_dir_all(root.join("store/entry")).expect("a folder at a file's name");
        symlink(root.join("outside"), root.join("store/entry/link")).expect("a link");
        fs::write(root.join("store/record"), b"read").expect("a file");
        let store = Folder::open(&root.join("store")).expect("opens");

        let record = OsStr::new("record");
        assert!(matches!(
            store.remove_if_holds(record, b"other"),
            Removal::Changed
        ));
        assert!(matches!(
            store.remove_if_holds(record, b"read"),
            Removal::Removed
        ));
        assert!(matches!(
            store.remove_if_holds(record, b"read"),
            Removal::Changed
        ));
        assert!(store.clear_for_file(OsStr::new("entry")).expect("cleared"));
        assert!(!root.join("store/entry").exists());
        assert_eq!(fs::read(root.join("outside/file")).expect("kept"), b"kept");
        let _ = fs::remove_dir_all(&root);
    }
}
