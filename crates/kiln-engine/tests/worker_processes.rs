//! The compile worker processes, through real processes: this binary is its
//! own worker (its `main` starts with the hook, so it needs no harness and no
//! second binary), and the fake compiler finalizes in it.
//!
//! Each test is a sentence naming its rule; the binary prints libtest's
//! `test result:` line, so `cargo test` and `cargo xtask test` count it.

use std::collections::BTreeSet;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_engine::fake::{FakeCompiler, FakeKernel, FakeTarget};
use kiln_engine::{
    ArtifactStore, Failure, KernelLoader, KernelOutcome, LoaderConfig, MemoryStore, WorkerMode,
};

fn main() {
    kiln_engine::worker::run_if_worker(&[]);
    let tests: &[(&str, fn())] = &[
        (
            "f2_a_batch_finalizes_in_worker_processes_each_taking_the_next_kernel",
            f2_a_batch_finalizes_in_worker_processes_each_taking_the_next_kernel,
        ),
        (
            "l6_a_kernel_whose_compile_crashes_its_worker_fails_alone_and_the_worker_is_replaced",
            l6_a_kernel_whose_compile_crashes_its_worker_fails_alone_and_the_worker_is_replaced,
        ),
        (
            "l6_a_compile_that_hangs_is_killed_at_the_timeout_and_fails_alone",
            l6_a_compile_that_hangs_is_killed_at_the_timeout_and_fails_alone,
        ),
        (
            "f5_workers_start_with_the_first_batch_that_compiles_and_it_compiles_in_them",
            f5_workers_start_with_the_first_batch_that_compiles_and_it_compiles_in_them,
        ),
        (
            "f11_a_batch_the_store_answers_whole_starts_no_worker_process",
            f11_a_batch_the_store_answers_whole_starts_no_worker_process,
        ),
        (
            "l11_a_batch_the_store_answers_by_text_starts_no_worker_process",
            l11_a_batch_the_store_answers_by_text_starts_no_worker_process,
        ),
        (
            "l8_a_panic_in_a_worker_process_fails_its_kernel_with_the_panic_s_message",
            l8_a_panic_in_a_worker_process_fails_its_kernel_with_the_panic_s_message,
        ),
        (
            "d2_a_compile_error_in_a_worker_process_keeps_every_diagnostic",
            d2_a_compile_error_in_a_worker_process_keeps_every_diagnostic,
        ),
        (
            "l5c_kernels_with_identical_source_share_one_artifact_built_in_a_worker",
            l5c_kernels_with_identical_source_share_one_artifact_built_in_a_worker,
        ),
        (
            "f2_the_worker_processes_stay_warm_between_batches_and_shut_down_with_the_loader",
            f2_the_worker_processes_stay_warm_between_batches_and_shut_down_with_the_loader,
        ),
        (
            "f2_a_loader_set_to_threads_finalizes_in_its_own_process",
            f2_a_loader_set_to_threads_finalizes_in_its_own_process,
        ),
        (
            "f2_a_worker_program_without_the_hook_leaves_the_loader_on_threads",
            f2_a_worker_program_without_the_hook_leaves_the_loader_on_threads,
        ),
        (
            "f5_a_worker_whose_loader_is_gone_before_asking_exits_quietly",
            f5_a_worker_whose_loader_is_gone_before_asking_exits_quietly,
        ),
        (
            "p11_a_kernel_cut_by_a_short_timeout_twice_compiles_on_the_next_run",
            p11_a_kernel_cut_by_a_short_timeout_twice_compiles_on_the_next_run,
        ),
        (
            "p11_a_worker_killed_from_outside_twice_is_never_held_against_its_kernel",
            p11_a_worker_killed_from_outside_twice_is_never_held_against_its_kernel,
        ),
        (
            "p11_a_kernel_that_crashes_its_worker_alone_twice_is_quarantined_saying_how_to_undo_it",
            p11_a_kernel_that_crashes_its_worker_alone_twice_is_quarantined_saying_how_to_undo_it,
        ),
        (
            "p11_a_killed_worker_leaves_no_temporary_files",
            p11_a_killed_worker_leaves_no_temporary_files,
        ),
        (
            "f9_with_worker_processes_device_objects_are_made_on_the_pool_s_threads",
            f9_with_worker_processes_device_objects_are_made_on_the_pool_s_threads,
        ),
    ];
    kiln_test_support::harness::run(tests);
}

