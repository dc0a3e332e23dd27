//! The supported matrix beyond the workspace's own build (README,
//! "Versions"): the cells `cargo xtask test` checks after the workspace's
//! tests, each failing with what broke and how to repeat it
//! (`cargo xtask test-matrix` runs them alone).
//!
//! - **NVRTC 12.** kiln-cuda's test binaries, built by the workspace run
//!   (cudarc's `cuda-13000` bindings), run once more with `KILN_NVRTC_PATH`
//!   on NVRTC 12.8.
//! - **A program outside the workspace** (`tests/outside`): kiln by path,
//!   its own wgpu and cudarc at the least versions kiln's manifests allow
//!   and cudarc on `cuda-12080`, resolved on its own `Cargo.lock` (so it
//!   adds nothing to the workspace's); built and run with NVRTC 12.8. It
//!   builds in the workspace's target directory: its units differ from the
//!   workspace's by their dependencies' versions and features, so neither
//!   build rebuilds the other's.
//! - **Another CUDA version through kiln's features**: `cargo check` of the
//!   facade with `cuda-12090` instead of its defaults.
//! - **The facade with its backends**: its tests and doc tests with every
//!   backend's feature (the workspace run builds it with `testing` alone),
//!   so compile-only mode's backend cases and the README's cudarc program
//!   compile and run.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::setup::nvrtc::NVRTC_12;
use crate::{command, setup};

/// The program outside the workspace, relative to the workspace's root.
const OUTSIDE: &str = "tests/outside";

/// The facade's features its tests with every backend run with.
const BACKEND_FEATURES: &str = "cuda,hip,wgpu,testing";

/// The facade's features the feature check builds with: another CUDA
/// version than the default, passed through kiln's own features.
const CHECKED_FEATURES: &str = "store,cuda,cuda-12090,dynamic-loading";

/// Runs every cell, each even when one before failed; fails naming those
/// that failed. `test_arguments` are the workspace run's `cargo test`
/// arguments, so its kiln-cuda binaries are found without a rebuild.
pub fn run_all(environment: &[(String, String)], test_arguments: &[&str]) -> Result<()> {
    let cells: [(&str, Result<()>); 4] = [
        (
            "kiln-cuda's tests on NVRTC 12",
            cuda_tests_on_nvrtc_12(environment, test_arguments),
        ),
        (
            "the program outside the workspace (tests/outside)",
            outside_program(environment),
        ),
        (
            "the facade with cuda-12090 instead of its defaults",
            feature_check(),
        ),
        (
            "the facade's tests and doc tests with every backend",
            facade_with_backends(environment),
        ),
    ];
    let mut failed = Vec::new();
    for (what, result) in cells {
        if let Err(error) = result {
            eprintln!("xtask: {what} failed: {error:#}");
            failed.push(what);
        }
    }
    println!(
        "matrix: {} cells passed, {} failed",
        4 - failed.len(),
        failed.len()
    );
    if !failed.is_empty() {
        bail!(
            "the supported matrix failed: {}; `cargo xtask test-matrix` repeats it alone",
            failed.join("; ")
        );
    }
    Ok(())
}

/// The environment with NVRTC 12 in place of the run's NVRTC, required.
fn with_nvrtc_12(environment: &[(String, String)]) -> Vec<(String, String)> {
    environment
        .iter()
        .filter(|(key, _)| key != "KILN_NVRTC_PATH" && key != "KILN_REQUIRE_NVRTC")
        .cloned()
        .chain([
            (
                "KILN_NVRTC_PATH".to_owned(),
                NVRTC_12.library().display().to_string(),
            ),
            ("KILN_REQUIRE_NVRTC".to_owned(), "1".to_owned()),
        ])
        .collect()
}

/// Runs kiln-cuda's test binaries (those `cargo test test_arguments`
/// builds) with NVRTC 12.
fn cuda_tests_on_nvrtc_12(environment: &[(String, String)], test_arguments: &[&str]) -> Result<()> {
    if !NVRTC_12.is_installed() {
        bail!(
            "NVRTC 12 is not installed ({} is missing): run `cargo xtask setup`",
            NVRTC_12.library().display()
        );
    }
    let binaries = test_binaries(test_arguments, "kiln-cuda")?;
    let environment = with_nvrtc_12(environment);
    let package_root = setup::workspace_root().join("backends").join("kiln-cuda");
    let mut failed = Vec::new();
    for (label, binary) in &binaries {
        eprintln!(
            "xtask: kiln-cuda's {label} on NVRTC 12 ({})",
            binary.display()
        );
        // As `cargo test` runs it: from its package's folder.
        let status = Command::new(binary)
            .current_dir(&package_root)
            .envs(environment.iter().map(|(key, value)| (key, value)))
            .status()
            .with_context(|| format!("could not run {}", binary.display()))?;
        if !status.success() {
            failed.push(label.as_str());
        }
    }
    println!(
        "nvrtc 12: {} of kiln-cuda's test binaries passed, {} failed",
        binaries.len() - failed.len(),
        failed.len()
    );
    if !failed.is_empty() {
        bail!(
            "kiln-cuda's tests fail on NVRTC 12 ({}): {}",
            NVRTC_12.requirement,
            failed.join(", ")
        );
    }
    Ok(())
}

