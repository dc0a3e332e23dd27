//! The table's rows of a lookup, from criterion's estimates: F1
//! (`loader_hot_path`: a launch of a loaded kernel), F4 (`store_scale`: a
//! store lookup as the store grows) and F10 (`store_packs`: what a store of
//! packed entries weighs, and its hits).

use std::path::Path;

use super::RecordsOf;
use super::sample::{criterion_median, time};

/// Loads per iteration of `loader_hot_path`, lookups per iteration of
/// `store_scale`: their criterion figures are per 16.
const PER_ITERATION: f64 = 16.0;

/// Criterion's median of `bench` for each of `parameters` that ran, per
/// load or lookup.
fn per_lookup(criterion: &Path, bench: &str, parameters: &[&str]) -> Vec<(String, f64)> {
    parameters
        .iter()
        .filter_map(|parameter| {
            criterion_median(criterion, bench, parameter)
                .map(|seconds| ((*parameter).to_owned(), seconds / PER_ITERATION))
        })
        .collect()
}

/// F1: a launch of a loaded kernel.
pub(super) fn f1_row(criterion: &Path, rows: &mut Vec<[String; 4]>) {
    let hot = per_lookup(criterion, "loader_hot_path", &["10", "1000", "100000"]);
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
}

/// F4: a store lookup as the store grows.
pub(super) fn f4_row(criterion: &Path, rows: &mut Vec<[String; 4]>) {
    let scale = per_lookup(criterion, "store_scale", &["10", "10000", "100000"]);
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
}

/// F10: what a store of packed entries weighs, and its hits.
pub(super) fn f10_row(of: &RecordsOf<'_>, criterion: &Path, rows: &mut Vec<[String; 4]>) {
    let weights = of("store_packs", "weight", "", None);
    if weights.is_empty() {
        return;
    }
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
    let sizes: Vec<&str> = weights.iter().map(|sample| sample.size.as_str()).collect();
    let hits = per_lookup(criterion, "store_packs", &sizes);
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