/// A worker started early whose program then ended without asking it
/// anything (a warm start that compiled nothing) finds its pipe closed:
/// it exits with success and says nothing on standard error.
fn f5_a_worker_whose_loader_is_gone_before_asking_exits_quietly() {
    let output = std::process::Command::new(std::env::current_exe().expect("this binary"))
        .env("KILN_WORKER_CHANNEL", "kiln-worker-1")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("the worker runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{:?}: {stderr}", output.status);
    assert!(stderr.trim().is_empty(), "it says nothing: {stderr}");
}

fn loader(target: FakeTarget, parallelism: usize) -> KernelLoader<FakeTarget> {
    KernelLoader::with_config(
        target,
        LoaderConfig {
            parallelism: NonZeroUsize::new(parallelism).expect("at least 1"),
            record_limit: 16,
            // A loader after `into_target` stands in for the next process:
            // no warm-start profile loads ahead of what the tests count.
            profile: false,
            ..LoaderConfig::default()
        },
    )
    .with_worker_mode(WorkerMode::Processes)
}

/// A storeless fake target whose compiler finalizes in worker processes and
/// logs each compile, with its process id, to `log`.
fn target_logging_to(log: &Path) -> FakeTarget {
    FakeTarget::storeless().with_compiler(
        FakeCompiler::default()
            .in_worker_processes()
            .logging_compiles_to(log),
    )
}

/// A fresh compile log path in the temporary folder.
fn compile_log(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "kiln-worker-test-{}-{name}.log",
        std::process::id()
    ));
    drop(std::fs::remove_file(&path));
    path
}

