//! What makes a folder a store, and the folders and files every store has.
//!
//! A store is marked by its `LAYOUT` file. Opening takes an empty folder
//! (or one holding only the staging files of a store whose creator died
//! before writing the marker) as a new store; a folder that holds anything
//! else and no marker is refused, so kiln never writes into, verifies or
//! collects someone's project. A folder that lost only its marker (it
//! holds `objects/` and `records/` and nothing but the store's own names)
//! is still the store: it is marked again, with a warning; opened to read
//! only, it is no store (the caller runs without it), with a warning saying
//! how to mark it again. In a marked store the names of
//! [`layout::FOLDERS`] and [`layout::FILES`] are the store's own: a file or
//! link where a folder should be is replaced, an empty folder where a file
//! should be is removed, and what cannot be repaired that way is reported
//! as [`Error::Damaged`], for the caller to run without the store.
//!
//! A store opened to read only is checked by the same rules
//! ([`inspect`]) and nothing is written; and every removal starts from a
//! root seen to carry the marker ([`open_marked`]).
//!
//! Opening also sweeps the staging files of dead processes, at most once
//! an hour per store (the time of the `swept` file says when it last did),
//! so a store nobody verifies does not accumulate them.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{self, Read};
use std::time::{Duration, SystemTime};

use crate::durable;
use crate::error::{Error, Result};
use crate::layout::{self, LAYOUT, Layout};
use crate::tree::{Folder, Kind, is_absent};

/// How often opening sweeps `staging/`.
const SWEEP_EVERY: Duration = Duration::from_secs(3600);
/// How old a dead process's staging file must be before a sweep at open
/// takes it: a process that just exited may have a publication in flight
/// through a process it handed the file to, and a minute costs nothing.
const STAGING_GRACE: Duration = Duration::from_secs(60);
/// The longest marker read: anything longer is not one.
const MARKER_LIMIT: u64 = 256;

/// Makes the folder at `layout`'s root a store, or checks that it is one,
/// and repairs its skeleton.
///
/// # Errors
///
/// The root cannot be made or opened; it holds files and no marker
/// ([`Error::NotAStore`]) or the marker of another layout; the skeleton is
/// damaged beyond what the store repairs on its own ([`Error::Damaged`]).
pub(crate) fn prepare(layout: &Layout, durable: bool) -> Result<()> {
    let root_path = layout.root();
    // The root itself may be reached through a link: where the store lives
    // is the user's choice. Nothing below it is. An existing store costs
    // one open; when that fails, creating the folder says best why.
    let root = Folder::open(root_path).or_else(|_| {
        fs::create_dir_all(root_path).map_err(Error::io("create the store folder", root_path))?;
        Folder::open(root_path).map_err(Error::io("open the store folder", root_path))
    })?;
    adopt(&root, layout, durable)?;
    repair(&root, layout, durable)?;
    sweep(&root, layout);
    Ok(())
}

/// Checks the marker, or writes it into a folder that may become a store.
fn adopt(root: &Folder, layout: &Layout, durable: bool) -> Result<()> {
    let marker = read_layout(root, layout)?;
    match marker {
        Marker::Current => return Ok(()),
        Marker::Earlier => {
            log::info!(
                "upgrading the store at {} to {LAYOUT}",
                layout.root().display()
            );
        }
        Marker::Absent => {
            if is_store_without_marker(root) {
                log::warn!(
                    "kiln store: {} had lost its {} file, and holds nothing but the store's \
                     own folders and files: it is marked as a store again",
                    layout.root().display(),
                    LAYOUT_NAME
                );
            } else if !is_empty_or_unfinished_store(root, layout)? {
                return Err(Error::NotAStore {
                    root: layout.root().to_path_buf(),
                });
            }
            if read_layout(root, layout)? != Marker::Absent {
                // Another process made the store while this one looked.
                return Ok(());
            }
        }
    }
    let marker_path = layout.layout_file();
    durable::publish(
        &layout.staging(),
        &marker_path,
        format!("{LAYOUT}\n").as_bytes(),
        durable,
    )
    .map_err(Error::io("write", &marker_path))?;
    if marker == Marker::Absent {
        tag_as_cache(layout, durable);
    }
    Ok(())
}

