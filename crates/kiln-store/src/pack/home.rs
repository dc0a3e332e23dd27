//! The home shard: where a small store keeps the entries of every shard
//! that has no files of its own.
//!
//! A shard's entries are in its own pack and index once it has them;
//! until then they are appended to the home shard's (shard 000's), beside
//! its own entries, while the home shard's index is smaller than
//! [`HOME_ROOM`]. A new store's first batch then makes two files, not two
//! for each of the hundreds of shards its entries fall in (four entries a
//! kernel, each in its own shard): making a file is the dearest thing an
//! append does on a file system that looks for a free inode past those
//! freed in the last minutes, one by one (ext4 without a journal), and
//! those files were most of a cold batch's work on the loader's thread.
//!
//! A shard gets its files of its own when one of its entries is put while
//! the home shard is full: its entries held in the home shard move with
//! it (copied into its new pack first, then removed from the home shard
//! by tombstones), so that a shard with an index holds all of its
//! entries. Readers look in a shard's own index when it has one, else in
//! the home shard's. Writers choose where an entry goes holding the home
//! shard's lock and the shard's own (the home shard's first: it is the
//! lowest, the order every writer takes shards in), so a shard is never
//! started while another writer puts one of its entries in the home
//! shard. A process killed while a shard moves leaves its entries in the
//! home shard, or in both places (the shard's own index is the one read,
//! and a rewrite of the home shard drops its copies), never in neither.
//!
//! Rewriting a shard (compaction: eviction, `gc`, `verify`) and sweeping
//! the packs its index no longer names are here too, as a rewrite of the
//! home shard drops the copies a killed move left.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, MutexGuard};

use crate::durable;
use crate::lock::LockFile;
use crate::pack::format::{
    Kind, Slot, UNIT, append_frame, frame_header, fresh_generation, index_generation, index_header,
    pack_header,
};
use crate::pack::shard::{View, read_frame};
use crate::pack::{Frame, Live, Packs, Rewritten, lock_shard, now_seconds, remove_named, shard_of};
use crate::tree::{Folder, is_absent};

/// The shard whose files hold the entries of shards without files.
pub(crate) const HOME: usize = 0;

/// The size of the home shard's index past which a shard without files
/// gets its own: 2,047 slots, about 500 small kernels (four entries each).
/// A process reads the whole index once; the home shard's share of a
/// large store stays at this.
pub(crate) const HOME_ROOM: u64 = 64 << 10;

/// An entry of the home shard that moves into its shard's own files.
pub(in crate::pack) struct Moving {
    kind: Kind,
    key: [u8; 16],
    payload: Vec<u8>,
}

impl Moving {
    /// Its kind and key: what a tombstone names.
    pub(in crate::pack) fn entry(&self) -> (Kind, [u8; 16]) {
        (self.kind, self.key)
    }

    fn frame(&self) -> Frame<'_> {
        Frame {
            kind: self.kind,
            key: self.key,
            payload: &self.payload,
        }
    }
}

/// Where a shard's new entries go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::pack) enum Destination {
    /// Its own files, which it has (or it is the home shard).
    Own,
    /// The home shard's files: it has none, and the home shard has room.
    Home,
    /// Files of its own, started now, its entries of the home shard moved.
    Started,
}

impl Packs {
    /// The shard whose files hold the entries keyed `key`, with this
    /// process's view of them brought up to date: the key's own shard
    /// when it has an index, else the home shard.
    pub(in crate::pack) fn holding(
        &self,
        key: &[u8; 16],
    ) -> io::Result<(usize, MutexGuard<'_, Option<View>>)> {
        let shard = shard_of(key);
        let mut own = self.view(shard);
        self.refresh(shard, &mut own)?;
        if own.is_some() || shard == HOME {
            return Ok((shard, own));
        }
        drop(own);
        let mut home = self.view(HOME);
        self.refresh(HOME, &mut home)?;
        Ok((HOME, home))
    }

