//! The table's rows of what a loaded program does next: F7 and F8
//! (`tuning`: a tune cold and warm, first launches with and without a
//! profile) and F9 (`device_step`: device objects made on the workers).

use super::RecordsOf;
use super::sample::{median, time};

/// The median wall of a `tuning` case, with its kernels and note.
fn tuning_wall(of: &RecordsOf<'_>, case: &str) -> Option<(f64, usize, String)> {
    let samples = of("tuning", case, "", None);
    let kernels = samples.first().map_or(0, |sample| sample.kernels);
    let note = samples
        .first()
        .map(|sample| sample.note.clone())
        .unwrap_or_default();
    median(samples.iter().map(|sample| sample.wall).collect()).map(|wall| (wall, kernels, note))
}

/// F7 from the `tuning` benchmark's records: a tune cold, the sequential
/// loop and a tune warm.
pub(super) fn f7_row(of: &RecordsOf<'_>, rows: &mut Vec<[String; 4]>) {
    let wall = |case: &str| tuning_wall(of, case);
    let (Some((cold, kernels, note)), Some((warm, _, _))) = (wall("tune_cold"), wall("tune_warm"))
    else {
        return;
    };
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

/// F8 from the `tuning` benchmark's records: first launches with and
/// without a profile against a hot load.
pub(super) fn f8_row(of: &RecordsOf<'_>, rows: &mut Vec<[String; 4]>) {
    let wall = |case: &str| tuning_wall(of, case);
    let per_kernel = |case: &str| {
        wall(case).map(|(wall, kernels, note)| (wall / kernels.max(1) as f64, kernels, note))
    };
    let (Some((profiled, kernels, note)), Some((hot, _, _))) =
        (per_kernel("first_launch_profiled"), per_kernel("hot_load"))
    else {
        return;
    };
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

/// F9 from the `device_step` benchmark's records: a cold wgpu batch with
/// its pipelines made on the workers, against its summed naga + pipeline
/// work over the workers and against the batch whose pipelines the loader's
/// thread made one after the other.
pub(super) fn f9_row(of: &RecordsOf<'_>, rows: &mut Vec<[String; 4]>) {
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
