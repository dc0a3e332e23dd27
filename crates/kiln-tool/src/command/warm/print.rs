//! `kiln warm`'s report for people: one table row per backend's batch,
//! then what the table cannot hold (long reasons, failures, spills).

use super::WarmReport;
use crate::backend::BackendReport;
use crate::console::outln;
use crate::format::{count, seconds};
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
        "{}, {} in {}; {store}",
        count(report.files as u64, "file"),
        count(kernels as u64, "kernel"),
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
    table(&report.backends).print();
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

/// The table's columns: with their numbers kept whole, a report fits 80
/// columns once the target's text wraps and the unstored and workers
/// columns (`?`) are left out; `--wide` and a pipe show them all.
const HEADERS: [&str; 11] = [
    "BACKEND",
    "TARGET",
    "KERNELS>",
    "HITS>",
    "REKEYED>",
    "COMPILED>",
    "FAILED>",
    "?UNSTORED>",
    "WALL>",
    "WORK>",
    "?WORKERS>",
];

/// One row per backend's batch: its kernels found in the store (hits),
/// compiled, failed, compiled but not written to the store (unstored), the
/// batch's wall time and the work its workers summed.
fn table(backends: &[BackendReport]) -> Table {
    let mut table = Table::new(&HEADERS);
    for backend in backends {
        if let Some(reason) = &backend.unavailable {
            let mut row = vec![
                backend.backend.to_owned(),
                format!("unavailable: {}", short(reason)),
                backend.kernels.to_string(),
            ];
            row.resize(HEADERS.len(), "-".into());
            table.row(row);
            continue;
        }
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
            seconds(backend.work_seconds),
            backend
                .workers
                .map_or_else(|| "-".to_owned(), |workers| workers.to_string()),
        ]);
    }
    table
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

#[cfg(test)]
mod tests {
    use super::*;

    // The README's first run: the widest targets and numbers a warm of
    // the examples shows.
    fn examples_run() -> Vec<BackendReport> {
        let ran = |backend, target: &str, kernels, wall, work| BackendReport {
            backend,
            target: target.to_owned(),
            kernels,
            compiled: kernels as u64,
            workers: Some(2),
            wall_seconds: wall,
            work_seconds: work,
            ..BackendReport::default()
        };
        vec![
            ran(
                "wgpu",
                "llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan)",
                1047,
                0.191,
                12.5,
            ),
            ran("cuda", "compile-only: sm_90, nvrtc 13.0", 9, 0.228, 0.341),
            BackendReport {
                backend: "hip",
                kernels: 9,
                unavailable: Some(
                    "hipRTC could not be loaded: looked for libhiprtc.so; install ROCm 6 or later"
                        .to_owned(),
                ),
                ..BackendReport::default()
            },
        ]
    }

    #[test]
    fn a_warm_report_fits_100_columns_with_every_header_on_its_line() {
        let text = table(&examples_run()).render_at(Some(100));
        let mut lines = text.lines();
        let header = lines.next().expect("a header line");
        let words: Vec<&str> = header.split_whitespace().collect();
        let expected: Vec<&str> = HEADERS
            .iter()
            .map(|header| header.trim_end_matches('>').trim_start_matches('?'))
            .collect();
        assert_eq!(
            words, expected,
            "every header whole on the first line:\n{text}"
        );
        for line in text.lines() {
            assert!(
                line.chars().count() <= 100,
                "{line:?} is over 100 columns:\n{text}"
            );
        }
        // Every number kept whole on its backend's line.
        let cuda = text
            .lines()
            .find(|line| line.starts_with("cuda"))
            .expect("a cuda row");
        for cell in ["9", "228 ms", "341 ms", "2"] {
            assert!(
                cuda.split("  ").any(|part| part.trim() == cell),
                "{cell} in {cuda:?}"
            );
        }
    }

    #[test]
    fn at_80_columns_a_warm_report_leaves_out_unstored_and_workers_and_keeps_times_whole() {
        let text = table(&examples_run()).render_at(Some(80));
        for line in text.lines() {
            assert!(line.chars().count() <= 80, "{line:?} in\n{text}");
        }
        let header = text.lines().next().expect("a header line");
        assert!(header.contains("WALL") && header.contains("WORK"), "{text}");
        assert!(!header.contains("UNSTORED"), "{text}");
        assert!(text.contains("228 ms") && text.contains("341 ms"), "{text}");
        assert!(text.contains("columns: UNSTORED, WORKERS;"), "{text}");
    }
}
