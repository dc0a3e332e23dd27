//! What an append finds in a shard's place that it cannot use, and what
//! it does about it (P2): an index or a pack that is not a regular file (a
//! folder, a link, a pipe) is moved aside under a name of its own in the
//! packs' folder, never followed, opened to wait on or deleted; an index
//! whose header is damaged, or a pack that is gone, cut or of another
//! generation, starts the shard afresh, saying so once, so its kernels are
//! compiled and kept again rather than missed on every run in silence.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::pack::format::{UNIT, index_generation, pack_header};
use crate::tree::{Folder, Kind, is_absent};

/// Names given to what was moved aside in this process so far.
static MOVED: AtomicU64 = AtomicU64::new(0);

/// The shard's index and pack in `folder`, opened to read and write, with
/// the index's length, when both are whole enough to append to; `None`
/// when the shard must start afresh (what was in the way moved aside).
pub(in crate::pack) fn open_shard(
    folder: &Folder,
    shard: usize,
    index_name: &str,
    pack_name: &dyn Fn(u64) -> String,
) -> io::Result<Option<(File, File, u64)>> {
    let Some(index) = open_regular(folder, index_name)? else {
        return Ok(None);
    };
    let length = index.metadata()?.len();
    let mut header = [0u8; UNIT as usize];
    let Some(generation) = index
        .read_exact_at(&mut header, 0)
        .ok()
        .and_then(|()| index_generation(&header))
    else {
        log::warn!(
            "kiln store: the index of pack shard {shard:03x} has a damaged header: the shard \
             starts afresh, and its entries are compiled and kept again"
        );
        return Ok(None);
    };
    let name = pack_name(generation);
    let Some(pack) = open_regular(folder, &name)? else {
        return Ok(None);
    };
    let mut start = [0u8; UNIT as usize];
    let whole = pack.read_exact_at(&mut start, 0).is_ok() && start == pack_header(generation);
    if !whole {
        log::warn!(
            "kiln store: pack {name} is damaged, cut or emptied at its start: shard \
             {shard:03x} starts afresh, and its entries are compiled and kept again"
        );
        return Ok(None);
    }
    Ok(Some((index, pack, length)))
}

/// The regular file `name` of `folder`, opened to read and write; `None`
/// when it is absent, or was something else and is now moved aside.
fn open_regular(folder: &Folder, name: &str) -> io::Result<Option<File>> {
    let found = match folder.status(OsStr::new(name)) {
        Ok(found) => found,
        Err(error) if is_absent(&error) => return Ok(None),
        Err(error) => return Err(error),
    };
    if found.kind != Kind::File {
        move_aside(folder, name, found.kind)?;
        return Ok(None);
    }
    match folder.open_read_write(OsStr::new(name)) {
        // Swapped for something else since it was looked at.
        Ok(file) if !file.metadata()?.is_file() => {
            drop(file);
            move_aside(folder, name, Kind::Other)?;
            Ok(None)
        }
        Ok(file) => Ok(Some(file)),
        Err(error) if is_absent(&error) => Ok(None),
        Err(error) if error.raw_os_error() == Some(libc::ELOOP) => {
            move_aside(folder, name, Kind::Link)?;
            Ok(None)
        }
        Err(error) => Err(error),
    }
}

/// Renames what is at `name` (a `kind`, not kiln's file) to a name of its
/// own beside it, saying so: nothing inside is followed or removed.
fn move_aside(folder: &Folder, name: &str, kind: Kind) -> io::Result<()> {
    let mut aside = OsString::from(name);
    aside.push(format!(
        ".not-kiln-{}-{}",
        std::process::id(),
        MOVED.fetch_add(1, Ordering::Relaxed)
    ));
    match folder.rename(OsStr::new(name), folder, &aside) {
        Ok(()) => {
            log::warn!(
                "kiln store: {} in the place of {name} in the store's packs folder was moved \
                 aside to {}; the shard starts afresh",
                kind.describe(),
                aside.to_string_lossy()
            );
            Ok(())
        }
        Err(error) if is_absent(&error) => Ok(()),
        Err(error) => Err(error),
    }
}
