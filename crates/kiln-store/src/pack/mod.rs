//! Packs: small entries appended to one file per shard, found through an
//! index beside it, so a store of a million small kernels holds about a
//! thousand files instead of four million (F10).
//!
//! # Design
//!
//! - **One pack and one index per shard.** An entry's key (an object's
//!   digest, a record's key digest, a kernel id's digest) picks one of
//!   [`SHARDS`] shards. `packs/<shard>.idx` is a log of fixed 32-byte slots,
//!   each naming a frame of `packs/<shard>-<generation>.pack` by offset
//!   (`format.rs`); the last slot of a key wins, and a tombstone slot
//!   removes it. Nothing is changed in place but a slot's access time.
//! - **A home shard for a small store.** A shard without files of its
//!   own keeps its entries in shard 000's, while that index is below 64
//!   KiB: a new store's batch makes two files, not two per shard its
//!   entries fall in. Past that, a shard put to gets its own files and its
//!   entries move there (`home.rs`); readers look in a shard's own index
//!   when it has one, else in the home shard's.
//! - **Appends under the shard's lock.** A writer takes the shard's slot of
//!   the `locks` file alone, cuts a torn last slot off the index, writes its
//!   frames at the pack's end, syncs, then writes their slots at the
//!   index's end and syncs (P3): a slot is never visible before its frame,
//!   and a process killed at any instant leaves whole slots naming whole
//!   frames, an unnamed frame (dead space), or a torn slot that readers
//!   skip and the next writer cuts.
//! - **Readers take no lock.** Each process keeps, per shard, the index's
//!   slots it has read and both files open; a lookup looks at the index by
//!   path (one `stat`), reads only the slots appended since, and reads its
//!   frame with one `pread`. What a frame holds proves itself as a file
//!   would (P2): an object's digest, a record's seal.
//! - **Compaction swaps generations.** Eviction, `gc` and `verify` rewrite
//!   a shard under its lock: the entries kept go to a new pack named by a
//!   new generation, a new index naming it is published over the old one
//!   (staged, synced, renamed), and the old pack is unlinked. A reader
//!   holding the old files reads them whole; its next lookup sees the
//!   index's new identity and reloads. An entry being read or written is
//!   never dropped (P6): eviction takes each object's lock alone, as it
//!   does for files.
//!
//! # Files
//!
//! This file is [`Packs`] and what the rest of the store uses of it;
//! `format.rs` the bytes of packs and indexes, `sharding.rs` which shard
//! holds an entry, and `shard/` one shard's files as a process reads them
//! (`view.rs`), appends to them (`append.rs`) and finds them unusable
//! (`repair.rs`); `home.rs` where a shard's entries are kept, and
//! compaction; `descriptors.rs` the process's table of descriptors, grown
//! before the lookups need it.

mod accesses;
mod descriptors;
mod format;
mod home;
mod shard;
mod sharding;

use std::collections::{HashMap, VecDeque};
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use accesses::{Access, Accesses};
use format::{ACCESSED_AT, fresh_generation, index_generation, index_header, pack_header};
pub(crate) use format::{Kind, Slot, UNIT};
use shard::{SLOTS_PER_READ, View, open_shard, read_at_most, read_frame};
pub(crate) use sharding::{SHARDS, shard_of, short_key};

use crate::durable;
use crate::layout::Layout;
use crate::lock::{LockFile, Mode, pack_slot};
use crate::tree::{Folder, is_absent};

/// How long a writer waits for a shard's lock.
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// An access time this recent is not written again (as for files).
const ACCESS_GRAIN: u32 = 60;

/// Where a slot was read: which index and where in it, so that a removal
/// takes an entry only while it is still the one that was judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Position {
    /// The shard whose files hold the slot: the entry's own, or the home
    /// shard (`home.rs`).
    shard: usize,
    generation: u64,
    slot: u64,
}

/// What a pack holds under a key.
#[derive(Debug)]
pub(crate) enum Read {
    /// The frame's payload, whole.
    Found { payload: Vec<u8>, at: Position },
    /// Nothing: no index, or no live slot of the key.
    Absent,
    /// A slot names a frame that is not there or not its own.
    Damaged { detail: String, at: Position },
    /// The index or pack cannot be read.
    Unreadable(String),
}

