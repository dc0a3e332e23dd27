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
//!
//! Every device: the run lists the machine's GPUs of the backend and says
//! which it ran on. The first pass sees them all (the tests take GPU 0, and
//! the multi-GPU tests take two, required where two are there); each
//! further GPU gets a pass of its own with only it visible
//! (`CUDA_VISIBLE_DEVICES`, `HIP_VISIBLE_DEVICES`), so the whole suite runs
//! on every GPU. `run.sh` does the same on the device machine.

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
    /// The machine's devices of this backend; empty when the backend has
    /// no way to pick one (the tests then take the one they find).
    devices: fn() -> Vec<Device>,
    /// The variable that shows the tests one device only, when there is.
    visible_devices: Option<&'static str>,
    /// A shell command printing how many devices `run.sh` has to run on.
    count_devices: &'static str,
}

/// One GPU as the machine lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Device {
    /// Its index, as the backend's visible-devices variable takes it.
    index: usize,
    /// What the machine calls it.
    name: String,
}

/// One run of every binary: which devices the tests see, and how.
#[derive(Debug, PartialEq, Eq)]
struct Pass {
    /// What it ran on, for the summary.
    label: String,
    /// The variables that choose it.
    environment: Vec<(String, String)>,
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
        devices: nvidia_gpus,
        visible_devices: Some("CUDA_VISIBLE_DEVICES"),
        count_devices: "nvidia-smi -L 2>/dev/null | grep -c '^GPU'",
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
        devices: amd_gpus,
        visible_devices: Some("HIP_VISIBLE_DEVICES"),
        count_devices: "grep -l '^simd_count [1-9]' /sys/class/kfd/kfd/topology/nodes/*/properties \
                        2>/dev/null | wc -l",
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
        // wgpu's tests take the adapter wgpu ranks first; Vulkan has no
        // variable that hides the others.
        devices: Vec::new,
        visible_devices: None,
        count_devices: "echo 1",
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
        let devices = (backend.devices)();
        print_devices(name, &devices);
        let passes = passes(backend.visible_devices, &devices);
        let mut failed = Vec::new();
        let mut ran = 0usize;
        for pass in &passes {
            eprintln!("xtask: {name} pass on {}", pass.label);
            for (label, binary) in &binaries {
                eprintln!("xtask: {label} ({}) on {}", binary.display(), pass.label);
                let status = Command::new(binary)
                    .envs(environment.iter().map(|(key, value)| (key, value)))
                    .env("KILN_REQUIRE_DEVICE", "1")
                    .env("KILN_CACHE_DIR", &store)
                    .envs(pass.environment.iter().map(|(key, value)| (key, value)))
                    .status()
                    .with_context(|| format!("could not run {}", binary.display()))?;
                ran += 1;
                if !status.success() {
                    failed.push(format!("{label} on {}", pass.label));
                }
            }
        }
        println!(
            "{name} device run on {}: {} passed, {} failed",
            passes
                .iter()
                .map(|pass| pass.label.as_str())
                .collect::<Vec<_>>()
                .join("; "),
            ran - failed.len(),
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

/// Prints the devices a run found, or that the tests pick their own.
fn print_devices(name: &str, devices: &[Device]) {
    if devices.is_empty() {
        println!("{name} devices: the one the tests pick (the backend lists none to choose from)");
        return;
    }
    println!("{name} devices: {}", devices.len());
    for device in devices {
        println!("  {} {}: {}", name, device.index, device.name);
    }
}

/// The passes that run the suite on every device of `devices`: one with
/// all visible (the tests take the first, and the multi-GPU tests two,
/// required where two are there), then one per further device with only
/// it visible through `visible_devices`.
fn passes(visible_devices: Option<&str>, devices: &[Device]) -> Vec<Pass> {
    let (Some(variable), [first, others @ ..]) = (visible_devices, devices) else {
        return vec![Pass {
            label: "the device the tests pick".to_owned(),
            environment: Vec::new(),
        }];
    };
    let mut all = Pass {
        label: format!("device {} ({}), all visible", first.index, first.name),
        environment: Vec::new(),
    };
    if !others.is_empty() {
        all.label = format!(
            "device {} ({}) with all {} visible",
            first.index,
            first.name,
            devices.len()
        );
        all.environment
            .push(("KILN_REQUIRE_GPUS".to_owned(), "2".to_owned()));
    }
    std::iter::once(all)
        .chain(others.iter().map(|device| Pass {
            label: format!("device {} ({}) alone", device.index, device.name),
            environment: vec![(variable.to_owned(), device.index.to_string())],
        }))
        .collect()
}

/// The NVIDIA GPUs `nvidia-smi` lists; none when it is missing or fails.
fn nvidia_gpus() -> Vec<Device> {
    Command::new("nvidia-smi")
        .args(["--query-gpu=index,name,pci.bus_id", "--format=csv,noheader"])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| parse_nvidia_gpus(&String::from_utf8_lossy(&output.stdout)))
        .unwrap_or_default()
}

/// `nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv,noheader`'s
/// lines as devices.
fn parse_nvidia_gpus(listing: &str) -> Vec<Device> {
    listing
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(',').map(str::trim);
            let index = fields.next()?.parse().ok()?;
            let name = fields.next()?.to_owned();
            let bus = fields.next().unwrap_or("").to_owned();
            Some(Device {
                index,
                name: if bus.is_empty() {
                    name
                } else {
                    format!("{name}, {bus}")
                },
            })
        })
        .collect()
}

