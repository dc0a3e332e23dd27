//! `kiln records`: the last batches of every process that used the store,
//! read after the fact: when each ran, for which backend, on how many
//! workers of which kind, what its kernels came to, and the slowest of them.

use anyhow::Result;
use clap::Args;
use kiln_engine::{KernelOutcome, StoredBatch, WorkerMode};
use kiln_store::DiskStore;
use serde::Serialize;

use crate::console::outln;
use crate::format;
use crate::output::Output;
use crate::table::Table;

/// `kiln records` options.
#[derive(Debug, Args)]
pub struct Arguments {
    /// How many of the newest batches to show.
    #[arg(long, default_value_t = 10)]
    pub last: usize,
    /// How many of each batch's costliest kernels to name.
    #[arg(long, default_value_t = 3)]
    pub slowest: usize,
}

/// One batch, as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct BatchShape {
    /// The process that ran it.
    pub process: u32,
    /// When it ended, in seconds since the Unix epoch.
    pub finished: u64,
    /// `cuda`, `hip`, `wgpu`.
    pub backend: String,
    /// The compiler and its version.
    pub compiler: String,
    /// The architecture compiled for, or `per variant`.
    pub architecture: String,
    /// Its kernels, counted whole.
    pub kernels: usize,
    /// How many worked at once.
    pub workers: usize,
    /// `threads` or `processes`.
    pub mode: &'static str,
    /// From its start to its last load.
    pub wall_seconds: f64,
    /// Its kernels' work (lower + finalize), added up: what one worker
    /// would have taken; what `kiln warm` shows as its summed work.
    pub work_seconds: f64,
    /// Kernels found in the store by their id.
    pub from_store: usize,
    /// Of those, the kernels a warm-start profile loaded before the
    /// program asked for them: the record of a profile's load.
    pub profile_hits: usize,
    /// Kernels that took another's artifact by identical text.
    pub rekeyed: usize,
    /// Kernels compiled.
    pub compiled: usize,
    /// Kernels that failed, remembered failures among them.
    pub failed: usize,
    /// Failures reported from the store's memory, without compiling.
    pub remembered: usize,
    /// Artifacts the device refused.
    pub refused: usize,
    /// Kernel records the store left out to keep the record small (the
    /// cheapest); the counts above leave them out too.
    pub omitted: usize,
    /// Whether it was a background batch, which no caller waited on.
    pub background: bool,
    /// The process's loads served by a fallback, as the batch ended.
    pub fallback_loads: u64,
    /// The process's compiles a caller waited on, as the batch ended.
    pub request_path_compiles: u64,
    /// The seconds callers waited on them.
    pub request_path_seconds: f64,
    /// Kernels waiting for or in a background batch as it ended.
    pub compiling_now: u64,
    /// The costliest kernels, costliest first.
    pub slowest: Vec<KernelShape>,
}

/// A kernel of a batch, as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct KernelShape {
    /// The kernel's name.
    pub kernel: String,
    /// Its id's digest, 32 hex digits.
    pub digest: String,
    /// `from_store`, `rekeyed`, `compiled`, `failed` or `refused`.
    pub outcome: &'static str,
    /// Lower and finalize time spent on it.
    pub work_seconds: f64,
    /// Its failure, cut short, for a failed or refused kernel.
    pub error: Option<String>,
}

fn outcome_name(outcome: KernelOutcome) -> &'static str {
    match outcome {
        KernelOutcome::FromStore => "from_store",
        KernelOutcome::Rekeyed => "rekeyed",
        KernelOutcome::Compiled => "compiled",
        KernelOutcome::Failed => "failed",
        KernelOutcome::Refused => "refused",
    }
}

