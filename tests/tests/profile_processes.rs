//! Warm-start profiles across real processes of one program on one disk
//! store (L12): on by default, named after the executable; the second
//! start has every kernel the first asked for on the device when its
//! first launch returns (counted, never timed); `KILN_PROFILE=0` turns it
//! off; a read-only store is never written.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, ensure};
use kiln_test_support::Scratch;

const TUNER: &str = env!("CARGO_BIN_EXE_kiln-test-tuner");

/// One run of the program: launches kernels `first..last` on the store at
/// `root`, with `environment` set; what it reports.
fn run(
    root: &Path,
    (first, last): (u32, u32),
    read_only: bool,
    environment: &[(&str, &str)],
) -> Result<serde_json::Value> {
    let mut command = Command::new(TUNER);
    command
        .arg("profile")
        .arg(root)
        .arg(first.to_string())
        .arg(last.to_string())
        .env_remove("KILN_PROFILE");
    if read_only {
        command.arg("read-only");
    }
    command.envs(environment.iter().copied());
    let output = command.output()?;
    ensure!(
        output.status.success(),
        "the program failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .last()
        .context("the program printed nothing")?;
    Ok(serde_json::from_str(line)?)
}

/// Every file under `root` with its length and modification time.
fn files(root: &Path) -> Vec<(String, u64, std::time::SystemTime)> {
    let mut found = Vec::new();
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            let path = entry.path();
            let Ok(metadata) = entry.metadata() else {
                continue;
            };
            if metadata.is_dir() {
                folders.push(path);
            } else {
                found.push((
                    path.display().to_string(),
                    metadata.len(),
                    metadata.modified().unwrap_or(std::time::UNIX_EPOCH),
                ));
            }
        }
    }
    found.sort();
    found
}

#[test]
fn l12_a_programs_second_start_has_every_kernel_its_first_asked_for_on_the_device() -> Result<()> {
    let scratch = Scratch::new("profile-processes");
    let root = scratch.join("store");
    let first = run(&root, (0, 12), false, &[])?;
    assert_eq!(first["keeps_profile"], true, "on by default with a store");
    assert_eq!(first["lowered"], 12);

    let second = run(&root, (0, 12), false, &[])?;
    assert_eq!(
        second["on_device_at_first_launch"], 12,
        "every profiled kernel, before the program asked for the second: {second}"
    );
    assert_eq!(second["lowered"], 0, "nothing compiled");
    assert_eq!(second["batches"], 0, "every launch found its kernel");

    let off = run(&root, (0, 12), false, &[("KILN_PROFILE", "0")])?;
    assert_eq!(off["keeps_profile"], false);
    assert_eq!(
        off["on_device_at_first_launch"], 1,
        "KILN_PROFILE=0 reads no profile: {off}"
    );
    assert_eq!(off["batches"], 12, "each launch a batch of store hits");
    Ok(())
}

#[test]
fn l12_a_read_only_store_keeps_its_profile_unwritten() -> Result<()> {
    let scratch = Scratch::new("profile-read-only");
    let root = scratch.join("store");
    run(&root, (0, 4), false, &[])?;
    // Kernels 4..8 compile in the read-only run (nothing stored) and would
    // be its profile.
    let before = files(&root);
    let read_only = run(&root, (4, 8), true, &[])?;
    assert_eq!(
        read_only["on_device_at_first_launch"], 5,
        "the profile is read: {read_only}"
    );
    assert_eq!(files(&root), before, "nothing in the store changed");

    let next = run(&root, (0, 1), false, &[])?;
    assert_eq!(
        next["on_device_at_first_launch"], 4,
        "the profile is the last writable run's: {next}"
    );
    Ok(())
}
