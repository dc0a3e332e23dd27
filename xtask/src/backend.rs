//! `cargo xtask test-backend`: one backend's tests on its real device.
//!
//! The backend's test binaries, and the example programs of `examples/`
//! that use it (built in release), are built here and run with
//! `KILN_REQUIRE_DEVICE=1`, so a test or program that would skip for want
//! of a device fails instead. On a machine without the device, they are
//! copied into `.device/<backend>/` with a `run.sh` that runs them all
//! there (see docs/DEVICE.md). They read no file of the machine that built
//! them (the tests embed the kernels they load), so the folder runs from
//! any path.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::{command, examples, setup};

/// A backend kiln knows of, and whether its crate has landed.
struct Backend {
    name: &'static str,
    package: &'static str,
    device: &'static str,
    exists: bool,
    /// Whether this machine has the device.
    is_device_here: fn() -> bool,
    /// Whether the device here is a stand-in (lavapipe for wgpu), so that
    /// the binaries are also packed for a machine with the real one.
    packs_even_when_run_here: bool,
    /// Release examples shipped beside the test binaries (measurements).
    examples: &'static [&'static str],
    /// Lines of `run.sh` that prepare the machine, before any binary runs.
    preamble: &'static str,
    /// Lines of `run.sh` after the test binaries.
    epilogue: &'static str,
}

const BACKENDS: &[Backend] = &[
    Backend {
        name: "cuda",
        package: "kiln-cuda",
        device: "an NVIDIA GPU with its driver (NVRTC compiles without one)",
        exists: true,
        is_device_here: has_nvidia_gpu,
        packs_even_when_run_here: false,
        examples: &[],
        preamble: "",
        epilogue: "",
    },
    Backend {
        name: "hip",
        package: "kiln-hip",
        device: "an AMD GPU with ROCm (hipRTC compiles without one)",
        exists: true,
        is_device_here: has_amd_gpu,
        packs_even_when_run_here: false,
        examples: &[],
        preamble: "",
        epilogue: "",
    },
    Backend {
        name: "wgpu",
        package: "kiln-wgpu",
        device: "a Vulkan adapter (lavapipe here and in CI, the NVIDIA driver on a GPU machine)",
        exists: true,
        is_device_here: has_vulkan_driver,
        packs_even_when_run_here: true,
        examples: &["pipeline_bench"],
        preamble: WGPU_PREAMBLE,
        epilogue: WGPU_EPILOGUE,
    },
];

/// Prints every backend and whether it exists yet.
pub fn list() {
    println!("backends:");
    for backend in BACKENDS {
        let state = if backend.exists {
            "available"
        } else {
            "not built yet"
        };
        println!(
            "  {:<6} {:<14} needs {}",
            backend.name, state, backend.device
        );
    }
}

/// Runs `name`'s tests with `KILN_REQUIRE_DEVICE=1`: here when this machine
/// has the device, else packed into `.device/<name>/` for a machine that has.
/// `extra` goes to `cargo test` when it builds them.
pub fn test(name: &str, extra: &[&str]) -> Result<()> {
    let Some(backend) = BACKENDS.iter().find(|backend| backend.name == name) else {
        list();
        bail!("there is no backend named `{name}`");
    };
    if !backend.exists {
        list();
        bail!("the {name} backend has not landed yet: there is nothing to test");
    }
    let environment = setup::ensure_all()?;
    let mut binaries = build_test_binaries(backend.package, extra)?;
    binaries.extend(build_example_programs(name)?);
    if (backend.is_device_here)() {
        let store = setup::target_directory().join("kiln-examples-store");
        let mut failed = Vec::new();
        for (label, binary) in &binaries {
            eprintln!("xtask: {label} ({})", binary.display());
            let status = Command::new(binary)
                .envs(environment.iter().map(|(key, value)| (key, value)))
                .env("KILN_REQUIRE_DEVICE", "1")
                .env("KILN_CACHE_DIR", &store)
                .status()
                .with_context(|| format!("could not run {}", binary.display()))?;
            if !status.success() {
                failed.push(label.clone());
            }
        }
        println!(
            "{name} device run: {} passed, {} failed",
            binaries.len() - failed.len(),
            failed.len()
        );
        if !failed.is_empty() {
            bail!(
                "the {name} tests failed on the device: {}",
                failed.join(", ")
            );
        }
        if !backend.packs_even_when_run_here {
            return Ok(());
        }
        let folder = pack(backend, &binaries)?;
        println!(
            "xtask: the {name} test binaries are also in {} for a machine with {}: copy the \
             folder there and run\n\n    bash .device/{name}/run.sh\n",
            folder.display(),
            backend.device
        );
        return Ok(());
    }
    let folder = pack(backend, &binaries)?;
    println!(
        "xtask: this machine lacks the device the {name} tests need: {}.\n\
         xtask: the {name} test binaries are in {}; copy the folder to a machine with the \
         device and run, from any folder:\n\n    bash .device/{name}/run.sh\n\n\
         (docs/DEVICE.md says how; `OUT=<folder>` keeps each binary's output there)",
        backend.device,
        folder.display()
    );
    Ok(())
}

