//! kiln's contributor tasks, run as `cargo xtask <task>`.
//!
//! - `test`: installs the system parts the tests need when they are missing,
//!   then runs every test of the workspace, the cells of the supported
//!   matrix beyond it (kiln-cuda's tests on NVRTC 12, the facade's tests with
//!   every backend, a program outside the
//!   workspace on other versions of wgpu and cudarc) and the example
//!   programs of `examples/`.
//! - `test-matrix`: only the supported matrix's cells.
//! - `test-backend <name>`: runs one backend's tests on every real device of
//!   it here, a pass per GPU, and prints which.
//! - `lint`: every rule id of the code and the docs stated in
//!   docs/BEHAVIOUR.md and every rule named by a test, `cargo fmt --check`,
//!   clippy with `-D warnings`, rustdoc with `-D warnings`, and `doc-check`.
//! - `doc-check`: the facade's documentation built with docs.rs's features
//!   lists every backend's target and kernel builder on its crate page.
//! - `setup`: only the install step of `test`.
//! - `env`: the install step, then the environment the tests need as shell
//!   `export` lines, for `eval "$(cargo xtask env)"` before a `cargo test` of
//!   one crate.
//! - `bench-report`: the benchmarks behind rules F1–F4 (docs/BEHAVIOUR.md) and one table of
//!   their ratios; packs the full run for a GPU machine.

mod backend;
mod bench;
mod boundary;
mod command;
mod docs;
mod examples;
mod fan_in;
mod matrix;
mod publish;
mod rules;
mod setup;
mod source;
mod summary;
mod surface;

use anyhow::{Result, bail};

const USAGE: &str = "\
usage: cargo xtask <task>

tasks:
  test                  install what the tests need, then run every test and example
  test-matrix           only the supported matrix: NVRTC 12, tests/outside, a feature check,
                        the facade with every backend
  test-backend [NAME]   run one backend's tests on every device of it (no NAME: list them)
  lint                  rule ids against docs/BEHAVIOUR.md, backends named only in kiln-tool's
                        backend/, no kiln-store module named by over a third of its siblings,
                        the facade's surface against crates/kiln/public-api.txt,
                        fmt --check, clippy, publish-check, doc -D warnings, doc-check
  facade-api [--write]  print the facade's public surface (--write: keep it in
                        crates/kiln/public-api.txt, which lint compares)
  publish-check         what a registry would refuse, offline: manifests, licences and
                        READMEs in each package, no test feature named, every .crate made
                        (--registry: cargo publish --dry-run too, which builds each one)
  doc-check             the facade's docs as docs.rs builds them: its crate page lists every
                        backend's target and kernel builder, and no link is left unresolved
  bench-report          run the F1-F4 benchmarks, print one table of ratios, pack the GPU run
  setup                 install what the tests need, and nothing else
  env                   install what the tests need, then print their environment as
                        export lines: eval \"$(cargo xtask env)\" before one crate's cargo test";

fn main() -> Result<()> {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let arguments: Vec<&str> = arguments.iter().map(String::as_str).collect();
    match arguments.as_slice() {
        ["test", extra @ ..] => test(extra),
        ["test-matrix", extra @ ..] => {
            let environment = setup::ensure_all()?;
            matrix::run_all(&environment, &test_arguments(extra))
        }
        ["test-backend"] => {
            backend::list();
            Ok(())
        }
        ["test-backend", name, extra @ ..] => backend::test(name, extra),
        ["lint"] => lint(),
        ["doc-check"] => docs::check_facade(),
        ["publish-check"] => publish::check(false),
        ["publish-check", "--registry"] => publish::check(true),
        ["bench-report", extra @ ..] => bench::report(extra),
        ["facade-api", extra @ ..] => surface::run(&setup::workspace_root(), extra),
        ["setup"] => setup::ensure_all().map(drop),
        ["env"] => {
            let mut environment = setup::ensure_all()?;
            environment.extend(setup::root_environment());
            for (key, value) in environment {
                println!("export {key}='{}'", value.replace('\'', "'\\''"));
            }
            Ok(())
        }
        ["help" | "--help" | "-h"] | [] => {
            println!("{USAGE}");
            Ok(())
        }
        [task, ..] => bail!("unknown task `{task}`\n\n{USAGE}"),
    }
}

/// Installs what is missing, then runs `cargo test` over the workspace with
/// the environment the installed parts need. `extra` goes to `cargo test`.
fn test(extra: &[&str]) -> Result<()> {
    let mut environment = setup::ensure_all()?;
    environment.extend(setup::root_environment());
    environment.extend(one_shot_build(
        std::env::var_os("CARGO_INCREMENTAL").is_some(),
        std::env::var_os("CI").is_some(),
        setup::target_directory()
            .join("debug")
            .join("incremental")
            .is_dir(),
    ));
    let arguments = test_arguments(extra);
    let tests = summary::run_tests(
        command::cargo(&arguments)
            .envs(environment.iter().map(|(key, value)| (key, value)))
            .into_command(),
    );
    // The matrix and the examples run even when a test failed, so that one
    // report says what works; the first failure is the one returned, and
    // each was printed as it happened.
    let matrix = matrix::run_all(&environment, &arguments);
    let examples = examples::run_all(&environment);
    tests.and(matrix).and(examples)
}