/// The AMD GPUs the kernel driver lists (its topology nodes with compute
/// units), in the order the HIP runtime numbers them.
fn amd_gpus() -> Vec<Device> {
    let Ok(nodes) = std::fs::read_dir("/sys/class/kfd/kfd/topology/nodes") else {
        return Vec::new();
    };
    let mut nodes: Vec<(usize, PathBuf)> = nodes
        .flatten()
        .filter_map(|node| {
            let number = node.file_name().to_str()?.parse().ok()?;
            Some((number, node.path()))
        })
        .collect();
    nodes.sort();
    nodes
        .into_iter()
        .filter(|(_, node)| {
            std::fs::read_to_string(node.join("properties"))
                .is_ok_and(|properties| is_amd_gpu_node(&properties))
        })
        .enumerate()
        .map(|(index, (_, node))| Device {
            index,
            name: std::fs::read_to_string(node.join("name"))
                .map(|name| name.trim().to_owned())
                .unwrap_or_else(|_| "an AMD GPU".to_owned()),
        })
        .collect()
}

/// Whether a kernel driver topology node's `properties` describe a GPU
/// (compute units) rather than a CPU.
fn is_amd_gpu_node(properties: &str) -> bool {
    properties.lines().any(|line| {
        line.strip_prefix("simd_count ")
            .and_then(|count| count.trim().parse::<u64>().ok())
            .is_some_and(|count| count > 0)
    })
}

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
    let binaries = command::test_executables(&output, |_| true);
    if binaries.is_empty() {
        bail!("cargo built no test binary for {package}");
    }
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
            "kiln-gpu",
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
# NVIDIA's compute cache (~/.nv/ComputeCache) hands NVRTC the cubins of
# texts an earlier run compiled, without ptxas's report: the runs compile
# what they say they compile, and report what ptxas says of it (D4).
export CUDA_CACHE_DISABLE=1
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
# Runs every binary once; $1 names the devices the pass runs on, and $2
# tells the log files of one pass from another's.
run_pass() {{
  echo "=== {name} pass on $1"
  for binary in {binaries}; do
    echo "=== $binary on $1"
    if [ -n "${{OUT:-}}" ]; then
      "$here/$binary" 2>&1 | tee "$OUT/$binary$2.log"
      status=${{PIPESTATUS[0]}}
    else
      "$here/$binary" 2>&1
      status=$?
    fi
    if [ "$status" -eq 0 ]; then
      passed=$((passed + 1))
    else
      echo "=== $binary on $1 FAILED (exit $status)"
      failed=$((failed + 1))
    fi
  done
}}