fn shape(stored: &StoredBatch, slowest: usize) -> BatchShape {
    let batch = &stored.batch;
    let mut costliest: Vec<_> = batch.records.iter().collect();
    costliest.sort_by_key(|record| std::cmp::Reverse(record.work));
    BatchShape {
        process: stored.process,
        finished: stored.finished,
        backend: stored.backend.clone(),
        compiler: stored.compiler.clone(),
        architecture: stored.architecture.clone(),
        kernels: batch.kernels,
        workers: batch.workers,
        mode: match batch.mode {
            WorkerMode::Threads => "threads",
            WorkerMode::Processes => "processes",
        },
        wall_seconds: batch.wall.as_secs_f64(),
        work_seconds: batch.summed_work().as_secs_f64(),
        from_store: batch.count(KernelOutcome::FromStore),
        profile_hits: batch.profile_hits,
        rekeyed: batch.count(KernelOutcome::Rekeyed),
        compiled: batch.count(KernelOutcome::Compiled),
        failed: batch.count(KernelOutcome::Failed),
        remembered: batch
            .records
            .iter()
            .filter(|record| record.remembered)
            .count(),
        refused: batch.count(KernelOutcome::Refused),
        omitted: stored.omitted,
        background: batch.background,
        fallback_loads: batch.health.fallback_loads,
        request_path_compiles: batch.health.request_path_compiles,
        request_path_seconds: batch.health.request_path_seconds,
        compiling_now: batch.health.compiling_now,
        slowest: costliest
            .into_iter()
            .take(slowest)
            .map(|record| KernelShape {
                kernel: record.kernel.name().to_owned(),
                digest: record.kernel.digest_hex(),
                outcome: outcome_name(record.outcome),
                work_seconds: record.work.as_secs_f64(),
                error: record.error.clone(),
            })
            .collect(),
    }
}

/// Prints the newest batches, oldest of them first: a JSON array with
/// `--json`, else a table and each batch's slowest kernels.
pub fn run(store: &DiskStore, arguments: &Arguments, output: &Output) -> Result<()> {
    let kept = store.kept_batches();
    let shown: Vec<BatchShape> = kept[kept.len().saturating_sub(arguments.last)..]
        .iter()
        .map(|stored| shape(stored, arguments.slowest))
        .collect();
    output.print(&shown, || {
        if shown.is_empty() {
            outln!("no batch records: no process has compiled with this store yet");
            return;
        }
        // Oldest first, as they ran: a record is a moment of a timeline.
        let mut table = Table::new(&[
            "ENDED>",
            "PID>",
            "BACKEND",
            "KERNELS>",
            "COMPILED>",
            "?REKEYED>",
            "STORE>",
            "?PROFILE>",
            "FAILED>",
            "?WORKERS",
            "WALL>",
            "WORK>",
        ]);
        for batch in &shown {
            table.row(vec![
                format::ago(batch.finished),
                batch.process.to_string(),
                format!("{} {}", batch.backend, batch.architecture),
                batch.kernels.to_string(),
                // A kernel found by its text compiled nothing (L5c).
                batch.compiled.to_string(),
                batch.rekeyed.to_string(),
                batch.from_store.to_string(),
                batch.profile_hits.to_string(),
                batch.failed.to_string(),
                match (batch.workers, batch.mode) {
                    (1, "threads") => "1 thread".to_owned(),
                    (1, "processes") => "1 process".to_owned(),
                    (workers, mode) => format!("{workers} {mode}"),
                } + if batch.background { ", background" } else { "" }
                    + if batch.profile_hits > 0 {
                        ", profile"
                    } else {
                        ""
                    },
                format::seconds(batch.wall_seconds),
                format::seconds(batch.work_seconds),
            ]);
        }
        outln!("{}", table.render().trim_end());
        crate::table::print_labelled(
            "request path:",
            &crate::health::HealthReport::of(&kept).line(),
        );
        for batch in shown.iter().filter(|batch| !batch.slowest.is_empty()) {
            outln!(
                "\nslowest of pid {} ({} {}, {}):",
                batch.process,
                batch.backend,
                batch.architecture,
                format::ago(batch.finished)
            );
            for kernel in &batch.slowest {
                outln!(
                    "  {:>9}  {:<10}  {}{}",
                    format::seconds(kernel.work_seconds),
                    kernel.outcome,
                    kernel.kernel,
                    kernel
                        .error
                        .as_deref()
                        .and_then(|error| error.lines().next())
                        .map(|line| format!(": {line}"))
                        .unwrap_or_default()
                );
            }
            if batch.omitted > 0 {
                outln!("  ({} cheaper kernels not kept)", batch.omitted);
            }
        }
    })
}