/// Marks a store kiln has just made as a cache folder
/// (<https://bford.info/cachedir/>), so that backup and archiving tools
/// skip it. After the marker, so that a creator killed between the two
/// leaves a store, not a folder that looks foreign; and best effort,
/// since a store works the same without it.
fn tag_as_cache(layout: &Layout, durable: bool) {
    const TAG: &str = "Signature: 8a477f597d28d172789f06886806bc55\n\
        # This file is a cache directory tag created by kiln.\n\
        # For information about cache directory tags, see https://bford.info/cachedir/\n";
    let path = layout.root().join("CACHEDIR.TAG");
    if let Err(error) = durable::publish(&layout.staging(), &path, TAG.as_bytes(), durable) {
        log::debug!("cannot write {}: {error}", path.display());
    }
}

/// Checks, as [`prepare`] does and writing nothing, that the folder at
/// `layout`'s root is a store: for a store opened to read only. `false`
/// when there is no store yet, where [`prepare`] would make one: the root
/// is missing, or holds nothing a store would not.
///
/// # Errors
///
/// As [`prepare`]'s: [`Error::NotAStore`], [`Error::Layout`], or the root
/// or its marker cannot be read.
pub(crate) fn inspect(layout: &Layout) -> Result<bool> {
    let root_path = layout.root();
    let root = match Folder::open(root_path) {
        Ok(root) => root,
        Err(error)
            if matches!(
                error.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(false);
        }
        Err(error) => return Err(Error::io("open the store folder", root_path)(error)),
    };
    is_marked(&root, layout)
}

/// The store's root, opened, once it is seen to carry this layout's
/// marker: where every removal starts, so that nothing is removed from a
/// folder that is not (or is no longer) a store.
///
/// # Errors
///
/// The root cannot be opened or its marker read; it carries no marker
/// ([`Error::NotAStore`]) or another layout's.
pub(crate) fn open_marked(layout: &Layout) -> Result<Folder> {
    let root_path = layout.root();
    let root = Folder::open(root_path).map_err(Error::io("open the store folder", root_path))?;
    if read_layout(&root, layout)? == Marker::Absent {
        return Err(Error::NotAStore {
            root: root_path.to_path_buf(),
        });
    }
    Ok(root)
}

/// Whether `root` carries this layout's marker; `false` when it carries
/// none and may become a store.
///
/// # Errors
///
/// It carries none and holds what a store would not ([`Error::NotAStore`]),
/// or as [`read_layout`].
fn is_marked(root: &Folder, layout: &Layout) -> Result<bool> {
    if read_layout(root, layout)? != Marker::Absent {
        return Ok(true);
    }
    if is_store_without_marker(root) {
        // Read only, it cannot be marked again, and without its marker
        // nothing may be read as the store's: the caller runs without it.
        log::warn!(
            "kiln store: {} has lost its {LAYOUT_NAME} file, and holds nothing but the store's \
             own folders and files; opened read-only it is not used: open it writable once \
             (without KILN_CACHE_READ_ONLY) and it is marked as a store again",
            layout.root().display()
        );
        return Ok(false);
    }
    if !is_empty_or_unfinished_store(root, layout)? {
        return Err(Error::NotAStore {
            root: layout.root().to_path_buf(),
        });
    }
    Ok(read_layout(root, layout)? != Marker::Absent)
}

/// What a root's `LAYOUT` marker says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    /// No marker: not a store (yet).
    Absent,
    /// This layout.
    Current,
    /// A layout this one reads as it is and upgrades ([`layout::UPGRADES_FROM`]).
    Earlier,
}

/// The marker `root` carries. Only "not found" says it carries none: a
/// marker that cannot be read, or is a link, is an error.
///
/// # Errors
///
/// The marker is of a layout this one cannot read ([`Error::Layout`]) or
/// cannot be read.
fn read_layout(root: &Folder, layout: &Layout) -> Result<Marker> {
    match read_marker(root, OsStr::new("LAYOUT")) {
        Ok(found) if found.trim() == LAYOUT => Ok(Marker::Current),
        Ok(found) if layout::UPGRADES_FROM.contains(&found.trim()) => Ok(Marker::Earlier),
        Ok(found) => Err(Error::Layout {
            root: layout.root().to_path_buf(),
            found: found.trim().to_owned(),
            expected: LAYOUT,
        }),
        Err(error) if is_absent(&error) => Ok(Marker::Absent),
        Err(error) => Err(Error::io("read", &layout.layout_file())(error)),
    }
}