/// Turns off incremental compilation for a run that builds every test
/// binary once: on a CI machine, or in a target directory that holds no
/// incremental state yet (a clean clone). Its caches would about double
/// the disk the suite's build takes and save nothing; a target directory
/// a developer built by hand keeps its setting, and so does a caller who
/// chose one.
fn one_shot_build(caller_chose: bool, on_ci: bool, has_incremental: bool) -> Vec<(String, String)> {
    if !caller_chose && (on_ci || !has_incremental) {
        vec![("CARGO_INCREMENTAL".to_owned(), "0".to_owned())]
    } else {
        Vec::new()
    }
}

/// The workspace run's `cargo test` arguments, `extra` last. Every test
/// binary runs even when one fails, so one failure does not hide the rest
/// of the results. The crates' dev-dependencies turn on kiln-engine's
/// `testing` feature for their tests; the facade's examples ask for the
/// facade's own.
fn test_arguments<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut arguments = vec![
        "test",
        "--workspace",
        "--no-fail-fast",
        "--features",
        "kiln-gpu/testing",
    ];
    arguments.extend_from_slice(extra);
    arguments
}

/// Crates allowed in two versions, each with why no single version exists.
const ALLOWED_DUPLICATES: &[(&str, &str)] = &[
    (
        "hashbrown",
        "wgpu-hal's Vulkan allocator (gpu-allocator 0.28, the latest) asks for 0.16, naga \
         30 for 0.17, and naga's SPIR-V front end (petgraph 0.8, the latest) for 0.15",
    ),
    (
        "foldhash",
        "hashbrown 0.15's default hasher (petgraph 0.8, naga's SPIR-V front end) is 0.1, and \
         hashbrown 0.16's 0.2",
    ),
    (
        "codespan-reporting",
        "naga_oil 0.23 (the latest, WGSL #import on naga 30) asks for 0.12, naga 30 itself for \
         0.13",
    ),
    (
        "syn",
        "tracing-attributes (tracing's default macros, which naga_oil 0.23 turns on) is on \
         syn 2, every other proc macro of the tree on syn 3",
    ),
    (
        "libloading",
        "wgpu-hal's Vulkan bindings (ash 0.38, the latest) ask for 0.8 and cudarc 0.19 for \
         0.9",
    ),
];

/// Fails when the dependency tree holds two versions of one crate: CI
/// builds everything on two cores, and a second version doubles its cost.
fn duplicates() -> Result<()> {
    let tree = command::cargo(&[
        "tree",
        "--workspace",
        "--all-features",
        "--duplicates",
        "--depth",
        "0",
        "--edges",
        "normal,build,dev",
    ])
    .output("cargo tree --duplicates")?;
    let tree = String::from_utf8_lossy(&tree);
    let duplicated: Vec<&str> = tree
        .lines()
        .filter(|line| !line.trim().is_empty())
        .filter(|line| {
            !ALLOWED_DUPLICATES
                .iter()
                .any(|(name, _)| line.starts_with(&format!("{name} v")))
        })
        .collect();
    if !duplicated.is_empty() {
        bail!(
            "the dependency tree holds several versions of a crate; pin one in the root \
             Cargo.toml or Cargo.lock:\n{}",
            duplicated.join("\n")
        );
    }
    Ok(())
}

fn lint() -> Result<()> {
    rules::check(&setup::workspace_root())?;
    boundary::check(&setup::workspace_root())?;
    fan_in::check(&setup::workspace_root())?;
    surface::check(&setup::workspace_root())?;
    command::cargo(&["fmt", "--all", "--check"]).run("cargo fmt --check")?;
    command::cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])
    .run("cargo clippy")?;
    // The facade's backends and its `testing` examples are behind features
    // the workspace build leaves off: lint the facade with all of them.
    command::cargo(&[
        "clippy",
        "--package",
        "kiln-gpu",
        "--features",
        "cuda,hip,wgpu,testing",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])
    .run("cargo clippy of the facade with its backends")?;
    duplicates()?;
    publish::check(false)?;
    command::cargo(&["doc", "--workspace", "--no-deps"])
        .env("RUSTDOCFLAGS", "-D warnings")
        .run("cargo doc")?;
    docs::check_facade()?;
    println!("lint: rule ids, fmt, clippy, the publish check and doc are clean");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::one_shot_build;

    #[test]
    fn a_clean_or_ci_build_runs_without_incremental_state() {
        let off = vec![("CARGO_INCREMENTAL".to_owned(), "0".to_owned())];
        assert_eq!(one_shot_build(false, true, true), off);
        assert_eq!(one_shot_build(false, false, false), off);
        assert!(one_shot_build(false, false, true).is_empty());
        assert!(one_shot_build(true, true, false).is_empty());
    }
}
