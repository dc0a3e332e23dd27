//! The walk of a store's sharded trees (`objects`, `records`, `kernels`)
//! that every whole-store pass makes: one folder of each level open at a
//! time, only names the store gives entered or visited, nothing followed.

use std::ffi::OsStr;
use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::layout::{TREES, is_hex_name};
use crate::record::AnyRecord;
use crate::tree::{Folder, Kind, Removal, Status, is_absent, not_a_file, why_not_entered};

/// Something a pass could not check and left as it was, and why.
pub(crate) type Unchecked = (PathBuf, String);

/// Why a file of a walk was not checked: gone meanwhile (evicted or
/// replaced: nothing to say), or something to report.
pub(crate) enum Skip {
    Gone,
    Unchecked(String),
}

/// What a walk's visit of one file did: `Err` says why it was not checked.
pub(crate) type Visited = Result<(), Skip>;

impl From<String> for Skip {
    fn from(reason: String) -> Self {
        Self::Unchecked(reason)
    }
}

/// A store's root as a pass holds it: the folder, reached by its
/// descriptor, and its path, by which reports name what they found.
pub(crate) struct StoreRoot<'a> {
    pub(crate) folder: Folder,
    pub(crate) path: &'a Path,
}

impl StoreRoot<'_> {
    /// Calls `visit` with the shard folder, name and path of every file of
    /// `tree` (`objects`, `records`, `kernels`), one shard at a time. Only
    /// folders and files named as the store names them are entered or
    /// visited, and nothing is followed ([`crate::tree`]); what it cannot
    /// enter, what is not the store's, and what `visit` could not check
    /// goes to `unchecked`.
    pub(crate) fn walk(
        &self,
        tree: &str,
        unchecked: &mut Vec<Unchecked>,
        visit: &mut dyn FnMut(&Folder, &str, &Path) -> Visited,
    ) {
        let name_length = TREES
            .iter()
            .find(|(name, _)| *name == tree)
            .map_or(64, |(_, length)| *length);
        let tree_path = self.path.join(tree);
        if let Some(tree_folder) = enter(&self.folder, OsStr::new(tree), &tree_path, unchecked) {
            walk_level(
                &tree_folder,
                &tree_path,
                &[2, 1, name_length],
                unchecked,
                visit,
            );
        }
    }

    /// As [`walk`](Self::walk), handing `visit` the shard folder, the name
    /// and the whole of each file, read as [`read_regular`] reads it.
    pub(crate) fn walk_sealed(
        &self,
        tree: &str,
        unchecked: &mut Vec<Unchecked>,
        visit: &mut dyn FnMut(&Folder, &str, Vec<u8>) -> Visited,
    ) {
        self.walk(tree, unchecked, &mut |folder, name, _| {
            visit(folder, name, read_regular(folder, name)?)
        });
    }

    /// The `objects` folder for [`object_status`]; `None` when it cannot be
    /// opened, which makes every object's state unknown, never gone.
    pub(crate) fn objects(&self) -> Option<Folder> {
        self.folder.folder(OsStr::new("objects")).ok()
    }
}

/// Walks `folder` at `path`, whose names are `lengths[0]` hex digits: the
/// shard folders of the levels left, then the files of the last one, which
/// go to `visit`. One folder of each level is open at a time.
pub(crate) fn walk_level(
    folder: &Folder,
    path: &Path,
    lengths: &[usize],
    unchecked: &mut Vec<Unchecked>,
    visit: &mut dyn FnMut(&Folder, &str, &Path) -> Visited,
) {
    let Some((&length, deeper)) = lengths.split_first() else {
        return;
    };
    let names = folder.names().unwrap_or_else(|error| {
        unchecked.push((path.to_path_buf(), format!("cannot be listed: {error}")));
        Vec::new()
    });
    for name in names {
        let inner_path = path.join(&name);
        let Some(text) = name.to_str().filter(|text| is_hex_name(text, length)) else {
            let why = "not a name the store gives: left alone".to_owned();
            unchecked.push((inner_path, why));
            continue;
        };
        if deeper.is_empty() {
            if let Err(Skip::Unchecked(why)) = visit(folder, text, &inner_path) {
                unchecked.push((inner_path, why));
            }
        } else if let Some(inner) = enter(folder, &name, &inner_path, unchecked) {
            walk_level(&inner, &inner_path, deeper, unchecked, visit);
        }
    }
}

/// The folder `name` in `parent`, at `path`; `None` when it is gone or,
/// said in `unchecked`, cannot be entered.
pub(crate) fn enter(
    parent: &Folder,
    name: &OsStr,
    path: &Path,
    unchecked: &mut Vec<Unchecked>,
) -> Option<Folder> {
    match parent.folder(name) {
        Ok(folder) => Some(folder),
        Err(error) if is_absent(&error) => None,
        Err(error) => {
            unchecked.push((path.to_path_buf(), why_not_entered(parent, name, &error)));
            None
        }
    }
}

