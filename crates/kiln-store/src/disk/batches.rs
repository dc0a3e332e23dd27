//! The records of the last batches of every process that used the store,
//! kept in its `batches` file (`kiln records`). No state of its own: the
//! file is the room.

use kiln_engine::StoredBatch;

use crate::batches::BatchesFile;
use crate::files::Files;

/// Keeps an encoded batch record among the store's last
/// ([`Records::keep_batch`](kiln_engine::Records::keep_batch)). A read-only store keeps
/// nothing; a record that cannot be written is dropped, never an error:
/// it is history, not an artifact. A file the store cannot open or may
/// not write is said once, with what to do.
pub(crate) fn keep(files: &Files, record: &[u8]) {
    if files.read_only {
        return;
    }
    let path = files.layout.batches_file();
    let file = match BatchesFile::open(&path) {
        Ok(file) => file,
        Err(error) => {
            crate::sealed::report_once(&path, "keep the batch records in", &error);
            return;
        }
    };
    match file.keep(record) {
        Ok(()) => {}
        // A full disk or a limit is said with the other writes it fails.
        Err(error) if error.kind() != std::io::ErrorKind::PermissionDenied => {
            log::debug!("kiln store: cannot keep a batch record ({error})");
        }
        Err(error) => crate::sealed::report_once(&path, "keep the batch records in", &error),
    }
}

/// The records of the last batches of every process that used the
/// store, oldest first; records this build cannot read are left out.
pub(crate) fn kept(files: &Files) -> Vec<StoredBatch> {
    BatchesFile::read_at(&files.layout.batches_file())
        .iter()
        .filter_map(|bytes| StoredBatch::decode(bytes))
        .collect()
}
