//! Running the benchmarks: the short runs here, and the full ones packed
//! with a script for a GPU machine.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::print_table;
use crate::{command, setup};

/// The benchmarks the report runs, in order.
const BENCHES: &[&str] = &[
    "batch_compile",
    "warm_start",
    "warm_run",
    "prebuilt_start",
    "loader_hot_path",
    "store_scale",
    "store_packs",
    "shared_store",
    "cold_start",
    "fleet",
    "bucket",
    "tuning",
    "device_step",
    "serving",
];

/// A benchmark, the variables it runs with, and criterion's options.
type QuickRun = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static [&'static str],
);

/// Runs the short benchmarks here, prints the table, and packs the full
/// ones for a GPU machine when this one has none.
pub(super) fn run_here() -> Result<()> {
    let environment = setup::ensure_all()?;
    let folder = setup::target_directory().join("kiln-bench");
    let records = folder.join("records.jsonl");
    let criterion = folder.join("criterion");
    std::fs::create_dir_all(&folder)
        .with_context(|| format!("could not create {}", folder.display()))?;
    if records.exists() {
        std::fs::remove_file(&records)
            .with_context(|| format!("could not clear {}", records.display()))?;
    }
    // Short runs: the CI machine has two cores. The GPU machine's are longer.
    let quick: &[QuickRun] = &[
        (
            "batch_compile",
            &[
                ("KILN_BENCH_BATCH", "gemm:16;tiny:16;heavy:8"),
                ("KILN_BENCH_MEMORY", "heavy:16"),
            ],
            &[],
        ),
        ("warm_start", &[("KILN_BENCH_WARM", "32")], &[]),
        ("warm_run", &[("KILN_BENCH_WARM_RUN", "64")], &[]),
        ("prebuilt_start", &[("KILN_BENCH_PREBUILT", "32")], &[]),
        (
            "loader_hot_path",
            &[],
            &["--warm-up-time", "1", "--measurement-time", "2"],
        ),
        (
            "store_scale",
            &[],
            &["--warm-up-time", "1", "--measurement-time", "2"],
        ),
        (
            "store_packs",
            &[],
            &["--warm-up-time", "1", "--measurement-time", "2"],
        ),
        // Real compiles need the GPU machine's cores: the fake case only.
        ("shared_store", &[], &["shared_store_fake"]),
        ("cold_start", &[("KILN_BENCH_COLD", "8")], &[]),
        ("fleet", &[("KILN_BENCH_FLEET", "64")], &[]),
        // F6's bucket rows: Garage, built by the setup, behind the proxy.
        ("bucket", &[], &[]),
        (
            "tuning",
            &[("KILN_BENCH_TUNE", "32"), ("KILN_BENCH_PROFILED", "256")],
            &["--warm-up-time", "1", "--measurement-time", "3"],
        ),
        (
            "device_step",
            &[],
            &["--warm-up-time", "1", "--measurement-time", "3"],
        ),
        // R1 on lavapipe and compile-only NVRTC: the whole plan.
        ("serving", &[], &[]),
    ];
    // prebuilt_start runs `kiln warm`: the binary of this tree, built in the
    // benchmarks' profile, beside them.
    let kiln = kiln_binary()?;
    for (bench, variables, options) in quick {
        let mut arguments = vec!["bench", "--package", "kiln-benches", "--bench", bench, "--"];
        arguments.extend_from_slice(options);
        command::cargo(&arguments)
            .envs(environment.iter().map(|(key, value)| (key, value)))
            .envs(variables.iter().copied())
            .env("KILN_BENCH_RECORDS", &records)
            .env("CRITERION_HOME", &criterion)
            .env("KILN_BENCH_KILN", &kiln)
            .run(&format!("the {bench} benchmark"))?;
    }
    super::serving::measure(&folder)?;
    print_table(&folder, &criterion)?;
    if !has_nvidia_gpu() {
        let packed = pack()?;
        println!(
            "\nxtask: this machine has no GPU; the full benchmarks are in {}. On a machine \
             with an NVIDIA GPU and 16 cores, from the repository root, run\n\n    \
             OUT=<folder> bash .device/bench/run.sh\n\n(the table lands in <folder>/table.md; \
             docs/DEVICE.md says how the folder travels)",
            packed.display()
        );
    }
    Ok(())
}

