//! What the tests of the `kiln` binary share: scratch folders, the binary
//! run as a real process under a deadline, a tmpfs of a chosen size.

// Each test binary uses its own part of this module.
#![allow(dead_code, reason = "shared by several test binaries")]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_core::fake::{FakeKernel, FakeTarget};
use kiln_core::{KernelLoader, LoaderConfig};
use kiln_store::{DiskStore, StoreConfig};
use serde_json::Value;

/// The binary under test.
pub const KILN: &str = env!("CARGO_BIN_EXE_kiln");

/// How long one run of the binary may take before the test fails: a walk
/// that follows a loop or a read that blocks must fail the test, never hang
/// the suite.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// A folder for one test, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(test: &str) -> Self {
        let path = std::env::temp_dir().join(format!("kiln-cli-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("the temporary folder is writable");
        Self(path)
    }

    /// A folder inside it, created.
    pub fn folder(&self, name: &str) -> PathBuf {
        let folder = self.0.join(name);
        std::fs::create_dir_all(&folder).expect("the temporary folder is writable");
        folder
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `kiln --dir STORE ARGUMENTS...`, prepared.
pub fn kiln(store: &Path, arguments: &[&str]) -> Command {
    let mut command = Command::new(KILN);
    command
        .arg("--dir")
        .arg(store)
        .args(arguments)
        .env_remove("KILN_CACHE_DISABLE")
        .env_remove("KILN_RECORD_LIMIT")
        .env_remove("KILN_CACHE_MAX_SIZE");
    command
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
pub fn wait(mut child: Child, deadline: Duration) -> Finished {
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut text);
            }
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|pipe| Box::new(pipe) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|pipe| Box::new(pipe) as Box<dyn Read + Send>),
    );
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            break status;
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = stderr.join().unwrap_or_default();
            panic!("kiln ran past {deadline:?} and was killed; it printed:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Finished {
        status,
        stdout: stdout.join().expect("standard output was read"),
        stderr: stderr.join().expect("standard error was read"),
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
/// without syncing (a scratch store).
pub fn filled(root: &Path, kernels: u32) -> DiskStore {
    let store = DiskStore::open(StoreConfig {
        durable: false,
        ..StoreConfig::at(root)
    })
    .expect("the store opens");
    let target = FakeTarget::on_store(Arc::new(store.clone()));
    let mut loader = KernelLoader::with_config(target, LoaderConfig::default());
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

/// A tmpfs of `size` mounted on a folder of its own, unmounted when
/// dropped. Mounting needs privileges the machine may not give: `None`
/// then, with the reason printed as a skip.
pub struct Tmpfs {
    pub path: PathBuf,
}

impl Tmpfs {
    pub fn mount(path: PathBuf, size: &str, what: &str) -> Option<Self> {
        std::fs::create_dir_all(&path).expect("the mount point can be created");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .output();
        match mounted {
            Ok(output) if output.status.success() => Some(Self { path }),
            Ok(output) => {
                kiln_core::conformance::skip(
                    what,
                    &format!(
                        "cannot mount a {size} tmpfs ({}): {}",
                        output.status,
                        String::from_utf8_lossy(&output.stderr).trim()
                    ),
                );
                None
            }
            Err(error) => {
                kiln_core::conformance::skip(
                    what,
                    &format!("cannot run mount for a {size} tmpfs: {error}"),
                );
                None
            }
        }
    }

    /// Makes it read-only.
    pub fn remount_read_only(&self) {
        let status = Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(&self.path)
            .status()
            .expect("mount runs");
        assert!(status.success(), "the tmpfs remounts read-only");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
    }
}