fn is_running(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// F9: an artifact a worker process built comes back to the thread of the
/// pool that sent it, which makes its device object there; the loader's
/// thread only publishes.
fn f9_with_worker_processes_device_objects_are_made_on_the_pool_s_threads() {
    let log = compile_log("f9-device");
    let target = target_logging_to(&log).with_device_time(Duration::from_millis(20));
    let mut loader = loader(target, 2);
    for number in 0..8 {
        loader.enqueue(Box::new(FakeKernel::new(number)), ());
    }
    loader.compile_queued();
    let batch = loader.records().back().expect("one batch").clone();
    assert_eq!(batch.mode, WorkerMode::Processes);
    assert_eq!(batch.count(KernelOutcome::Compiled), 8);
    let compiles = FakeCompiler::read_compile_log(&log).expect("the log reads");
    assert!(
        compiles.iter().all(|(pid, _)| *pid != std::process::id()),
        "compiled in the worker processes"
    );
    let step = loader.target().fake_device_step();
    let caller = std::thread::current().id();
    let threads: BTreeSet<String> = (0..8)
        .map(|number| {
            let thread = step
                .made_on(&kiln_engine::Kernel::id(&FakeKernel::new(number)))
                .expect("made");
            assert_ne!(
                thread, caller,
                "kernel {number} was made on the loader's thread"
            );
            format!("{thread:?}")
        })
        .collect();
    assert_eq!(threads.len(), 2, "{threads:?}");
    assert_eq!(step.most_at_once(), 2);
    drop(std::fs::remove_file(&log));
}

fn f2_a_batch_finalizes_in_worker_processes_each_taking_the_next_kernel() {
    let log = compile_log("f2-batch");
    let mut loader = loader(target_logging_to(&log), 3);
    for number in 0..12 {
        let kernel = FakeKernel::new(number).sleeping(Duration::from_millis(20));
        loader.enqueue(Box::new(kernel), ());
    }
    loader.compile_queued();

    let batch = loader.records().back().expect("one batch").clone();
    assert_eq!(batch.mode, WorkerMode::Processes);
    assert_eq!(batch.workers, 3);
    assert_eq!(batch.count(KernelOutcome::Compiled), 12);
    assert_eq!(loader.loaded_len(), 12);
    // Every compile ran in a worker, none here; more than one worker took
    // kernels.
    let compiles = FakeCompiler::read_compile_log(&log).expect("the log reads");
    assert_eq!(compiles.len(), 12);
    let processes: BTreeSet<u32> = compiles.iter().map(|(pid, _)| *pid).collect();
    assert!(!processes.contains(&std::process::id()), "{processes:?}");
    assert!(processes.len() > 1, "one worker took every kernel");
    let workers = loader.worker_processes();
    assert!(
        processes.iter().all(|pid| workers.running.contains(pid)),
        "{processes:?} ran in the pool's {workers:?}"
    );
    assert!(workers.running.len() <= 3, "{workers:?}");
    // Lowering stays in this process.
    assert_eq!(loader.target().fake_compiler().lowered(), 12);
    assert_eq!(loader.target().fake_compiler().finalized(), 0);
    drop(std::fs::remove_file(&log));
}

fn l6_a_kernel_whose_compile_crashes_its_worker_fails_alone_and_the_worker_is_replaced() {
    let log = compile_log("l6-crash");
    let mut loader = loader(target_logging_to(&log), 2);
    let crashing = FakeKernel::new(3).aborting();
    for number in 0..8 {
        let kernel = if number == 3 {
            crashing.clone()
        } else {
            FakeKernel::new(number)
        };
        loader.enqueue(Box::new(kernel), ());
    }
    loader.compile_queued();

    let batch = loader.records().back().expect("one batch").clone();
    assert_eq!(batch.mode, WorkerMode::Processes);
    assert_eq!(batch.count(KernelOutcome::Compiled), 7, "{batch:#?}");
    assert_eq!(batch.count(KernelOutcome::Failed), 1);
    for number in (0..8).filter(|&number| number != 3) {
        assert!(loader.is_loaded(&FakeKernel::new(number).artifact_id()));
    }
    let error = loader
        .load(&crashing, &crashing.artifact_id())
        .expect_err("the crashing kernel fails");
    let message = error.to_string();
    eprintln!("the crashed kernel's error: {message}");
    assert!(message.contains("the compiler crashed"), "{message}");
    assert!(message.contains("SIGABRT"), "{message}");
    assert!(matches!(error.failure, Failure::Compile(_)), "{error:?}");

    // The dead worker was replaced: the pool is back to its size, and the
    // next batch compiles in it.
    let workers = loader.worker_processes();
    assert_eq!(workers.replaced, 1, "{workers:?}");
    assert!(workers.unavailable.is_none(), "{workers:?}");
    assert!(
        workers.running.iter().all(|&pid| is_running(pid)),
        "{workers:?}"
    );
    let compiles_before = FakeCompiler::read_compile_log(&log).expect("reads").len();
    for number in 100..104 {
        loader.enqueue(Box::new(FakeKernel::new(number)), ());
    }
    loader.compile_queued();
    let batch = loader.records().back().expect("a second batch").clone();
    assert_eq!(batch.mode, WorkerMode::Processes);
    assert_eq!(batch.count(KernelOutcome::Compiled), 4);
    let compiles = FakeCompiler::read_compile_log(&log).expect("reads");
    assert_eq!(compiles.len(), compiles_before + 4);
    for (pid, _) in &compiles[compiles_before..] {
        assert!(
            loader.worker_processes().running.contains(pid),
            "{pid} is a live worker"
        );
    }
    drop(std::fs::remove_file(&log));
}

fn l6_a_compile_that_hangs_is_killed_at_the_timeout_and_fails_alone() {
    let log = compile_log("l6-hang");
    let mut loader = KernelLoader::with_config(
        target_logging_to(&log),
        LoaderConfig {
            parallelism: NonZeroUsize::new(2).expect("2 is not zero"),
            compile_timeout: Duration::from_secs(1),
            ..LoaderConfig::default()
        },
    )
    .with_worker_mode(WorkerMode::Processes);
    // Hangs for a minute: only the timeout ends it in time.
    let hanging = FakeKernel::new(3).sleeping(Duration::from_secs(60));
    for number in 0..6 {
        let kernel = if number == 3 {
            hanging.clone()
        } else {
            FakeKernel::new(number)
        };
        loader.enqueue(Box::new(kernel), ());
    }
    loader.compile_queued();

    let batch = loader.records().back().expect("one batch").clone();
    assert_eq!(batch.count(KernelOutcome::Compiled), 5, "{batch:#?}");
    assert_eq!(batch.count(KernelOutcome::Failed), 1);
    assert!(
        batch.wall < Duration::from_secs(30),
        "the hung compile was cut at its timeout, not waited for: {:?}",
        batch.wall
    );
    let error = loader
        .load(&hanging, &hanging.artifact_id())
        .expect_err("the hung kernel fails");
    let message = error.to_string();
    eprintln!("the hung kernel's error: {message}");
    assert!(message.contains("KILN_COMPILE_TIMEOUT"), "{message}");
    assert!(message.contains("within 1 s"), "{message}");
    let hung_in = FakeCompiler::read_compile_log(&log)
        .expect("reads")
        .into_iter()
        .find(|(_, number)| *number == 3)
        .map(|(pid, _)| pid)
        .expect("the hung kernel began in a worker");
    assert!(!is_running(hung_in), "its worker {hung_in} was killed");
    let workers = loader.worker_processes();
    assert_eq!(workers.replaced, 1, "{workers:?}");
    assert!(!workers.running.contains(&hung_in), "{workers:?}");
    drop(std::fs::remove_file(&log));
}

/// The processes whose parent is this one.
fn children() -> BTreeSet<u32> {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return BTreeSet::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    // The parent is the second field after the command's
                    // closing parenthesis.
                    let rest = &stat[stat.rfind(')')? + 1..];
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(me)
        })
        .collect()
}