/// One frame to append.
pub(crate) struct Frame<'a> {
    pub(crate) kind: Kind,
    pub(crate) key: [u8; 16],
    pub(crate) payload: &'a [u8],
}

/// A live entry as a pass sees it.
pub(crate) struct Live<'a> {
    pub(crate) slot: Slot,
    /// The payload, or why the frame is damaged.
    pub(crate) payload: Result<&'a [u8], String>,
}

/// What a rewrite of a shard did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Rewritten {
    pub(crate) kept: u64,
    pub(crate) dropped: u64,
    /// Bytes of the shard's files before and after.
    pub(crate) before: u64,
    pub(crate) after: u64,
}

/// The packs of one store, and this process's view of each shard.
#[derive(Debug)]
pub(crate) struct Packs {
    layout: Layout,
    writable: bool,
    durable: bool,
    /// Shared with what is done beside the store's open: the home shard's
    /// view opened ahead of the first lookup.
    views: Arc<Views>,
    accesses: Accesses,
}

/// This process's views of one store's shards.
#[derive(Debug)]
struct Views {
    /// The packs' folder.
    folder: PathBuf,
    slots: Box<[Mutex<Option<View>>]>,
    /// The shards whose views are open, oldest first: at most
    /// [`OPEN_VIEWS`] (see there).
    opened: Mutex<VecDeque<usize>>,
}

/// The most shards whose files a process keeps open. Each open view holds
/// two descriptors; held for every shard a large warm start reads, they
/// took up to a thousand of the process's descriptors (a common limit is
/// 1,024), and each time the process's table of descriptors grew, every
/// thread that opened a file waited for the kernel (10-30 ms, seen on a GPU
/// host where the driver's threads share the table). Past this many, the
/// least recently opened view is closed; reading its shard again opens it
/// again.
pub(crate) const OPEN_VIEWS: usize = 48;

impl Views {
    fn view(&self, shard: usize) -> MutexGuard<'_, Option<View>> {
        self.slots[shard]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Notes that `shard`'s view was opened (its lock held by the caller)
    /// and closes the least recently opened ones past [`OPEN_VIEWS`]. A
    /// view another thread holds is left open and looked at next time
    /// (never waited for: the caller holds a lock of its own).
    fn opened_view(&self, shard: usize) {
        let mut opened = self
            .opened
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        opened.retain(|&open| open != shard);
        opened.push_back(shard);
        let mut busy = Vec::new();
        while opened.len() + busy.len() > OPEN_VIEWS {
            let Some(oldest) = opened.pop_front() else {
                break;
            };
            match self.slots[oldest].try_lock() {
                Ok(mut view) => *view = None,
                Err(std::sync::TryLockError::Poisoned(poisoned)) => *poisoned.into_inner() = None,
                Err(std::sync::TryLockError::WouldBlock) => busy.push(oldest),
            }
        }
        for shard in busy.into_iter().rev() {
            opened.push_front(shard);
        }
    }

