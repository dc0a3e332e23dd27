//! `kiln coverage`: how much of what a program needs a store or a bundle
//! holds, so that a pack that would leave compiles on the request path is
//! refused before it ships. What the program needs is its warm-start
//! profile (`--profile PROGRAM`) or a list of kernel ids (`--ids FILE`);
//! each kernel is present or missing, a missing one with the compile
//! seconds the store's batch records kept for it; `--require PERCENT`
//! ends with exit code 5 below it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use kiln_engine::profile::{PROFILE_BLOB_KIND, StoredProfile};
use kiln_engine::store::{KeyComponents, KeySubject};
use kiln_engine::tune::{ANSWER_BLOB_KIND, TuningAnswer};
use kiln_engine::{Blobs, KernelOutcome, Lookup};
use kiln_store::{DiskStore, Entry, StoreConfig};
use serde::Serialize;

use crate::console::outln;
use crate::exit::{COVERAGE_SHORT, Exit};
use crate::format;
use crate::output::Output;

/// `kiln coverage` options.
#[derive(Debug, Args)]
pub struct Arguments {
    /// What the program needs: the warm-start profile of this program, as
    /// `kiln profiles` names it.
    #[arg(long, conflicts_with = "ids", required_unless_present = "ids")]
    pub profile: Option<String>,
    /// What the program needs: a file of kernel ids, one a line (32 hex
    /// digits, as `kiln ls --json` prints a key's digest; text after the
    /// id and lines starting with `#` are ignored).
    #[arg(long, value_name = "FILE")]
    pub ids: Option<PathBuf>,
    /// Compare with this bundle instead of the store (it is verified and
    /// read into a temporary store; the store is left alone).
    #[arg(long, value_name = "FILE")]
    pub bundle: Option<PathBuf>,
    /// Exit with code 5 when less than this percentage of the needed
    /// kernels is present.
    #[arg(long, value_name = "PERCENT")]
    pub require: Option<f64>,
}

/// The report, as `--json` prints it.
#[derive(Debug, Serialize)]
struct CoverageShape {
    /// `store` or `bundle`, and its path.
    compared_with: String,
    path: String,
    /// Kernels needed.
    needed: usize,
    /// Of those, present.
    present: usize,
    /// Of those, missing.
    missing: usize,
    /// present / needed × 100; 100 when nothing is needed.
    percent: f64,
    /// The compile seconds recorded for the present kernels: what a start
    /// from this pack saves.
    present_compile_seconds: f64,
    /// The compile seconds recorded for the missing kernels that have a
    /// record: what would land on the request path.
    missing_compile_seconds: f64,
    /// Tuning answers the store or bundle keeps.
    tuning_answers: usize,
    /// Each needed kernel.
    kernels: Vec<KernelCoverage>,
}

/// One needed kernel.
#[derive(Debug, Serialize)]
struct KernelCoverage {
    /// `name#digest` as logs print it (the digest alone for an id of a
    /// list).
    kernel: String,
    /// The kernel id's digest, 32 hex digits.
    digest: String,
    present: bool,
    /// Its compile seconds: from its record when present, else from the
    /// store's batch records; `null` when neither has it.
    compile_seconds: Option<f64>,
}

/// A needed kernel: its digest, and for a profiled one the compiler and
/// variant it was loaded under.
struct Needed {
    label: String,
    digest: u128,
    under: Option<(KeyComponents, Vec<u8>)>,
}

/// What the compared store holds.
#[derive(Default)]
struct Held {
    /// By kernel digest: the compiler, variant bytes and compile nanoseconds
    /// of each record.
    kernels: HashMap<u128, Vec<(KeyComponents, Vec<u8>, u64)>>,
    /// Tuning answers kept.
    answers: usize,
}

