//! A real S3 server for the bucket tier's tests: Garage, as a single node
//! on loopback ports, its files in a scratch folder (SQLite metadata,
//! replication 1), with a layout, a key and a bucket made by its own
//! command line; stopped by its pid. A test that finds no Garage prints
//! why it skips, unless `KILN_REQUIRE_S3=1` (set by `cargo xtask test`,
//! whose setup builds it) turns the skip into a failure.

#![allow(
    dead_code,
    reason = "each test binary uses its own part of the support"
)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kiln_bucket::{BucketConfig, BucketStore, Credentials};
use kiln_remote::{Keys, keygen};
use kiln_test_support::Scratch;

/// The bucket every test's objects go to, each test under a prefix of
/// its own.
pub const BUCKET: &str = "kiln-test";

/// The `garage` binary: `KILN_GARAGE`, else where `cargo xtask setup`
/// installs it in the target directory.
pub fn garage_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("KILN_GARAGE").filter(|path| !path.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .filter(|folder| !folder.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let binary = target.join("kiln-s3/bin/garage");
    if binary.is_file() {
        Ok(binary)
    } else {
        Err(
            "Garage is not built: `cargo xtask setup` builds it (cargo install garage), or \
             set KILN_GARAGE to its path"
                .to_owned(),
        )
    }
}

/// Prints that `what` skips because `reason`, or fails when
/// `KILN_REQUIRE_S3=1`.
pub fn skip(what: &str, reason: &str) {
    kiln_test_support::skip_unless(&["KILN_REQUIRE_S3"], what, reason);
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("the loopback interface takes a listener")
}

/// One Garage node, killed by its pid when dropped.
pub struct Garage {
    child: Child,
    /// The S3 API's loopback port.
    pub port: u16,
    /// The access key made for the tests.
    pub credentials: Credentials,
    /// Its files.
    pub scratch: Scratch,
    config: PathBuf,
    binary: PathBuf,
}

impl Garage {
    /// A node with a bucket and a key that may read and write it, or why
    /// not.
    pub fn start(test: &str) -> Result<Self, String> {
        let binary = garage_binary()?;
        let scratch = Scratch::new(test);
        let (rpc, s3) = (free_port(), free_port());
        let secret: String = (0..32)
            .map(|index| format!("{:02x}", (index * 37 + std::process::id() as usize) % 256))
            .collect();
        let config = scratch.join("garage.toml");
        std::fs::write(
            &config,
            format!(
                "metadata_dir = \"{meta}\"\n\
                 data_dir = \"{data}\"\n\
                 db_engine = \"sqlite\"\n\
                 replication_factor = 1\n\
                 rpc_bind_addr = \"127.0.0.1:{rpc}\"\n\
                 rpc_public_addr = \"127.0.0.1:{rpc}\"\n\
                 rpc_secret = \"{secret}\"\n\
                 [s3_api]\n\
                 s3_region = \"garage\"\n\
                 api_bind_addr = \"127.0.0.1:{s3}\"\n",
                meta = scratch.folder("meta").display(),
                data = scratch.folder("data").display(),
            ),
        )
        .map_err(|error| error.to_string())?;
        let log = std::fs::File::create(scratch.join("garage.log")).map_err(|e| e.to_string())?;
        let mut command = Command::new(&binary);
        command
            .arg("-c")
            .arg(&config)
            .arg("server")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|error| error.to_string())?)
            .stderr(log);
        let child = spawn_tied_to_this_process(command)
            .map_err(|error| format!("cannot start {}: {error}", binary.display()))?;
        let mut garage = Self {
            child,
            port: s3,
            credentials: Credentials {
                key_id: String::new(),
                secret: String::new(),
                token: None,
            },
            scratch,
            config,
            binary,
        };
        garage.set_up()?;
        Ok(garage)
    }

    /// Runs the command line against this node; its standard output.
    pub fn cli(&self, arguments: &[&str]) -> Result<String, String> {
        let output = Command::new(&self.binary)
            .arg("-c")
            .arg(&self.config)
            .args(arguments)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .output()
            .map_err(|error| error.to_string())?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(format!(
                "garage {}: {}{}",
                arguments.join(" "),
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    }

    fn set_up(&mut self) -> Result<(), String> {
        let started = Instant::now();
        let node = loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("garage exited at once ({status})"));
            }
            match self.cli(&["node", "id", "-q"]) {
                Ok(id) => break id,
                Err(error) if started.elapsed() > Duration::from_secs(60) => return Err(error),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        let node = node.trim().split('@').next().unwrap_or_default().to_owned();
        // The node's id is read from its files, which it writes before it
        // listens for its command line: on a loaded machine the first
        // command that talks to it may find its port closed (seen once:
        // "Connection refused"). It is asked again within the minute.
        loop {
            match self.cli(&["layout", "assign", "-z", "dc1", "-c", "1G", &node]) {
                Ok(_) => break,
                Err(error) if started.elapsed() > Duration::from_secs(60) => return Err(error),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
        self.cli(&["layout", "apply", "--version", "1"])?;
        let created = self.cli(&["key", "create", "kiln-test"])?;
        let field = |name: &str| {
            created
                .lines()
                .find_map(|line| line.trim().strip_prefix(name))
                .map(|value| value.trim().to_owned())
                .ok_or_else(|| format!("no `{name}` in `garage key create`'s output: {created}"))
        };
        self.credentials.key_id = field("Key ID:")?;
        self.credentials.secret = field("Secret key:")?;
        self.cli(&["bucket", "create", BUCKET])?;
        self.cli(&[
            "bucket",
            "allow",
            "--read",
            "--write",
            "--owner",
            BUCKET,
            "--key",
            "kiln-test",
        ])?;
        // The API answers once the layout reached it.
        let deadline = Instant::now() + Duration::from_secs(60);
        let store = self.store_at(self.port, fleet_keys(), &fresh_prefix());
        while Instant::now() < deadline {
            use kiln_engine::Blobs;
            if matches!(
                store.lookup_blob(&kiln_engine::store::BlobKey::new("probe")),
                kiln_engine::Lookup::Miss(kiln_engine::Miss::Absent)
            ) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err("Garage's S3 API did not answer within a minute".to_owned())
    }

    /// The settings of a store on this node (through `port`: the node's,
    /// or a proxy's in front of it) under `prefix`.
    pub fn config_at(&self, port: u16, keys: Keys, prefix: &str) -> BucketConfig {
        let endpoint = url::Url::parse(&format!("http://127.0.0.1:{port}")).expect("a URL");
        let mut config = BucketConfig::new(endpoint, BUCKET, keys);
        config.region = "garage".to_owned();
        config.prefix = prefix.to_owned();
        config.credentials = Some(self.credentials.clone());
        config.timeout = Duration::from_secs(2);
        config.retry_after = Duration::from_millis(300);
        config
    }

    /// A store on this node through `port` under `prefix`.
    pub fn store_at(&self, port: u16, keys: Keys, prefix: &str) -> BucketStore {
        BucketStore::open(self.config_at(port, keys, prefix)).expect("a store with a key opens")
    }

    /// A store on this node under `prefix`.
    pub fn store(&self, keys: Keys, prefix: &str) -> BucketStore {
        self.store_at(self.port, keys, prefix)
    }

    /// SIGSTOP: the node keeps its port and answers nothing until
    /// [`resume`](Self::resume)d. Returns once every thread of the node
    /// has stopped (at most 5 s): `kill` returns when the signal is
    /// queued, and a process of many threads stops only once the one
    /// thread woken for the signal runs and stops the others; on a loaded
    /// machine that is milliseconds later, and the other threads answer
    /// requests meanwhile (a test's lookup sent just after `kill` found
    /// one key of eight answered).
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
        let until = Instant::now() + Duration::from_secs(5);
        while !self.stopped() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Whether every thread of the node is stopped by a signal (state
    /// `T` in the system's process table); `true` where the table cannot
    /// be read, as nothing can be waited on then.
    fn stopped(&self) -> bool {
        let Ok(threads) = std::fs::read_dir(format!("/proc/{}/task", self.child.id())) else {
            return true;
        };
        threads.flatten().all(|thread| {
            std::fs::read_to_string(thread.path().join("stat"))
                .ok()
                .and_then(|stat| {
                    // The state follows the command's name in parentheses.
                    let (_, rest) = stat.rsplit_once(')')?;
                    Some(rest.trim_start().starts_with('T'))
                })
                .unwrap_or(true)
        })
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid fits");
        // SAFETY: a signal to the server this value started, by its pid
        // (reaped only when dropped, so the pid is still its).
        let sent = unsafe { libc::kill(pid, signal) };
        assert_eq!(sent, 0, "the signal reaches garage");
    }

    /// Kills the node by its pid and reaps it.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Garage {
    fn drop(&mut self) {
        self.resume_quietly();
        self.stop();
    }
}

impl Garage {
    fn resume_quietly(&self) {
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: as in `signal`; a failure (already gone) is harmless.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
    }
}

/// Starts `command` from a thread that lives as long as this process, with
/// SIGKILL as its parent-death signal: a node shared by a test binary's
/// tests (kept in a static, never dropped) ends with the binary.
fn spawn_tied_to_this_process(mut command: Command) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    // SAFETY: `prctl` is async-signal-safe and touches no memory of the
    // parent; it runs in the child between fork and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(command.spawn());
        // The parent-death signal follows this thread: it must outlive
        // every test.
        loop {
            std::thread::park();
        }
    });
    receiver
        .recv()
        .unwrap_or_else(|_| Err(std::io::Error::other("the spawning thread ended")))
}

/// The node every test of a binary shares, started by the first to ask;
/// `None` after printing why not.
pub fn shared(what: &str) -> Option<&'static Garage> {
    static NODE: std::sync::OnceLock<Result<Garage, String>> = std::sync::OnceLock::new();
    match NODE.get_or_init(|| Garage::start("kiln-bucket-shared")) {
        Ok(garage) => Some(garage),
        Err(reason) => {
            skip(what, reason);
            None
        }
    }
}

/// A fleet key, new for each call.
pub fn fleet_keys() -> Keys {
    Keys {
        fleet: Some(keygen::fleet_key().expect("the system gives random bytes")),
        ..Keys::default()
    }
}

/// A prefix no other store of this process uses.
pub fn fresh_prefix() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "t{}-{}/",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Garage for `what`, or `None` after printing why not.
pub fn garage(what: &str) -> Option<Garage> {
    match Garage::start(what) {
        Ok(garage) => Some(garage),
        Err(reason) => {
            skip(what, &reason);
            None
        }
    }
}
