//! `bench-report --compare OLD`: every row of this report next to the same
//! row of an earlier one (OLD: a records folder, or a Markdown file such as
//! the committed `BENCHMARKS.md`, whose first row of each name, the newest,
//! is taken), with its change, and a mark on each row more than 20 % worse.
//!
//! A row's figure is its headline: the first bold number of its ratios
//! (`warm / floor **1.32**`), else the first time it measured; lower is
//! better for both.

use std::path::Path;

use anyhow::{Context, Result};

/// A row more than this much worse is marked.
const WORSE: f64 = 0.20;

/// The rows of a report: measure, measured, ratios, goal.
pub(super) type Row = [String; 4];

/// Prints `rows` against the rows of `old`; returns how many are marked.
pub(super) fn compare(rows: &[Row], old: &Path) -> Result<usize> {
    let before: Vec<Row> = if old.is_dir() {
        super::table_rows(old, &old.join("criterion"))?.0
    } else {
        let text = std::fs::read_to_string(old)
            .with_context(|| format!("could not read {}", old.display()))?;
        markdown_rows(&text)
    };
    println!("\n| measure | before | now | change |");
    println!("|---|---|---|---|");
    let mut marked = 0;
    for row in rows {
        let Some(earlier) = before.iter().find(|earlier| earlier[0] == row[0]) else {
            println!("| {} | (no row) | {} | new |", row[0], shown(row));
            continue;
        };
        let (Some((was, was_kind)), Some((now, now_kind))) = (headline(earlier), headline(row))
        else {
            println!(
                "| {} | {} | {} | no figure to compare |",
                row[0],
                shown(earlier),
                shown(row)
            );
            continue;
        };
        if was_kind != now_kind || was <= 0.0 {
            println!(
                "| {} | {} | {} | not comparable |",
                row[0],
                shown(earlier),
                shown(row)
            );
            continue;
        }
        let change = now / was - 1.0;
        let mark = if change > WORSE {
            marked += 1;
            " ✗ more than 20 % worse"
        } else {
            ""
        };
        println!(
            "| {} | {} | {} | {:+.0} %{mark} |",
            row[0],
            shown(earlier),
            shown(row),
            change * 100.0
        );
    }
    for earlier in &before {
        if rows.iter().all(|row| row[0] != earlier[0]) && headline(earlier).is_some() {
            println!(
                "| {} | {} | (no row) | not run |",
                earlier[0],
                shown(earlier)
            );
        }
    }
    println!(
        "\n{marked} rows more than 20 % worse than {} (each needs a sentence saying why)",
        old.display()
    );
    Ok(marked)
}

/// What kind of figure a headline is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ratio,
    Seconds,
}

/// A row's headline figure, as [`compare`] reads it.
fn headline(row: &Row) -> Option<(f64, Kind)> {
    bold_number(&row[2])
        .map(|ratio| (ratio, Kind::Ratio))
        .or_else(|| first_time(&row[1]).map(|seconds| (seconds, Kind::Seconds)))
}

fn shown(row: &Row) -> String {
    match headline(row) {
        Some((ratio, Kind::Ratio)) => format!("{ratio:.2}"),
        Some((seconds, Kind::Seconds)) => super::sample::time(seconds),
        None => "–".to_owned(),
    }
}

/// The first number between `**` marks.
fn bold_number(text: &str) -> Option<f64> {
    let mut parts = text.split("**");
    parts.next()?;
    let bold = parts.next()?;
    leading_number(bold)
}

/// The number `text` starts with (after spaces, `×` or `x`).
fn leading_number(text: &str) -> Option<f64> {
    let text = text.trim_start_matches(|c: char| c.is_whitespace() || c == '×' || c == 'x');
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    text[..end].parse().ok()
}

/// The first time written as the report writes times (`2.31 ms`, `155.0
/// µs`, `1.50 s`, `12.0 ns`), in seconds.
fn first_time(text: &str) -> Option<f64> {
    let words: Vec<&str> = text.split_whitespace().collect();
    words.windows(2).find_map(|pair| {
        let number = leading_number(pair[0])?;
        let unit = pair[1].trim_end_matches([',', ';', ')', '.']);
        let scale = match unit {
            "s" => 1.0,
            "ms" => 1e-3,
            "µs" | "us" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        Some(number * scale)
    })
}

/// The rows of every Markdown table of `text` with four cells or more,
/// the first of each name kept.
fn markdown_rows(text: &str) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if !line.starts_with('|') || line.starts_with("|---") || line.starts_with("| measure") {
            continue;
        }
        let cells: Vec<String> = line
            .trim_matches('|')
            .split('|')
            .map(|cell| cell.trim().to_owned())
            .collect();
        if cells.len() < 4 || rows.iter().any(|row| row[0] == cells[0]) {
            continue;
        }
        rows.push([
            cells[0].clone(),
            cells[1].clone(),
            cells[2].clone(),
            cells[3].clone(),
        ]);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(measure: &str, measured: &str, ratios: &str) -> Row {
        [
            measure.to_owned(),
            measured.to_owned(),
            ratios.to_owned(),
            String::new(),
        ]
    }

    // F11: a row's headline is its first bold ratio, else its first time.
    #[test]
    fn f11_a_row_s_headline_is_its_bold_ratio_else_its_first_time() {
        let ratio = row("F3", "warm 85.9 µs", "warm / floor **1.23** of the floor");
        assert_eq!(headline(&ratio), Some((1.23, Kind::Ratio)));
        let runs = row("F3", "x", "**1.32, 1.64, 1.32**; ×50 faster");
        assert_eq!(headline(&runs), Some((1.32, Kind::Ratio)));
        let time = row("F1", "10 held: 12.5 ns; 1000 held: 13.0 ns", "flat");
        let (seconds, kind) = headline(&time).expect("a time");
        assert_eq!(kind, Kind::Seconds);
        assert!((seconds - 12.5e-9).abs() < 1e-15);
        assert_eq!(headline(&row("peak", "reported", "all")), None);
    }

    // F11: the first row of each name in a Markdown file is the one kept.
    #[test]
    fn f11_the_newest_row_of_each_name_is_read_from_markdown() {
        let text = "| measure | measured | ratios | goal |\n|---|---|---|---|\n\
                    | F3 warm_start gemm | warm 1 ms | **1.10** | g |\n\
                    | F3 warm_start gemm | warm 2 ms | **2.00** | g |\n";
        let rows = markdown_rows(text);
        assert_eq!(rows.len(), 1);
        assert_eq!(bold_number(&rows[0][2]), Some(1.10));
    }
}