/// Compares what the program needs with the store, or with `--bundle`.
pub fn run(store: &DiskStore, arguments: &Arguments, output: &Output) -> Result<()> {
    let temporary = arguments.bundle.as_deref().map(Unpacked::new).transpose()?;
    let compared = temporary.as_ref().map_or(store, |unpacked| &unpacked.store);
    let needed = match (&arguments.profile, &arguments.ids) {
        (Some(program), _) => profiled(compared, store, program)?,
        (None, Some(path)) => listed(path)?,
        (None, None) => bail!("name what the program needs: --profile PROGRAM or --ids FILE"),
    };
    let held = held(compared)?;
    let recorded = recorded_work(store);
    let mut shape = CoverageShape {
        compared_with: if temporary.is_some() {
            "bundle"
        } else {
            "store"
        }
        .into(),
        path: arguments.bundle.as_deref().map_or_else(
            || store.root().display().to_string(),
            |bundle| bundle.display().to_string(),
        ),
        needed: needed.len(),
        present: 0,
        missing: 0,
        percent: 100.0,
        present_compile_seconds: 0.0,
        missing_compile_seconds: 0.0,
        tuning_answers: held.answers,
        kernels: Vec::with_capacity(needed.len()),
    };
    for kernel in &needed {
        let found = held.kernels.get(&kernel.digest).and_then(|records| {
            records
                .iter()
                .find(|(components, variant, _)| {
                    kernel.under.as_ref().is_none_or(|(wanted, bytes)| {
                        same_compiler(components, wanted) && variant == bytes
                    })
                })
                .map(|(_, _, nanos)| *nanos)
        });
        let compile_seconds = match found {
            Some(nanos) => Some(nanos as f64 * 1e-9),
            None => recorded.get(&kernel.digest).copied(),
        };
        if found.is_some() {
            shape.present += 1;
            shape.present_compile_seconds += compile_seconds.unwrap_or(0.0);
        } else {
            shape.missing += 1;
            shape.missing_compile_seconds += compile_seconds.unwrap_or(0.0);
        }
        shape.kernels.push(KernelCoverage {
            kernel: kernel.label.clone(),
            digest: format!("{:032x}", kernel.digest),
            present: found.is_some(),
            compile_seconds,
        });
    }
    if shape.needed > 0 {
        shape.percent = shape.present as f64 * 100.0 / shape.needed as f64;
    }
    output.print(&shape, || print(&shape))?;
    if let Some(required) = arguments.require
        && shape.percent < required
    {
        return Err(Exit::new(
            COVERAGE_SHORT,
            format!(
                "{:.1} % of the needed kernels are present, below the {required} % required: \
                 {} would compile on the request path",
                shape.percent, shape.missing
            ),
        )
        // The report says what is missing: under `--json`, standard output
        // stays that one value.
        .reported()
        .into());
    }
    Ok(())
}

fn print(shape: &CoverageShape) {
    outln!(
        "{} of {} needed kernels present in the {} at {} ({:.1} %)",
        shape.present,
        shape.needed,
        shape.compared_with,
        shape.path,
        shape.percent
    );
    outln!(
        "present: {} (their compiles took {}); tuning answers kept: {}",
        shape.present,
        format::seconds(shape.present_compile_seconds),
        shape.tuning_answers
    );
    if shape.missing == 0 {
        return;
    }
    outln!(
        "missing: {}, whose compiles took {} when last recorded:",
        shape.missing,
        format::seconds(shape.missing_compile_seconds)
    );
    let mut missing: Vec<&KernelCoverage> = shape
        .kernels
        .iter()
        .filter(|kernel| !kernel.present)
        .collect();
    missing.sort_by(|a, b| {
        b.compile_seconds
            .unwrap_or(0.0)
            .total_cmp(&a.compile_seconds.unwrap_or(0.0))
    });
    for kernel in missing {
        outln!(
            "  {:>9}  {}",
            kernel
                .compile_seconds
                .map_or_else(|| "unknown".to_owned(), format::seconds),
            kernel.kernel
        );
    }
}

/// Two compilers alike as a store key names them.
fn same_compiler(a: &KeyComponents, b: &KeyComponents) -> bool {
    a == b
}

