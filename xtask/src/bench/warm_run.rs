//! The table's rows of a whole start: F11 (`warm_run`: `kiln warm` and a
//! program against their floor, and the device step on 1 to 16 threads)
//! and L11 (`prebuilt_start`: a program after a compile-only run or after
//! `kiln warm`, against its own second run).

use super::RecordsOf;
use super::sample::{Sample, median, time};

/// The median wall of `samples`.
fn wall(samples: &[Sample]) -> Option<f64> {
    median(samples.iter().map(|sample| sample.wall).collect())
}

/// F11: for each count, the CLI's and the program's whole warm run
/// against the floor measured in the same run; then the device step on
/// each number of threads.
pub(super) fn f11_rows(of: &RecordsOf<'_>, rows: &mut Vec<[String; 4]>) {
    let mut counts: Vec<usize> = of("warm_run", "floor", "", None)
        .iter()
        .map(|sample| sample.kernels)
        .collect();
    counts.sort_unstable();
    counts.dedup();
    for count in counts {
        let floor = of("warm_run", "floor", "", Some(count));
        let Some(floor_wall) = wall(&floor) else {
            continue;
        };
        let note = floor
            .first()
            .map(|sample| sample.note.clone())
            .unwrap_or_default();
        let mut measured = Vec::new();
        let mut ratios = Vec::new();
        if let Some(cli) = wall(&of("warm_run", "cli", "", Some(count))) {
            measured.push(format!("kiln warm {}", time(cli)));
            ratios.push(format!("kiln warm / floor **{:.2}**", cli / floor_wall));
            if let Some(process) = wall(&of("warm_run", "cli_process", "", Some(count))) {
                measured.push(format!("its process {}", time(process)));
            }
        }
        let program = of("warm_run", "program", "", Some(count));
        if let Some(program_wall) = wall(&program) {
            let workers = program.first().map_or(0, |sample| sample.workers);
            measured.push(format!(
                "a program {} (×{workers} workers)",
                time(program_wall)
            ));
            let ratio = program_wall / floor_wall;
            if ratios.is_empty() {
                ratios.push(format!("program / floor **{ratio:.2}**"));
            } else {
                ratios.push(format!("program / floor {ratio:.2}"));
            }
        }
        let ahead = of("warm_run", "program_ahead", "", Some(count));
        if let Some(ahead_wall) = wall(&ahead) {
            measured.push(format!(
                "reading ahead beside its device {}",
                time(ahead_wall)
            ));
            ratios.push(format!("read ahead / floor {:.2}", ahead_wall / floor_wall));
        }
        let profiled = of("warm_run", "program_profiled", "", Some(count));
        if let Some(profiled_wall) = wall(&profiled) {
            measured.push(format!(
                "with its warm-start profile {}",
                time(profiled_wall)
            ));
            ratios.push(format!(
                "profiled / floor {:.2}",
                profiled_wall / floor_wall
            ));
        }
        measured.push(format!(
            "read + verify + load {} ({note})",
            time(floor_wall)
        ));
        rows.push([
            format!("F11 warm_run gemm ×{count}"),
            measured.join("; "),
            ratios.join("; "),
            "≤ 1.5× floor; H200 ×64 ≤ 3 ms".to_owned(),
        ]);

        let threads = of("warm_run", "device_threads", "", Some(count));
        let mut by_threads: Vec<usize> = threads.iter().map(|sample| sample.workers).collect();
        by_threads.sort_unstable();
        by_threads.dedup();
        let walls: Vec<(usize, f64)> = by_threads
            .into_iter()
            .filter_map(|workers| {
                let of_these: Vec<Sample> = threads
                    .iter()
                    .filter(|sample| sample.workers == workers)
                    .cloned()
                    .collect();
                wall(&of_these).map(|wall| (workers, wall))
            })
            .collect();
        if let Some(&(_, one)) = walls.first() {
            let (best, best_wall) = walls
                .iter()
                .copied()
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .unwrap_or((1, one));
            rows.push([
                format!("F11 device step threads gemm ×{count}"),
                walls
                    .iter()
                    .map(|(workers, wall)| format!("{workers}: {}", time(*wall)))
                    .collect::<Vec<_>>()
                    .join("; "),
                format!("fastest on {best}: ×{:.2} vs one thread", one / best_wall),
                "reported (where module loads go)".to_owned(),
            ]);
        }
    }
}

/// How many starts each L11 figure is the median of.
fn runs(first: usize, second: usize) -> String {
    if first == second {
        format!("median of {first} runs each")
    } else {
        format!("medians of {first} and {second} runs")
    }
}

/// L11: the start after a compile-only run prebuilt the store, and the
/// start after `kiln warm` filled it from the program's own files, each
/// next to the program's own second run.
pub(super) fn l11_rows(of: &RecordsOf<'_>, rows: &mut Vec<[String; 4]>) {
    let compiled = |samples: &[Sample]| samples.iter().filter_map(|s| s.compiled).max();
    let after = of("prebuilt_start", "after_prebuild", "", None);
    let second = of("prebuilt_start", "second_run", "", None);
    if let (Some(first), Some(after_wall), Some(second_wall)) =
        (after.first(), wall(&after), wall(&second))
    {
        rows.push([
            "L11 prebuilt_start gemm".to_owned(),
            format!(
                "after a compile-only run {} ({} compiled); own second run {} ({} compiled); \
                 {} kernels, {}; {}",
                time(after_wall),
                compiled(&after).unwrap_or(0),
                time(second_wall),
                compiled(&second).unwrap_or(0),
                first.kernels,
                first.note,
                runs(after.len(), second.len()),
            ),
            format!("after / second **{:.2}**", after_wall / second_wall),
            "0 compiled; ≈ 1×".to_owned(),
        ]);
    }

    let warm = of("prebuilt_start", "kiln_warm", "", None);
    let after = of("prebuilt_start", "after_warm", "", None);
    if let (Some(first), Some(warm_wall), Some(after_wall), Some(second_wall)) =
        (after.first(), wall(&warm), wall(&after), wall(&second))
    {
        rows.push([
            "L11 prebuilt_start after kiln warm".to_owned(),
            format!(
                "kiln warm {}; then the program {} ({} compiled); own second run {} ({} \
                 compiled); {} kernels, {}; {}",
                time(warm_wall),
                time(after_wall),
                compiled(&after).unwrap_or(0),
                time(second_wall),
                compiled(&second).unwrap_or(0),
                first.kernels,
                first.note,
                runs(after.len(), second.len()),
            ),
            format!("after / second **{:.2}**", after_wall / second_wall),
            "0 compiled; ≈ 1×".to_owned(),
        ]);
    }
}
