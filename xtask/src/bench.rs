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

mod compare;
mod run;
mod sample;
mod serving;
mod warm_run;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use run::{pack, run_here};
use sample::{Sample, criterion_median, mebibytes, median, time};

/// Loads per iteration of `loader_hot_path`, lookups per iteration of
/// `store_scale`: their criterion figures are per 16.
const PER_ITERATION: f64 = 16.0;

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

    // F2: every size and count that ran, processes against threads and the
    // plain loop.
    let mut batches: BTreeMap<(usize, String), ()> = BTreeMap::new();
    for sample in &samples {
        if sample.bench == "batch_compile"
            && ["threads", "processes", "memory_processes"].contains(&sample.case.as_str())
        {
            batches.insert((size_rank(&sample.size), sample.size.clone()), ());
        }
    }
    for (_, size) in batches.keys() {
        let per_kernel = median(
            of("batch_compile", "sequential_per_kernel", size, Some(1))
                .iter()
                .map(|sample| sample.wall)
                .collect(),
        );
        let mut counts: Vec<usize> = samples
            .iter()
            .filter(|sample| sample.bench == "batch_compile" && sample.size == *size)
            .filter(|sample| sample.kernels > 1)
            .map(|sample| sample.kernels)
            .collect();
        counts.sort_unstable();
        counts.dedup();
        for count in counts {
            let mut processes = of("batch_compile", "processes", size, Some(count));
            let mut note = String::new();
            if processes.is_empty() {
                processes = of("batch_compile", "memory_processes", size, Some(count));
                note = " (one batch)".to_owned();
            }
            let threads = of("batch_compile", "threads", size, Some(count));
            let cold = of("batch_compile", "processes_cold", size, Some(count));
            let wall = |batch: &[Sample]| median(batch.iter().map(|sample| sample.wall).collect());
            let (processes_wall, threads_wall) = (wall(&processes), wall(&threads));
            let sequential = per_kernel.map(|per_kernel| per_kernel * count as f64);
            let mut measured = Vec::new();
            let mut ratios = Vec::new();
            if let Some(wall) = processes_wall {
                let workers = processes.first().map_or(0, |sample| sample.workers);
                measured.push(format!("processes ×{workers} {}{note}", time(wall)));
                let ideal = median(processes.iter().map(Sample::ideal).collect()).unwrap_or(0.0);
                let ratio = median(
                    processes
                        .iter()
                        .map(|sample| sample.wall / sample.ideal())
                        .collect(),
                )
                .unwrap_or(0.0);
                measured.push(format!("ideal {}", time(ideal)));
                ratios.push(format!("wall/ideal **{ratio:.2}**"));
                if let Some(per_kernel) = per_kernel {
                    let ideal = per_kernel.max(per_kernel * count as f64 / cores as f64);
                    ratios.push(format!("wall/ideal of sequential work {:.2}", wall / ideal));
                }
            }
            // The tail: the last worker's finish less the one before it.
            let tail = median(
                processes
                    .iter()
                    .filter_map(|sample| {
                        sample
                            .note
                            .split_whitespace()
                            .find_map(|pair| pair.strip_prefix("tail="))
                            .and_then(|seconds| seconds.parse().ok())
                    })
                    .collect(),
            );
            if let (Some(tail), Some(wall)) = (tail, processes_wall) {
                measured.push(format!("tail {}", time(tail)));
                ratios.push(format!("tail/wall {:.2}", tail / wall));
            }
            if let Some(wall) = threads_wall {
                let workers = threads.first().map_or(0, |sample| sample.workers);
                measured.push(format!("threads ×{workers} {}", time(wall)));
            }
            if let Some(sequential) = sequential {
                measured.push(format!("sequential {}", time(sequential)));
            }
            if let Some(cold) = wall(&cold) {
                measured.push(format!("processes, cold pool {}", time(cold)));
            }
            if let (Some(processes), Some(sequential)) = (processes_wall, sequential) {
                ratios.push(format!("×{:.1} vs sequential", sequential / processes));
            }
            if let (Some(processes), Some(threads)) = (processes_wall, threads_wall) {
                ratios.push(format!("×{:.2} vs threads", threads / processes));
            }
            rows.push([
                format!("F2 batch_compile {size} ×{count}"),
                measured.join("; "),
                ratios.join("; "),
                "wall ≤ 1.10 × ideal".to_owned(),
            ]);
        }
    }

    // F3: a fresh process loading from the store, against the floor and
    // against compiling.
    let fresh = of("warm_start", "fresh_process", "", None);
    let floor = of("warm_start", "read_verify_load", "", None);
    let compile = of("warm_start", "compile", "", None);
    if let (Some(kernels), Some(fresh_wall), Some(floor_wall)) = (
        fresh.first().map(|sample| sample.kernels),
        median(fresh.iter().map(|sample| sample.wall).collect()),
        median(floor.iter().map(|sample| sample.wall).collect()),
    ) {
        let warm = fresh_wall / kernels as f64;
        let floor = floor_wall / kernels as f64;
        let mut ratios = vec![format!(
            "warm / (read + verify + load) **{:.2}**",
            warm / floor
        )];
        let mut measured = vec![
            format!(
                "warm {} per kernel ({kernels} kernels, {})",
                time(warm),
                fresh[0].note
            ),
            format!("read + verify + load {}", time(floor)),
        ];
        if let Some(compile) = median(compile.iter().map(|sample| sample.wall).collect()) {
            let compile = compile / kernels as f64;
            measured.push(format!("compile {} per kernel (processes)", time(compile)));
            ratios.push(format!("×{:.0} faster than compiling", compile / warm));
        }
        if let Some(per_kernel) = median(
            of("batch_compile", "sequential_per_kernel", "gemm", Some(1))
                .iter()
                .map(|sample| sample.wall)
                .collect(),
        ) {
            ratios.push(format!(
                "×{:.0} vs one sequential compile",
                per_kernel / warm
            ));
        }
        rows.push([
            "F3 warm_start gemm".to_owned(),
            measured.join("; "),
            ratios.join("; "),
            "≤ 1.5× floor; ≥ 50× faster".to_owned(),
        ]);
    }

    // F11 and L11: whole starts, against their floor and against the
    // program's own second run.
    warm_run::f11_rows(&of, &mut rows);
    warm_run::l11_rows(&of, &mut rows);

    // F1: a launch of a loaded kernel.
    let hot: Vec<(String, f64)> = ["10", "1000", "100000"]
        .iter()
        .filter_map(|held| {
            criterion_median(criterion, "loader_hot_path", held)
                .map(|seconds| ((*held).to_owned(), seconds / PER_ITERATION))
        })
        .collect();
    if let (Some(first), Some(last)) = (hot.first(), hot.last()) {
        rows.push([
            "F1 loader_hot_path".to_owned(),
            hot.iter()
                .map(|(held, seconds)| format!("{held} held: {:.1} ns", seconds * 1e9))
                .collect::<Vec<_>>()
                .join("; "),
            format!("{} / {} held: {:.2}", last.0, first.0, last.1 / first.1),
            "tens of ns, flat".to_owned(),
        ]);
    }

    // F4: a store lookup as the store grows.
    let scale: Vec<(String, f64)> = ["10", "10000", "100000"]
        .iter()
        .filter_map(|entries| {
            criterion_median(criterion, "store_scale", entries)
                .map(|seconds| ((*entries).to_owned(), seconds / PER_ITERATION))
        })
        .collect();
    if let (Some(first), Some(last)) = (scale.first(), scale.last()) {
        rows.push([
            "F4 store_scale".to_owned(),
            scale
                .iter()
                .map(|(entries, seconds)| format!("{entries} entries: {}", time(*seconds)))
                .collect::<Vec<_>>()
                .join("; "),
            format!("{} / {} entries: {:.2}", last.0, first.0, last.1 / first.1),
            "flat".to_owned(),
        ]);
    }

    // F10: what a store of packed entries weighs, and its hits.
    let weights = of("store_packs", "weight", "", None);
    if !weights.is_empty() {
        let field = |note: &str, name: &str| -> Option<f64> {
            note.split_whitespace()
                .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
                .and_then(|value| value.parse().ok())
        };
        let mut measured = Vec::new();
        let mut ratios = Vec::new();
        for sample in &weights {
            let (Some(files), Some(allocated), Some(counted)) = (
                field(&sample.note, "files"),
                field(&sample.note, "allocated"),
                field(&sample.note, "counted"),
            ) else {
                continue;
            };
            let bound = 1.1 * (512.0 + sample.kernels as f64 / 1000.0);
            measured.push(format!("{} entries: {files} files", sample.size));
            ratios.push(format!(
                "{}: files / bound {:.2}, allocated / counted {:.2}",
                sample.size,
                files / bound,
                allocated / counted
            ));
        }
        let hits: Vec<(String, f64)> = weights
            .iter()
            .filter_map(|sample| {
                criterion_median(criterion, "store_packs", &sample.size)
                    .map(|seconds| (sample.size.clone(), seconds / PER_ITERATION))
            })
            .collect();
        if let (Some(first), Some(last)) = (hits.first(), hits.last()) {
            measured.extend(
                hits.iter()
                    .map(|(entries, seconds)| format!("hit at {entries}: {}", time(*seconds))),
            );
            ratios.push(format!(
                "hit {} / {} entries: {:.2}",
                last.0,
                first.0,
                last.1 / first.1
            ));
        }
        rows.push([
            "F10 store_packs".to_owned(),
            measured.join("; "),
            ratios.join("; "),
            "at 1,000,000 entries (KILN_BENCH_PACKS): files ≤ 1.1 × (shards + entries / 1000), \
             allocated ≤ 1.3 × counted; hits flat"
                .to_owned(),
        ]);
    }

    // F6: nodes sharing one Redis against nodes alone.
    let runs = |case: &str| of("fleet", &format!("{case}_run"), "", None);
    let (shared, alone) = (runs("remote"), runs("alone"));
    if let Some(shared_wall) = median(shared.iter().map(|sample| sample.wall).collect()) {
        let nodes = shared
            .first()
            .map_or(String::new(), |sample| sample.size.clone());
        let kernels = shared.first().map_or(0, |sample| sample.kernels);
        let ideal = median(shared.iter().map(|sample| sample.slowest).collect()).unwrap_or(0.0);
        let compiles: std::collections::BTreeSet<String> = shared
            .iter()
            .map(|sample| sample.compiled.unwrap_or(0).to_string())
            .collect();
        let mut measured = vec![
            format!("shared {}", time(shared_wall)),
            format!("Σwork / all workers {}", time(ideal)),
            format!(
                "compiles over all nodes {}",
                compiles.into_iter().collect::<Vec<_>>().join("/")
            ),
        ];
        let mut ratios = vec![format!("shared / ideal **{:.2}**", shared_wall / ideal)];
        if let Some(alone_wall) = median(alone.iter().map(|sample| sample.wall).collect()) {
            measured.push(format!("alone {}", time(alone_wall)));
            ratios.push(format!(
                "×{:.1} faster than alone",
                alone_wall / shared_wall
            ));
        }
        rows.push([
            format!("F6 fleet fake ×{kernels}, {nodes} nodes"),
            measured.join("; "),
            ratios.join("; "),
            "compiles = kernels; shared ≤ 1.3 × ideal".to_owned(),
        ]);
    }

    // F6's remote warm start: a fresh process with an empty disk store
    // loading the batch from Redis, against one loading it from its own
    // disk store, each timed from its loader's creation until every kernel
    // is loaded; the remote hits' durable write-back comes after (its
    // flush time is in each remote sample's note).
    let warm = |case: &str| {
        median(
            of("fleet", case, "", None)
                .iter()
                .map(|sample| sample.wall)
                .collect(),
        )
    };
    if let (Some(remote), Some(local)) = (warm("remote_warm"), warm("local_warm")) {
        let trip = warm("round_trip").unwrap_or(0.0);
        let samples = of("fleet", "remote_warm", "", None);
        let kernels = samples.first().map_or(0, |sample| sample.kernels);
        let flushed = median(
            samples
                .iter()
                .filter_map(|sample| note_number(&sample.note, "ms after"))
                .collect(),
        );
        let mut measured = vec![format!(
            "from Redis {}; from the disk {}; round trip {}",
            time(remote),
            time(local),
            time(trip)
        )];
        if let Some(flushed) = flushed {
            measured.push(format!(
                "remote hits durable on disk {} after",
                time(flushed / 1e3)
            ));
        }
        rows.push([
            format!("F6 remote warm start ×{kernels}"),
            measured.join("; "),
            format!(
                "remote / (2 × local + a round trip) **{:.2}**",
                remote / (2.0 * local + trip)
            ),
            "≤ 1".to_owned(),
        ]);
    }

    // F6 at a distance: a cold node with its remote 0, 100 and 400 ms
    // away, against the same node with none, each a median of the runs;
    // the round trips it took, and the ratio to (no remote + k round
    // trips), k the batch steps that must talk to the remote (the bench
    // says which, in each sample's note).
    let alone = median(
        of("fleet", "cold_alone", "", None)
            .iter()
            .map(|sample| sample.wall)
            .collect(),
    );
    let distant: Vec<(u64, f64, Option<f64>, Option<f64>)> = [0u64, 100, 400]
        .into_iter()
        .filter_map(|rtt| {
            let samples = of("fleet", "cold_rtt", &rtt.to_string(), None);
            let wall = median(samples.iter().map(|sample| sample.wall).collect())?;
            let trips = median(
                samples
                    .iter()
                    .filter_map(|sample| note_number(&sample.note, "round trips"))
                    .collect(),
            );
            let steps = samples
                .iter()
                .find_map(|sample| note_number(&sample.note, "steps talk"));
            Some((rtt, wall, trips, steps))
        })
        .collect();
    if let (Some(alone), false) = (alone, distant.is_empty()) {
        let runs = of("fleet", "cold_alone", "", None);
        let kernels = runs.first().map_or(0, |sample| sample.kernels);
        let mut measured = vec![format!("no remote {}", time(alone))];
        let mut ratios = Vec::new();
        for (rtt, wall, trips, steps) in &distant {
            let trips = trips.map_or(String::new(), |trips| format!(" ({trips:.0} round trips)"));
            measured.push(format!("{rtt} ms away {}{trips}", time(*wall)));
            if *rtt > 0 {
                let steps = steps.unwrap_or(4.0);
                let few = steps * *rtt as f64 / 1000.0;
                ratios.push(format!(
                    "{rtt} ms: / (no remote + {steps:.0} round trips) **{:.2}**",
                    wall / (alone + few)
                ));
            }
        }
        rows.push([
            format!(
                "F6 fleet cold ×{kernels}, a remote far away (medians of {} runs)",
                runs.len()
            ),
            measured.join("; "),
            ratios.join("; "),
            "≤ 1.2 × (no remote + k round trips), k the batch steps that talk to the remote"
                .to_owned(),
        ]);
    }

    // F5: a fresh process's first batch against a warm pool's.
    let cold = of("cold_start", "cold_start", "", None);
    let warm = of("cold_start", "warm_pool", "", None);
    let ratio = |batch: &[Sample]| {
        median(
            batch
                .iter()
                .map(|sample| sample.wall / sample.ideal())
                .collect(),
        )
    };
    if let (Some(cold_ratio), Some(cold_wall)) = (
        ratio(&cold),
        median(cold.iter().map(|sample| sample.wall).collect()),
    ) {
        let kernels = cold.first().map_or(0, |sample| sample.kernels);
        let mut measured = vec![format!("cold {}", time(cold_wall))];
        let mut ratios = vec![format!("cold wall/ideal **{cold_ratio:.2}**")];
        if let (Some(warm_ratio), Some(warm_wall)) = (
            ratio(&warm),
            median(warm.iter().map(|sample| sample.wall).collect()),
        ) {
            measured.push(format!("warm pool {}", time(warm_wall)));
            ratios.push(format!("warm pool wall/ideal {warm_ratio:.2}"));
            ratios.push(format!("cold / warm {:.2}", cold_wall / warm_wall));
        }
        let spread: Vec<String> = cold
            .iter()
            .map(|sample| format!("{:.2}", sample.wall / sample.ideal()))
            .collect();
        measured.push(format!("cold ratios {}", spread.join(" ")));
        rows.push([
            format!(
                "F5 cold_start gemm ×{kernels} ({})",
                cold.first().map_or("", |sample| sample.note.as_str())
            ),
            measured.join("; "),
            ratios.join("; "),
            "cold ≤ 1.15 × ideal".to_owned(),
        ]);
    }

    // P12: 1, 2 and 4 processes sharing one store, each run's slowest
    // process against one process's wall split N ways.
    for case in ["fake", "cuda"] {
        let run = |processes: &str| of("shared_store", &format!("{case}_run"), processes, None);
        let alone = run("1");
        let Some(alone_wall) = median(alone.iter().map(|sample| sample.wall).collect()) else {
            continue;
        };
        let kernels = alone.first().map_or(0, |sample| sample.kernels);
        // One compile: the fake compiler's fixed time, or one process's
        // mean work per kernel.
        let one_compile = median(alone.iter().map(|sample| sample.slowest).collect())
            .filter(|seconds| *seconds > 0.0)
            .or_else(|| {
                median(
                    of("shared_store", case, "1", None)
                        .iter()
                        .map(|sample| sample.summed_work / sample.kernels.max(1) as f64)
                        .collect(),
                )
            })
            .unwrap_or(0.0);
        let mut measured = Vec::new();
        let mut ratios = Vec::new();
        let mut compiles = Vec::new();
        for processes in ["1", "2", "4"] {
            let runs = run(processes);
            let Some(wall) = median(runs.iter().map(|sample| sample.wall).collect()) else {
                continue;
            };
            let count: f64 = processes.parse().unwrap_or(1.0);
            measured.push(format!("{processes}: {}", time(wall)));
            if count > 1.0 {
                let goal = 1.25 * alone_wall / count + one_compile;
                ratios.push(format!(
                    "{processes}: ×{:.2} of one/N, **{:.2}** of the goal",
                    wall / (alone_wall / count),
                    wall / goal
                ));
            }
            let compiled: Vec<String> = runs
                .iter()
                .map(|sample| sample.compiled.unwrap_or(0).to_string())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            compiles.push(format!("{processes}: {}", compiled.join("/")));
        }
        measured.push(format!(
            "compiles ({kernels} kernels) {}",
            compiles.join(", ")
        ));
        rows.push([
            format!(
                "P12 shared_store {case} {}×{kernels}",
                of("shared_store", case, "1", None)
                    .first()
                    .map(|sample| sample.note.clone())
                    .filter(|note| !note.is_empty())
                    .map(|note| format!("{note} "))
                    .unwrap_or_default()
            ),
            measured.join("; "),
            ratios.join("; "),
            "≤ 1 of 1.25 × one/N + a compile; compiles = kernels".to_owned(),
        ]);
    }

    tuning_rows(&of, &mut rows);
    device_step_row(&of, &mut rows);
    serving::row(folder, &mut rows);

    // Peak memory of a batch of heavy kernels.
    for sample in samples
        .iter()
        .filter(|sample| sample.bench == "compile_memory")
    {
        let workers = &sample.worker_peaks;
        let measured = match sample.host_peak {
            Some(host) if workers.is_empty() => format!("host {}", mebibytes(host)),
            Some(host) => format!(
                "host {}; {} workers, each {}–{}",
                mebibytes(host),
                workers.len(),
                mebibytes(workers.iter().copied().fold(f64::MAX, f64::min)),
                mebibytes(workers.iter().copied().fold(0.0, f64::max)),
            ),
            None => "not measured".to_owned(),
        };
        rows.push([
            format!(
                "peak memory {} ×{} ({})",
                sample.size, sample.kernels, sample.case
            ),
            measured,
            format!(
                "all processes {}",
                mebibytes(sample.host_peak.unwrap_or(0.0) + workers.iter().sum::<f64>())
            ),
            "reported".to_owned(),
        ]);
    }

    Ok((rows, cores))
}

