//! The loader's settings at their limits, in real processes: a
//! `KILN_PARALLELISM` the operating system cannot honour, and one that is
//! not a number.
//!
//! Each test starts this test binary again as a child, running only that
//! test with `CHILD` set: the child reads its environment as a user's
//! program would, under the limits the parent gave it, and the parent
//! judges its exit status and what it printed.

use std::process::Command;

use kiln_engine::fake::{FakeKernel, FakeTarget};
use kiln_engine::{KernelLoader, LoaderConfig};
use kiln_test_support::child::{self, describe};
use kiln_test_support::{Limit, NOBODY, require};

/// Set in a child: the test it names does the child's half.
const CHILD: &str = "KILN_CONFIG_LIMITS_CHILD";

/// How many threads the thread-limited child may have beyond those its
/// user already runs: the child's main thread, the test harness's thread
/// and two workers, fewer than the cap of four per core on any machine.
const THREAD_ALLOWANCE: u64 = 4;

/// Whether this process is the child of `test`.
fn is_child_of(test: &str) -> bool {
    child::is_child(CHILD, test)
}

/// This test binary, set to run only `test`, as its child.
fn child(test: &str) -> Command {
    let mut command = child::rerun(test, CHILD, test);
    command
        .env_remove("KILN_PARALLELISM")
        .env_remove("KILN_RECORD_LIMIT")
        .env("KILN_WORKER_MODE", "threads");
    command
}

/// A batch of `count` fake kernels through a loader configured from the
/// environment, every kernel loaded afterwards.
fn load_a_batch(count: u32) -> usize {
    let mut loader = KernelLoader::new(FakeTarget::storeless());
    let kernels: Vec<FakeKernel> = (0..count).map(FakeKernel::new).collect();
    for kernel in &kernels {
        loader.enqueue(Box::new(kernel.clone()), ());
    }
    loader.compile_queued();
    for kernel in &kernels {
        loader
            .load(kernel, &kernel.artifact_id())
            .unwrap_or_else(|error| panic!("kernel {} loads: {error}", kernel.number));
    }
    loader.target().fake_compiler().threads_used()
}

/// How many threads the processes of user `uid` run now, from `/proc`.
fn threads_of_user(uid: u32) -> std::io::Result<u64> {
    let mut threads = 0;
    for entry in std::fs::read_dir("/proc")? {
        let Ok(status) = std::fs::read_to_string(entry?.path().join("status")) else {
            continue;
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|value| value.parse::<u64>().ok())
        };
        if field("Uid:") == Some(u64::from(uid)) {
            threads += field("Threads:").unwrap_or(1);
        }
    }
    Ok(threads)
}

/// `KILN_PARALLELISM=100000` in a process that may start only a few
/// threads: the value is capped with a warning, the pool starts the threads
/// it can (halving until the operating system agrees), and the batch loads
/// every kernel. It used to panic in the pool's builder (exit 101).
#[test]
fn a_parallelism_the_system_cannot_start_runs_on_the_threads_it_can() {
    const TEST: &str = "a_parallelism_the_system_cannot_start_runs_on_the_threads_it_can";
    if is_child_of(TEST) {
        let threads = load_a_batch(64);
        println!("loaded 64 kernels on {threads} threads");
        return;
    }
    if !require::is_root() {
        require::skip_without_root(
            TEST,
            "RLIMIT_NPROC counts every process of a user, so a small limit needs a user of its \
             own: only root can run the child as the unprivileged user 65534",
        );
        return;
    }
    let existing = match threads_of_user(NOBODY) {
        Ok(threads) => threads,
        Err(error) => {
            require::skip_without_root(
                TEST,
                &format!("cannot count the threads user {NOBODY} already runs in /proc: {error}"),
            );
            return;
        }
    };
    let limit = existing + THREAD_ALLOWANCE;
    let mut command = child(TEST);
    command.env("KILN_PARALLELISM", "100000");
    // The limit first, while the child is still root; then the user the
    // kernel enforces it for (it does not for root).
    child::limit(&mut command, Limit::Processes(limit));
    child::run_as(&mut command, NOBODY);
    let output = command
        .output()
        .expect("the test binary starts again as an unprivileged child");
    let report = describe(&output);
    assert!(output.status.success(), "the child failed: {report}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("loaded 64 kernels"),
        "the child loaded its kernels: {report}"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("KILN_PARALLELISM") && stderr.contains("100000"),
        "the cap is reported, naming the variable and its value: {report}"
    );
    assert!(
        stderr.contains("compile worker thread"),
        "the smaller pool is reported: {report}"
    );
}

/// `KILN_PARALLELISM=abc` is reported on stderr (the program has no logger)
/// naming the variable, its value and the number of workers used instead,
/// and the other variables still apply. It used to be dropped without a
/// word, taking `KILN_RECORD_LIMIT` with it.
#[test]
fn an_unreadable_parallelism_is_reported_and_the_default_used() {
    const TEST: &str = "an_unreadable_parallelism_is_reported_and_the_default_used";
    if is_child_of(TEST) {
        let config = LoaderConfig::from_env_or_default();
        // A second read, as a second loader makes, warns no more.
        let again = LoaderConfig::from_env_or_default();
        assert_eq!(config, again);
        println!(
            "parallelism {} record_limit {}",
            config.parallelism, config.record_limit
        );
        return;
    }
    let output = child(TEST)
        .env("KILN_PARALLELISM", "abc")
        .env("KILN_RECORD_LIMIT", "10")
        .output()
        .expect("the test binary starts again as a child");
    let report = describe(&output);
    assert!(output.status.success(), "the child failed: {report}");
    let default = LoaderConfig::default().parallelism;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(&format!("parallelism {default} record_limit 10")),
        "the default parallelism and the valid record limit are used: {report}"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("KILN_PARALLELISM"))
        .collect();
    assert_eq!(warnings.len(), 1, "one warning, once: {report}");
    assert!(
        warnings[0].contains("\"abc\"") && warnings[0].contains(&format!("using {default}")),
        "the warning names the value and what is used: {report}"
    );
}