# Every device: the first pass sees all (the multi-GPU tests take two,
# required where two are there); each further device gets a pass alone.
devices="$({count_devices})"
devices="${{devices:-0}}"
ran_on="device 0"
if [ -n "{visible_devices}" ] && [ "$devices" -ge 2 ]; then
  KILN_REQUIRE_GPUS=2 run_pass "device 0 with all $devices visible" ""
  for device in $(seq 1 $((devices - 1))); do
    {visible_devices}=$device run_pass "device $device alone" ".device$device"
    ran_on="$ran_on, device $device"
  done
else
  run_pass "the device the tests pick" ""
fi
{epilogue}
echo "{name} test binaries on $ran_on of $devices: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
"#,
        binaries = labels.join(" "),
        preamble = backend.preamble,
        epilogue = backend.epilogue,
        count_devices = backend.count_devices,
        visible_devices = backend.visible_devices.unwrap_or(""),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(index: usize, name: &str) -> Device {
        Device {
            index,
            name: name.to_owned(),
        }
    }

    #[test]
    fn nvidia_smi_lines_are_the_gpus_with_their_bus() {
        let listing = "0, NVIDIA H200, 00000000:19:00.0\n1, NVIDIA H200, 00000000:3B:00.0\n\n";
        assert_eq!(
            parse_nvidia_gpus(listing),
            [
                device(0, "NVIDIA H200, 00000000:19:00.0"),
                device(1, "NVIDIA H200, 00000000:3B:00.0"),
            ]
        );
        assert_eq!(parse_nvidia_gpus("No devices were found\n"), []);
    }

    #[test]
    fn a_kernel_driver_node_with_compute_units_is_a_gpu() {
        assert!(is_amd_gpu_node("cpu_cores_count 0\nsimd_count 440\n"));
        assert!(!is_amd_gpu_node("cpu_cores_count 64\nsimd_count 0\n"));
    }

    #[test]
    fn every_gpu_gets_a_pass_and_the_first_sees_them_all() {
        let gpus = [device(0, "H200"), device(1, "H200"), device(2, "H200")];
        let passes = passes(Some("CUDA_VISIBLE_DEVICES"), &gpus);
        assert_eq!(passes.len(), 3);
        assert_eq!(
            passes[0].environment,
            [("KILN_REQUIRE_GPUS".to_owned(), "2".to_owned())]
        );
        assert_eq!(
            passes[2].environment,
            [("CUDA_VISIBLE_DEVICES".to_owned(), "2".to_owned())]
        );
        assert!(passes[2].label.contains("device 2 (H200)"), "{passes:?}");
    }

    #[test]
    fn one_gpu_or_no_list_is_one_pass_that_requires_no_second_gpu() {
        let one = passes(Some("CUDA_VISIBLE_DEVICES"), &[device(0, "H200")]);
        assert_eq!(one.len(), 1);
        assert!(one[0].environment.is_empty());
        let unlisted = passes(None, &[]);
        assert_eq!(unlisted.len(), 1);
        assert_eq!(unlisted[0].label, "the device the tests pick");
    }

    #[test]
    fn the_script_runs_a_pass_per_further_gpu() {
        let cuda = BACKENDS
            .iter()
            .find(|backend| backend.name == "cuda")
            .expect("the cuda backend");
        let script = run_script(cuda, &["compile", "device"]);
        assert!(
            script.contains("CUDA_VISIBLE_DEVICES=$device run_pass"),
            "{script}"
        );
        assert!(script.contains("KILN_REQUIRE_GPUS=2 run_pass"), "{script}");
        assert!(
            script.contains("for binary in compile device; do"),
            "{script}"
        );
        for backend in BACKENDS {
            let script = run_script(backend, &["compile"]);
            let file = std::env::temp_dir().join(format!(
                "kiln-xtask-run-{}-{}.sh",
                backend.name,
                std::process::id()
            ));
            std::fs::write(&file, &script).expect("the temp folder is writable");
            let checked = Command::new("bash").arg("-n").arg(&file).output();
            let _ = std::fs::remove_file(&file);
            let checked = checked.expect("bash runs");
            assert!(
                checked.status.success(),
                "{}'s run.sh does not parse: {}",
                backend.name,
                String::from_utf8_lossy(&checked.stderr)
            );
        }
    }
}
