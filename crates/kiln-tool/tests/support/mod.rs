//! What the tests of the `kiln` binary share: the binary run as a real
//! process under a deadline, its JSON reports, filled stores, the kernel
//! files it warms ([`kernels`]) and the remote tier it talks to
//! ([`remote`]). Scratch folders, tmpfs mounts and children under limits
//! come from kiln-test-support.

// Each test binary uses its own part of this module.
#![allow(dead_code, reason = "shared by several test binaries")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use kiln_engine::fake::{FakeCompiler, FakeKernel, FakeTarget};
use kiln_engine::{ArtifactId, ArtifactStore, Kernel, KernelLoader, LoaderConfig, StoreKey};
use kiln_store::{DiskStore, StoreConfig};
#[allow(
    unused_imports,
    reason = "each test binary uses its own part of the support"
)]
pub use kiln_test_support::Scratch;
use kiln_test_support::child;
use kiln_wgpu::{WgpuDevice, WgpuTarget, WgpuVariant, WgslKernel};
use serde_json::Value;

pub mod kernels;
pub mod remote;

/// The binary under test.
pub const KILN: &str = env!("CARGO_BIN_EXE_kiln");

/// How long one run of the binary may take before the test fails: a walk
/// that follows a loop or a read that blocks must fail the test, never hang
/// the suite.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// `kiln --dir STORE ARGUMENTS...`, prepared.
pub fn kiln(store: &Path, arguments: &[&str]) -> Command {
    let mut command = Command::new(KILN);
    command
        .arg("--dir")
        .arg(store)
        .args(arguments)
        .env_remove("KILN_CACHE_DISABLE")
        .env_remove("KILN_RECORD_LIMIT")
        .env_remove("KILN_CACHE_MAX_SIZE")
        .env_remove("KILN_CACHE_PACK_BELOW");
    command
}

/// `kiln --dir STORE ARGUMENTS...`, run to its end as [`finish`] runs it.
pub fn run(store: &Path, arguments: &[&str]) -> Finished {
    finish(&mut kiln(store, arguments))
}

/// What a finished run left.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    /// Its standard output as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|error| {
            panic!(
                "kiln prints JSON ({error}); status {}:\n{}\n{}",
                self.status, self.stdout, self.stderr
            )
        })
    }

    /// Its standard output as JSON, after checking it succeeded.
    pub fn succeeded_json(&self) -> Value {
        assert!(
            self.status.success(),
            "kiln failed ({}): {}\n{}",
            self.status,
            self.stderr,
            self.stdout
        );
        self.json()
    }
}

/// Runs `command` to its end, or kills it at [`DEADLINE`] and fails the
/// test.
pub fn finish(command: &mut Command) -> Finished {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the kiln binary starts");
    wait(child, DEADLINE)
}

/// Waits for `child`, reading its pipes, up to `deadline`; kills it and
/// fails the test past it.
pub fn wait(child: Child, deadline: Duration) -> Finished {
    let finished = child::wait(child, deadline);
    Finished {
        status: finished.status,
        stdout: finished.stdout,
        stderr: finished.stderr,
    }
}

/// `kiln --dir STORE --json warm OPTIONS... FOLDER`, prepared, with a
/// driver shader cache of the store's own.
pub fn warm(store: &Path, options: &[&str], folder: &Path) -> Command {
    let mut command = kiln(store, &["--json", "warm"]);
    command
        .args(options)
        .arg(folder)
        .env("MESA_SHADER_CACHE_DIR", store.with_extension("mesa"));
    command
}

/// kiln's own lines on standard error (a Vulkan driver may add its own).
pub fn kiln_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|line| line.starts_with("kiln"))
        .collect()
}

/// The reason `file` failed, from a `kiln warm --json` report's
/// `failed_files`.
pub fn failure_of<'a>(report: &'a Value, file: &str) -> &'a str {
    reason_in(report, "failed_files", file)
}

/// The reason `file` was skipped, from a `kiln warm --json` report's
/// `skipped`.
pub fn skip_of<'a>(report: &'a Value, file: &str) -> &'a str {
    reason_in(report, "skipped", file)
}

fn reason_in<'a>(report: &'a Value, list: &str, file: &str) -> &'a str {
    report[list]
        .as_array()
        .and_then(|files| files.iter().find(|entry| entry["file"] == file))
        .and_then(|entry| entry["reason"].as_str())
        .unwrap_or_else(|| panic!("{file} is listed in {list}: {report:#}"))
}

