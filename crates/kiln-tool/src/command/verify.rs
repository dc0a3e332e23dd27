//! `kiln verify`: re-digest everything, remove what is bad, report; with
//! `--recompile FRACTION`, also compile a sample of the kernels again and
//! compare the bytes with what is stored.

use anyhow::Result;
use clap::Args;
use kiln_engine::store::Recompiled;
use kiln_engine::{ArtifactStore, StoreKey};
use kiln_store::{DiskStore, Entry, VerifyReport};
use serde::Serialize;

use crate::backend::{Recompiler, variant_label};
use crate::console::outln;
use crate::exit::{self, Exit};
use crate::format;
use crate::output::Output;
use crate::progress::ProgressBar;
use crate::table::print_pairs;

/// `kiln verify` options.
#[derive(Debug, Args)]
pub struct Arguments {
    /// Also compile this fraction (0 to 1) of the kernels again, chosen by
    /// their keys, and compare the bytes with the stored ones: a
    /// nondeterministic compiler, or an entry stored damaged, differs.
    #[arg(long, value_name = "FRACTION", value_parser = fraction)]
    pub recompile: Option<f64>,
}

fn fraction(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(value) if (0.0..=1.0).contains(&value) => Ok(value),
        _ => Err(format!("`{text}` is not a fraction from 0 to 1")),
    }
}

/// What `kiln verify --json` prints.
#[derive(Debug, Serialize)]
struct Verified {
    #[serde(flatten)]
    report: VerifyReport,
    /// The recompiled sample, with `--recompile`.
    #[serde(skip_serializing_if = "Option::is_none")]
    recompile: Option<RecompileReport>,
}

/// What compiling a sample of the kernels again found.
#[derive(Debug, Default, Serialize)]
pub struct RecompileReport {
    /// Kernel entries chosen.
    pub sampled: usize,
    /// Compiled again to the same bytes.
    pub same: usize,
    /// Compiled again to other bytes.
    pub different: Vec<EntryNote>,
    /// Kept without what they were compiled from (stored by an older kiln,
    /// or rekeyed onto another kernel's artifact).
    pub no_recipe: usize,
    /// Not compiled again: their compiler is not here, or is another
    /// version.
    pub skipped: Vec<EntryNote>,
    /// The compiler failed on what they were compiled from, or it did not
    /// decode.
    pub failed: Vec<EntryNote>,
    /// Records whose object is another kernel's artifact: what they were
    /// compiled from is of another key than theirs. Removed, unless the
    /// store is read-only.
    pub other_key: Vec<EntryNote>,
}

/// One entry of a [`RecompileReport`] and what was found.
#[derive(Debug, Serialize)]
pub struct EntryNote {
    /// The kernel's name.
    pub kernel: String,
    /// Its backend and variant: `cuda sm_90`.
    pub variant: String,
    /// What was found.
    pub note: String,
}

/// Verifies the whole store, streaming; then recompiles the sample asked
/// for.
pub fn run(store: &DiskStore, arguments: &Arguments, output: &Output) -> Result<()> {
    let mut bar = ProgressBar::new("verify");
    let report = store.verify(&mut |progress| bar.update(progress))?;
    drop(bar);
    let recompiled = arguments
        .recompile
        .map(|fraction| recompile_sample(store, fraction))
        .transpose()?;
    let verified = Verified {
        report,
        recompile: recompiled,
    };
    output.print(&verified, || print_human(store, &verified))?;
    if let Some(recompiled) = &verified.recompile
        && !recompiled.other_key.is_empty()
    {
        return Err(Exit::new(
            exit::KERNELS_FAILED,
            format!(
                "{} of {} kernel records name another kernel's artifact: {}",
                recompiled.other_key.len(),
                recompiled.sampled,
                if store.is_read_only() {
                    "the store is read-only, so they were kept; run `kiln verify --recompile` \
                     on a writable store to remove them"
                } else {
                    "they were removed, and those kernels compile again when next loaded"
                }
            ),
        )
        .reported()
        .into());
    }
    if let Some(recompiled) = &verified.recompile
        && !recompiled.different.is_empty()
    {
        return Err(Exit::new(
            exit::KERNELS_FAILED,
            format!(
                "{} of {} kernels compiled again to other bytes than stored: the compiler is \
                 not deterministic, or those entries were stored damaged",
                recompiled.different.len(),
                recompiled.sampled
            ),
        )
        .reported()
        .into());
    }
    Ok(())
}

