//! What a process reads of a shard: its view's slots, taken as the index
//! grows, and a frame's payload.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crate::pack::format::{Kind, Slot, UNIT, frames};

/// The largest payload a frame may have: the largest artifact a store
/// packs, with room for its record.
const LARGEST_FRAME: u64 = crate::config::MAX_PACKED + (1 << 20);

/// Slots read from an index at a time: a long index is read in steps.
pub(in crate::pack) const SLOTS_PER_READ: u64 = 1 << 15;

/// What this process has read of one shard.
#[derive(Debug)]
pub(in crate::pack) struct View {
    /// The index's device and inode: another one means a rewrite.
    pub(in crate::pack) identity: (u64, u64),
    /// The index, opened to read: a lookup opens nothing to write.
    pub(in crate::pack) index: File,
    /// The pack, shared with reads under way: a frame is read without
    /// the view's lock.
    pub(in crate::pack) pack: std::sync::Arc<File>,
    pub(in crate::pack) generation: u64,
    /// How far the index has been read: whole slots only.
    pub(in crate::pack) read_to: u64,
    pub(in crate::pack) slots: HashMap<(Kind, [u8; 16]), (Slot, u64)>,
}

impl View {
    /// Reads the slots appended since the last read: whole slots only, a
    /// damaged one skipped.
    pub(in crate::pack) fn read_tail(&mut self) -> io::Result<()> {
        let length = self.index.metadata()?.len();
        loop {
            let whole = (length.saturating_sub(self.read_to) / UNIT).min(SLOTS_PER_READ) * UNIT;
            if whole == 0 {
                return Ok(());
            }
            let mut bytes = vec![0u8; usize::try_from(whole).unwrap_or(0)];
            self.index.read_exact_at(&mut bytes, self.read_to)?;
            self.take_slots(&bytes);
        }
    }

    /// Takes `bytes`, the whole slots read from where the view had read to.
    pub(in crate::pack) fn take_slots(&mut self, bytes: &[u8]) {
        for (number, unit) in bytes.chunks_exact(UNIT as usize).enumerate() {
            let position = self.read_to + number as u64 * UNIT;
            let Some(slot) = Slot::decode(unit) else {
                continue;
            };
            if slot.removed {
                self.slots.remove(&(slot.kind, slot.key));
            } else {
                self.slots.insert((slot.kind, slot.key), (slot, position));
            }
        }
        self.read_to += (bytes.len() as u64) / UNIT * UNIT;
    }

    /// The live slots in the order they were written.
    pub(in crate::pack) fn ordered(&self) -> Vec<(Slot, u64)> {
        let mut live: Vec<(Slot, u64)> = self.slots.values().copied().collect();
        live.sort_by_key(|(_, position)| *position);
        live
    }
}

/// Reads from the start of `file` into `buffer` until it is full or the
/// file ends; returns how much was read.
pub(in crate::pack) fn read_at_most(file: &File, buffer: &mut [u8]) -> io::Result<usize> {
    let mut read = 0;
    while read < buffer.len() {
        match file.read_at(&mut buffer[read..], read as u64) {
            Ok(0) => break,
            Ok(more) => read += more,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(read)
}

/// The payload of the frame `slot` names, or why it is not there: `Err`
/// only when the pack cannot be read.
pub(in crate::pack) fn read_frame(pack: &File, slot: &Slot) -> io::Result<Result<Vec<u8>, String>> {
    // A slot damaged past its check must not make a reader allocate what
    // it says: nothing packed is larger than the largest artifact packed.
    if u64::from(slot.length) > LARGEST_FRAME {
        return Ok(Err(format!(
            "its index says {} bytes, more than any packed entry",
            slot.length
        )));
    }
    let mut bytes = vec![0u8; usize::try_from(UNIT + u64::from(slot.length)).unwrap_or(0)];
    match pack.read_exact_at(&mut bytes, u64::from(slot.offset)) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => {
            return Ok(Err("the pack ends before the entry".into()));
        }
        Err(error) => return Err(error),
    }
    if !frames(&bytes, slot) {
        return Ok(Err(
            "the pack holds another entry where its index points".into()
        ));
    }
    bytes.drain(..UNIT as usize);
    Ok(Ok(bytes))
}
