//! The records the benchmarks append, read back, and how their figures
//! are written in the table.

use std::path::Path;

use serde_json::Value;

/// One line of the records file.
#[derive(Debug, Clone)]
pub(super) struct Sample {
    pub(super) bench: String,
    pub(super) case: String,
    pub(super) size: String,
    pub(super) kernels: usize,
    pub(super) wall: f64,
    pub(super) summed_work: f64,
    pub(super) slowest: f64,
    pub(super) workers: usize,
    pub(super) cores: usize,
    pub(super) host_peak: Option<f64>,
    pub(super) worker_peaks: Vec<f64>,
    pub(super) compiled: Option<usize>,
    pub(super) note: String,
}

impl Sample {
    pub(super) fn read(line: &str) -> Option<Self> {
        let value: Value = serde_json::from_str(line).ok()?;
        let text = |key: &str| value[key].as_str().unwrap_or_default().to_owned();
        let number = |key: &str| value[key].as_f64().unwrap_or(0.0);
        let count = |key: &str| value[key].as_u64().unwrap_or(0) as usize;
        Some(Self {
            bench: text("bench"),
            case: text("case"),
            size: text("size"),
            kernels: count("kernels"),
            wall: number("wall"),
            summed_work: number("summed_work"),
            slowest: number("slowest"),
            workers: count("workers"),
            cores: count("cores").max(1),
            host_peak: value["host_peak_bytes"].as_f64(),
            worker_peaks: value["worker_peak_bytes"]
                .as_array()
                .map(|peaks| peaks.iter().filter_map(Value::as_f64).collect())
                .unwrap_or_default(),
            compiled: value["compiled"].as_u64().map(|count| count as usize),
            note: text("note"),
        })
    }

    /// F2's ideal for this batch: max(slowest kernel, summed work / cores).
    pub(super) fn ideal(&self) -> f64 {
        self.slowest.max(self.summed_work / self.cores as f64)
    }
}

pub(super) fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    })
}

pub(super) fn time(seconds: f64) -> String {
    if seconds >= 1.0 {
        format!("{seconds:.2} s")
    } else if seconds >= 1e-3 {
        format!("{:.1} ms", seconds * 1e3)
    } else if seconds >= 1e-6 {
        format!("{:.1} µs", seconds * 1e6)
    } else {
        format!("{:.1} ns", seconds * 1e9)
    }
}

pub(super) fn mebibytes(bytes: f64) -> String {
    format!("{:.0} MiB", bytes / 1_048_576.0)
}

/// Criterion's median estimate of `bench/parameter`, seconds per iteration.
pub(super) fn criterion_median(criterion: &Path, bench: &str, parameter: &str) -> Option<f64> {
    let path = criterion
        .join(bench)
        .join(parameter)
        .join("new")
        .join("estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let value: Value = serde_json::from_str(&text).ok()?;
    value["median"]["point_estimate"]
        .as_f64()
        .map(|nanoseconds| nanoseconds * 1e-9)
}