/// The digest a file's name of 64 hex digits spells: what the walk's files
/// of records and objects are named by.
pub(crate) fn digest_from_name(name: &str) -> Option<[u8; 32]> {
    if name.len() != 64 {
        return None;
    }
    let mut digest = [0u8; 32];
    for (index, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(name.get(index * 2..index * 2 + 2)?, 16).ok()?;
    }
    Some(digest)
}

/// Calls `visit` with the path and name of every file of `tree` in the
/// store at `root_path`, one folder at a time, as [`StoreRoot::walk`]
/// finds them: for passes that only read. What cannot be walked is logged.
///
/// # Errors
///
/// The store's root cannot be opened.
pub(crate) fn walk_files(
    root_path: &Path,
    tree: &str,
    visit: &mut dyn FnMut(PathBuf, &str),
) -> Result<()> {
    let root = StoreRoot {
        folder: Folder::open(root_path).map_err(Error::io("open", root_path))?,
        path: root_path,
    };
    let mut unchecked = Vec::new();
    root.walk(tree, &mut unchecked, &mut |_, name, path| {
        visit(path.to_path_buf(), name);
        Ok(())
    });
    for (path, why) in unchecked {
        log::warn!("{}: {why}", path.display());
    }
    Ok(())
}

/// The file `name` in `folder`, opened to read without following a link,
/// and what it is; a folder, link or special file there is reported.
pub(crate) fn open_regular(folder: &Folder, name: &str) -> Result<(File, Metadata), Skip> {
    let file = match folder.open_file(OsStr::new(name)) {
        Ok(file) => file,
        Err(error) if is_absent(&error) => return Err(Skip::Gone),
        Err(error) => {
            return Err(match folder.status(OsStr::new(name)) {
                Ok(found) if found.kind != Kind::File => not_a_file(found.kind),
                _ => format!("cannot be read: {error}"),
            }
            .into());
        }
    };
    let found = file
        .metadata()
        .map_err(|error| format!("cannot be read: {error}"))?;
    if !found.is_file() {
        let kind = if found.is_dir() {
            Kind::Folder
        } else {
            Kind::Other
        };
        return Err(not_a_file(kind).into());
    }
    Ok((file, found))
}

/// The whole of the file `name` in `folder`, read as [`open_regular`]
/// opens it.
pub(crate) fn read_regular(folder: &Folder, name: &str) -> Result<Vec<u8>, Skip> {
    let (mut file, found) = open_regular(folder, name)?;
    let mut bytes = Vec::with_capacity(usize::try_from(found.len()).unwrap_or(0));
    file.read_to_end(&mut bytes)
        .map_err(|error| format!("cannot be read: {error}"))?;
    Ok(bytes)
}

/// What is at the object `digest`'s name, reached from the `objects`
/// folder without following a link. Only `NotFound` says it is gone.
pub(crate) fn object_status(objects: Option<&Folder>, digest: &[u8; 32]) -> io::Result<Status> {
    let name = kiln_engine::store::hex(digest);
    let objects = objects.ok_or_else(|| io::Error::other("the objects folder cannot be opened"))?;
    objects
        .folder(OsStr::new(&name[..2]))?
        .folder(OsStr::new(&name[2..3]))?
        .status(OsStr::new(&name))
}

/// Whether `record`'s object is there, of the size the record says;
/// `false` only when it is gone or of another size, never when it cannot
/// be looked at or is not a file (that is reported, and the record kept).
pub(crate) fn has_object(objects: Option<&Folder>, record: &AnyRecord<'_>) -> Result<bool, Skip> {
    let (object, size) = record.object();
    match object_status(objects, &object) {
        Ok(found) if found.kind == Kind::File => Ok(found.len == size),
        Err(error) if is_absent(&error) => Ok(false),
        Ok(found) => Err(format!("its object is {}: not checked", found.kind.describe()).into()),
        Err(error) => Err(format!("its object cannot be looked at: {error}").into()),
    }
}

/// What `remove` did, or, in a store opened to read only, the failure
/// that says why nothing was removed.
pub(crate) fn unless_read_only(writable: bool, remove: impl FnOnce() -> Removal) -> Removal {
    if writable {
        remove()
    } else {
        Removal::Failed(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "the store is opened to read only",
        ))
    }
}

/// Counts a removal in `removed`; a failed one is not checked for lack of
/// a fix, and says why.
pub(crate) fn count(removal: Removal, removed: &mut u64, defect: &str) -> Result<(), Skip> {
    match removal {
        Removal::Removed => {
            *removed += 1;
            Ok(())
        }
        Removal::Changed => Ok(()),
        Removal::Failed(error) => Err(format!("{defect}; cannot be removed: {error}").into()),
    }
}

/// The BLAKE3 digest and length of what `file` holds, read in chunks.
pub(crate) fn stream_digest(mut file: &File, buffer: &mut [u8]) -> io::Result<([u8; 32], u64)> {
    let mut hasher = blake3::Hasher::new();
    let mut length = 0u64;
    loop {
        let read = file.read(buffer)?;
        if read == 0 {
            return Ok((*hasher.finalize().as_bytes(), length));
        }
        hasher.update(&buffer[..read]);
        length += read as u64;
    }
}
