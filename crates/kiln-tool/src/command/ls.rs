//! `kiln ls`: every entry of the store: the artifacts of kernels and of
//! lowered source, and the named blobs kept beside them (a pipeline cache),
//! each listed as what it is, an artifact with the resources its kernel
//! uses (D4: registers, spills, shared memory), read from its bytes.

use anyhow::Result;
use clap::Args;
use kiln_engine::store::{BlobKey, FAILURE_BLOB_KIND, RememberedFailure, hex};
use kiln_engine::{ArtifactReport, ArtifactStore, KeySubject, Lookup, ResourceUsage};
use kiln_store::{DiskStore, Entry, EntryInfo, Record};

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
            let report = match &entry.entry {
                Entry::Record(record) => stored_report(store, record),
                Entry::Blob(_) => None,
            };
            match serde_json::to_string(&crate::shape::EntryShape::new(&entry, report.as_ref())) {
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
        "KIND", "SUBJECT", "VARIANT", "BACKEND", "COMPILER", "ARCH", "SIZE>", "REGS>", "SPILLS>",
        "SHARED>", "STORED", "USED",
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
                let [registers, spills, shared] = resource_cells(
                    stored_report(store, record)
                        .as_ref()
                        .map(|report| &report.resources),
                );
                vec![
                    kind.into(),
                    subject,
                    crate::backend::variant_label(key),
                    key.components.backend.clone(),
                    key.components.compiler.clone(),
                    key.components.architecture.clone(),
                    format::bytes(record.size),
                    registers,
                    spills,
                    shared,
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
                    "-".into(),
                    "-".into(),
                    "-".into(),
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

/// The REGS, SPILLS and SHARED cells of an artifact's resources (D4): the
/// registers per thread (HIP's VGPRs), the spills (`0`, CUDA's bytes
/// stored/loaded per thread `1756/1796 B`, HIP's spilled registers
/// `3v/0s`), and the shared memory (LDS, workgroup memory); `-` for what
/// is not known.
fn resource_cells(resources: Option<&ResourceUsage>) -> [String; 3] {
    let Some(resources) = resources else {
        return ["-".into(), "-".into(), "-".into()];
    };
    let registers = resources
        .registers
        .map_or_else(|| "-".to_owned(), |registers| registers.to_string());
    let spills = if resources.spill_store_bytes.is_some() || resources.spill_load_bytes.is_some() {
        if resources.spills() {
            format!(
                "{}/{} B",
                resources.spill_store_bytes.unwrap_or(0),
                resources.spill_load_bytes.unwrap_or(0)
            )
        } else {
            "0".to_owned()
        }
    } else if resources.spilled_vector_registers.is_some()
        || resources.spilled_scalar_registers.is_some()
    {
        if resources.spills() {
            format!(
                "{}v/{}s",
                resources.spilled_vector_registers.unwrap_or(0),
                resources.spilled_scalar_registers.unwrap_or(0)
            )
        } else {
            "0".to_owned()
        }
    } else {
        "-".to_owned()
    };
    let shared = resources
        .shared_memory_bytes
        .map_or_else(|| "-".to_owned(), format::bytes);
    [registers, spills, shared]
}

/// The report (D4) of the artifact `record` names, read from its object
/// and decoded as its backend's artifact; `None` for a backend this
/// command does not know, an artifact stored before artifacts carried
/// reports (its compiler component names no artifact format that has
/// one, and its bytes do not decode), or an object that is missing, is no
/// plain file, or does not match the record's length and digest.
///
/// It reads the object without the store's lookup
/// ([`DiskStore::object_bytes`]), which would count a hit and renew the
/// entry's place in the eviction order: listing a store changes nothing in
/// it.
pub(crate) fn stored_report(store: &DiskStore, record: &Record) -> Option<ArtifactReport> {
    let bytes = store.object_bytes(record)?;
    crate::backend::named(&record.key.components.backend)?.stored_report(&bytes)
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