/// The records of a benchmark's case (of a size and count, when given).
type RecordsOf<'a> = dyn Fn(&str, &str, &str, Option<usize>) -> Vec<Sample> + 'a;

/// F7 and F8 from the `tuning` benchmark's records: a tune cold, the
/// sequential loop and a tune warm; first launches with and without a
/// profile against a hot load.
fn tuning_rows(of: &RecordsOf<'_>, rows: &mut Vec<[String; 4]>) {
    let wall = |case: &str| {
        let samples = of("tuning", case, "", None);
        let kernels = samples.first().map_or(0, |sample| sample.kernels);
        let note = samples
            .first()
            .map(|sample| sample.note.clone())
            .unwrap_or_default();
        median(samples.iter().map(|sample| sample.wall).collect()).map(|wall| (wall, kernels, note))
    };
    if let (Some((cold, kernels, note)), Some((warm, _, _))) =
        (wall("tune_cold"), wall("tune_warm"))
    {
        let mut measured = vec![
            format!("cold {}", time(cold)),
            format!("warm {}", time(warm)),
        ];
        let mut ratios = vec![format!("cold / warm **{:.0}**", cold / warm)];
        if let Some((sequential, _, _)) = wall("sequential_cold") {
            measured.push(format!("sequential loop {}", time(sequential)));
            ratios.push(format!("sequential / cold {:.2}", sequential / cold));
        }
        rows.push([
            format!("F7 tuning ×{kernels} ({note})"),
            measured.join("; "),
            ratios.join("; "),
            "warm ≥ 100× faster than cold".to_owned(),
        ]);
    }
    let per_kernel = |case: &str| {
        wall(case).map(|(wall, kernels, note)| (wall / kernels.max(1) as f64, kernels, note))
    };
    if let (Some((profiled, kernels, note)), Some((hot, _, _))) =
        (per_kernel("first_launch_profiled"), per_kernel("hot_load"))
    {
        let mut measured = vec![
            format!("first launch, profiled {}", time(profiled)),
            format!("hot {}", time(hot)),
        ];
        let mut ratios = vec![format!("profiled / hot **{:.2}**", profiled / hot)];
        if let Some((batched, _, _)) = per_kernel("first_launch_batched") {
            measured.push(format!("first launch after a batch {}", time(batched)));
            ratios.push(format!("after a batch / hot {:.2}", batched / hot));
        }
        if let Some((unprofiled, _, _)) = per_kernel("first_launch_unprofiled") {
            measured.push(format!("without profile {}", time(unprofiled)));
            ratios.push(format!("without / with {:.0}", unprofiled / profiled));
        }
        if let Some((batch, _, _)) = wall("profile_batch") {
            measured.push(format!("background batch {}", time(batch)));
        }
        rows.push([
            format!("F8 profiled first launches ×{kernels} ({note})"),
            measured.join("; "),
            ratios.join("; "),
            "profiled ≤ 1.2 × hot".to_owned(),
        ]);
    }
}