    /// Brings this process's view of `shard` up to date: the slots
    /// appended since it last looked, or everything when the index was
    /// replaced.
    fn refresh(&self, shard: usize, view: &mut Option<View>) -> io::Result<()> {
        let index_path = self.folder.join(Packs::index_name(shard));
        // A shard not read yet in this process is opened at once: its
        // index's identity is the open file's.
        if view.is_none() {
            let index = match open_to_read(&index_path) {
                Ok(index) => index,
                // No index: one failed open says so (F11; with the home
                // shard, most shards of a small store have none).
                Err(error) if is_absent(&error) => return Ok(()),
                Err(error) => return Err(error),
            };
            match self.view_of(shard, index) {
                Ok(opened) => {
                    *view = Some(opened);
                    self.opened_view(shard);
                    return Ok(());
                }
                // Gone, or its pack swapped meanwhile: looked at below.
                Err(error) if is_absent(&error) => {}
                Err(error) => return Err(error),
            }
        }
        let found = match fs::symlink_metadata(&index_path) {
            Ok(found) => found,
            Err(error) if is_absent(&error) => {
                *view = None;
                return Ok(());
            }
            Err(error) => return Err(error),
        };
        if !found.is_file() {
            *view = None;
            return Err(io::Error::other("the index is not a regular file"));
        }
        if let Some(current) = view.as_mut()
            && current.identity == (found.dev(), found.ino())
        {
            if found.len() > current.read_to {
                current.read_tail()?;
            }
            return Ok(());
        }
        *view = None;
        // A rewrite may swap the index and unlink the pack it named between
        // the two opens: the next try reads the new pair. A shard whose
        // files went altogether holds nothing.
        for _ in 0..3 {
            match self.open_view(shard, &index_path) {
                Ok(opened) => {
                    *view = Some(opened);
                    self.opened_view(shard);
                    return Ok(());
                }
                Err(error) if is_absent(&error) => continue,
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    fn open_view(&self, shard: usize, index_path: &std::path::Path) -> io::Result<View> {
        self.view_of(shard, open_to_read(index_path)?)
    }

    /// The view of `shard` whose `index` was just opened.
    fn view_of(&self, shard: usize, index: File) -> io::Result<View> {
        let found = index.metadata()?;
        if !found.is_file() {
            return Err(io::Error::other("the index is not a regular file"));
        }
        // The header and every whole slot in one read (F11): a shard's
        // first lookup in a process costs two opens and three reads.
        let whole = found.len().min(UNIT * (SLOTS_PER_READ + 1)) / UNIT * UNIT;
        let mut start = vec![0u8; usize::try_from(whole.max(UNIT)).unwrap_or(0)];
        let read = read_at_most(&index, &mut start)?;
        if read < UNIT as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a damaged index header",
            ));
        }
        start.truncate(read / UNIT as usize * UNIT as usize);
        let generation = index_generation(&start[..UNIT as usize])
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a damaged index header"))?;
        let pack = open_to_read(&self.folder.join(Packs::pack_name(shard, generation)))?;
        let mut pack_start = [0u8; UNIT as usize];
        pack.read_exact_at(&mut pack_start, 0)?;
        if pack_start != pack_header(generation) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a pack of another generation",
            ));
        }
        let mut view = View {
            identity: (found.dev(), found.ino()),
            index,
            pack: Arc::new(pack),
            generation,
            read_to: UNIT,
            slots: HashMap::new(),
        };
        view.take_slots(&start[UNIT as usize..]);
        if found.len() > view.read_to {
            view.read_tail()?;
        }
        Ok(view)
    }
}

impl Packs {
    pub(crate) fn new(layout: Layout, writable: bool, durable: bool) -> Self {
        descriptors::grow_table();
        let folder = layout.root().join("packs");
        Self {
            accesses: Accesses::new(folder.clone()),
            layout,
            writable,
            durable,
            views: Arc::new(Views {
                folder,
                slots: (0..SHARDS).map(|_| Mutex::new(None)).collect(),
                opened: Mutex::new(VecDeque::new()),
            }),
        }
    }

