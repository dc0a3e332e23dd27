//! One shard's files as this process uses them: what it has read of the
//! index and how a frame is read (`view.rs`), appending frames and the
//! slots that name them (`append.rs`), and what an append does about a
//! shard's files it cannot use (`repair.rs`).

mod append;
mod repair;
mod view;

pub(super) use repair::open_shard;
pub(super) use view::{SLOTS_PER_READ, View, read_at_most, read_frame};
