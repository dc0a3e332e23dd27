//! Rewriting a shard (compaction: eviction, `gc`, `verify`) and sweeping
//! the packs its index no longer names.

use std::ffi::OsStr;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use crate::durable;
use crate::lock::LockFile;
use crate::pack::format::{
    UNIT, frame_header, fresh_generation, index_generation, index_header, pack_header,
};
use crate::pack::home::HOME;
use crate::pack::shard::read_frame;
use crate::pack::{Live, Packs, Rewritten, Slot, lock_shard, remove_named, shard_of};
use crate::tree::{Folder, is_absent};

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