fn print_human(store: &DiskStore, verified: &Verified) {
    let report = &verified.report;
    print_pairs(&[
        (
            "objects",
            format!("{} ({})", report.objects, format::bytes(report.bytes)),
        ),
        ("records", report.records.to_string()),
        ("histories", report.histories.to_string()),
        ("bad objects removed", report.bad_objects.to_string()),
        ("bad records removed", report.bad_records.to_string()),
        (
            "dangling records removed",
            report.dangling_records.to_string(),
        ),
        ("bad histories removed", report.bad_histories.to_string()),
        ("staging files removed", report.staging_removed.to_string()),
        ("left alone, in use", report.busy.to_string()),
    ]);
    for (path, why) in &report.unchecked {
        outln!("not checked: {}: {why}", path.display());
    }
    if store.is_read_only() {
        outln!("the store is read-only: what is bad was reported, not removed");
    }
    if report.is_clean() {
        outln!("everything verified");
    }
    let Some(recompiled) = &verified.recompile else {
        return;
    };
    outln!();
    print_pairs(&[
        ("kernels compiled again", recompiled.sampled.to_string()),
        ("same bytes", recompiled.same.to_string()),
        ("other bytes", recompiled.different.len().to_string()),
        ("kept without a recipe", recompiled.no_recipe.to_string()),
        ("skipped", recompiled.skipped.len().to_string()),
        ("failed", recompiled.failed.len().to_string()),
        (
            "another kernel's artifact",
            recompiled.other_key.len().to_string(),
        ),
    ]);
    for (what, notes) in [
        ("another kernel's artifact", &recompiled.other_key),
        ("other bytes", &recompiled.different),
        ("skipped", &recompiled.skipped),
        ("failed", &recompiled.failed),
    ] {
        for note in notes {
            outln!("{what}: {} ({}): {}", note.kernel, note.variant, note.note);
        }
    }
}

/// Whether the kernel entry of `key` is in the sample of `fraction`: the
/// first 8 bytes of its digest, as a number, below that fraction of all
/// numbers. The same entries in every run, spread evenly over the store.
fn sampled(key: &StoreKey, fraction: f64) -> bool {
    let digest = key.digest();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) as f64) < fraction * (u64::MAX as f64 + 1.0)
}

/// The compilers of this machine, by backend, opened when first needed.
type Compilers = std::collections::HashMap<&'static str, Result<Box<dyn Recompiler>, String>>;

fn recompile_sample(store: &DiskStore, fraction: f64) -> Result<RecompileReport> {
    let mut records = Vec::new();
    store.entries(&mut |entry| {
        if let Entry::Record(record) = entry.entry
            && record.key.kernel().is_some()
            && sampled(&record.key, fraction)
        {
            records.push(record);
        }
    })?;
    let mut report = RecompileReport {
        sampled: records.len(),
        ..RecompileReport::default()
    };
    let mut compilers = Compilers::default();
    let mut bar = ProgressBar::new("recompile");
    let mut read = 0u64;
    for (done, record) in records.iter().enumerate() {
        let key = &record.key;
        bar.update(&kiln_store::Progress {
            phase: "kernels",
            done: done as u64,
            total: Some(records.len() as u64),
            bytes: read,
        });
        let note = |note: String| EntryNote {
            kernel: key.kernel().map(|(name, _)| name).unwrap_or("").to_owned(),
            variant: format!("{} {}", key.components.backend, variant_label(key)),
            note,
        };
        // Read as `kiln ls` reads it: checking a store changes nothing in it.
        let Some(bytes) = store.object_bytes(record) else {
            report.skipped.push(note(
                "its object is gone, or is not what its record says (`kiln verify` removes it)"
                    .to_owned(),
            ));
            continue;
        };
        read += bytes.len() as u64;
        let outcome = match crate::backend::named(&key.components.backend) {
            Some(backend) => compilers
                .entry(backend.name())
                .or_insert_with(|| backend.recompiler())
                .as_ref()
                .map_err(|error| format!("its compiler cannot be opened here: {error}"))
                .and_then(|compiler| compiler.recompile(key, &bytes)),
            None => Err(format!(
                "no compiler of backend `{}` here",
                key.components.backend
            )),
        };
        match outcome {
            Ok(Recompiled::Same) => report.same += 1,
            Ok(Recompiled::Different { stored, recompiled }) => report.different.push(note(
                format!("{stored} bytes stored, {recompiled} bytes compiled now"),
            )),
            Ok(Recompiled::NoRecipe) => report.no_recipe += 1,
            Ok(Recompiled::Undecodable(detail) | Recompiled::Failed(detail)) => {
                report.failed.push(note(detail));
            }
            Ok(Recompiled::OtherKey(what)) => {
                // Its digest checks out, so only this tells it from a whole
                // entry: the record is not what its key says, and goes.
                let removed = !store.is_read_only();
                if removed {
                    store.remove(key);
                }
                report.other_key.push(note(format!(
                    "{what}{}",
                    if removed {
                        "; record removed"
                    } else {
                        "; kept (read-only store)"
                    }
                )));
            }
            Err(reason) => report.skipped.push(note(reason)),
        }
    }
    drop(bar);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fraction_is_from_0_to_1() {
        assert_eq!(fraction("0.25"), Ok(0.25));
        assert_eq!(fraction("1"), Ok(1.0));
        assert!(fraction("1.5").is_err());
        assert!(fraction("-0.1").is_err());
        assert!(fraction("half").is_err());
        assert!(fraction("NaN").is_err());
    }
}