    /// Whether `shard` has an index of its own in the packs' `folder`,
    /// whatever it holds (one that cannot be used is started afresh where
    /// it is, `repair.rs`).
    pub(in crate::pack) fn has_index(folder: &Folder, shard: usize) -> io::Result<bool> {
        match folder.status(OsStr::new(&Self::index_name(shard))) {
            Ok(_) => Ok(true),
            Err(error) if is_absent(&error) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// The bytes the home shard's index may still grow by before shards
    /// without files get their own.
    pub(in crate::pack) fn home_room(folder: &Folder) -> io::Result<u64> {
        match folder.status(OsStr::new(&Self::index_name(HOME))) {
            Ok(found) => Ok(HOME_ROOM.saturating_sub(found.len)),
            Err(error) if is_absent(&error) => Ok(HOME_ROOM),
            Err(error) => Err(error),
        }
    }

    /// Where `shard`'s entries go, the home shard's lock and its own held:
    /// `room` is what the home shard has left, less what this choice adds
    /// there. Entries that are only tombstones never start a shard.
    pub(in crate::pack) fn destination(
        folder: &Folder,
        shard: usize,
        frames: usize,
        room: &mut u64,
    ) -> io::Result<Destination> {
        if shard == HOME || Self::has_index(folder, shard)? {
            return Ok(Destination::Own);
        }
        if *room > 0 || frames == 0 {
            *room = room.saturating_sub(UNIT * frames as u64);
            return Ok(Destination::Home);
        }
        Ok(Destination::Started)
    }

    /// The live entries of `shard` that the home shard holds, read whole
    /// (its lock held); a damaged one stays behind, unread by anyone once
    /// the shard has its own index, and goes with the home shard's next
    /// rewrite.
    pub(in crate::pack) fn home_entries_of(&self, shard: usize) -> io::Result<Vec<Moving>> {
        let mut guard = self.view(HOME);
        self.refresh(HOME, &mut guard)?;
        let Some(view) = guard.as_ref() else {
            return Ok(Vec::new());
        };
        let mut moving = Vec::new();
        for (slot, _) in view.ordered() {
            if shard_of(&slot.key) != shard {
                continue;
            }
            if let Ok(payload) = read_frame(&view.pack, &slot)? {
                moving.push(Moving {
                    kind: slot.kind,
                    key: slot.key,
                    payload,
                });
            }
        }
        Ok(moving)
    }

    /// Appends `frames` and `removals` (tombstones) of `shard` to the files
    /// that keep its entries (its own, or the home shard's: see above),
    /// under their locks, and returns the bytes written. Frames are
    /// durable before the slots that name them are written (P3).
    pub(crate) fn append(
        &self,
        locks: &Arc<LockFile>,
        shard: usize,
        new_frames: &[Frame<'_>],
        removals: &[(Kind, [u8; 16])],
    ) -> io::Result<u64> {
        if !self.writable {
            return Err(io::Error::new(
                io::ErrorKind::ReadOnlyFilesystem,
                "the store is read-only",
            ));
        }
        let folder = self.folder_to_write()?;
        // A shard with files of its own needs its lock alone.
        if shard != HOME && Self::has_index(&folder, shard)? {
            let alone = lock_shard(locks, shard)?;
            if Self::has_index(&folder, shard)? {
                return self.append_in(&folder, shard, new_frames, removals);
            }
            // Its files went (a rewrite left it empty) meanwhile.
            drop(alone);
        }
        let _home = lock_shard(locks, HOME)?;
        let _alone = if shard == HOME {
            None
        } else {
            Some(lock_shard(locks, shard)?)
        };
        let mut room = Self::home_room(&folder)?;
        match Self::destination(&folder, shard, new_frames.len(), &mut room)? {
            Destination::Own => self.append_in(&folder, shard, new_frames, removals),
            Destination::Home => self.append_in(&folder, HOME, new_frames, removals),
            Destination::Started => {
                let moving = self.home_entries_of(shard)?;
                let frames: Vec<Frame<'_>> = moving
                    .iter()
                    .filter(|entry| !removals.contains(&(entry.kind, entry.key)))
                    .map(Moving::frame)
                    .chain(new_frames.iter().map(Frame::again))
                    .collect();
                // The shard's own files first, whole and (outside a group
                // commit) durable; then the home shard's copies go.
                let durably = self.durable && !self.grouped();
                let mut written = self
                    .start_with(&folder, shard, &frames)?
                    .publish(&self.layout.staging(), durably)?;
                if !moving.is_empty() {
                    let gone: Vec<(Kind, [u8; 16])> =
                        moving.iter().map(|entry| (entry.kind, entry.key)).collect();
                    written += self.append_in(&folder, HOME, &[], &gone)?;
                }
                Ok(written)
            }
        }
    }

    /// Where the frames of a batch go, by shard (the home shard's lock and
    /// every shard's held), and the home shard's entries that move into
    /// shards started here: [`append`](Self::append) for many shards at
    /// once, with [`route`](Self::route).
    pub(in crate::pack) fn choose(
        &self,
        folder: &Folder,
        by_shard: &BTreeMap<usize, Vec<Frame<'_>>>,
    ) -> io::Result<(BTreeMap<usize, Destination>, Vec<Moving>)> {
        let mut room = Self::home_room(folder)?;
        let mut chosen = BTreeMap::new();
        let mut moving = Vec::new();
        for (shard, frames) in by_shard {
            let destination = Self::destination(folder, *shard, frames.len(), &mut room)?;
            if destination == Destination::Started {
                moving.extend(self.home_entries_of(*shard)?);
            }
            chosen.insert(*shard, destination);
        }
        Ok((chosen, moving))
    }

    /// The frames of a batch by the shard whose files each goes to, as
    /// [`choose`](Self::choose) chose; a started shard's moved entries
    /// first, so that a new entry of the same key comes later and wins.
    pub(in crate::pack) fn route<'a>(
        by_shard: BTreeMap<usize, Vec<Frame<'a>>>,
        chosen: &BTreeMap<usize, Destination>,
        moving: &'a [Moving],
    ) -> BTreeMap<usize, Vec<Frame<'a>>> {
        let mut routed: BTreeMap<usize, Vec<Frame<'a>>> = BTreeMap::new();
        for (shard, frames) in by_shard {
            let destination = chosen.get(&shard).copied().unwrap_or(Destination::Own);
            let to = match destination {
                Destination::Home => HOME,
                Destination::Own | Destination::Started => shard,
            };
            let into = routed.entry(to).or_default();
            if destination == Destination::Started {
                into.extend(
                    moving
                        .iter()
                        .filter(|entry| shard_of(&entry.key) == shard)
                        .map(Moving::frame),
                );
            }
            into.extend(frames);
        }
        routed
    }
}

/// A shard started with its entries: its pack written whole, and the index
/// naming every one of them, to be published once the pack is durable.
pub(in crate::pack) struct Starting {
    pub(in crate::pack) pack: File,
    index_path: PathBuf,
    index: Vec<u8>,
    bytes: u64,
}

impl Packs {
    /// Writes a new pack of `shard` holding `frames`, and makes the index
    /// that names them all: a shard that gets files of its own shows its
    /// index only whole, since readers stop looking in the home shard for
    /// its entries once it has one (an index made empty first, then
    /// appended to, hid them from a process killed between the two).
    pub(in crate::pack) fn start_with(
        &self,
        folder: &Folder,
        shard: usize,
        frames: &[Frame<'_>],
    ) -> io::Result<Starting> {
        let generation = fresh_generation();
        let mut packed = pack_header(generation).to_vec();
        let mut index = index_header(generation).to_vec();
        let now = now_seconds();
        for frame in frames {
            let entry = (frame.kind, frame.key, frame.payload);
            let slot = append_frame(&mut packed, 0, entry, now)?;
            index.extend_from_slice(&slot.encode());
        }
        crate::file_size::within_file_size_limit(packed.len().max(index.len()) as u64)?;
        let pack_name = Self::pack_name(shard, generation);
        let pack = folder.create_file(OsStr::new(&pack_name))?;
        if let Err(error) = pack.write_all_at(&packed, 0) {
            let _ = folder.remove_file(OsStr::new(&pack_name));
            return Err(error);
        }
        Ok(Starting {
            pack,
            index_path: self.folder_path().join(Self::index_name(shard)),
            bytes: (packed.len() + index.len()) as u64,
            index,
        })
    }
}

impl Starting {
    /// Publishes the index, whole (staged, then renamed into place), the
    /// pack synced first when `durably` (P3); the bytes the shard holds.
    /// Not durably, a later sync does both (a group's or a batch's).
    pub(in crate::pack) fn publish(self, staging: &Path, durably: bool) -> io::Result<u64> {
        if durably {
            durable::sync_all(&self.pack)?;
        }
        durable::publish(staging, &self.index_path, &self.index, durably)?;
        Ok(self.bytes)
    }
}

impl<'a> Frame<'a> {
    /// The same frame, borrowed again.
    pub(in crate::pack) fn again(&self) -> Frame<'a> {
        Frame {
            kind: self.kind,
            key: self.key,
            payload: self.payload,
        }
    }
}

impl Packs {
    /// Rewrites `shard` with the live entries `keep` says to keep, under
    /// the shard's lock; nothing is written when it keeps them all and the
    /// pack holds little dead space. An empty shard's files go.
    pub(crate) fn rewrite(
        &self,
        locks: &Arc<LockFile>,
        shard: usize,
        keep: &mut dyn FnMut(Live<'_>) -> bool,
    ) -> io::Result<Rewritten> {
        self.accesses.flush();
        let mut report = Rewritten::default();
        if !self.writable {
            // A store opened to read only is judged entry by entry, and
            // nothing is written.
            self.each(shard, &mut |live| {
                keep(live);
            })?;
            return Ok(report);
        }
        let _alone = lock_shard(locks, shard)?;
        let index_path = self.folder_path().join(Self::index_name(shard));
        let view = match self.open_view(shard, &index_path) {
            Ok(view) => view,
            Err(error) if is_absent(&error) => return Ok(report),
            Err(error) => return Err(error),
        };
        let pack_len = view.pack.metadata()?.len();
        report.before = pack_len + view.read_to;
        let mut kept: Vec<(Slot, Vec<u8>)> = Vec::new();
        let mut live_bytes = UNIT;
        // The home shard's copies of entries whose shard has files of its
        // own now (a process killed while the shard moved) are read by
        // nobody: they go, unjudged (`home.rs`).
        let packs = if shard == HOME {
            self.open_folder().ok().flatten()
        } else {
            None
        };
        let shadowed = |slot: &Slot| -> bool {
            let own = shard_of(&slot.key);
            own != HOME
                && packs
                    .as_ref()
                    .is_some_and(|folder| Self::has_index(folder, own).unwrap_or(false))
        };
        for (slot, _) in view.ordered() {
            if shadowed(&slot) {
                report.dropped += 1;
                continue;
            }
            let read = read_frame(&view.pack, &slot)?;
            let keeps = keep(Live {
                slot,
                payload: read.as_deref().map_err(Clone::clone),
            });
            match read {
                Ok(payload) if keeps => {
                    live_bytes += UNIT + payload.len() as u64;
                    kept.push((slot, payload));
                }
                _ => report.dropped += 1,
            }
        }
        report.kept = kept.len() as u64;
        let dead = pack_len.saturating_sub(live_bytes);
        if report.dropped == 0 && dead * 4 <= pack_len {
            report.after = report.before;
            return Ok(report);
        }
        let root = crate::skeleton::open_marked(&self.layout).map_err(io::Error::other)?;
        let (folder, _) = root.folder_made(OsStr::new("packs"), true)?;
        let old_pack = Self::pack_name(shard, view.generation);
        if kept.is_empty() {
            remove_named(&folder, &Self::index_name(shard), &view.index)?;
            remove_named(&folder, &old_pack, &view.pack)?;
            return Ok(report);
        }
        let generation = fresh_generation();
        let pack_name = Self::pack_name(shard, generation);
        let pack = folder.create_file(OsStr::new(&pack_name))?;
        let mut packed = pack_header(generation).to_vec();
        let mut slots = index_header(generation).to_vec();
        for (slot, payload) in &kept {
            let moved = Slot {
                offset: u32::try_from(packed.len())
                    .map_err(|_| io::Error::other("a pack past 4 GiB"))?,
                ..*slot
            };
            packed.extend_from_slice(&frame_header(&slot.key, slot.kind, slot.length));
            packed.extend_from_slice(payload);
            slots.extend_from_slice(&moved.encode());
        }
        let written = pack
            .write_all_at(&packed, 0)
            .and_then(|()| {
                if self.durable {
                    durable::sync_all(&pack)
                } else {
                    Ok(())
                }
            })
            .and_then(|()| {
                durable::publish(&self.layout.staging(), &index_path, &slots, self.durable)
            });
        if let Err(error) = written {
            let _ = folder.remove_file(OsStr::new(&pack_name));
            return Err(error);
        }
        remove_named(&folder, &old_pack, &view.pack)?;
        report.after = (packed.len() + slots.len()) as u64;
        Ok(report)
    }

    /// Removes the packs of `shard` that its index does not name: left by a
    /// process killed while it rewrote the shard. Returns how many.
    pub(crate) fn sweep(
        &self,
        locks: &Arc<LockFile>,
        folder: &Folder,
        names: &[String],
        shard: usize,
    ) -> u64 {
        if !self.writable {
            return 0;
        }
        let Ok(_alone) = lock_shard(locks, shard) else {
            return 0;
        };
        // Read from the folder, never through a link nor waiting on a pipe.
        let mut header = [0u8; UNIT as usize];
        let current = folder
            .open_file(OsStr::new(&Self::index_name(shard)))
            .ok()
            .filter(|index| index.metadata().is_ok_and(|found| found.is_file()))
            .and_then(|index| index.read_exact_at(&mut header, 0).ok())
            .and_then(|()| index_generation(&header));
        let prefix = format!("{shard:03x}-");
        let mut removed = 0;
        for name in names {
            let Some(generation) = name
                .strip_prefix(&prefix)
                .and_then(|rest| rest.strip_suffix(".pack"))
                .and_then(|hex| u64::from_str_radix(hex, 16).ok())
            else {
                continue;
            };
            // Only the store's own files go: anything else by a pack's
            // name is moved aside by the next append, never removed.
            let is_file = folder
                .status(OsStr::new(name))
                .is_ok_and(|found| found.kind == crate::tree::Kind::File);
            if Some(generation) != current
                && is_file
                && folder.remove_file(OsStr::new(name)).is_ok()
            {
                removed += 1;
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests;