/// The wgpu run's preparation: a Vulkan loader from `.gl/` (Debian's
/// libvulkan1 and the GL dispatch libraries NVIDIA's driver loads, carried
/// unpacked) where the machine has none, NVIDIA's driver manifest where no
/// driver is registered, and Mesa's shader cache in a fresh folder.
const WGPU_PREAMBLE: &str = r#"
if ! ldconfig -p 2>/dev/null | grep 'libvulkan\.so\.1' >/dev/null && [ -d .gl ]; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
if [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ] \
  && ! compgen -G '/usr/share/vulkan/icd.d/*.json' >/dev/null \
  && ! compgen -G '/etc/vulkan/icd.d/*.json' >/dev/null; then
  for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json; do
    if [ -f "$icd" ]; then export VK_DRIVER_FILES="$icd"; break; fi
  done
  if [ -f /usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json ]; then
    export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
  fi
fi
echo "vulkan loader: $(ldconfig -p 2>/dev/null | grep 'libvulkan\.so\.1' | tr -s ' \t\n' ' '); VK_DRIVER_FILES=${VK_DRIVER_FILES:-<default>}"
export MESA_SHADER_CACHE_DIR="$(mktemp -d)"
"#;

/// The wgpu run's measurements, with `KILN_BENCH=1`: what the stored
/// pipeline cache saves for 100 kernels, each run a fresh process and the
/// driver's own disk cache off (then on, for comparison), and whether
/// pipelines made on several threads of one device finish sooner.
const WGPU_EPILOGUE: &str = r#"
if [ "${KILN_BENCH:-0}" = 1 ] && [ -x "$here/pipeline_bench" ]; then
  bench="$(mktemp -d)"
  echo "=== pipeline cache, 100 kernels, driver disk cache off"
  for run in "cold $bench/a" "warm $bench/a" "cold $bench/b" "warm $bench/a" "warm $bench/b"; do
    __GL_SHADER_DISK_CACHE=0 MESA_SHADER_CACHE_DISABLE=true "$here/pipeline_bench" $run 100 2>&1 | tee -a "${OUT:-$bench}/bench.log"
  done
  echo "=== the driver's own disk cache on, kiln's store fresh each time"
  for run in "cold $bench/c" "cold $bench/d"; do
    __GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_PATH="$bench/nv" __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1 \
      MESA_SHADER_CACHE_DIR="$bench/mesa" "$here/pipeline_bench" $run 100 2>&1 | tee -a "${OUT:-$bench}/bench.log"
  done
  echo "=== pipelines made on several threads of one device"
  __GL_SHADER_DISK_CACHE=0 MESA_SHADER_CACHE_DISABLE=true "$here/pipeline_bench" parallel 100 2>&1 | tee -a "${OUT:-$bench}/bench.log"
fi
"#;

/// Whether a Vulkan driver is registered here: the loader's manifest
/// folders hold one, or the environment names one.
fn has_vulkan_driver() -> bool {
    ["VK_DRIVER_FILES", "VK_ICD_FILENAMES"]
        .iter()
        .any(|variable| std::env::var_os(variable).is_some_and(|value| !value.is_empty()))
        || ["/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d"]
            .iter()
            .any(|folder| {
                std::fs::read_dir(folder).is_ok_and(|entries| {
                    entries.flatten().any(|entry| {
                        entry
                            .path()
                            .extension()
                            .is_some_and(|extension| extension == "json")
                    })
                })
            })
}

/// Whether an AMD GPU and its kernel driver are here.
fn has_amd_gpu() -> bool {
    Path::new("/dev/kfd").exists()
}

/// Whether an NVIDIA GPU and its driver are here.
fn has_nvidia_gpu() -> bool {
    Path::new("/dev/nvidiactl").exists()
        || Command::new("nvidia-smi")
            .arg("-L")
            .output()
            .is_ok_and(|output| output.status.success())
}

/// Builds `package`'s tests without running them; returns each test
/// binary as (its target's name, its path).
fn build_test_binaries(package: &str, extra: &[&str]) -> Result<Vec<(String, PathBuf)>> {
    let mut arguments = vec![
        "test",
        "--package",
        package,
        "--no-run",
        "--message-format=json",
    ];
    arguments.extend_from_slice(extra);
    let output = command::cargo(&arguments).output("building the test binaries")?;
    let mut binaries = Vec::new();
    for line in String::from_utf8_lossy(&output).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if message["reason"] != "compiler-artifact" || message["profile"]["test"] != true {
            continue;
        }
        let Some(executable) = message["executable"].as_str() else {
            continue;
        };
        let label = message["target"]["name"]
            .as_str()
            .unwrap_or("tests")
            .to_owned();
        binaries.push((label, PathBuf::from(executable)));
    }
    if binaries.is_empty() {
        bail!("cargo built no test binary for {package}");
    }
    binaries.sort();
    Ok(binaries)
}

