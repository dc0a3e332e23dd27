//! `kiln warm`'s report for people: one table row per backend's batch,
//! then what the table cannot hold (long reasons, failures, spills).

use super::WarmReport;
use crate::console::outln;
use crate::format::seconds;
use crate::table::Table;

/// Prints `report` as tables and lines.
pub(super) fn report(report: &WarmReport) {
    let kernels: usize = report.backends.iter().map(|backend| backend.kernels).sum();
    let store = match (&report.store, &report.storeless) {
        (Some(root), _) => format!("store {root}"),
        (None, Some(reason)) => format!("no store: {reason}"),
        (None, None) => "no store".to_owned(),
    };
    outln!(
        "{} files, {kernels} kernels in {}; {store}",
        report.files,
        report.folder
    );
    if let Some(remote) = &report.remote {
        outln!(
            "remote tier {}: {} hits, {} written, {} write failures, {} dropped, {} entries \
             that did not verify{}",
            remote.url,
            remote.hits,
            remote.written,
            remote.write_failures,
            remote.dropped,
            remote.unverified,
            if remote.flushed {
                ""
            } else {
                "; some writes were still queued at the end"
            }
        );
    }
    let mut table = Table::new(&[
        "BACKEND",
        "TARGET",
        "KERNELS>",
        "FROM STORE>",
        "REKEYED>",
        "COMPILED>",
        "FAILED>",
        "NOT STORED>",
        "WALL>",
        "SUMMED WORK>",
    ]);
    for backend in &report.backends {
        if let Some(reason) = &backend.unavailable {
            let mut row = vec![
                backend.backend.to_owned(),
                format!("unavailable: {}", short(reason)),
                backend.kernels.to_string(),
            ];
            row.resize(10, "-".into());
            table.row(row);
            continue;
        }
        let work = seconds(backend.work_seconds);
        table.row(vec![
            backend.backend.to_owned(),
            backend.target.clone(),
            backend.kernels.to_string(),
            backend.from_store.to_string(),
            backend.rekeyed.to_string(),
            backend.compiled.to_string(),
            backend.failed.to_string(),
            backend.store_write_failures.to_string(),
            seconds(backend.wall_seconds),
            match backend.workers {
                Some(workers) => {
                    format!(
                        "{work} on {workers} worker{}",
                        if workers == 1 { "" } else { "s" }
                    )
                }
                None => work,
            },
        ]);
    }
    table.print();
    for backend in &report.backends {
        if let Some(reason) = backend
            .unavailable
            .as_ref()
            .filter(|reason| short(reason) != **reason)
        {
            outln!("{} unavailable: {reason}", backend.backend);
        }
        if let Some(cache) = &backend.pipeline_cache {
            outln!("{} pipeline cache: {cache}", backend.backend);
        }
        if backend.backend == "cuda" && backend.unavailable.is_none() {
            if backend.toolkit_headers.is_empty() {
                outln!(
                    "cuda toolkit headers: none found (set KILN_CUDA_INCLUDE to the folder \
                     holding cuda_runtime.h)"
                );
            } else {
                outln!(
                    "cuda toolkit headers: {}",
                    backend.toolkit_headers.join(", ")
                );
            }
        }
        for failure in &backend.failures {
            outln!(
                "{} failed{}: {}: {}",
                backend.backend,
                if failure.remembered {
                    " (remembered from an earlier compile, not compiled again; --retry-failed \
                     compiles it, kiln forget forgets it)"
                } else {
                    ""
                },
                failure.kernel,
                failure.first_diagnostic
            );
        }
        for spill in &backend.spilling {
            outln!(
                "{} spills: {}: {}{}",
                backend.backend,
                spill.kernel,
                spill.spills,
                spill
                    .registers
                    .map_or_else(String::new, |registers| format!(" ({registers} registers)"))
            );
        }
    }
    for file in &report.failed_files {
        outln!("failed: {}: {}", file.file, file.reason);
    }
    for file in &report.skipped {
        outln!("skipped: {}: {}", file.file, file.reason);
    }
}

/// The start of a long reason, for a table cell: up to where it starts
/// listing what was tried.
pub(super) fn short(reason: &str) -> String {
    let cut = [": looked for", ";"]
        .iter()
        .filter_map(|marker| reason.find(marker))
        .min()
        .unwrap_or(reason.len());
    let mut text: String = reason[..cut].chars().take(72).collect();
    if text.len() < reason.len() {
        text.push_str(" (below)");
    }
    text
}
