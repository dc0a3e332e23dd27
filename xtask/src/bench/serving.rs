//! The request path's rows (R1): p99 request latency with `load_or`
//! against `load` for a serving loop whose requests arrive at a fixed rate
//! while unannounced shapes compile: on the fake target (the serving
//! example, its quick plan) and on real compilers (the `serving`
//! benchmark: wgpu on the first Vulkan adapter, CUDA on GPU 0 or
//! compile-only).

use std::path::Path;

use anyhow::{Context, Result};

use super::RecordsOf;
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
        format!("load / load_or p99 **×{:.0}**", load / load_or),
        "load_or: 0 request-path compiles; p99 a lookup, not a compile".to_owned(),
    ]);
}

/// The row of `target` from the `serving` benchmark's records (the latest
/// run of each mode): the figures are in each record's note.
fn bench_row(of: &RecordsOf<'_>, target: &str, rows: &mut Vec<[String; 4]>) {
    let figures = |mode: &str| {
        of("serving", &format!("{target}/{mode}"), "", None)
            .last()
            .and_then(|sample| serde_json::from_str::<serde_json::Value>(&sample.note).ok())
    };
    let (Some(load), Some(load_or)) = (figures("load"), figures("load_or")) else {
        return;
    };
    let number =
        |figures: &serde_json::Value, field: &str| figures[field].as_f64().unwrap_or(f64::NAN);
    let device = load["device"].as_str().unwrap_or("?");
    let label = match target {
        "wgpu" => format!("wgpu, naga + pipeline on {device}"),
        _ => format!("CUDA, NVRTC GEMMs, {device}"),
    };
    // What a caller of `load` waited per compile: the compile and the
    // device object made of it.
    let waited = 1e3 * number(&load, "request_path_seconds")
        / number(&load, "request_path_compiles").max(1.0);
    rows.push([
        format!(
            "R1 serving ({label}) {} requests / {} s, {} shapes of {waited:.0} ms",
            load["requests"], load["seconds"], load["shapes"]
        ),
        format!(
            "p50 load_or {:.2} ms, load {:.2} ms; p99 load_or {:.2} ms, load {:.1} ms; \
             request-path compiles {} vs {}; fallback loads {}; specialized after their \
             batches {}/{}",
            number(&load_or, "p50_ms"),
            number(&load, "p50_ms"),
            number(&load_or, "p99_ms"),
            number(&load, "p99_ms"),
            load_or["request_path_compiles"],
            load["request_path_compiles"],
            load_or["fallback_loads"],
            load_or["specialized"],
            load_or["shapes"]
        ),
        format!(
            "load / load_or p99 **×{:.0}**",
            number(&load, "p99_ms") / number(&load_or, "p99_ms")
        ),
        "load_or: 0 request-path compiles; p99 a lookup, not a compile".to_owned(),
    ]);
}