/// Builds, in release, the example programs of `examples/` that use the
/// backend `name` (those whose facade features name it); returns each as
/// (its name, its path).
fn build_example_programs(name: &str) -> Result<Vec<(String, PathBuf)>> {
    let mut programs = Vec::new();
    for example in examples::EXAMPLES
        .iter()
        .filter(|example| example.features.split(',').any(|feature| feature == name))
    {
        command::cargo(&[
            "build",
            "--release",
            "--package",
            "kiln",
            "--features",
            example.features,
            "--example",
            example.name,
        ])
        .run("building the example programs")?;
        programs.push((
            example.name.to_owned(),
            setup::target_directory()
                .join("release")
                .join("examples")
                .join(example.name),
        ));
    }
    Ok(programs)
}

/// Copies `binaries` (without their debug information, when `strip` is
/// here) into `.device/<name>/` beside a `run.sh`.
fn pack(backend: &Backend, binaries: &[(String, PathBuf)]) -> Result<PathBuf> {
    let name = backend.name;
    let folder = setup::workspace_root().join(".device").join(name);
    if folder.exists() {
        std::fs::remove_dir_all(&folder)
            .with_context(|| format!("could not clear {}", folder.display()))?;
    }
    std::fs::create_dir_all(&folder)
        .with_context(|| format!("could not create {}", folder.display()))?;
    let can_strip = Command::new("strip").arg("--version").output().is_ok();
    for (label, binary) in binaries {
        let copy = folder.join(label);
        std::fs::copy(binary, &copy)
            .with_context(|| format!("could not copy {}", binary.display()))?;
        if can_strip {
            // Debug information is most of a test binary's size, and the
            // folder travels to the device machine.
            let stripped = Command::new("strip")
                .arg("--strip-debug")
                .arg(&copy)
                .status()
                .is_ok_and(|status| status.success());
            if !stripped {
                eprintln!("xtask: could not strip {}; it goes whole", copy.display());
            }
        }
    }
    for example in backend.examples {
        command::cargo(&[
            "build",
            "--release",
            "--package",
            backend.package,
            "--example",
            example,
        ])
        .run("building the measurement examples")?;
        let built = setup::target_directory()
            .join("release")
            .join("examples")
            .join(example);
        std::fs::copy(&built, folder.join(example))
            .with_context(|| format!("could not copy {}", built.display()))?;
    }
    let labels: Vec<&str> = binaries.iter().map(|(label, _)| label.as_str()).collect();
    let script = folder.join("run.sh");
    std::fs::write(&script, run_script(backend, &labels))
        .with_context(|| format!("could not write {}", script.display()))?;
    Ok(folder)
}

/// The script that runs every binary on the device machine and prints the
/// results; it exits non-zero when any binary failed.
fn run_script(backend: &Backend, labels: &[&str]) -> String {
    let name = backend.name;
    format!(
        r#"#!/usr/bin/env bash
# Runs the {name} backend's test binaries on a machine with the device.
# Made by `cargo xtask test-backend {name}`; see docs/DEVICE.md.
# With OUT set to a folder, each binary's output is also kept there.
set -uo pipefail
here="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
export KILN_REQUIRE_DEVICE=1
export RUST_BACKTRACE=1
# The example programs keep their kernels in a store of their own.
export KILN_CACHE_DIR="${{KILN_CACHE_DIR:-$(mktemp -d)}}"

# NVRTC: KILN_NVRTC_PATH when given, else the dynamic linker's, else the
# first libnvrtc.so.13 under the usual roots.
# (grep reads the whole list: with -q it would stop early, and pipefail would
# count ldconfig's broken pipe as "not found".)
if [ -z "${{KILN_NVRTC_PATH:-}}" ] && ! ldconfig -p 2>/dev/null | grep 'libnvrtc\.so\.13' >/dev/null; then
  found="$(find /usr/local/cuda/ /usr/local /usr /opt -name 'libnvrtc.so.13' 2>/dev/null | head -n 1)"
  if [ -n "$found" ]; then export KILN_NVRTC_PATH="$found"; fi
fi

echo "machine: $(uname -srm); $(ldd --version 2>&1 | head -n 1)"
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>&1 || true
echo "KILN_NVRTC_PATH=${{KILN_NVRTC_PATH:-<dynamic linker>}}"
{preamble}
passed=0
failed=0
for binary in {binaries}; do
  echo "=== $binary"
  if [ -n "${{OUT:-}}" ]; then
    "$here/$binary" 2>&1 | tee "$OUT/$binary.log"
    status=${{PIPESTATUS[0]}}
  else
    "$here/$binary" 2>&1
    status=$?
  fi
  if [ "$status" -eq 0 ]; then
    passed=$((passed + 1))
  else
    echo "=== $binary FAILED (exit $status)"
    failed=$((failed + 1))
  fi
done
{epilogue}
echo "{name} test binaries: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
"#,
        binaries = labels.join(" "),
        preamble = backend.preamble,
        epilogue = backend.epilogue,
    )
}
