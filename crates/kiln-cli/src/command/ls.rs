//! `kiln ls`: every entry of the store: the artifacts of kernels and of
//! lowered source, and the named blobs kept beside them (a pipeline cache),
//! each listed as what it is.

use anyhow::Result;
use clap::Args;
use kiln_core::KeySubject;
use kiln_core::store::{BlobKey, FAILURE_BLOB_KIND, RememberedFailure, hex};
use kiln_core::{ArtifactStore, Lookup};
use kiln_store::{DiskStore, Entry, EntryInfo};

use super::Output;
use crate::console::{self, outln};
use crate::format;
use crate::table::Table;

/// `kiln ls` options.
#[derive(Debug, Args)]
pub struct Arguments {
    /// Only entries whose kernel name contains this text.
    #[arg(long)]
    pub kernel: Option<String>,
    /// Leave out the records of lowered source and the named blobs.
    #[arg(long)]
    pub kernels_only: bool,
}

/// Lists the entries: JSON lines of one array with `--json`, else a table.
pub fn run(store: &DiskStore, arguments: &Arguments, output: &Output) -> Result<()> {
    let wanted = |entry: &EntryInfo| {
        let kernel = match &entry.entry {
            Entry::Record(record) => record.key.kernel().map(|(name, _)| name.to_owned()),
            // A remembered failure is of a kernel (P11), unless forgotten.
            Entry::Blob(record) if record.key.kind == FAILURE_BLOB_KIND => {
                if !remembers_something(store, &record.key) {
                    return false;
                }
                Some(blob_component(&record.key, "kernel"))
            }
            Entry::Blob(_) => None,
        };
        let of_a_kernel =
            matches!(&entry.entry, Entry::Record(record) if record.key.kernel().is_some());
        if arguments.kernels_only && !of_a_kernel {
            return false;
        }
        match &arguments.kernel {
            Some(text) => kernel.is_some_and(|name| name.contains(text.as_str())),
            None => true,
        }
    };
    if output.json {
        // Streamed as one array, whatever the store's size.
        let mut first = true;
        outln!("[");
        let mut failed = None;
        store.entries(&mut |entry| {
            // Past a closed pipe (`kiln --json ls | head`) nobody reads the
            // rest: skip the work of printing it.
            if !wanted(&entry) || failed.is_some() || console::is_closed() {
                return;
            }
            match serde_json::to_string(&crate::shape::EntryShape::from(&entry)) {
                Ok(line) => {
                    outln!("{}{line}", if first { "" } else { "," });
                    first = false;
                }
                Err(error) => failed = Some(error),
            }
        })?;
        outln!("]");
        return failed.map_or(Ok(()), |error| Err(error.into()));
    }
    let mut table = Table::new(&[
        "KIND", "SUBJECT", "VARIANT", "BACKEND", "COMPILER", "ARCH", "SIZE>", "STORED", "USED",
    ]);
    store.entries(&mut |entry| {
        if !wanted(&entry) {
            return;
        }
        let used = entry.accessed_at.map_or_else(|| "gone".into(), format::ago);
        let row = match &entry.entry {
            Entry::Record(record) => {
                let key = &record.key;
                let (kind, subject) = match &key.subject {
                    KeySubject::Kernel { name, digest } => {
                        ("kernel", format!("{name}#{:016x}", digest >> 64))
                    }
                    KeySubject::Source { digest } => ("source", hex(&digest[..8])),
                };
                vec![
                    kind.into(),
                    subject,
                    crate::backend::variant_label(key),
                    key.components.backend.clone(),
                    key.components.compiler.clone(),
                    key.components.architecture.clone(),
                    format::bytes(record.size),
                    format::ago(record.stored_at),
                    used,
                ]
            }
            // A blob is no kernel: its kind says what it is, and what
            // identifies it is its key's components, not a compiler's.
            Entry::Blob(record) => {
                let component = |name: &str| blob_component(&record.key, name);
                let subject = if record.key.kind == FAILURE_BLOB_KIND {
                    component("kernel")
                } else {
                    hex(&record.key.digest()[..8])
                };
                vec![
                    record.key.kind.clone(),
                    subject,
                    "-".into(),
                    "-".into(),
                    component("driver"),
                    component("adapter"),
                    format::bytes(record.size),
                    format::ago(record.stored_at),
                    used,
                ]
            }
        };
        table.row(row);
    })?;
    if table.len() == 0 {
        outln!("the store at {} holds no entries", store.root().display());
    } else {
        table.print();
    }
    Ok(())
}

/// The value of the blob key's component `name`, or `-`.
fn blob_component(key: &BlobKey, name: &str) -> String {
    key.components
        .iter()
        .find(|(component, _)| component == name)
        .map_or_else(|| "-".to_owned(), |(_, value)| value.clone())
}

/// Whether the failure memory under `key` still holds something: a
/// forgotten one is listed as nothing.
fn remembers_something(store: &DiskStore, key: &BlobKey) -> bool {
    match store.lookup_blob(key) {
        Lookup::Hit { artifact, .. } => {
            RememberedFailure::from_bytes(&artifact).is_some_and(|memory| !memory.is_empty())
        }
        Lookup::Miss(_) => false,
    }
}
