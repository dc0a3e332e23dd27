//! `kiln ls`: every entry of the store: the artifacts of kernels and of
//! lowered source, and the named blobs kept beside them (a pipeline cache),
//! each listed as what it is.

use anyhow::Result;
use clap::Args;
use kiln_core::KeySubject;
use kiln_core::store::hex;
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
            Entry::Record(record) => record.key.kernel(),
            Entry::Blob(_) => None,
        };
        if arguments.kernels_only && kernel.is_none() {
            return false;
        }
        match &arguments.kernel {
            Some(text) => kernel.is_some_and(|(name, _)| name.contains(text.as_str())),
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
            match serde_json::to_string(&entry) {
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
                    key.variant_text.clone(),
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
                let component = |name: &str| {
                    record
                        .key
                        .components
                        .iter()
                        .find(|(component, _)| component == name)
                        .map_or_else(|| "-".to_owned(), |(_, value)| value.clone())
                };
                vec![
                    record.key.kind.clone(),
                    hex(&record.key.digest()[..8]),
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