/// Waits up to ten seconds for `check` to hold of this process's children.
fn children_until(check: impl Fn(&BTreeSet<u32>) -> bool) -> BTreeSet<u32> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = children();
        if check(&now) || std::time::Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn f5_workers_start_with_the_first_batch_that_compiles_and_it_compiles_in_them() {
    let log = compile_log("f5-early");
    let before = children();
    let mut loader = loader(target_logging_to(&log), 3);
    // A loader starts nothing before a batch says what it must compile: a
    // warm start starts no process (F11).
    std::thread::sleep(Duration::from_millis(100));
    let at_creation: BTreeSet<u32> = children().difference(&before).copied().collect();
    assert!(
        at_creation.is_empty(),
        "no worker started with the loader: {at_creation:?}"
    );
    for number in 0..9 {
        loader.enqueue(Box::new(FakeKernel::new(number)), ());
    }
    loader.compile_queued();
    let batch = loader.records().back().expect("a batch").clone();
    assert_eq!(batch.mode, WorkerMode::Processes);
    let compiled_in: BTreeSet<u32> = FakeCompiler::read_compile_log(&log)
        .expect("reads")
        .into_iter()
        .map(|(pid, _)| pid)
        .collect();
    assert!(
        (1..=3).contains(&compiled_in.len()),
        "the batch compiled in at most its three workers: {compiled_in:?}"
    );
    let workers = loader.worker_processes();
    assert!(
        (1..=3).contains(&workers.started),
        "it took the workers started for it and started no others: {workers:?}"
    );
    drop(std::fs::remove_file(&log));
}

