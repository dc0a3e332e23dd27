//! Worker programs that break the protocol part-way, through real
//! processes: this binary is its own worker program, and when
//! `KILN_TEST_FAKE_WORKER` says so it plays a broken one instead of
//! serving (L8, P11).
//!
//! Each test is a sentence naming its rule; the binary prints libtest's
//! `test result:` line, so `cargo test` and `cargo xtask test` count it.

use std::io::{Read, Write};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kiln_engine::fake::{FakeCompiler, FakeKernel, FakeTarget};
use kiln_engine::{ArtifactStore, KernelLoader, LoaderConfig, MemoryStore, WorkerMode};

/// What the worker processes of a test play: `partial` (answers its start,
/// then sends the first bytes of a reply and stops), `exit` (answers its
/// start, then exits with status 0 while it holds a kernel).
const FAKE: &str = "KILN_TEST_FAKE_WORKER";

fn main() {
    play_a_broken_worker_if_asked();
    kiln_engine::worker::run_if_worker(&[]);
    let tests: &[(&str, fn())] = &[
        (
            "l8_a_worker_that_stops_mid_reply_costs_one_timeout",
            l8_a_worker_that_stops_mid_reply_costs_one_timeout,
        ),
        (
            "p11_a_worker_that_exits_cleanly_mid_batch_is_never_held_against_its_kernel",
            p11_a_worker_that_exits_cleanly_mid_batch_is_never_held_against_its_kernel,
        ),
    ];
    kiln_test_support::harness::run(tests);
}

/// As a worker (the loader set its channel variable) told to be broken:
/// answers its start request as a kiln worker does (a frame of one byte,
/// the first reply), then breaks.
fn play_a_broken_worker_if_asked() {
    if std::env::var_os("KILN_WORKER_CHANNEL").is_none() {
        return;
    }
    let Ok(role) = std::env::var(FAKE) else {
        return;
    };
    let mut output = std::io::stdout().lock();
    let started = [1u8, 0, 0, 0, 0];
    drop(output.write_all(&started).and_then(|()| output.flush()));
    match role.as_str() {
        "partial" => {
            // A frame of 100 bytes, of which 3 come.
            drop(
                output
                    .write_all(&[100, 0, 0, 0, 2, 0, 0])
                    .and_then(|()| output.flush()),
            );
            std::thread::sleep(Duration::from_secs(300));
        }
        _ => {
            // Wait for the finalize request to arrive, then leave cleanly.
            let mut input = std::io::stdin().lock();
            let mut bytes = [0u8; 4096];
            let deadline = Instant::now() + Duration::from_secs(5);
            let mut read = 0;
            while read < 64 && Instant::now() < deadline {
                match input.read(&mut bytes) {
                    Ok(0) | Err(_) => break,
                    Ok(more) => read += more,
                }
            }
        }
    }
    std::process::exit(0);
}

fn set_role(role: Option<&str>) {
    // SAFETY: this harness runs its tests one at a time, and no other
    // thread of the process reads the environment while it changes.
    unsafe {
        match role {
            Some(role) => std::env::set_var(FAKE, role),
            None => std::env::remove_var(FAKE),
        }
    }
}

/// A compile log no other test shares: a recipe of its own, so no worker
/// started early for another test is taken.
fn compile_log(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "kiln-worker-replies-{name}-{}.log",
        std::process::id()
    ))
}

fn loader_on(
    store: &Arc<dyn ArtifactStore>,
    log: &PathBuf,
    timeout: Duration,
) -> KernelLoader<FakeTarget> {
    KernelLoader::with_config(
        FakeTarget::on_store(Arc::clone(store)).with_compiler(
            FakeCompiler::default()
                .in_worker_processes()
                .logging_compiles_to(log),
        ),
        LoaderConfig {
            parallelism: NonZeroUsize::new(1).expect("1 is not zero"),
            compile_timeout: timeout,
            profile: false,
            ..LoaderConfig::default()
        },
    )
    .with_worker_mode(WorkerMode::Processes)
}

/// Runs `work` on a thread of its own and gives its answer, or fails when
/// it has not answered within `limit`: a hang is a failure, not a test
/// that never ends.
fn within<T: Send + 'static>(limit: Duration, work: impl FnOnce() -> T + Send + 'static) -> T {
    let (sender, answers) = mpsc::channel();
    std::thread::spawn(move || drop(sender.send(work())));
    answers
        .recv_timeout(limit)
        .unwrap_or_else(|_| panic!("no answer within {} s: it hangs", limit.as_secs()))
}

/// L8: every byte of a reply is under the compile timeout, not only its
/// first: a worker that sends part of a frame and stops costs one timeout,
/// and the kernel fails alone, saying so.
fn l8_a_worker_that_stops_mid_reply_costs_one_timeout() {
    let log = compile_log("partial");
    set_role(Some("partial"));
    let timeout = Duration::from_secs(2);
    let (message, wall) = within(Duration::from_secs(60), move || {
        let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
        let mut loader = loader_on(&store, &log, timeout);
        let kernel = FakeKernel::new(1);
        let began = Instant::now();
        let outcome = loader.load(&kernel, &kernel.artifact_id());
        let wall = began.elapsed();
        drop(std::fs::remove_file(&log));
        (outcome.err().map(|error| error.to_string()), wall)
    });
    set_role(None);
    let message = message.expect("the kernel fails: its worker never finished its reply");
    eprintln!("the kernel's error: {message}");
    assert!(message.contains("KILN_COMPILE_TIMEOUT"), "{message}");
    assert!(
        wall < timeout * 3,
        "one timeout ({timeout:?}), not more: {wall:?}"
    );
}

/// P11: a worker that exits with status 0 while it holds a kernel was ended
/// by its program, not crashed by the kernel: twice is not a quarantine,
/// and the error says it is not held against the kernel.
fn p11_a_worker_that_exits_cleanly_mid_batch_is_never_held_against_its_kernel() {
    let log = compile_log("exit");
    set_role(Some("exit"));
    let messages = within(Duration::from_secs(60), move || {
        let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
        let kernel = FakeKernel::new(2);
        let messages: Vec<String> = (0..3)
            .map(|_| {
                let mut loader = loader_on(&store, &log, Duration::from_secs(60));
                loader
                    .load(&kernel, &kernel.artifact_id())
                    .err()
                    .map_or_else(|| "compiled".to_owned(), |error| error.to_string())
            })
            .collect();
        drop(std::fs::remove_file(&log));
        messages
    });
    set_role(None);
    for (run, message) in messages.iter().enumerate() {
        eprintln!("run {run}: {message}");
        assert!(!message.contains("quarantined"), "run {run}: {message}");
        if message != "compiled" {
            assert!(
                message.contains("not held against the kernel"),
                "run {run}: {message}"
            );
        }
    }
}
