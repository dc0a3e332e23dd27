//! The request path's row: the serving example's p99 request latency with
//! `load_or` against `load` on the fake target, its requests arriving at a
//! fixed rate while unannounced shapes compile.

use std::path::Path;

use anyhow::{Context, Result};

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

/// The row, when `folder` holds the example's figures.
pub(super) fn row(folder: &Path, rows: &mut Vec<[String; 4]>) {
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
