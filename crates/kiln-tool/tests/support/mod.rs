//! What the tests of the `kiln` binary share: the binary run as a real
//! process under a deadline, its JSON reports, filled stores. Scratch
//! folders, tmpfs mounts and children under limits come from
//! kiln-test-support.

// Each test binary uses its own part of this module.
#![allow(dead_code, reason = "shared by several test binaries")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use kiln_engine::fake::{FakeCompiler, FakeKernel, FakeTarget};
use kiln_engine::{KernelLoader, LoaderConfig, StoreKey};
use kiln_store::{DiskStore, StoreConfig};
#[allow(
    unused_imports,
    reason = "each test binary uses its own part of the support"
)]
pub use kiln_test_support::Scratch;
use kiln_test_support::child;
use serde_json::Value;

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

/// The row of `name` in a `kiln warm --json` report.
pub fn backend<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["backends"]
        .as_array()
        .and_then(|backends| backends.iter().find(|backend| backend["backend"] == name))
        .unwrap_or_else(|| panic!("the report has a {name} row: {report:#}"))
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
    let target = FakeTarget::on_store(Arc::new(store.clone()));
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
    assert_eq!(
        loader.statistics().stored,
        u64::from(kernels),
        "every fake kernel was stored"
    );
    store
}

/// The object file of fake kernel `number` in `store`, which holds it.
pub fn object_of(store: &DiskStore, number: u32) -> PathBuf {
    let key = StoreKey::for_artifact(
        &FakeCompiler::default_key_components(),
        &FakeKernel::new(number).artifact_id(),
        None,
    );
    store.object_path(&store.record(&key).expect("stored").object)
}