fn has_nvidia_gpu() -> bool {
    Path::new("/dev/nvidiactl").exists()
}

/// Builds the benchmark binaries and copies them, with this xtask, into
/// `.device/bench/` beside `run.sh`.
pub(super) fn pack() -> Result<PathBuf> {
    let mut arguments = vec![
        "bench",
        "--package",
        "kiln-benches",
        "--no-run",
        "--message-format=json",
    ];
    for bench in BENCHES {
        arguments.extend_from_slice(&["--bench", bench]);
    }
    let output = command::cargo(&arguments).output("building the benchmark binaries")?;
    let folder = setup::workspace_root().join(".device").join("bench");
    if folder.exists() {
        std::fs::remove_dir_all(&folder)
            .with_context(|| format!("could not clear {}", folder.display()))?;
    }
    std::fs::create_dir_all(&folder)
        .with_context(|| format!("could not create {}", folder.display()))?;
    let mut packed = Vec::new();
    for line in String::from_utf8_lossy(&output).lines() {
        let Ok(message) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let (Some(name), Some(executable)) = (
            message["target"]["name"].as_str(),
            message["executable"].as_str(),
        ) else {
            continue;
        };
        if message["reason"] != "compiler-artifact" || !BENCHES.contains(&name) {
            continue;
        }
        copy_stripped(Path::new(executable), &folder.join(name))?;
        packed.push(name.to_owned());
    }
    for bench in BENCHES {
        if !packed.iter().any(|name| name == bench) {
            bail!("cargo built no binary for the {bench} benchmark");
        }
    }
    copy_stripped(&kiln_binary()?, &folder.join("kiln"))?;
    let xtask = std::env::current_exe().context("xtask cannot find itself")?;
    copy_stripped(&xtask, &folder.join("xtask"))?;
    let script = folder.join("run.sh");
    std::fs::write(&script, RUN_SCRIPT)
        .with_context(|| format!("could not write {}", script.display()))?;
    Ok(folder)
}

/// Builds the `kiln` binary in the benchmarks' profile (`prebuilt_start`
/// runs `kiln warm`) and returns its path.
fn kiln_binary() -> Result<PathBuf> {
    let output = command::cargo(&[
        "build",
        "--profile",
        "bench",
        "--package",
        "kiln-tool",
        "--bin",
        "kiln",
        "--message-format=json",
    ])
    .output("building the kiln binary")?;
    String::from_utf8_lossy(&output)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|message| {
            message["reason"] == "compiler-artifact" && message["target"]["name"] == "kiln"
        })
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
        .context("cargo built no kiln binary")
}

fn copy_stripped(from: &Path, to: &Path) -> Result<()> {
    std::fs::copy(from, to).with_context(|| format!("could not copy {}", from.display()))?;
    let stripped = Command::new("strip")
        .arg("--strip-debug")
        .arg(to)
        .status()
        .is_ok_and(|status| status.success());
    if !stripped {
        eprintln!("xtask: could not strip {}; it goes whole", to.display());
    }
    Ok(())
}

/// The GPU machine's run: the full benchmarks, each under a time limit, in
/// the order of what matters most, then the table.
const RUN_SCRIPT: &str = r#"#!/usr/bin/env bash
# The benchmarks behind rules F1-F4 on a GPU machine (16 cores), made by
# `cargo xtask bench-report`. Keeps records.jsonl, bench.log, machine.txt
# and table.md in $OUT (default: a temporary folder).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"
work="$(mktemp -d)"
export KILN_BENCH_RECORDS="$out/records.jsonl"
export CRITERION_HOME="$work/criterion"
# NVIDIA's compute cache (~/.nv/ComputeCache) would hand NVRTC the cubins
# of texts an earlier run compiled: each run compiles what it measures.
export CUDA_CACHE_DISABLE=1
rm -f "$KILN_BENCH_RECORDS"

