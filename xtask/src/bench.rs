//! `cargo xtask bench-report`: runs the benchmarks behind rules F1–F4 (docs/BEHAVIOUR.md) and
//! prints one table of ratios.
//!
//! Here it runs short versions of `loader_hot_path` (F1), `batch_compile`
//! (F2, and the peak memory of a batch), `warm_start` (F3) and `store_scale`
//! (F4), `store_packs` (F10: a packed store's weight and hits) and `shared_store` (P12: processes sharing one store, with the
//! fake compiler here), then prints the table. On a machine without a GPU it also packs the
//! benchmark binaries into `.device/bench/` beside a `run.sh` that runs the
//! full versions there (256 kernels, 16 cores) and prints the same table with
//! the packed xtask (`bench-report --from`), keeping everything in `$OUT`.
//!
//! The table comes from the records the benchmarks append (one JSON line
//! per batch, process or loop: see `kiln_benches::BenchRecord`) and from
//! criterion's own estimates for F1 and F4.

mod batch;
mod bucket;
mod compare;
mod fleet;
mod lookups;
mod run;
mod sample;
mod serving;
mod start;
mod tuning;
mod warm_run;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use run::{pack, run_here};
use sample::Sample;

/// `cargo xtask bench-report [--pack | --from DIR [--criterion DIR]]`: with
/// no argument, runs here, prints the table and packs; `--pack` only packs;
/// `--from` only prints the table of a finished run.
pub fn report(arguments: &[&str]) -> Result<()> {
    match arguments {
        ["--compare", old] => {
            let folder = crate::setup::target_directory().join("kiln-bench");
            let (rows, _) = table_rows(&folder, &folder.join("criterion"))?;
            compare::compare(&rows, Path::new(old)).map(drop)
        }
        ["--from", folder, "--criterion", criterion, "--compare", old] => {
            let (rows, _) = table_rows(Path::new(folder), Path::new(criterion))?;
            compare::compare(&rows, Path::new(old)).map(drop)
        }
        ["--from", folder, "--compare", old] => {
            let (rows, _) = table_rows(Path::new(folder), &criterion_home_in(folder))?;
            compare::compare(&rows, Path::new(old)).map(drop)
        }
        ["--from", folder] => print_table(Path::new(folder), &criterion_home_in(folder)),
        ["--from", folder, "--criterion", criterion] => {
            print_table(Path::new(folder), Path::new(criterion))
        }
        ["--pack"] => pack().map(|folder| println!("packed into {}", folder.display())),
        [] => run_here(),
        _ => bail!(
            "usage: cargo xtask bench-report [--pack | --from DIR [--criterion DIR] | [--from DIR] \
             --compare OLD]"
        ),
    }
}

fn criterion_home_in(folder: &str) -> PathBuf {
    Path::new(folder).join("criterion")
}

/// Prints the table from the records in `folder` and criterion's estimates
/// under `criterion`.
pub(super) fn print_table(folder: &Path, criterion: &Path) -> Result<()> {
    let (rows, cores) = table_rows(folder, criterion)?;
    println!("\n| measure | measured (medians) | ratios | goal |");
    println!("|---|---|---|---|");
    for [measure, measured, ratio, goal] in rows {
        println!("| {measure} | {measured} | {ratio} | {goal} |");
    }
    println!(
        "\n{cores} cores; ideal = max(slowest kernel, summed work / cores) from each batch's own \
         records (S3); sequential = N × the median of one plain cudarc NVRTC compile."
    );
    Ok(())
}

/// The table's rows from the records in `folder` and criterion's
/// estimates under `criterion`, and the cores they ran on.
pub(super) fn table_rows(folder: &Path, criterion: &Path) -> Result<(Vec<[String; 4]>, usize)> {
    let path = folder.join("records.jsonl");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("could not read {}", path.display()))?;
    let samples: Vec<Sample> = text.lines().filter_map(Sample::read).collect();
    let of = |bench: &str, case: &str, size: &str, kernels: Option<usize>| -> Vec<Sample> {
        samples
            .iter()
            .filter(|sample| {
                sample.bench == bench
                    && sample.case == case
                    && (size.is_empty() || sample.size == size)
                    && kernels.is_none_or(|kernels| sample.kernels == kernels)
            })
            .cloned()
            .collect()
    };
    let cores = samples.iter().map(|sample| sample.cores).max().unwrap_or(1);
    let mut rows: Vec<[String; 4]> = Vec::new();
    batch::f2_rows(&samples, &of, cores, &mut rows);
    start::f3_row(&of, &mut rows);
    warm_run::f11_rows(&of, &mut rows);
    warm_run::l11_rows(&of, &mut rows);
    lookups::f1_row(criterion, &mut rows);
    lookups::f4_row(criterion, &mut rows);
    lookups::f10_row(&of, criterion, &mut rows);
    fleet::f6_shared_row(&of, &mut rows);
    fleet::f6_remote_warm_row(&of, &mut rows);
    fleet::f6_distant_row(&of, &mut rows);
    bucket::f6_bucket_rows(&of, &mut rows);
    start::f5_row(&of, &mut rows);
    fleet::p12_rows(&of, &mut rows);
    tuning::f7_row(&of, &mut rows);
    tuning::f8_row(&of, &mut rows);
    tuning::f9_row(&of, &mut rows);
    serving::row(folder, &of, &mut rows);
    batch::memory_rows(&samples, &mut rows);
    Ok((rows, cores))
}

/// The records of a benchmark's case (of a size and count, when given).
type RecordsOf<'a> = dyn Fn(&str, &str, &str, Option<usize>) -> Vec<Sample> + 'a;