    /// Opens the home shard's view (every entry of a small store is
    /// there), for a thread beside the store's open to run: the first
    /// lookup then finds the index read. What it cannot open, the first
    /// lookup opens, and says why.
    pub(crate) fn home_opener(&self) -> impl FnOnce() + Send + 'static {
        let views = Arc::clone(&self.views);
        move || {
            let mut home = views.view(home::HOME);
            let _ = views.refresh(home::HOME, &mut home);
        }
    }

    pub(crate) fn folder_path(&self) -> PathBuf {
        self.views.folder.clone()
    }

    fn index_name(shard: usize) -> String {
        format!("{shard:03x}.idx")
    }

    fn pack_name(shard: usize, generation: u64) -> String {
        format!("{shard:03x}-{generation:016x}.pack")
    }

    fn view(&self, shard: usize) -> MutexGuard<'_, Option<View>> {
        self.views.view(shard)
    }

    /// Brings this process's view of `shard` up to date (see
    /// [`Views::refresh`]).
    fn refresh(&self, shard: usize, view: &mut Option<View>) -> io::Result<()> {
        self.views.refresh(shard, view)
    }

    fn open_view(&self, shard: usize, index_path: &std::path::Path) -> io::Result<View> {
        self.views.open_view(shard, index_path)
    }

    /// The payload of the live entry `kind`/`key`.
    pub(crate) fn read(&self, kind: Kind, key: &[u8; 16]) -> Read {
        let (shard, guard) = match self.holding(key) {
            Ok(held) => held,
            Err(error) => {
                let shard = shard_of(key);
                return Read::Unreadable(format!("reading the index of pack {shard:03x}: {error}"));
            }
        };
        let Some(view) = guard.as_ref() else {
            return Read::Absent;
        };
        let Some(&(slot, position)) = view.slots.get(&(kind, *key)) else {
            return Read::Absent;
        };
        let at = Position {
            shard,
            generation: view.generation,
            slot: position,
        };
        // The frame is read without the view's lock: readers of one shard
        // (every entry of a small store is in the home shard's) wait for
        // one another's lookups in memory only, not their reads.
        let pack = Arc::clone(&view.pack);
        drop(guard);
        match read_frame(&pack, &slot) {
            Ok(Ok(payload)) => Read::Found { payload, at },
            Ok(Err(detail)) => Read::Damaged { detail, at },
            Err(error) => Read::Unreadable(format!("reading pack {shard:03x}: {error}")),
        }
    }

    /// Whether a live entry `kind`/`key` is indexed; its frame is not read.
    pub(crate) fn contains(&self, kind: Kind, key: &[u8; 16]) -> io::Result<bool> {
        let (_, guard) = self.holding(key)?;
        Ok(guard
            .as_ref()
            .is_some_and(|view| view.slots.contains_key(&(kind, *key))))
    }

    /// The slot of the live entry `kind`/`key`, if any.
    pub(crate) fn slot(&self, kind: Kind, key: &[u8; 16]) -> Option<Slot> {
        let (_, guard) = self.holding(key).ok()?;
        guard
            .as_ref()
            .and_then(|view| view.slots.get(&(kind, *key)).map(|(slot, _)| *slot))
    }

    /// Records a read of the entry at `at` (P6), at most once a minute:
    /// queued, and written off the reader's path (`accesses`). Whether it
    /// queued one.
    pub(crate) fn touch(&self, kind: Kind, key: &[u8; 16], at: Position) -> bool {
        if !self.writable {
            return false;
        }
        let shard = at.shard;
        let mut guard = self.view(shard);
        let Some(view) = guard.as_mut() else {
            return false;
        };
        let now = now_seconds();
        match view.slots.get_mut(&(kind, *key)) {
            Some((slot, position))
                if view.generation == at.generation
                    && *position == at.slot
                    && now.saturating_sub(slot.accessed) >= ACCESS_GRAIN =>
            {
                self.accesses.queue(Access {
                    name: Self::index_name(shard),
                    identity: view.identity,
                    position: *position + ACCESSED_AT,
                    seconds: now.to_le_bytes(),
                });
                slot.accessed = now;
                true
            }
            _ => false,
        }
    }

    /// Records a read of the live entry `kind`/`key`, wherever its slot
    /// is now (at most once a minute, as [`touch`](Self::touch)).
    pub(crate) fn touch_live(&self, kind: Kind, key: &[u8; 16]) {
        let at = {
            let Ok((shard, guard)) = self.holding(key) else {
                return;
            };
            let Some(view) = guard.as_ref() else {
                return;
            };
            let Some(&(_, position)) = view.slots.get(&(kind, *key)) else {
                return;
            };
            Position {
                shard,
                generation: view.generation,
                slot: position,
            }
        };
        self.touch(kind, key, at);
    }

    /// Appends `frames` and `removals` to the files of `shard` itself,
    /// its lock held: [`append`](Self::append) without choosing where.
    fn append_locked(
        &self,
        shard: usize,
        new_frames: &[Frame<'_>],
        removals: &[(Kind, [u8; 16])],
    ) -> io::Result<u64> {
        let folder = self.folder_to_write()?;
        self.append_in(&folder, shard, new_frames, removals)
    }

    /// [`append_locked`](Self::append_locked) in the packs' `folder`.
    fn append_in(
        &self,
        folder: &Folder,
        shard: usize,
        new_frames: &[Frame<'_>],
        removals: &[(Kind, [u8; 16])],
    ) -> io::Result<u64> {
        // In a group commit (a batch's puts), the frames, their slots and
        // a shard started here are made durable by the group's one sync:
        // the slots are still written after their frames, so a process
        // killed at any instant leaves whole entries or none.
        let sync_now = self.durable && !self.grouped();
        let start = if sync_now {
            Start::Durably
        } else {
            Start::WithTheBatch
        };
        let staged = self.stage(folder, shard, new_frames, removals, start)?;
        if sync_now && staged.has_frames {
            durable::sync_data(&staged.pack)?;
        }
        staged.publish(sync_now)
    }

    /// Whether the calling thread has a group commit open, which then
    /// makes this store's writes durable ([`durable::begin_group`]).
    pub(super) fn grouped(&self) -> bool {
        durable::deferred(self.layout.root())
    }

    /// Appends a tombstone for `kind`/`key` if its live slot is still the
    /// one read at `at`: a writer may have put a good entry since.
    pub(crate) fn remove_if_at(
        &self,
        locks: &Arc<LockFile>,
        kind: Kind,
        key: &[u8; 16],
        at: Position,
    ) -> io::Result<bool> {
        if !self.writable {
            return Ok(false);
        }
        // The shard whose files the slot was read from.
        let shard = at.shard;
        let _alone = lock_shard(locks, shard)?;
        let still = {
            let mut guard = self.view(shard);
            self.refresh(shard, &mut guard)?;
            guard.as_ref().is_some_and(|view| {
                view.generation == at.generation
                    && view.slots.get(&(kind, *key)).map(|(_, slot)| *slot) == Some(at.slot)
            })
        };
        if still {
            self.append_locked(shard, &[], &[(kind, *key)])?;
        }
        Ok(still)
    }

    /// Appends a tombstone for `kind`/`key` when a live slot names it,
    /// in the files that hold the slot.
    pub(crate) fn remove(
        &self,
        locks: &Arc<LockFile>,
        kind: Kind,
        key: &[u8; 16],
    ) -> io::Result<()> {
        let (holder, live) = {
            let (holder, guard) = self.holding(key)?;
            let live = guard
                .as_ref()
                .is_some_and(|view| view.slots.contains_key(&(kind, *key)));
            (holder, live)
        };
        if live {
            let _alone = lock_shard(locks, holder)?;
            self.append_locked(holder, &[], &[(kind, *key)])?;
        }
        Ok(())
    }

    /// Calls `visit` with every live entry of `shard`, read from a view of
    /// its own, without the shard's lock.
    pub(crate) fn each(&self, shard: usize, visit: &mut dyn FnMut(Live<'_>)) -> io::Result<()> {
        // What maintenance reads holds every access time read before.
        self.accesses.flush();
        let index_path = self.folder_path().join(Self::index_name(shard));
        let view = match self.open_view(shard, &index_path) {
            Ok(view) => view,
            Err(error) if is_absent(&error) => return Ok(()),
            Err(error) => return Err(error),
        };
        for (slot, _) in view.ordered() {
            let read = read_frame(&view.pack, &slot)?;
            visit(Live {
                slot,
                payload: read.as_deref().map_err(Clone::clone),
            });
        }
        Ok(())
    }

    /// The live slots of `shard`, read from a view of its own, and the
    /// bytes its two files take.
    pub(crate) fn live(&self, shard: usize) -> io::Result<(Vec<Slot>, u64)> {
        // What maintenance reads holds every access time read before.
        self.accesses.flush();
        let index_path = self.folder_path().join(Self::index_name(shard));
        let view = match self.open_view(shard, &index_path) {
            Ok(view) => view,
            Err(error) if is_absent(&error) => return Ok((Vec::new(), 0)),
            Err(error) => return Err(error),
        };
        let bytes = view.pack.metadata()?.len() + view.index.metadata()?.len();
        Ok((
            view.ordered().into_iter().map(|(slot, _)| slot).collect(),
            bytes,
        ))
    }

    /// Opens the `packs` folder from the store's marked root.
    pub(crate) fn open_folder(&self) -> io::Result<Option<Folder>> {
        let root = crate::skeleton::open_marked(&self.layout).map_err(io::Error::other)?;
        match root.folder(OsStr::new("packs")) {
            Ok(folder) => Ok(Some(folder)),
            Err(error) if is_absent(&error) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// The packs' folder of a marked store, made when missing: opened once
    /// for an append, or once for every shard of a batch.
    fn folder_to_write(&self) -> io::Result<Folder> {
        let root = crate::skeleton::open_marked(&self.layout).map_err(io::Error::other)?;
        let (folder, _) = root.folder_made(OsStr::new("packs"), true)?;
        Ok(folder)
    }

    /// The index and pack of `shard` in the packs' `folder`, opened to
    /// append: made when missing, and made again (a new generation) when
    /// the index's header or its pack is damaged or gone, or either is not
    /// a regular file (moved aside, `repair`). A torn last slot is cut off.
    fn open_for_writing(&self, folder: &Folder, shard: usize, start: Start) -> io::Result<Writing> {
        let index_name = Self::index_name(shard);
        let opened = open_shard(folder, shard, &index_name, &|generation| {
            Self::pack_name(shard, generation)
        })?;
        let (index, pack, length, started) = match opened {
            Some((index, pack, length)) => (index, pack, length, false),
            None => {
                let (index, pack) = self.start_shard(folder, shard, start)?;
                let length = index.metadata()?.len();
                (index, pack, length, true)
            }
        };
        let whole = UNIT + length.saturating_sub(UNIT) / UNIT * UNIT;
        if length != whole {
            index.set_len(whole)?;
        }
        Ok(Writing {
            index,
            pack,
            index_end: whole,
            started,
        })
    }

    /// Starts `shard` afresh: an empty pack of a new generation, then an
    /// index naming it, published over whatever was there; synced as
    /// `start` says.
    fn start_shard(&self, folder: &Folder, shard: usize, start: Start) -> io::Result<(File, File)> {
        let durable = self.durable && start == Start::Durably;
        let generation = fresh_generation();
        let pack_name = Self::pack_name(shard, generation);
        let pack = folder.create_file(OsStr::new(&pack_name))?;
        pack.write_all_at(&pack_header(generation), 0)?;
        if durable {
            durable::sync_all(&pack)?;
        }
        let index_path = self.folder_path().join(Self::index_name(shard));
        let index = durable::publish_open(
            &self.layout.staging(),
            &index_path,
            &index_header(generation),
            durable,
        )?;
        Ok((index, pack))
    }
}

/// The files of a shard opened to append.
struct Writing {
    index: File,
    pack: File,
    index_end: u64,
    /// Whether the shard was started for this append.
    started: bool,
}

/// How a shard an append starts is made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Start {
    /// Its pack and index synced as they are made: a single append.
    Durably,
    /// Left to the batch's sync of the file system, which makes the new
    /// files and their names durable with the frames (`append_batch`):
    /// a batch that starts many shards does not sync three files each.
    WithTheBatch,
}

/// Removes `name` from `folder` if it is still the file `file` has open.
fn remove_named(folder: &Folder, name: &str, file: &File) -> io::Result<()> {
    let found = file.metadata()?;
    match folder.remove_if_same(OsStr::new(name), found.dev(), found.ino()) {
        crate::tree::Removal::Failed(error) => Err(error),
        _ => Ok(()),
    }
}

/// A shard's file opened to read: read only, as a lookup writes nothing
/// (F11; access times are written by a thread of their own, `accesses`),
/// never through a link nor waiting on a pipe.
fn open_to_read(path: &std::path::Path) -> io::Result<File> {
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
}

fn lock_shard(locks: &Arc<LockFile>, shard: usize) -> io::Result<crate::lock::SlotGuard> {
    locks
        .acquire(
            pack_slot(shard),
            Mode::Exclusive,
            Some(Instant::now() + LOCK_WAIT),
        )?
        .ok_or_else(|| io::Error::new(io::ErrorKind::WouldBlock, "a pack stayed locked"))
}

fn now_seconds() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u32::try_from(since.as_secs()).unwrap_or(u32::MAX)
        })
}
