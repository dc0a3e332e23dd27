//! `kiln verify`: re-digest everything, remove what is bad, report.

use anyhow::Result;
use clap::Args;
use kiln_store::DiskStore;

use super::Output;
use crate::console::outln;
use crate::format;
use crate::progress::ProgressBar;
use crate::table::print_pairs;

/// `kiln verify` takes no arguments.
#[derive(Debug, Args)]
pub struct Arguments {}

/// Verifies the whole store, streaming.
pub fn run(store: &DiskStore, _arguments: &Arguments, output: &Output) -> Result<()> {
    let mut bar = ProgressBar::new("verify");
    let report = store.verify(&mut |progress| bar.update(progress))?;
    drop(bar);
    output.print(&report, || {
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
    })
}
