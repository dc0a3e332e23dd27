//! The table's rows of one batch: F2 (`batch_compile`: worker processes
//! against threads and the plain loop, for every size and count that ran)
//! and the peak memory of a batch of heavy kernels (`compile_memory`).

use std::collections::BTreeMap;

use super::RecordsOf;
use super::sample::{Sample, mebibytes, median, time};

/// F2: every size and count that ran, processes against threads and the
/// plain loop.
pub(super) fn f2_rows(
    samples: &[Sample],
    of: &RecordsOf<'_>,
    cores: usize,
    rows: &mut Vec<[String; 4]>,
) {
    let mut batches: BTreeMap<(usize, String), ()> = BTreeMap::new();
    for sample in samples {
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
            rows.push(f2_row(of, size, count, per_kernel, cores));
        }
    }
}

/// F2's row of one size and count.
fn f2_row(
    of: &RecordsOf<'_>,
    size: &str,
    count: usize,
    per_kernel: Option<f64>,
    cores: usize,
) -> [String; 4] {
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
    [
        format!("F2 batch_compile {size} ×{count}"),
        measured.join("; "),
        ratios.join("; "),
        "wall ≤ 1.10 × ideal".to_owned(),
    ]
}

/// The order of F2's sizes: the known ones first, from the lightest.
fn size_rank(size: &str) -> usize {
    ["tiny", "gemm", "heavy"]
        .iter()
        .position(|known| *known == size)
        .unwrap_or(3)
}

/// Peak memory of a batch of heavy kernels, one row per record.
pub(super) fn memory_rows(samples: &[Sample], rows: &mut Vec<[String; 4]>) {
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
}