fn read_marker(root: &Folder, marker: &OsStr) -> io::Result<String> {
    let file: File = root.open_file(marker)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("not a file"));
    }
    let mut found = String::new();
    file.take(MARKER_LIMIT).read_to_string(&mut found)?;
    Ok(found)
}

/// The name of the marker file.
const LAYOUT_NAME: &str = "LAYOUT";

/// Whether `root`, which carries no marker, is a store that lost only its
/// marker: it holds the folders of a store's entries
/// ([`layout::ENTRY_FOLDERS`]), the files each opening writes
/// ([`layout::WRITTEN_AT_OPEN`]), and nothing but the store's own names.
fn is_store_without_marker(root: &Folder) -> bool {
    let Ok(entries) = root.entries() else {
        return false;
    };
    let is_own = |name: &OsStr| {
        name.to_str()
            .is_some_and(|name| layout::FOLDERS.contains(&name) || layout::FILES.contains(&name))
    };
    let is_folder = |wanted: &str| {
        entries.iter().any(|(name, kind)| {
            name == wanted
                && match kind {
                    Some(kind) => *kind == Kind::Folder,
                    None => root
                        .status(name)
                        .is_ok_and(|status| status.kind == Kind::Folder),
                }
        })
    };
    let is_file = |wanted: &str| {
        entries.iter().any(|(name, _)| {
            name == wanted
                && root
                    .status(name)
                    .is_ok_and(|status| status.kind == Kind::File)
        })
    };
    layout::ENTRY_FOLDERS.iter().all(|folder| is_folder(folder))
        && layout::WRITTEN_AT_OPEN.iter().all(|file| is_file(file))
        && entries.iter().all(|(name, _)| is_own(name))
}

/// Whether `root` holds nothing or only what a store's creation leaves, or
/// has become a store since its marker was read: several processes opening
/// one new folder at once each find no marker, and the first to finish has
/// written the marker and the skeleton by the time another lists the root.
fn is_empty_or_unfinished_store(root: &Folder, layout: &Layout) -> Result<bool> {
    if is_empty_or_unfinished(root).map_err(Error::io("list", layout.root()))? {
        return Ok(true);
    }
    Ok(read_layout(root, layout)? != Marker::Absent)
}

/// Whether `root` holds nothing, or only what a store's creation leaves
/// before its marker: a `staging` folder of staging files.
fn is_empty_or_unfinished(root: &Folder) -> io::Result<bool> {
    // An entry gone between the listing and the look at it was a staging
    // file another process renamed into place: no longer there, so nothing
    // that makes the folder foreign.
    let gone = |error: &io::Error| error.kind() == io::ErrorKind::NotFound;
    for name in root.names()? {
        if name != "staging" {
            return Ok(false);
        }
        let staging = match root.status(&name).and_then(|status| {
            if status.kind == Kind::Folder {
                root.folder(&name).map(Some)
            } else {
                Ok(None)
            }
        }) {
            Ok(Some(staging)) => staging,
            Ok(None) => return Ok(false),
            Err(error) if gone(&error) => continue,
            Err(error) => return Err(error),
        };
        for staged in staging.names()? {
            if staged
                .to_str()
                .and_then(crate::staging::staging_pid)
                .is_none()
            {
                return Ok(false);
            }
            match staging.status(&staged) {
                Ok(status) if status.kind == Kind::File => {}
                Ok(_) => return Ok(false),
                Err(error) if gone(&error) => {}
                Err(error) => return Err(error),
            }
        }
    }
    Ok(true)
}