/// Loads `kernel` as a program would, on the target `kiln warm` chose (the
/// device when there is one) over `store`, and checks it compiled nothing:
/// it took what `kiln warm` stored (P14).
pub fn program_loads_without_compiling(store: Arc<dyn ArtifactStore>, kernel: &WgslKernel) {
    let target = match WgpuDevice::open() {
        Ok(device) => WgpuTarget::on_device(device),
        Err(_) => WgpuTarget::compile_only(),
    };
    let mut loader = KernelLoader::with_config(target.with_store(store), LoaderConfig::default());
    let id = ArtifactId::new(kernel.id(), WgpuVariant);
    loader
        .load(kernel, &id)
        .unwrap_or_else(|error| panic!("the program's kernel loads: {error}"));
    let statistics = loader.statistics();
    assert_eq!(
        (statistics.compiled, statistics.rekeyed + statistics.hits),
        (0, 1),
        "{statistics:?}"
    );
}

/// The row of `name` in a `kiln warm --json` report.
pub fn backend<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["backends"]
        .as_array()
        .and_then(|backends| backends.iter().find(|backend| backend["backend"] == name))
        .unwrap_or_else(|| panic!("the report has a {name} row: {report:#}"))
}

/// The CUDA row of a `kiln warm --json` report, or `None` after printing
/// why NVRTC is not here (a failure when `KILN_REQUIRE_NVRTC=1`).
pub fn cuda_row(report: &Value, what: &str) -> Option<Value> {
    let row = backend(report, "cuda").clone();
    if let Some(reason) = row["unavailable"].as_str() {
        assert!(
            std::env::var_os("KILN_REQUIRE_NVRTC").is_none_or(|value| value != "1"),
            "{what} needs NVRTC, and KILN_REQUIRE_NVRTC=1: {reason}"
        );
        kiln_engine::conformance::skip(what, &format!("no NVRTC: {reason}"));
        return None;
    }
    Some(row)
}

/// A WGSL kernel that compiles with naga alone, on any machine: writes
/// `value` everywhere.
pub fn wgsl_kernel(value: u32) -> String {
    format!(
        "@group(0) @binding(0) var<storage, read_write> data: array<u32>;\n\
         @compute @workgroup_size(64)\n\
         fn main(@builtin(global_invocation_id) id: vec3<u32>) {{ data[id.x] = {value}u; }}\n"
    )
}

/// A store at `root` holding `kernels` fake kernels, filled in one batch
/// without syncing (a scratch store), each entry in files of its own: the
/// tests damage entries through their files ([`object_of`]).
pub fn filled(root: &Path, kernels: u32) -> DiskStore {
    let store = DiskStore::open(StoreConfig {
        durable: false,
        pack_below: 0,
        ..StoreConfig::at(root)
    })
    .expect("the store opens");
    let loader = fake_batch(store.clone(), kernels);
    assert_eq!(
        loader.statistics().stored,
        u64::from(kernels),
        "every fake kernel was stored"
    );
    store
}

/// A loader of fake kernels over `store` that asked for kernels
/// `0..kernels` in one batch: what it compiled, stored and found.
pub fn fake_batch(store: DiskStore, kernels: u32) -> KernelLoader<FakeTarget> {
    let target = FakeTarget::on_store(Arc::new(store));
    let mut loader = KernelLoader::with_config(
        target,
        LoaderConfig {
            // A store filled for the command line to read holds no
            // warm-start profile of the test (L12).
            profile: false,
            ..LoaderConfig::default()
        },
    );
    for number in 0..kernels {
        // The fake target's variant is `()`.
        loader.enqueue(Box::new(FakeKernel::new(number)), ());
    }
    loader.compile_queued();
    loader
}

/// The store key of fake kernel `number`.
pub fn fake_key(number: u32) -> StoreKey {
    StoreKey::for_artifact(
        &FakeCompiler::default_key_components(),
        &FakeKernel::new(number).artifact_id(),
        None,
    )
}

/// The object file of fake kernel `number` in `store`, which holds it.
pub fn object_of(store: &DiskStore, number: u32) -> PathBuf {
    store.object_path(&store.record(&fake_key(number)).expect("stored").object)
}
