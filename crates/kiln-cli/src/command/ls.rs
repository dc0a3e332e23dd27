//! `kiln ls`: every entry of the store.

use anyhow::Result;
use clap::Args;
use kiln_core::KeySubject;
use kiln_core::store::hex;
use kiln_store::{DiskStore, EntryInfo};

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
    /// Leave out the records of lowered source.
    #[arg(long)]
    pub kernels_only: bool,
}

/// Lists the entries: JSON lines of one array with `--json`, else a table.
pub fn run(store: &DiskStore, arguments: &Arguments, output: &Output) -> Result<()> {
    let wanted = |entry: &EntryInfo| {
        let kernel = entry.record.key.kernel();
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
        let key = &entry.record.key;
        let (kind, subject) = match &key.subject {
            KeySubject::Kernel { name, digest } => {
                ("kernel", format!("{name}#{:016x}", digest >> 64))
            }
            KeySubject::Source { digest } => ("source", hex(&digest[..8])),
        };
        table.row(vec![
            kind.into(),
            subject,
            key.variant_text.clone(),
            key.components.backend.clone(),
            key.components.compiler.clone(),
            key.components.architecture.clone(),
            format::bytes(entry.record.size),
            format::ago(entry.record.stored_at),
            entry.accessed_at.map_or_else(|| "gone".into(), format::ago),
        ]);
    })?;
    if table.len() == 0 {
        outln!("the store at {} holds no entries", store.root().display());
    } else {
        table.print();
    }
    Ok(())
}