fn f11_a_batch_the_store_answers_whole_starts_no_worker_process() {
    let log = compile_log("f11-no-workers");
    let target = FakeTarget::persisting().with_compiler(
        FakeCompiler::default()
            .in_worker_processes()
            .logging_compiles_to(&log),
    );
    let mut first = loader(target, 2);
    first.enqueue(Box::new(FakeKernel::new(1)), ());
    first.compile_queued();
    assert_eq!(first.records()[0].count(KernelOutcome::Compiled), 1);
    // Its pool shuts down with it.
    let target = first.into_target();
    let before = children_until(|now| now.is_empty());
    // A later loader on the same store: its only batch finds everything
    // stored, and starts no worker process at all.
    let mut second = loader(target, 2);
    second.enqueue(Box::new(FakeKernel::new(1)), ());
    second.compile_queued();
    assert_eq!(
        second.records()[0].count(KernelOutcome::FromStore),
        1,
        "nothing to compile"
    );
    std::thread::sleep(Duration::from_millis(100));
    let started: BTreeSet<u32> = children().difference(&before).copied().collect();
    assert!(started.is_empty(), "no worker started: {started:?}");
    assert_eq!(second.worker_processes().started, 0);
    drop(std::fs::remove_file(&log));
}

/// L11, F11: a program started on a store another tool filled under its
/// own names (`kiln warm`) finds every kernel by its text: its batch
/// compiles nothing, so it starts no worker process either.
fn l11_a_batch_the_store_answers_by_text_starts_no_worker_process() {
    let log = compile_log("l11-no-workers");
    let target = FakeTarget::persisting().with_compiler(
        FakeCompiler::default()
            .in_worker_processes()
            .logging_compiles_to(&log),
    );
    let mut warm = loader(target, 2);
    for number in 0..4 {
        let kernel = FakeKernel::new(number).sharing_source(format!("text {number}"));
        warm.enqueue(Box::new(kernel), ());
    }
    warm.compile_queued();
    assert_eq!(warm.records()[0].count(KernelOutcome::Compiled), 4);
    let target = warm.into_target();
    let before = children_until(|now| now.is_empty());
    // The program's kernels: other ids, the same texts.
    let mut program = loader(target, 2);
    for number in 0..4 {
        let kernel = FakeKernel::new(100 + number).sharing_source(format!("text {number}"));
        program.enqueue(Box::new(kernel), ());
    }
    program.compile_queued();
    assert_eq!(
        program.records()[0].count(KernelOutcome::Rekeyed),
        4,
        "each found by its text"
    );
    std::thread::sleep(Duration::from_millis(100));
    let started: BTreeSet<u32> = children().difference(&before).copied().collect();
    assert!(started.is_empty(), "no worker started: {started:?}");
    assert_eq!(program.worker_processes().started, 0);
    drop(std::fs::remove_file(&log));
}

fn l8_a_panic_in_a_worker_process_fails_its_kernel_with_the_panic_s_message() {
    let log = compile_log("l8-panic");
    let mut loader = loader(target_logging_to(&log), 2);
    let panicking = FakeKernel::new(1).panicking();
    loader.enqueue(Box::new(FakeKernel::new(0)), ());
    loader.enqueue(Box::new(panicking.clone()), ());
    loader.compile_queued();
    let error = loader
        .load(&panicking, &panicking.artifact_id())
        .expect_err("the panicking kernel fails");
    let Failure::Panicked { message } = &error.failure else {
        panic!("a panic, not {error:?}");
    };
    assert!(
        message.contains("fake compiler crashed on kernel 1"),
        "{message}"
    );
    assert!(loader.is_loaded(&FakeKernel::new(0).artifact_id()));
    // A panic is not a crash: the worker lives on.
    assert_eq!(loader.worker_processes().replaced, 0);
    drop(std::fs::remove_file(&log));
}

fn d2_a_compile_error_in_a_worker_process_keeps_every_diagnostic() {
    let log = compile_log("d2-failure");
    let mut loader = loader(target_logging_to(&log), 2);
    let failing = FakeKernel::new(7).failing();
    loader.enqueue(Box::new(FakeKernel::new(6)), ());
    let error = loader
        .load(&failing, &failing.artifact_id())
        .expect_err("fails to compile");
    let failure = error.compile_failure().expect("a compile failure");
    assert_eq!(failure.errors().count(), 3);
    assert_eq!(failure.suppressed_errors(), 2);
    assert!(error.to_string().contains("2:7"), "{error}");
    assert_eq!(
        loader.records().back().expect("a batch").mode,
        WorkerMode::Processes
    );
    let module = loader
        .load(&FakeKernel::new(6), &FakeKernel::new(6).artifact_id())
        .expect("loads");
    assert_eq!(module.text, "fake kernel 6");
    // Remarks of a successful compile come back from the worker too.
    let record = &loader.records().back().expect("a batch").records;
    assert!(
        record
            .iter()
            .any(|record| !record.diagnostics.is_empty() && record.error.is_none()),
        "{record:#?}"
    );
    drop(std::fs::remove_file(&log));
}