fn size_rank(size: &str) -> usize {
    ["tiny", "gemm", "heavy"]
        .iter()
        .position(|known| *known == size)
        .unwrap_or(3)
}

/// F9 from the `device_step` benchmark's records: a cold wgpu batch with
/// its pipelines made on the workers, against its summed naga + pipeline
/// work over the workers and against the batch whose pipelines the loader's
/// thread made one after the other.
fn device_step_row(of: &RecordsOf<'_>, rows: &mut Vec<[String; 4]>) {
    let parallel = of("device_step", "workers", "", None);
    let Some(wall) = median(parallel.iter().map(|sample| sample.wall).collect()) else {
        return;
    };
    let kernels = parallel.first().map_or(0, |sample| sample.kernels);
    let workers = parallel.first().map_or(1, |sample| sample.workers.max(1));
    let ideal = median(
        parallel
            .iter()
            .map(|sample| sample.summed_work / sample.workers.max(1) as f64)
            .collect(),
    )
    .unwrap_or(0.0);
    let ratio = median(
        parallel
            .iter()
            .map(|sample| sample.wall / (sample.summed_work / sample.workers.max(1) as f64))
            .collect(),
    )
    .unwrap_or(0.0);
    let mut measured = vec![
        format!("{kernels} pipelines on {workers} workers {}", time(wall)),
        format!("summed work / workers {}", time(ideal)),
    ];
    let mut ratios = vec![format!("wall / (summed / workers) **{ratio:.2}**")];
    let serial = of("device_step", "loader_thread", "", None);
    if let Some(serial) = median(serial.iter().map(|sample| sample.wall).collect()) {
        measured.push(format!("on the loader's thread {}", time(serial)));
        ratios.push(format!("**×{:.2}** vs the loader's thread", serial / wall));
    }
    rows.push([
        "F9 device_step (wgpu, cold)".to_owned(),
        measured.join("; "),
        ratios.join("; "),
        "≤ 1.2 × summed / workers; ≥ 1.8× faster than one thread on 2 cores".to_owned(),
    ]);
}

/// The number in `note` just before `words` (`"38 round trips; 5 steps
/// talk"` gives 38 for "round trips"), if any.
fn note_number(note: &str, words: &str) -> Option<f64> {
    let before = &note[..note.find(words)?];
    before
        .split_whitespace()
        .last()?
        .trim_matches('(')
        .parse()
        .ok()
}
