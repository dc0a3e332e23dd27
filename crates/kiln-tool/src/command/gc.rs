//! `kiln gc`: evict least recently used entries down to the limits.

use anyhow::Result;
use clap::Args;
use kiln_store::{DiskStore, Limits};

use crate::console::outln;
use crate::format;
use crate::output::Output;
use crate::progress::ProgressBar;
use crate::table::print_pairs;

/// `kiln gc` options.
#[derive(Debug, Args)]
pub struct Arguments {
    /// The size to bring the store under (`512M`, `10G`, `1.5GiB`);
    /// default: the store's limit, 10 GiB.
    #[arg(long, value_name = "SIZE", env = "KILN_CACHE_MAX_SIZE", hide_env_values = true, value_parser = format::parse_size)]
    pub max_size: Option<u64>,
    /// The number of entries to bring the store under; default: the
    /// store's limit, 1,000,000.
    #[arg(long, value_name = "N", env = "KILN_CACHE_MAX_ENTRIES", hide_env_values = true, value_parser = format::parse_count)]
    pub max_entries: Option<u64>,
}

/// Collects, streaming.
pub fn run(store: &DiskStore, arguments: &Arguments, output: &Output) -> Result<()> {
    let mut limits = Limits::of(store.config());
    if let Some(bytes) = arguments.max_size {
        limits.max_bytes = bytes;
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