fn l5c_kernels_with_identical_source_share_one_artifact_built_in_a_worker() {
    let log = compile_log("l5c-share");
    let target = FakeTarget::persisting().with_compiler(
        FakeCompiler::default()
            .in_worker_processes()
            .logging_compiles_to(&log),
    );
    let mut loader = loader(target, 2);
    for number in 0..4 {
        loader.enqueue(
            Box::new(FakeKernel::new(number).sharing_source("one text")),
            (),
        );
    }
    loader.enqueue(Box::new(FakeKernel::new(9)), ());
    loader.compile_queued();
    let batch = loader.records().back().expect("a batch").clone();
    assert_eq!(batch.mode, WorkerMode::Processes);
    assert_eq!(batch.count(KernelOutcome::Compiled), 2);
    assert_eq!(batch.count(KernelOutcome::Rekeyed), 3);
    let compiles = FakeCompiler::read_compile_log(&log).expect("reads");
    assert_eq!(
        compiles.len(),
        2,
        "one compile of the shared text: {compiles:?}"
    );
    drop(std::fs::remove_file(&log));
}

fn f2_the_worker_processes_stay_warm_between_batches_and_shut_down_with_the_loader() {
    let log = compile_log("f2-warm");
    let mut loader = loader(target_logging_to(&log), 2);
    for number in 0..4 {
        loader.enqueue(Box::new(FakeKernel::new(number)), ());
    }
    loader.compile_queued();
    let first = loader.worker_processes();
    assert!(!first.running.is_empty());
    for number in 10..14 {
        loader.enqueue(Box::new(FakeKernel::new(number)), ());
    }
    loader.compile_queued();
    let second = loader.worker_processes();
    // Every worker of the first batch served the second: none was started
    // again (a second batch may start one more, up to the pool's size, if
    // one thread took every kernel of the first).
    assert!(
        first.running.iter().all(|pid| second.running.contains(pid)),
        "the same warm workers: {first:?} then {second:?}"
    );
    assert!(second.running.len() <= 2, "{second:?}");
    assert_eq!(second.replaced, 0, "{second:?}");

    drop(loader);
    for pid in &second.running {
        assert!(!is_running(*pid), "worker {pid} exited with its loader");
    }
    drop(std::fs::remove_file(&log));
}

fn f2_a_loader_set_to_threads_finalizes_in_its_own_process() {
    let log = compile_log("f2-threads");
    let mut loader = loader(target_logging_to(&log), 2).with_worker_mode(WorkerMode::Threads);
    for number in 0..4 {
        loader.enqueue(Box::new(FakeKernel::new(number)), ());
    }
    loader.compile_queued();
    assert_eq!(
        loader.records().back().expect("a batch").mode,
        WorkerMode::Threads
    );
    let compiles = FakeCompiler::read_compile_log(&log).expect("reads");
    assert!(
        compiles.iter().all(|(pid, _)| *pid == std::process::id()),
        "{compiles:?}"
    );
    assert!(loader.worker_processes().running.is_empty());
    drop(std::fs::remove_file(&log));
}

