//! Appending: frames written first, the slots that name them once they are
//! durable (P3); and appends to many shards at once, for a batch of puts
//! (the copies of a remote tier's hits): every frame of every shard is written, then made
//! durable with one sync of the file system, then every slot is written
//! and synced once more. Two syncs for the batch, where appending shard by
//! shard costs two per shard, and still no slot names a frame before the
//! frame is durable (P3).

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use crate::lock::LockFile;
use crate::pack::format::{Kind, Slot, UNIT, append_frame};
use crate::pack::home::{Destination, HOME, Moving};
use crate::pack::sharding::shard_of;
use crate::pack::{Frame, Packs, Start, lock_shard, now_seconds};
use crate::tree::Folder;

impl Packs {
    /// Writes `new_frames` at the end of `shard`'s pack, not synced, and
    /// makes the slots that name them (and the tombstones of `removals`),
    /// not written yet: the frames must be durable before a slot names
    /// them (P3). The shard's lock is held; `folder` is the packs' folder
    /// ([`folder_to_write`](Self::folder_to_write)).
    pub(in crate::pack) fn stage(
        &self,
        folder: &Folder,
        shard: usize,
        new_frames: &[Frame<'_>],
        removals: &[(Kind, [u8; 16])],
        start: Start,
    ) -> io::Result<Staged> {
        let open = self.open_for_writing(folder, shard, start)?;
        let pack_end = open.pack.metadata()?.len();
        let frame_bytes: u64 = new_frames
            .iter()
            .map(|frame| UNIT + frame.payload.len() as u64)
            .sum();
        let slot_bytes = UNIT * (new_frames.len() + removals.len()) as u64;
        if pack_end + frame_bytes > u64::from(u32::MAX) {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                format!("pack {shard:03x} is full; `kiln gc` compacts it"),
            ));
        }
        crate::file_size::within_file_size_limit(
            (pack_end + frame_bytes).max(open.index_end + slot_bytes),
        )?;
        let now = now_seconds();
        let mut packed = Vec::with_capacity(usize::try_from(frame_bytes).unwrap_or(0));
        let mut slots = Vec::with_capacity(usize::try_from(slot_bytes).unwrap_or(0));
        for frame in new_frames {
            let entry = (frame.kind, frame.key, frame.payload);
            let slot = append_frame(&mut packed, pack_end, entry, now)?;
            slots.extend_from_slice(&slot.encode());
        }
        for (kind, key) in removals {
            let slot = Slot {
                key: *key,
                kind: *kind,
                removed: true,
                offset: 0,
                length: 0,
                accessed: now,
            };
            slots.extend_from_slice(&slot.encode());
        }
        if !packed.is_empty() {
            open.pack.write_all_at(&packed, pack_end)?;
        }
        Ok(Staged {
            started: open.started,
            has_frames: !packed.is_empty(),
            pack: open.pack,
            index: open.index,
            index_end: open.index_end,
            slots,
            bytes: frame_bytes + slot_bytes,
        })
    }

    /// Appends each of `frames` to its shard (`shard_of` its key), as one
    /// batch; returns the bytes it added. The shards' locks are taken in
    /// their order, so two batches never wait for each other in a cycle.
    /// On an error nothing it wrote is named by a slot of a shard whose
    /// slots were not written; frames written and never named are dead
    /// space that a rewrite drops.
    pub(crate) fn append_batch(
        &self,
        locks: &Arc<LockFile>,
        frames: &[Frame<'_>],
    ) -> io::Result<u64> {
        self.append_batch_as(locks, frames, self.durable)
    }

    /// [`append_batch`](Self::append_batch), synced only when `synced`: an
    /// index entry that names what is durable already (a rekeyed kernel's
    /// record, L11) is written and not waited for. A process killed at any
    /// instant still leaves whole slots naming whole frames, or unnamed
    /// frames (the page cache outlives it); a lost power may lose the
    /// entry, or leave a slot whose frame does not verify, which reads as
    /// damaged (P2) and is removed.
    pub(crate) fn append_batch_as(
        &self,
        locks: &Arc<LockFile>,
        frames: &[Frame<'_>],
        synced: bool,
    ) -> io::Result<u64> {
        if frames.is_empty() {
            return Ok(0);
        }
        if !self.writable {
            return Err(io::Error::new(
                io::ErrorKind::ReadOnlyFilesystem,
                "the store is read-only",
            ));
        }
        let mut by_shard: BTreeMap<usize, Vec<Frame<'_>>> = BTreeMap::new();
        for frame in frames {
            by_shard
                .entry(shard_of(&frame.key))
                .or_default()
                .push(Frame {
                    kind: frame.kind,
                    key: frame.key,
                    payload: frame.payload,
                });
        }
        // The home shard's lock first (it is the lowest), then each
        // shard's in order: where an entry goes is chosen under them.
        let _alone = std::iter::once(HOME)
            .chain(by_shard.keys().copied().filter(|shard| *shard != HOME))
            .map(|shard| lock_shard(locks, shard))
            .collect::<io::Result<Vec<_>>>()?;
        // One open of the root, its marker and the packs' folder for the
        // batch, not one per shard it appends to.
        let folder = self.folder_to_write()?;
        let (chosen, moving) = self.choose(&folder, &by_shard)?;
        let routed = Self::route(by_shard, &chosen, &moving);
        // The home shard's copies of what moved go once the shards they
        // moved to name them: its slots are written last.
        let gone: Vec<(Kind, [u8; 16])> = moving.iter().map(Moving::entry).collect();
        let mut staged = Vec::with_capacity(routed.len() + 1);
        let mut starting = Vec::new();
        for (shard, frames) in routed.iter().filter(|(shard, _)| **shard != HOME) {
            if chosen.get(shard) == Some(&Destination::Started) {
                starting.push(self.start_with(&folder, *shard, frames)?);
            } else {
                staged.push(self.stage(&folder, *shard, frames, &[], Start::WithTheBatch)?);
            }
        }
        let home_frames = routed.get(&HOME).map_or(&[][..], Vec::as_slice);
        if !home_frames.is_empty() || !gone.is_empty() {
            staged.push(self.stage(&folder, HOME, home_frames, &gone, Start::WithTheBatch)?);
        }
        // A shard started here has a new pack and index, and their names,
        // to make durable too: the file system's sync does all, even for an
        // append that is otherwise not synced.
        let started = !starting.is_empty() || staged.iter().any(|staged| staged.started);
        // In a group commit, the group's one sync does it all.
        let due = self.durable && (synced || started);
        let sync_now = due && !self.grouped();
        if sync_now {
            sync_together(
                staged
                    .iter()
                    .map(|staged| &staged.pack)
                    .chain(starting.iter().map(|start| &start.pack)),
                started,
            )?;
        }
        let indexes: Vec<File> = staged
            .iter()
            .map(|staged| staged.index.try_clone())
            .collect::<io::Result<_>>()?;
        let mut bytes = 0;
        // The shards started here show their indexes, whole, and those are
        // durable before the home shard's copies of their entries go.
        let one_started = starting
            .first()
            .map(|start| start.pack.try_clone())
            .transpose()?;
        for start in starting {
            bytes += start.publish(&self.layout.staging(), false)?;
        }
        if sync_now && let Some(pack) = &one_started {
            // Their names too: the file system's sync.
            sync_together(std::iter::once(pack), true)?;
        }
        for staged in staged {
            bytes += staged.publish(false)?;
        }
        if sync_now && synced {
            sync_together(indexes.iter(), false)?;
        }
        Ok(bytes)
    }
}

/// Makes what was written to `files` durable: one `syncfs` of their file
/// system when there are several (it flushes all of it at once) or when
/// `with_names` (files made since, whose names are to be durable too), the
/// file's own sync when there is one.
fn sync_together<'a>(files: impl Iterator<Item = &'a File>, with_names: bool) -> io::Result<()> {
    let files: Vec<&File> = files.collect();
    match files.as_slice() {
        [] => Ok(()),
        [one] if !with_names => crate::durable::sync_data(one),
        [first, ..] => {
            crate::durable::count_sync();
            // SAFETY: the descriptor is open for as long as `first` lives,
            // which outlives the call.
            if unsafe { libc::syncfs(first.as_raw_fd()) } == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        }
    }
}

/// An append whose frames are written and whose slots are not.
pub(in crate::pack) struct Staged {
    /// Whether the shard was started for this append.
    pub(in crate::pack) started: bool,
    pub(in crate::pack) has_frames: bool,
    pub(in crate::pack) pack: File,
    index: File,
    index_end: u64,
    slots: Vec<u8>,
    /// What the append adds to the files.
    bytes: u64,
}

impl Staged {
    /// Writes the slots, once the frames they name are durable; synced
    /// when `durable`. Returns the bytes the append added.
    pub(in crate::pack) fn publish(self, durable: bool) -> io::Result<u64> {
        self.index.write_all_at(&self.slots, self.index_end)?;
        if durable {
            crate::durable::sync_data(&self.index)?;
        }
        Ok(self.bytes)
    }
}