/// The kernels of `program`'s profiles: in `compared` first (a bundle
/// carries them), else in `store`.
fn profiled(compared: &DiskStore, store: &DiskStore, program: &str) -> Result<Vec<Needed>> {
    let mut profiles = profiles_of(compared, program)?;
    if profiles.is_empty() && !std::ptr::eq(compared, store) {
        profiles = profiles_of(store, program)?;
    }
    if profiles.is_empty() {
        bail!(
            "no warm-start profile of {program}: `kiln profiles` lists the programs the store \
             keeps one for"
        );
    }
    let mut needed = Vec::new();
    for profile in profiles {
        for kernel in &profile.kernels {
            let Some((id, variant)) = kernel.key_parts() else {
                continue;
            };
            needed.push(Needed {
                label: kernel.kernel.clone(),
                digest: id.digest(),
                under: Some((profile.components.clone(), variant.to_vec())),
            });
        }
    }
    Ok(needed)
}

pub(super) fn profiles_of(store: &DiskStore, program: &str) -> Result<Vec<StoredProfile>> {
    Ok(
        super::blobs_of_kind(store, PROFILE_BLOB_KIND, StoredProfile::from_bytes)?
            .into_iter()
            .map(|(_, profile)| profile)
            .filter(|profile| profile.program == program && !profile.kernels.is_empty())
            .collect(),
    )
}

/// The ids of a list, one a line.
fn listed(path: &Path) -> Result<Vec<Needed>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("could not read {}", path.display()))?;
    let mut needed = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let word = line.split_whitespace().next().unwrap_or_default();
        let digest = match u128::from_str_radix(word, 16) {
            Ok(digest) if word.len() == 32 => digest,
            _ => bail!(
                "{} line {}: {word:?} is not a kernel id (32 hex digits, as `kiln ls --json` \
                 prints a key's digest)",
                path.display(),
                number + 1
            ),
        };
        needed.push(Needed {
            label: line.to_owned(),
            digest,
            under: None,
        });
    }
    Ok(needed)
}

/// What `store` holds: its kernel records and tuning answers.
fn held(store: &DiskStore) -> Result<Held> {
    let mut held = Held::default();
    let mut answers = Vec::new();
    store
        .entries(&mut |info| match info.entry {
            Entry::Record(record) => {
                if let KeySubject::Kernel { digest, .. } = record.key.subject {
                    held.kernels.entry(digest).or_default().push((
                        record.key.components,
                        record.key.variant,
                        record.work_nanos,
                    ));
                }
            }
            Entry::Blob(record) => {
                if record.key.kind == ANSWER_BLOB_KIND {
                    answers.push(record.key);
                }
            }
        })
        .context("reading the store's entries")?;
    // A forgotten answer is an empty one: only answers count.
    held.answers = answers
        .iter()
        .filter(|name| match store.lookup_blob(name) {
            Lookup::Hit { artifact, .. } => {
                TuningAnswer::from_bytes(&artifact).is_some_and(|answer| answer.is_answer())
            }
            Lookup::Miss(_) => false,
        })
        .count();
    Ok(held)
}

/// The compile seconds the store's batch records kept, by kernel digest,
/// the newest of each.
fn recorded_work(store: &DiskStore) -> HashMap<u128, f64> {
    let mut work = HashMap::new();
    for stored in store.kept_batches() {
        for record in &stored.batch.records {
            if record.outcome == KernelOutcome::Compiled {
                work.insert(record.kernel.digest(), record.work.as_secs_f64());
            }
        }
    }
    work
}

/// A bundle read into a temporary store, removed when dropped.
struct Unpacked {
    folder: PathBuf,
    store: DiskStore,
}

impl Unpacked {
    fn new(bundle: &Path) -> Result<Self> {
        let folder = std::env::temp_dir().join(format!(
            "kiln-coverage-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_nanos())
        ));
        let store = DiskStore::open(StoreConfig::at(&folder))
            .with_context(|| format!("could not make a temporary store at {}", folder.display()))?;
        let unpacked = Self { folder, store };
        unpacked
            .store
            .import(bundle, None, &mut |_| {})
            .with_context(|| format!("could not read the bundle {}", bundle.display()))?;
        Ok(unpacked)
    }
}

impl Drop for Unpacked {
    fn drop(&mut self) {
        // The folder is this process's own, made above.
        if let Err(error) = std::fs::remove_dir_all(&self.folder) {
            log::debug!("could not remove {}: {error}", self.folder.display());
        }
    }
}
