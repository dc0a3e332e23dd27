//! `kiln gc`: evict least recently used entries down to the limits.

use anyhow::{Context, Result};
use clap::Args;
use kiln_store::{DiskStore, Limits, parse_size};

use super::Output;
use crate::console::outln;
use crate::format;
use crate::progress::ProgressBar;
use crate::table::print_pairs;

/// `kiln gc` options.
#[derive(Debug, Args)]
pub struct Arguments {
    /// The size to bring the store under (`512M`, `10G`); default: the
    /// configured limit.
    #[arg(long, value_name = "SIZE")]
    pub max_size: Option<String>,
    /// The number of entries to bring the store under; default: the
    /// configured limit.
    #[arg(long, value_name = "N")]
    pub max_entries: Option<u64>,
}

/// Collects, streaming.
pub fn run(store: &DiskStore, arguments: &Arguments, output: &Output) -> Result<()> {
    let mut limits = Limits::of(store.config());
    if let Some(size) = &arguments.max_size {
        limits.max_bytes = parse_size(size)
            .with_context(|| format!("--max-size {size:?} is not a size like 512M or 10G"))?;
    }
    if let Some(entries) = arguments.max_entries {
        limits.max_entries = entries;
    }
    let mut bar = ProgressBar::new("gc");
    let report = store.collect(limits, &mut |progress| bar.update(progress))?;
    drop(bar);
    output.print(&report, || {
        if report.skipped {
            outln!("another process is collecting this store; nothing done");
            return;
        }
        if store.is_read_only() {
            outln!("the store is read-only; nothing evicted");
            return;
        }
        print_pairs(&[
            (
                "before",
                format!(
                    "{} in {}",
                    format::bytes(report.before.bytes),
                    format::count(report.before.entries, "entry")
                ),
            ),
            (
                "evicted",
                format!(
                    "{} in {}",
                    format::bytes(report.evicted_bytes),
                    format::count(report.evicted, "entry")
                ),
            ),
            ("records removed", report.records_removed.to_string()),
            ("kept, in use", report.busy.to_string()),
            (
                "after",
                format!(
                    "{} in {}",
                    format::bytes(report.after.bytes),
                    format::count(report.after.entries, "entry")
                ),
            ),
        ]);
        for (path, why) in &report.unchecked {
            outln!("not checked: {}: {why}", path.display());
        }
    })
}