fn f2_a_worker_program_without_the_hook_leaves_the_loader_on_threads() {
    let log = compile_log("f2-no-hook");
    // SAFETY: this harness runs its tests one at a time, and no other thread
    // of the process reads the environment while it changes.
    unsafe { std::env::set_var(kiln_engine::worker::WORKER_PROGRAM_VARIABLE, "/bin/true") };
    let mut loader = loader(target_logging_to(&log), 2);
    for number in 0..4 {
        loader.enqueue(Box::new(FakeKernel::new(number)), ());
    }
    loader.compile_queued();
    // SAFETY: as above.
    unsafe { std::env::remove_var(kiln_engine::worker::WORKER_PROGRAM_VARIABLE) };

    let batch = loader.records().back().expect("a batch").clone();
    assert_eq!(batch.mode, WorkerMode::Threads);
    assert_eq!(batch.count(KernelOutcome::Compiled), 4);
    let workers = loader.worker_processes();
    let reason = workers.unavailable.expect("says why there are no workers");
    assert!(reason.contains("/bin/true"), "{reason}");
    assert!(reason.contains("run_if_worker"), "{reason}");
    drop(std::fs::remove_file(&log));
}

/// A loader of a fake target on `store` whose compiler finalizes in worker
/// processes, logging to `log`, with one worker and `timeout`.
fn loader_on(
    store: &Arc<dyn ArtifactStore>,
    log: &Path,
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
            ..LoaderConfig::default()
        },
    )
    .with_worker_mode(WorkerMode::Processes)
}

/// How many compiles of kernel `number` the log holds.
fn compiles_of(log: &Path, number: u32) -> usize {
    FakeCompiler::read_compile_log(log)
        .expect("reads")
        .iter()
        .filter(|(_, logged)| *logged == number)
        .count()
}

/// P11: a timeout the user set below the floor is the user's, not the
/// kernel's: cut twice, the kernel is compiled again on the next run instead
/// of being failed from memory.
fn p11_a_kernel_cut_by_a_short_timeout_twice_compiles_on_the_next_run() {
    let log = compile_log("p11-short-timeout");
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    let slow = FakeKernel::new(3).sleeping(Duration::from_secs(3));
    for run in 0..2 {
        let mut loader = loader_on(&store, &log, Duration::from_millis(500));
        let error = loader
            .load(&slow, &slow.artifact_id())
            .expect_err("cut at its timeout");
        let message = error.to_string();
        assert!(
            message.contains("KILN_COMPILE_TIMEOUT"),
            "run {run}: {message}"
        );
        assert!(message.contains("not held against the kernel"), "{message}");
        assert!(!message.contains("quarantined"), "run {run}: {message}");
    }
    assert_eq!(compiles_of(&log, 3), 2);
    let mut loader = loader_on(&store, &log, Duration::from_secs(120));
    loader
        .load(&slow, &slow.artifact_id())
        .expect("compiled again, and given its time, it loads");
    assert_eq!(compiles_of(&log, 3), 3, "compiled, not failed from memory");
    drop(std::fs::remove_file(&log));
}

/// Waits until kernel `number` has begun in a worker, then kills that
/// worker as the out-of-memory killer would.
fn kill_when_it_begins(log: PathBuf, number: u32, before: usize) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let begun: Vec<u32> = FakeCompiler::read_compile_log(&log)
                .expect("reads")
                .into_iter()
                .filter(|(_, logged)| *logged == number)
                .map(|(pid, _)| pid)
                .collect();
            if let Some(&pid) = begun.get(before) {
                let pid = libc::pid_t::try_from(pid).expect("a process id");
                // SAFETY: sends a signal to a worker process of this test.
                assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("kernel {number} never began in a worker");
    })
}

/// P11: a worker killed by SIGKILL from outside (the out-of-memory killer)
/// says nothing of its kernel: killed twice, the kernel compiles on the
/// next run.
fn p11_a_worker_killed_from_outside_twice_is_never_held_against_its_kernel() {
    let log = compile_log("p11-killed");
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    let slow = FakeKernel::new(5).sleeping(Duration::from_secs(4));
    for run in 0..2 {
        let killer = kill_when_it_begins(log.clone(), 5, run);
        let mut loader = loader_on(&store, &log, Duration::from_secs(120));
        let error = loader
            .load(&slow, &slow.artifact_id())
            .expect_err("its worker was killed");
        killer.join().expect("the killer ran");
        let message = error.to_string();
        eprintln!("the killed kernel's error: {message}");
        assert!(message.contains("SIGKILL"), "{message}");
        assert!(message.contains("not held against the kernel"), "{message}");
    }
    let mut loader = loader_on(&store, &log, Duration::from_secs(120));
    loader
        .load(&slow, &slow.artifact_id())
        .expect("compiled again, it loads");
    assert_eq!(compiles_of(&log, 5), 3, "compiled, not failed from memory");
    drop(std::fs::remove_file(&log));
}

