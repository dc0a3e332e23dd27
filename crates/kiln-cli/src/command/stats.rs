//! `kiln stats`: what the store holds against its limits.

use anyhow::Result;
use clap::Args;
use kiln_store::DiskStore;
use serde::Serialize;

use super::Output;
use crate::format;
use crate::table::print_pairs;

/// `kiln stats` takes no arguments.
#[derive(Debug, Args)]
pub struct Arguments {}

#[derive(Debug, Serialize)]
struct Stats {
    root: String,
    bytes: u64,
    entries: u64,
    max_bytes: u64,
    max_entries: u64,
    compilers: Vec<kiln_core::KeyComponents>,
}

/// Prints the usage counters, the limits and the compilers seen.
pub fn run(store: &DiskStore, _arguments: &Arguments, output: &Output) -> Result<()> {
    let usage = store.usage();
    let config = store.config();
    let stats = Stats {
        root: store.root().display().to_string(),
        bytes: usage.bytes,
        entries: usage.entries,
        max_bytes: config.max_bytes,
        max_entries: config.max_entries,
        compilers: store.targets(),
    };
    output.print(&stats, || {
        let percent = |used: u64, limit: u64| {
            if limit == 0 {
                String::new()
            } else {
                format!(" ({:.1} %)", used as f64 * 100.0 / limit as f64)
            }
        };
        let mut pairs = vec![
            ("root", stats.root.clone()),
            (
                "size",
                format!(
                    "{} of {}{}",
                    format::bytes(stats.bytes),
                    format::bytes(stats.max_bytes),
                    percent(stats.bytes, stats.max_bytes)
                ),
            ),
            (
                "entries",
                format!(
                    "{} of {}{}",
                    stats.entries,
                    stats.max_entries,
                    percent(stats.entries, stats.max_entries)
                ),
            ),
        ];
        if stats.compilers.is_empty() {
            pairs.push(("compilers", "none yet".into()));
        }
        for compiler in &stats.compilers {
            pairs.push(("compiler", compiler.to_string()));
        }
        print_pairs(&pairs);
    })
}