/// Rebuilds what is missing or damaged among the store's own names.
///
/// One listing of the root says what each name is, so a healthy store is
/// checked without a look per name; only a name the listing does not show
/// as it should be is looked at again, and repaired. A root that cannot be
/// listed has every name looked at.
fn repair(root: &Folder, layout: &Layout, durable: bool) -> Result<()> {
    let listed = root.entries().ok();
    // What the listing says is at `name`: `Some(None)` for nothing, `None`
    // when it cannot say.
    let listed_kind = |name: &str| -> Option<Option<Kind>> {
        let entries = listed.as_ref()?;
        match entries.iter().find(|(listed_name, _)| listed_name == name) {
            Some((_, kind)) => kind.map(Some),
            None => Some(None),
        }
    };
    let mut damage = Vec::new();
    let mut changed = false;
    for name in layout::FOLDERS {
        if listed_kind(name) == Some(Some(Kind::Folder)) {
            continue;
        }
        // A file or link there is replaced; a folder is kept as it is.
        match root.folder_made(OsStr::new(name), true) {
            Ok((_, made)) => changed |= made,
            Err(error) => damage.push(format!(
                "{name} should be a folder and cannot be made one: {error}"
            )),
        }
    }
    for name in layout::FILES {
        // Nothing is as good as a file: a put writes it when needed.
        if matches!(listed_kind(name), Some(None | Some(Kind::File))) {
            continue;
        }
        let name = OsStr::new(name);
        let shown = name.to_string_lossy();
        let found = match root.status(name) {
            Ok(found) => found,
            Err(error) if is_absent(&error) => continue,
            Err(error) => {
                damage.push(format!("{shown} cannot be looked at: {error}"));
                continue;
            }
        };
        let removed = match found.kind {
            Kind::File => continue,
            // Only an empty folder: what a folder holds is not the store's
            // to remove.
            Kind::Folder => root.remove_folder(name).map_err(|error| {
                if matches!(error.raw_os_error(), Some(libc::ENOTEMPTY | libc::EEXIST)) {
                    format!(
                        "{shown} is a folder that holds files where the store keeps a file: move it away"
                    )
                } else {
                    format!("{shown} is a folder where a file should be and cannot be removed: {error}")
                }
            }),
            // The name only, never what a link points to.
            Kind::Link | Kind::Other => root.remove_file(name).map_err(|error| {
                format!(
                    "{shown} is {} where a file should be and cannot be removed: {error}",
                    found.kind.describe()
                )
            }),
        };
        let removed = match removed {
            // The store's history: it goes on without it, and says so once.
            Err(_) if found.kind == Kind::Folder && layout::HISTORY_FILES.contains(&&*shown) => {
                crate::sealed::report_once(
                    &layout.root().join(name),
                    "keep the store's history in",
                    &io::Error::other("a folder that holds files is where the file should be"),
                );
                continue;
            }
            removed => removed,
        };
        match removed {
            Ok(()) => {
                log::warn!(
                    "removed {} at {} where the store keeps a file",
                    found.kind.describe(),
                    layout.root().join(name).display()
                );
                changed = true;
            }
            Err(why) => damage.push(why),
        }
    }
    if changed && durable {
        let _ = root.sync();
    }
    if damage.is_empty() {
        Ok(())
    } else {
        Err(Error::Damaged {
            root: layout.root().to_path_buf(),
            damage,
        })
    }
}

/// Removes the staging files of dead processes older than a minute, unless
/// a sweep ran in the last hour. A store it cannot write is not swept.
fn sweep(root: &Folder, layout: &Layout) {
    let swept = OsStr::new("swept");
    let now = SystemTime::now();
    let is_recent = root.status(swept).is_ok_and(|found| {
        found.kind == Kind::File
            && now
                .duration_since(found.modified)
                .is_ok_and(|age| age < SWEEP_EVERY)
    });
    if is_recent {
        return;
    }
    // The time is set first, so processes opening meanwhile skip the sweep.
    let marked = root
        .open_or_create_file(swept)
        .and_then(|file| file.set_modified(now));
    if let Err(error) = marked {
        log::debug!("not sweeping staging: {error}");
        return;
    }
    let mut unchecked = Vec::new();
    let removed =
        crate::staging::sweep_staging(root, &layout.staging(), &mut unchecked, &|pid, age| {
            age > STAGING_GRACE && crate::staging::is_dead(pid)
        });
    if removed > 0 {
        log::debug!("removed {removed} staging files of dead processes");
    }
    for (path, why) in unchecked {
        log::debug!("{}: {why}", path.display());
    }
}