/// Why this process's machine is not one on which a crash is held against
/// its kernel, if it is not.
fn no_headroom() -> Option<String> {
    for (resource, name) in [
        (libc::RLIMIT_FSIZE, "file size"),
        (libc::RLIMIT_AS, "address space"),
        (libc::RLIMIT_DATA, "data"),
    ] {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `limit` is a live rlimit the call fills.
        let read = unsafe { libc::getrlimit(resource, &mut limit) };
        if read == 0 && limit.rlim_cur != libc::RLIM_INFINITY {
            return Some(format!("this process runs under a {name} limit"));
        }
    }
    None
}

/// P11: a kernel that crashes its worker alone, on a machine with
/// headroom, twice, is quarantined: the next run fails it from memory,
/// saying what was seen and how to compile it again.
fn p11_a_kernel_that_crashes_its_worker_alone_twice_is_quarantined_saying_how_to_undo_it() {
    if let Some(reason) = no_headroom() {
        kiln_test_support::redis::skip("quarantining a crashing kernel", &reason);
        return;
    }
    let log = compile_log("p11-quarantine");
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    let crashing = FakeKernel::new(7).aborting();
    for run in 0..2 {
        let mut loader = loader_on(&store, &log, Duration::from_secs(120));
        let error = loader
            .load(&crashing, &crashing.artifact_id())
            .expect_err("it crashes");
        let message = error.to_string();
        assert!(message.contains("SIGABRT"), "run {run}: {message}");
        assert!(
            !message.contains("not held against"),
            "run {run}: {message}"
        );
    }
    let mut loader = loader_on(&store, &log, Duration::from_secs(120));
    let error = loader
        .load(&crashing, &crashing.artifact_id())
        .expect_err("quarantined");
    let message = error.to_string();
    eprintln!("the quarantined kernel's error: {message}");
    assert!(message.contains("quarantined"), "{message}");
    assert!(message.contains("SIGABRT"), "what was seen: {message}");
    assert!(message.contains("kiln forget"), "how to undo it: {message}");
    assert!(
        message.contains("--retry-failed"),
        "how to undo it: {message}"
    );
    assert_eq!(compiles_of(&log, 7), 2, "not compiled a third time");
    drop(std::fs::remove_file(&log));
}

/// A compiler killed with its worker leaves its temporary files in the
/// worker's own temporary folder, which goes with the worker.
fn p11_a_killed_worker_leaves_no_temporary_files() {
    let log = compile_log("temporary");
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    let mut loader = loader_on(&store, &log, Duration::from_millis(800));
    // The kernel that hangs writes into its worker's TMPDIR first.
    let hanging = FakeKernel::new(9)
        .sleeping(Duration::from_secs(30))
        .writing_a_temporary_file();
    let error = loader
        .load(&hanging, &hanging.artifact_id())
        .expect_err("cut at its timeout");
    assert!(
        error.to_string().contains("KILN_COMPILE_TIMEOUT"),
        "{error}"
    );
    let written = FakeCompiler::read_temporary_files(&log);
    assert_eq!(written.len(), 1, "{written:?}");
    let folder = written[0].parent().expect("a folder");
    assert_ne!(
        folder,
        std::env::temp_dir(),
        "the worker wrote into a temporary folder of its own"
    );
    assert!(!written[0].exists(), "{} was removed", written[0].display());
    assert!(!folder.exists(), "{} was removed", folder.display());
    drop(std::fs::remove_file(log.with_extension("temporary")));
    drop(loader);
    drop(std::fs::remove_file(&log));
}