/// The test binaries of `package` that `cargo test test_arguments` builds
/// (built already by that run, so only listed), as (target name, path).
fn test_binaries(test_arguments: &[&str], package: &str) -> Result<Vec<(String, PathBuf)>> {
    // cargo's own flags go before a `--` that hands the rest to the tests.
    let cargo_flags = test_arguments
        .iter()
        .position(|argument| *argument == "--")
        .unwrap_or(test_arguments.len());
    let mut arguments = test_arguments[..cargo_flags].to_vec();
    arguments.extend(["--no-run", "--message-format=json"]);
    let output = command::cargo(&arguments).output("listing the test binaries")?;
    let binaries = command::test_executables(&output, |message| {
        message["manifest_path"]
            .as_str()
            .is_some_and(|manifest| is_manifest_of(Path::new(manifest), package))
    });
    if binaries.is_empty() {
        bail!("cargo built no test binary for {package}");
    }
    Ok(binaries)
}

/// Whether `manifest` is the manifest of the package in the folder named
/// `package` (the workspace names each folder after its package).
fn is_manifest_of(manifest: &Path, package: &str) -> bool {
    manifest
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|folder| folder == package)
}

/// Builds and runs the program outside the workspace on its own lockfile,
/// with NVRTC 12.
fn outside_program(environment: &[(String, String)]) -> Result<()> {
    let manifest = setup::workspace_root().join(OUTSIDE).join("Cargo.toml");
    let manifest = manifest.to_string_lossy();
    let target = setup::target_directory();
    let target = target.to_string_lossy();
    command::cargo(&[
        "build",
        "--manifest-path",
        &manifest,
        "--locked",
        "--target-dir",
        &target,
    ])
    .run("building tests/outside")
    .context(
        "tests/outside depends on kiln by path with its own wgpu and cudarc pinned at the least \
         versions kiln's manifests allow (README, \"Versions\"). A resolution failure means a \
         kiln manifest now asks for more: raise the pins there and the minimums in README, or \
         lower the requirement. A lockfile out of date (a dependency kiln added) is brought up \
         to date, pins kept, by `cargo tree --manifest-path tests/outside/Cargo.toml`",
    )?;
    let program = setup::target_directory().join("debug").join("kiln-outside");
    eprintln!("xtask: {} with NVRTC 12", program.display());
    let status = Command::new(&program)
        .envs(
            with_nvrtc_12(environment)
                .iter()
                .map(|(key, value)| (key, value)),
        )
        .status()
        .with_context(|| format!("could not run {}", program.display()))?;
    if !status.success() {
        bail!("tests/outside built, but failed when run ({status}); its output says why");
    }
    Ok(())
}

/// The facade's tests and doc tests with every backend's feature.
fn facade_with_backends(environment: &[(String, String)]) -> Result<()> {
    command::cargo(&[
        "test",
        "--package",
        "kiln-gpu",
        "--no-fail-fast",
        "--features",
        BACKEND_FEATURES,
    ])
    .envs(environment.iter().map(|(key, value)| (key, value)))
    .run(&format!("cargo test of kiln with {BACKEND_FEATURES}"))
}

/// `cargo check` of the facade with another CUDA version than its default,
/// through its own pass-through features.
fn feature_check() -> Result<()> {
    command::cargo(&[
        "check",
        "--package",
        "kiln-gpu",
        "--no-default-features",
        "--features",
        CHECKED_FEATURES,
    ])
    .run(&format!("cargo check of kiln with {CHECKED_FEATURES}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvrtc_12_replaces_the_runs_nvrtc_and_is_required() {
        let environment = vec![
            (
                "KILN_NVRTC_PATH".to_owned(),
                "/elsewhere/libnvrtc.so.13".to_owned(),
            ),
            ("KILN_REQUIRE_NVRTC".to_owned(), "0".to_owned()),
            ("MESA_SHADER_CACHE_DIR".to_owned(), "/tmp/mesa".to_owned()),
        ];
        let replaced = with_nvrtc_12(&environment);
        let value = |key: &str| {
            replaced
                .iter()
                .filter(|(name, _)| name == key)
                .map(|(_, value)| value.as_str())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            value("KILN_NVRTC_PATH"),
            [NVRTC_12.library().display().to_string()]
        );
        assert!(value("KILN_NVRTC_PATH")[0].ends_with("libnvrtc.so.12"));
        assert_eq!(value("KILN_REQUIRE_NVRTC"), ["1"]);
        assert_eq!(value("MESA_SHADER_CACHE_DIR"), ["/tmp/mesa"]);
    }

    #[test]
    fn a_package_is_known_by_its_folder() {
        assert!(is_manifest_of(
            Path::new("/src/kiln/backends/kiln-cuda/Cargo.toml"),
            "kiln-cuda"
        ));
        assert!(!is_manifest_of(
            Path::new("/src/kiln/backends/kiln-hip/Cargo.toml"),
            "kiln-cuda"
        ));
    }
}