if [ -z "${KILN_NVRTC_PATH:-}" ] && ! ldconfig -p 2>/dev/null | grep 'libnvrtc\.so\.13' >/dev/null; then
  found="$(find /usr/local/cuda/ /usr/local /usr /opt -name 'libnvrtc.so.13' 2>/dev/null | head -n 1)"
  if [ -n "$found" ]; then export KILN_NVRTC_PATH="$found"; fi
fi
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "machine: $(uname -srm); $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>&1 || true
  echo "KILN_NVRTC_PATH=${KILN_NVRTC_PATH:-<dynamic linker>}"
} | tee "$out/machine.txt"

# run LIMIT BENCH [VARIABLE=VALUE ...] [-- CRITERION OPTIONS ...]
run() {
  local limit="$1" bench="$2"
  shift 2
  local variables=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do variables+=("$1"); shift; done
  if [ $# -gt 0 ]; then shift; fi
  echo "=== $bench (limit ${limit}s)" | tee -a "$out/bench.log"
  timeout "$limit" env "${variables[@]}" "$here/$bench" --bench "$@" >>"$out/bench.log" 2>&1
  echo "=== $bench: exit $?" | tee -a "$out/bench.log"
}

run "${KILN_BENCH_LIMIT_BATCH:-280}" batch_compile \
  KILN_BENCH_BATCH="${KILN_BENCH_BATCH:-gemm:16,64,256;tiny:16,64,256;heavy:16,64}" \
  KILN_BENCH_MEMORY="${KILN_BENCH_MEMORY:-heavy:256}" \
  KILN_BENCH_MEMORY_MODES="${KILN_BENCH_MEMORY_MODES:-processes}"
run 60 warm_start KILN_BENCH_WARM="${KILN_BENCH_WARM:-256}"
run 120 warm_run KILN_BENCH_WARM_RUN="${KILN_BENCH_WARM_RUN:-64,256}" KILN_BENCH_KILN="$here/kiln"
run 120 prebuilt_start KILN_BENCH_PREBUILT="${KILN_BENCH_PREBUILT:-256}"
run 45 loader_hot_path -- --warm-up-time 1 --measurement-time 2
run 100 store_scale -- --warm-up-time 1 --measurement-time 2
run 600 store_packs KILN_BENCH_PACKS="${KILN_BENCH_PACKS:-10,10000,100000,1000000}" -- --warm-up-time 1 --measurement-time 2
run 150 shared_store KILN_BENCH_SHARED="${KILN_BENCH_SHARED:-64}"
run 150 cold_start KILN_BENCH_COLD="${KILN_BENCH_COLD:-64}"
run 150 fleet KILN_BENCH_FLEET="${KILN_BENCH_FLEET:-256}"
run 150 bucket
run 300 tuning KILN_BENCH_TUNE="${KILN_BENCH_TUNE:-32}" -- --warm-up-time 1 --measurement-time 3
run 200 device_step -- --warm-up-time 1 --measurement-time 3
run 200 serving KILN_BENCH_SERVING="${KILN_BENCH_SERVING:-1000:5:20}"

"$here/xtask" bench-report --from "$out" --criterion "$CRITERION_HOME" | tee "$out/table.md"
# Every row against the previous run's (a records folder) or the committed
# figures: BENCH_COMPARE=<records folder or BENCHMARKS.md copy>.
if [ -n "${BENCH_COMPARE:-}" ]; then
  "$here/xtask" bench-report --from "$out" --criterion "$CRITERION_HOME" \
    --compare "$BENCH_COMPARE" | tee "$out/compare.md"
fi
"#;
