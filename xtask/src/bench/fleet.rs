//! The table's rows of processes and machines sharing a store: F6
//! (`fleet`: nodes sharing one Redis, a remote warm start, a remote far
//! away) and P12 (`shared_store`: processes sharing one disk store).

use std::collections::BTreeSet;

use super::RecordsOf;
use super::sample::{median, time};

/// F6: nodes sharing one Redis against nodes alone.
pub(super) fn f6_shared_row(of: &RecordsOf<'_>, rows: &mut Vec<[String; 4]>) {
    let runs = |case: &str| of("fleet", &format!("{case}_run"), "", None);
    let (shared, alone) = (runs("remote"), runs("alone"));
    let Some(shared_wall) = median(shared.iter().map(|sample| sample.wall).collect()) else {
        return;
    };
    let nodes = shared
        .first()
        .map_or(String::new(), |sample| sample.size.clone());
    let kernels = shared.first().map_or(0, |sample| sample.kernels);
    let ideal = median(shared.iter().map(|sample| sample.slowest).collect()).unwrap_or(0.0);
    let compiles: BTreeSet<String> = shared
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

/// F6's remote warm start: a fresh process with an empty disk store
/// loading the batch from Redis, against one loading it from its own disk
/// store, each timed from its loader's creation until every kernel is
/// loaded; the remote hits' durable write-back comes after (its flush time
/// is in each remote sample's note).
pub(super) fn f6_remote_warm_row(of: &RecordsOf<'_>, rows: &mut Vec<[String; 4]>) {
    let warm = |case: &str| {
        median(
            of("fleet", case, "", None)
                .iter()
                .map(|sample| sample.wall)
                .collect(),
        )
    };
    let (Some(remote), Some(local)) = (warm("remote_warm"), warm("local_warm")) else {
        return;
    };
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

/// F6 at a distance: a cold node with its remote 0, 100 and 400 ms away,
/// against the same node with none, each a median of the runs; the round
/// trips it took, and the ratio to (no remote + k round trips), k the
/// batch steps that must talk to the remote (the bench says which, in
/// each sample's note).
pub(super) fn f6_distant_row(of: &RecordsOf<'_>, rows: &mut Vec<[String; 4]>) {
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
    let (Some(alone), false) = (alone, distant.is_empty()) else {
        return;
    };
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
        "≤ 1.2 × (no remote + k round trips), k the batch steps that talk to the remote".to_owned(),
    ]);
}

/// P12: 1, 2 and 4 processes sharing one store, each run's slowest
/// process against one process's wall split N ways; a row per compiler.
pub(super) fn p12_rows(of: &RecordsOf<'_>, rows: &mut Vec<[String; 4]>) {
    for case in ["fake", "cuda"] {
        p12_row(of, case, rows);
    }
}

/// P12's row of one compiler (`fake` or `cuda`), when it ran alone.
fn p12_row(of: &RecordsOf<'_>, case: &str, rows: &mut Vec<[String; 4]>) {
    let run = |processes: &str| of("shared_store", &format!("{case}_run"), processes, None);
    let alone = run("1");
    let Some(alone_wall) = median(alone.iter().map(|sample| sample.wall).collect()) else {
        return;
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
            .collect::<BTreeSet<_>>()
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
