//! `kiln ls`: every entry of the store: the artifacts of kernels and of
//! lowered source, and the named blobs kept beside them (a pipeline cache),
//! each listed as what it is, an artifact with the resources its kernel
//! uses (D4: registers, spills, shared memory), read from its bytes, and
//! the specialization it was compiled with (defines, constants), read from
//! the recipe kept after them: one row per specialization, sorted.

use anyhow::Result;
use clap::Args;
use kiln_engine::store::{BlobKey, FAILURE_BLOB_KIND, RememberedFailure, hex};
use kiln_engine::{ArtifactReport, Blobs, KeySubject, Lookup, ResourceUsage};
use kiln_store::{DiskStore, Entry, EntryInfo, Record};

use crate::console::{self, outln};
use crate::format;
use crate::output::Output;
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
    let wide = output.wide;
    let mut table = Table::new(&[
        "ENTRY", "TARGET", "COMPILER", "SIZE>", "?REGS>", "?SPILLS>", "?SHARED>", "?STORED>",
        "USED>",
    ]);
    let mut any = false;
    store.entries(&mut |entry| {
        any = true;
        if !wanted(&entry) {
            return;
        }
        let used = entry.accessed_at.map_or_else(|| "gone".into(), format::ago);
        let row = match &entry.entry {
            Entry::Record(record) => {
                let key = &record.key;
                let bytes = store.object_bytes(record);
                let backend = key.components.backend.as_str();
                let specialization = bytes
                    .as_deref()
                    .and_then(|bytes| specialization_of(backend, bytes));
                let (kind, name, digest) = match &key.subject {
                    KeySubject::Kernel { name, digest } => {
                        let digest = if wide {
                            format!("{digest:032x}")
                        } else {
                            format!("{:08x}", digest >> 96)
                        };
                        ("0 kernel", format!("{name}#"), digest)
                    }
                    KeySubject::Source { digest } => (
                        "1 source",
                        "source ".to_owned(),
                        hex(&digest[..if wide { 32 } else { 4 }]),
                    ),
                };
                let specialization = specialization.unwrap_or_default();
                let subject = format!("{name}{digest} {specialization}")
                    .trim_end()
                    .to_owned();
                // A kernel's specializations sort together, by their
                // defines, rather than by their digests.
                let sort_key = vec![
                    kind.to_owned(),
                    name,
                    key.components.backend.clone(),
                    specialization,
                    digest,
                ];
                let [registers, spills, shared] = resource_cells(
                    bytes
                        .as_deref()
                        .and_then(|bytes| crate::backend::named(backend)?.stored_report(bytes))
                        .as_ref()
                        .map(|report| &report.resources),
                );
                (
                    sort_key,
                    vec![
                        subject,
                        target_cell(backend, &crate::backend::variant_label(key), key),
                        format::compiler(&key.components.compiler, wide),
                        format::bytes(record.size),
                        registers,
                        spills,
                        shared,
                        format::ago(record.stored_at),
                        used,
                    ],
                )
            }
            // A blob is no kernel: its kind says what it is, and what
            // identifies it is its key's components, not a compiler's.
            Entry::Blob(record) => {
                let component = |name: &str| blob_component(&record.key, name);
                let subject = if record.key.kind == FAILURE_BLOB_KIND {
                    short_kernel(&component("kernel"), wide)
                } else {
                    hex(&record.key.digest()[..if wide { 32 } else { 4 }])
                };
                let sort_key = vec![format!("2 {}", record.key.kind), subject.clone()];
                (
                    sort_key,
                    vec![
                        format!("{} {subject}", record.key.kind),
                        format::compiler(&component("adapter"), wide),
                        format::compiler(&component("driver"), wide),
                        format::bytes(record.size),
                        "-".into(),
                        "-".into(),
                        "-".into(),
                        format::ago(record.stored_at),
                        used,
                    ],
                )
            }
        };
        let (sort_key, cells) = row;
        table.row_sorted_by(sort_key, cells);
    })?;
    if table.len() > 0 {
        table.sort();
        table.print();
    } else if any {
        outln!(
            "no entry of the store at {} matches{}",
            store.root().display(),
            match (&arguments.kernel, arguments.kernels_only) {
                (Some(text), _) => format!(" --kernel {text:?}"),
                (None, true) => " --kernels-only".to_owned(),
                (None, false) => String::new(),
            }
        );
    } else {
        outln!("the store at {} holds no entries", store.root().display());
    }
    Ok(())
}

/// The TARGET cell: the backend and the variant its entries were stored
/// under (`cuda sm_90`), or the architecture where the variant says
/// nothing (`wgpu wgsl`).
fn target_cell(backend: &str, variant: &str, key: &kiln_engine::StoreKey) -> String {
    let variant = if variant == "-" || variant.is_empty() {
        key.components.architecture.as_str()
    } else {
        variant
    };
    format!("{backend} {variant}")
}

/// A kernel's `name#digest` with the digest cut to 8 hex digits, as the
/// kernels' rows show it, unless `wide`.
fn short_kernel(kernel: &str, wide: bool) -> String {
    match kernel.rsplit_once('#') {
        Some((name, digest))
            if !wide && digest.len() > 8 && digest.chars().all(|c| c.is_ascii_hexdigit()) =>
        {
            format!("{name}#{}", &digest[..8])
        }
        _ => kernel.to_owned(),
    }
}

/// What `bytes` (a stored value) were compiled with beyond their source,
/// in its backend's words (`N=4 BLOCK=128`); `None` for none, for a value
/// kept without a recipe, or for a backend this command does not know.
fn specialization_of(backend: &str, bytes: &[u8]) -> Option<String> {
    let words = crate::backend::named(backend)?.specialization(bytes)?;
    (!words.is_empty()).then(|| words.join(" "))
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
    let spilled = resources.spills();
    let spills = spill_cell(
        spilled,
        (resources.spill_store_bytes, resources.spill_load_bytes),
        |stored, loaded| format!("{stored}/{loaded} B"),
    )
    .or_else(|| {
        spill_cell(
            spilled,
            (
                resources.spilled_vector_registers,
                resources.spilled_scalar_registers,
            ),
            |vector, scalar| format!("{vector}v/{scalar}s"),
        )
    })
    .unwrap_or_else(|| "-".to_owned());
    let shared = resources
        .shared_memory_bytes
        .map_or_else(|| "-".to_owned(), format::bytes);
    [registers, spills, shared]
}

/// A SPILLS cell from one backend's pair of spill counts, as `write`
/// shows them (a missing one of the pair is 0); `0` when nothing spills,
/// `None` when the backend reports neither.
fn spill_cell<T: Copy + Default>(
    spills: bool,
    pair: (Option<T>, Option<T>),
    write: impl Fn(T, T) -> String,
) -> Option<String> {
    match pair {
        (None, None) => None,
        _ if !spills => Some("0".to_owned()),
        (first, second) => Some(write(first.unwrap_or_default(), second.unwrap_or_default())),
    }
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
