//! Moving a store through a bundle file: writing one (`export.rs`),
//! reading its head and manifest (`head.rs`) and its sections
//! (`reader.rs`), and publishing what it holds (`import.rs`).

mod export;
mod head;
mod import;
mod reader;

#[cfg(test)]
pub(super) use export::write_head;
pub use head::read_header;
#[cfg(test)]
pub(super) use reader::{Search, scan};
