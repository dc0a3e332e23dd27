//! The table's rows of a process's start: F3 (`warm_start`: a fresh
//! process loading from the store, against its floor and against
//! compiling) and F5 (`cold_start`: a fresh process's first batch against
//! a warm pool's).

use super::RecordsOf;
use super::sample::{Sample, median, time};

/// F3: a fresh process loading from the store, against the floor and
/// against compiling.
pub(super) fn f3_row(of: &RecordsOf<'_>, rows: &mut Vec<[String; 4]>) {
    let fresh = of("warm_start", "fresh_process", "", None);
    let floor = of("warm_start", "read_verify_load", "", None);
    let compile = of("warm_start", "compile", "", None);
    let (Some(kernels), Some(fresh_wall), Some(floor_wall)) = (
        fresh.first().map(|sample| sample.kernels),
        median(fresh.iter().map(|sample| sample.wall).collect()),
        median(floor.iter().map(|sample| sample.wall).collect()),
    ) else {
        return;
    };
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

/// F5: a fresh process's first batch against a warm pool's.
pub(super) fn f5_row(of: &RecordsOf<'_>, rows: &mut Vec<[String; 4]>) {
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
    let (Some(cold_ratio), Some(cold_wall)) = (
        ratio(&cold),
        median(cold.iter().map(|sample| sample.wall).collect()),
    ) else {
        return;
    };
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
    // The same first batch of a process that started its workers before
    // its target (`worker::start_early`), as a program that knows it will
    // compile does.
    let early = of("cold_start", "cold_start_early", "", None);
    if let (Some(early_ratio), Some(early_wall)) = (
        ratio(&early),
        median(early.iter().map(|sample| sample.wall).collect()),
    ) {
        measured.push(format!("workers started early {}", time(early_wall)));
        ratios.push(format!("started early wall/ideal **{early_ratio:.2}**"));
    }
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
