//! The request path's rows (R1): p99 request latency with `load_or`
//! against `load` for a serving loop whose requests arrive at a fixed rate
//! while unannounced shapes compile: on the fake target (the serving
//! example, its quick plan) and on real compilers (the `serving`
//! benchmark: wgpu on the first Vulkan adapter, CUDA on GPU 0 or
//! compile-only).

use std::path::Path;

use anyhow::{Context, Result};

use super::RecordsOf;
use super::sample::median;
use crate::command;

/// Where a run keeps the example's JSON line.
const FILE: &str = "serving.json";

/// Runs the serving example (its quick plan) and keeps its figures in
/// `folder`.
pub(super) fn measure(folder: &Path) -> Result<()> {
    let output = command::cargo(&[
        "run",
        "--release",
        "--quiet",
        "--package",
        "kiln-gpu",
        "--features",
        "testing",
        "--example",
        "serving",
        "--",
        "--quick",
        "--json",
    ])
    .output("the serving example")?;
    let path = folder.join(FILE);
    std::fs::write(&path, output).with_context(|| format!("could not write {}", path.display()))
}

/// The rows: the fake target's when `folder` holds the example's figures,
/// and one per target the `serving` benchmark left both runs of.
pub(super) fn row(folder: &Path, of: &RecordsOf<'_>, rows: &mut Vec<[String; 4]>) {
    fake_row(folder, rows);
    for target in ["wgpu", "cuda"] {
        bench_row(of, target, rows);
    }
}

/// The fake target's row, from the serving example's JSON line.
fn fake_row(folder: &Path, rows: &mut Vec<[String; 4]>) {
    let Ok(text) = std::fs::read_to_string(folder.join(FILE)) else {
        return;
    };
    let Ok(figures) = serde_json::from_str::<serde_json::Value>(text.trim()) else {
        return;
    };
    let number = |run: &str, field: &str| figures[run][field].as_f64().unwrap_or(f64::NAN);
    let (load, load_or) = (number("load", "p99_ms"), number("load_or", "p99_ms"));
    rows.push([
        format!(
            "R1 serving (fake) {} requests / {} s, {} shapes of {} s",
            figures["requests"], figures["seconds"], figures["shapes"], figures["compile_seconds"]
        ),
        format!(
            "p99 load_or {load_or:.2} ms, load {load:.1} ms; request-path compiles {} vs {}; \
             fallback loads {}",
            figures["load_or"]["request_path_compiles"],
            figures["load"]["request_path_compiles"],
            figures["load_or"]["fallback_loads"]
        ),
        format!(
            "p99 load_or / load **{:.4}** (load ×{:.0} of load_or)",
            load_or / load,
            load / load_or
        ),
        "load_or: 0 request-path compiles; p99 a lookup, not a compile".to_owned(),
    ]);
}

/// The row of `target` from the `serving` benchmark's records: each figure
/// the median over the runs of each mode (the figures are in each record's
/// note), the counts that must hold in every run their worst.
fn bench_row(of: &RecordsOf<'_>, target: &str, rows: &mut Vec<[String; 4]>) {
    type Runs = Vec<serde_json::Value>;
    let figures = |mode: &str| -> Option<Runs> {
        let runs: Runs = of("serving", &format!("{target}/{mode}"), "", None)
            .iter()
            .filter_map(|sample| serde_json::from_str(&sample.note).ok())
            .collect();
        (!runs.is_empty()).then_some(runs)
    };
    let (Some(load), Some(load_or)) = (figures("load"), figures("load_or")) else {
        return;
    };
    let values = |runs: &Runs, field: &str| -> Vec<f64> {
        runs.iter().filter_map(|run| run[field].as_f64()).collect()
    };
    let number = |runs: &Runs, field: &str| median(values(runs, field)).unwrap_or(f64::NAN);
    let most = |runs: &Runs, field: &str| values(runs, field).into_iter().fold(0.0, f64::max);
    let least = |runs: &Runs, field: &str| {
        values(runs, field)
            .into_iter()
            .fold(f64::INFINITY, f64::min)
    };
    let first = &load[0];
    let device = first["device"].as_str().unwrap_or("?");
    let label = match target {
        "wgpu" => format!("wgpu, naga + pipeline on {device}"),
        _ => format!("CUDA, NVRTC GEMMs, {device}"),
    };
    // What a caller of `load` waited per compile: the compile and the
    // device object made of it.
    let waited = 1e3 * number(&load, "request_path_seconds")
        / number(&load, "request_path_compiles").max(1.0);
    // Lower is better, as `--compare` reads a headline.
    let mut ratios = format!(
        "p99 load_or / load **{:.3}** (load ×{:.0} of load_or)",
        number(&load_or, "p99_ms") / number(&load, "p99_ms"),
        number(&load, "p99_ms") / number(&load_or, "p99_ms")
    );
    if let Some(floor) = figures("loaded") {
        ratios.push_str(&format!(
            "; floor (all loaded) p99 {:.2} ms, load_or ×{:.1} of it",
            number(&floor, "p99_ms"),
            number(&load_or, "p99_ms") / number(&floor, "p99_ms")
        ));
    }
    rows.push([
        format!(
            "R1 serving ({label}) {} requests / {} s, {} new shapes",
            first["requests"], first["seconds"], first["shapes"]
        ),
        format!(
            "{} runs, a compile (as load waited) {waited:.0} ms; p50 load_or {:.2} ms, load {:.2} ms; p99 load_or {:.2} ms, load {:.1} ms; \
             the call alone, max: load_or {:.0} µs, load {:.1} ms; request-path compiles \
             (most) {} vs {}; fallback loads {:.0}; specialized after their batches (least) \
             {}/{}",
            load.len().min(load_or.len()),
            number(&load_or, "p50_ms"),
            number(&load, "p50_ms"),
            number(&load_or, "p99_ms"),
            number(&load, "p99_ms"),
            number(&load_or, "call_max_us"),
            number(&load, "call_max_us") / 1e3,
            most(&load_or, "request_path_compiles"),
            most(&load, "request_path_compiles"),
            number(&load_or, "fallback_loads"),
            least(&load_or, "specialized"),
            first["shapes"]
        ),
        ratios,
        "load_or: 0 request-path compiles; p99 a lookup, not a compile".to_owned(),
    ]);
}
