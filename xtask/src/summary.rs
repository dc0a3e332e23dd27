//! Runs `cargo test` and closes with one line that adds up every test
//! binary's result, so the end of a long log says what ran in total instead
//! of what the last doctest binary happened to hold.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// Totals over every `test result:` line.
#[derive(Debug, Default, PartialEq, Eq)]
struct Totals {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl Totals {
    /// Adds one `test result: ok. 3 passed; 0 failed; 1 ignored; ...` line.
    fn add_line(&mut self, line: &str) {
        let Some(rest) = line.trim().strip_prefix("test result:") else {
            return;
        };
        for part in rest.split(';') {
            let mut words = part.split_whitespace().rev();
            let (Some(label), Some(count)) = (words.next(), words.next()) else {
                continue;
            };
            let Ok(count) = count.parse::<u64>() else {
                continue;
            };
            match label {
                "passed" => self.passed += count,
                "failed" => self.failed += count,
                "ignored" => self.ignored += count,
                _ => {}
            }
        }
    }
}

/// Runs `command` (a `cargo test`), echoing its output, then prints the
/// totals as `tests: N passed, N failed, N skipped`.
///
/// A test that cannot run here (no GPU) passes after printing
/// `skipped <what>: <why>` to standard error; those lines are counted as
/// skipped, not passed, so the closing line says what really ran.
pub fn run_tests(mut command: Command) -> Result<()> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("could not start cargo test")?;
    let stdout = child.stdout.take().expect("stdout was piped");
    let stderr = child.stderr.take().expect("stderr was piped");
    // Standard error is echoed on its own thread, so neither pipe can fill
    // up and stall the tests while the other is read.
    let skips = std::thread::spawn(move || {
        let mut skips = 0u64;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("{line}");
            if line.starts_with("skipped ") {
                skips += 1;
            }
        }
        skips
    });
    let mut totals = Totals::default();
    for line in BufReader::new(stdout).lines() {
        let line = line.context("could not read the test output")?;
        println!("{line}");
        totals.add_line(&line);
    }
    let status = child.wait().context("cargo test did not finish")?;
    let skips = skips.join().unwrap_or(0);
    println!(
        "tests: {} passed, {} failed, {} skipped",
        totals.passed.saturating_sub(skips),
        totals.failed,
        totals.ignored + skips
    );
    if !status.success() {
        bail!("the workspace tests failed ({status})");
    }
    if totals.passed == 0 {
        bail!("no test ran: the workspace tests are missing");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines_add_up() {
        let mut totals = Totals::default();
        totals.add_line("test result: ok. 45 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.22s");
        totals.add_line("running 4 tests");
        totals.add_line(
            "test result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out",
        );
        assert_eq!(
            totals,
            Totals {
                passed: 48,
                failed: 1,
                ignored: 2
            }
        );
    }
}
