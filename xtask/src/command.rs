//! Running a child command and failing with its name when it fails.

use std::ffi::OsStr;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// A command to run, echoed before it runs.
pub struct Step {
    command: Command,
}

/// `cargo` with `arguments`, using the cargo that runs xtask.
pub fn cargo(arguments: &[&str]) -> Step {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command.args(arguments);
    Step { command }
}

impl Step {
    /// Sets one environment variable.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.command.env(key, value);
        self
    }

    /// Sets environment variables.
    pub fn envs<K: AsRef<OsStr>, V: AsRef<OsStr>>(
        mut self,
        variables: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.command.envs(variables);
        self
    }

    /// The command itself, echoed, for callers that read its output.
    pub fn into_command(self) -> Command {
        eprintln!("xtask: {}", describe(&self.command));
        self.command
    }

    /// Runs it, failing with `what` when it cannot start or exits non-zero.
    pub fn run(mut self, what: &str) -> Result<()> {
        eprintln!("xtask: {}", describe(&self.command));
        let status = self
            .command
            .status()
            .with_context(|| format!("could not start {what}"))?;
        if !status.success() {
            bail!("{what} failed ({status})");
        }
        Ok(())
    }

    /// Runs it with its standard output captured (its errors still reach
    /// the terminal), failing with `what` when it cannot start or exits
    /// non-zero.
    pub fn output(mut self, what: &str) -> Result<Vec<u8>> {
        eprintln!("xtask: {}", describe(&self.command));
        let output = self
            .command
            .stderr(std::process::Stdio::inherit())
            .output()
            .with_context(|| format!("could not start {what}"))?;
        if !output.status.success() {
            bail!("{what} failed ({})", output.status);
        }
        Ok(output.stdout)
    }
}

fn describe(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|part| part.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The test executables that `cargo test --no-run --message-format=json`
/// reported in `output`, as (target name, path), sorted; `keep` chooses
/// among the messages.
pub fn test_executables(
    output: &[u8],
    keep: impl Fn(&serde_json::Value) -> bool,
) -> Vec<(String, std::path::PathBuf)> {
    let mut binaries = Vec::new();
    for line in String::from_utf8_lossy(output).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if message["reason"] != "compiler-artifact" || message["profile"]["test"] != true {
            continue;
        }
        let Some(executable) = message["executable"].as_str() else {
            continue;
        };
        if !keep(&message) {
            continue;
        }
        let label = message["target"]["name"]
            .as_str()
            .unwrap_or("tests")
            .to_owned();
        binaries.push((label, std::path::PathBuf::from(executable)));
    }
    binaries.sort();
    binaries
}
