//! The disk store under several real processes: single flight, crashes,
//! refused writes and eviction while others read. Each test names the rule
//! it proves.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use kiln_engine::fake::FakeCompiler;
use kiln_engine::{ArtifactStore, ArtifactStoreExt, Lookup};
use kiln_store::Limits;
use kiln_test_support::Scratch;
use kiln_tests::{WorkerReport, fake_key, is_whole_pattern, open_store_packing, pattern};

const WORKER: &str = env!("CARGO_BIN_EXE_kiln-test-worker");

fn report_of(output: std::process::Output) -> Result<WorkerReport> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    ensure!(
        output.status.success(),
        "worker failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let line = stdout
        .lines()
        .last()
        .context("the worker printed nothing")?;
    Ok(serde_json::from_str(line)?)
}

#[test]
fn p4_eight_processes_compile_each_shared_key_exactly_once() -> Result<()> {
    // P4, and P1: every process computes the same key for the same kernel.
    let scratch = Scratch::new("single-flight");
    let root = scratch.join("store");
    let log = scratch.join("compiles.log");
    let workers: Vec<_> = (0..8)
        .map(|seed| {
            Command::new(WORKER)
                .args([
                    "loads",
                    &root.display().to_string(),
                    &log.display().to_string(),
                ])
                .args(["50", "200", &seed.to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    for worker in workers {
        let report = report_of(worker.wait_with_output()?)?;
        assert_eq!(report.loads, 200);
        assert_eq!(report.loaded, 200, "every load gets its kernel: {report:?}");
        assert_eq!(report.wrong, 0, "every load gets the right bytes");
    }
    let compiles = FakeCompiler::read_compile_log(&log)?;
    let mut per_kernel: HashMap<u32, usize> = HashMap::new();
    for (_, number) in &compiles {
        *per_kernel.entry(*number).or_default() += 1;
    }
    assert_eq!(per_kernel.len(), 50, "all 50 keys were asked for");
    let repeated: Vec<_> = per_kernel
        .iter()
        .filter(|(_, count)| **count != 1)
        .collect();
    assert!(repeated.is_empty(), "compiled more than once: {repeated:?}");
    let processes: std::collections::HashSet<u32> =
        compiles.iter().map(|(process, _)| *process).collect();
    assert!(
        processes.len() > 1,
        "the compiles were shared among the processes"
    );
    Ok(())
}

/// Runs one `batch` worker per `(first, last, delay)`, each started `delay`
/// after the test began, all killed past a deadline; every kernel asked
/// for is compiled exactly once in total and every process loads all its
/// kernels.
fn batches_compile_each_key_once(name: &str, batches: &[(u32, u32, u64)]) -> Result<()> {
    let scratch = Scratch::new(name);
    let root = scratch.join("store");
    let log = scratch.join("compiles.log");
    let started = Instant::now();
    let mut children = Vec::new();
    for (first, last, delay) in batches {
        let wait = Duration::from_millis(*delay).saturating_sub(started.elapsed());
        std::thread::sleep(wait);
        children.push(
            Command::new(WORKER)
                .args([
                    "batch",
                    &root.display().to_string(),
                    &log.display().to_string(),
                ])
                .args(["20", &first.to_string(), &last.to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()?,
        );
    }
    let deadline = started + Duration::from_secs(120);
    for child in &mut children {
        while child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                for child in &mut children {
                    let _ = child.kill();
                }
                anyhow::bail!("a worker ran past the deadline");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let mut asked = std::collections::HashSet::new();
    for ((first, last, _), child) in batches.iter().zip(children) {
        let report = report_of(child.wait_with_output()?)?;
        let n = first.abs_diff(*last) + 1;
        assert_eq!(
            report.loaded,
            u64::from(n),
            "every kernel loads: {report:?}"
        );
        asked.extend(*first.min(last)..=*first.max(last));
    }
    let compiles = FakeCompiler::read_compile_log(&log)?;
    let mut per_kernel: HashMap<u32, usize> = HashMap::new();
    for (_, number) in &compiles {
        *per_kernel.entry(*number).or_default() += 1;
    }
    assert_eq!(
        per_kernel.len(),
        asked.len(),
        "every kernel asked was compiled"
    );
    let repeated: Vec<_> = per_kernel
        .iter()
        .filter(|(_, count)| **count != 1)
        .collect();
    assert!(repeated.is_empty(), "compiled more than once: {repeated:?}");
    Ok(())
}

#[test]
fn p12_overlapping_batches_in_opposite_orders_compile_each_key_once() -> Result<()> {
    // P4, P12
    batches_compile_each_key_once("opposite", &[(0, 39, 0), (49, 10, 50)])
}

#[test]
fn p12_a_superset_and_a_subset_batch_compile_each_key_once() -> Result<()> {
    // P4, P12
    batches_compile_each_key_once("superset", &[(10, 29, 0), (0, 39, 30), (15, 20, 60)])
}

#[test]
fn p12_four_processes_started_together_and_staggered_compile_each_key_once() -> Result<()> {
    // P4, P12
    batches_compile_each_key_once(
        "together",
        &[(0, 31, 0), (31, 0, 0), (8, 40, 0), (40, 8, 0)],
    )?;
    batches_compile_each_key_once(
        "staggered",
        &[(0, 31, 0), (31, 0, 40), (8, 40, 80), (40, 8, 120)],
    )
}

#[test]
fn p4_two_processes_started_together_in_reverse_order_compile_64_kernels_once_each() -> Result<()> {
    // P4, P12: the two meet in the middle, each having compiled for longer
    // than the claim timeout by then; the kernel the other is compiling
    // when they meet is waited for (its holder is busy, not stuck), not
    // compiled a second time.
    let scratch = Scratch::new("reverse");
    let root = scratch.join("store");
    let log = scratch.join("compiles.log");
    // At two speeds, so that one reaches the other's kernel while it is
    // being compiled.
    let children = [(40, (0, 63)), (60, (63, 0))]
        .into_iter()
        .map(|(millis, range)| {
            let mut command = spawn_command(&root, &log, millis, range);
            command
                .env("KILN_CACHE_LOCK_TIMEOUT", "1")
                .env("KILN_PARALLELISM", "2");
            Ok(command.spawn()?)
        })
        .collect::<Result<Vec<_>>>()?;
    for child in children {
        let report = report_of(child.wait_with_output()?)?;
        assert_eq!(report.loaded, 64, "every kernel loads: {report:?}");
    }
    let compiles = FakeCompiler::read_compile_log(&log)?;
    let mut per_kernel: HashMap<u32, usize> = HashMap::new();
    for (_, number) in &compiles {
        *per_kernel.entry(*number).or_default() += 1;
    }
    let repeated: Vec<_> = per_kernel
        .iter()
        .filter(|(_, count)| **count != 1)
        .collect();
    assert_eq!(per_kernel.len(), 64, "every kernel was compiled");
    assert!(repeated.is_empty(), "compiled more than once: {repeated:?}");
    assert_eq!(compiles.len(), 64, "64 compiles for 64 kernels");
    Ok(())
}

/// The lease the signalled-holder tests give every process's store: small,
/// so a stopped holder loses its keys quickly, yet renewed (every third of
/// it) in time by a live holder on a loaded machine, whose keys a waiter
/// must never take over.
const LEASE: &str = "2";

/// A `batch` worker of kernels `first..=last`, each compiling for
/// `millis`, logging its compiles to `log`; the lock timeout is long, so a
/// waiter that fell back to it would blow the test's bound.
fn spawn_batch(
    root: &std::path::Path,
    log: &std::path::Path,
    millis: u64,
    (first, last): (u32, u32),
) -> Result<std::process::Child> {
    Ok(spawn_command(root, log, millis, (first, last))
        .env("KILN_CACHE_LEASE", LEASE)
        .env("KILN_CACHE_LOCK_TIMEOUT", "60")
        .spawn()?)
}

/// The command of a `batch` worker of kernels `first..=last`, each
/// compiling for `millis`, logging its compiles to `log`.
fn spawn_command(
    root: &std::path::Path,
    log: &std::path::Path,
    millis: u64,
    (first, last): (u32, u32),
) -> Command {
    let mut command = Command::new(WORKER);
    command
        .args([
            "batch",
            &root.display().to_string(),
            &log.display().to_string(),
        ])
        .args([millis.to_string(), first.to_string(), last.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// The kernel numbers `log` holds, in the order their compiles began.
fn compiled_in(log: &std::path::Path) -> Result<Vec<u32>> {
    Ok(FakeCompiler::read_compile_log(log)?
        .into_iter()
        .map(|(_, number)| number)
        .collect())
}

/// Waits until `log` holds more than `seen` compiles: one just began.
fn wait_for_compile(log: &std::path::Path, seen: usize, deadline: Instant) -> Result<usize> {
    loop {
        let compiled = compiled_in(log)?.len();
        if compiled > seen {
            return Ok(compiled);
        }
        ensure!(Instant::now() < deadline, "the holder compiled nothing");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A slow holder (30 s a kernel: longer than anything the test waits
/// for, however loaded the machine) of a batch of 24 is sent `signal` in
/// the middle of its first compiles, with two faster processes of the same
/// batch started meanwhile, which skip the keys it holds: each key is
/// compiled once by the others (besides what the holder finished), every
/// other process loads every kernel, and they finish within the lease plus
/// a compile plus a margin of the signal, far below the lock timeout
/// (60 s).
fn a_signalled_holder_stalls_nobody_past_its_lease(name: &str, signal: libc::c_int) -> Result<()> {
    const KERNELS: (u32, u32) = (0, 23);
    let scratch = Scratch::new(name);
    let root = scratch.join("store");
    let holder_log = scratch.join("holder.log");
    let deadline = Instant::now() + Duration::from_secs(60);
    const HOLDER_COMPILE: Duration = Duration::from_secs(30);
    let mut holder = spawn_batch(
        &root,
        &holder_log,
        HOLDER_COMPILE.as_millis() as u64,
        KERNELS,
    )?;
    let run = (|| -> Result<(Duration, Vec<WorkerReport>, Vec<std::path::PathBuf>)> {
        // Its first compile began: it holds the keys its workers are on.
        wait_for_compile(&holder_log, 0, deadline)?;
        let first_began = Instant::now();
        let others_logs: Vec<_> = (0..2)
            .map(|other| scratch.join(&format!("other-{other}.log")))
            .collect();
        let mut others = Vec::new();
        for (other, log) in others_logs.iter().enumerate() {
            let order = if other == 0 {
                KERNELS
            } else {
                (KERNELS.1, KERNELS.0)
            };
            others.push(spawn_batch(&root, log, 20, order)?);
        }
        // Give them time to look their batch up and find its keys held.
        std::thread::sleep(Duration::from_millis(200));
        ensure!(
            first_began.elapsed() < HOLDER_COMPILE,
            "the holder is still in its first compiles when signalled"
        );
        let signalled = Instant::now();
        let holder_id = libc::pid_t::try_from(holder.id())?;
        // SAFETY: `kill` only sends a signal; the holder is our child,
        // not yet waited for, so its id names no other process.
        let sent = unsafe { libc::kill(holder_id, signal) };
        ensure!(sent == 0, "the signal reaches the holder");
        let mut reports = Vec::new();
        for mut other in others {
            while other.try_wait()?.is_none() {
                if Instant::now() > deadline {
                    let _ = other.kill();
                    let _ = other.wait();
                    anyhow::bail!("a process waited past the test's deadline");
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            reports.push(report_of(other.wait_with_output()?)?);
        }
        Ok((signalled.elapsed(), reports, others_logs))
    })();
    // Stopped or killed, it must not outlive the test (SIGKILL ends a
    // stopped process too).
    let _ = holder.kill();
    let _ = holder.wait();
    let (wall, reports, others_logs) = run?;
    eprintln!("{name}: the others finished {wall:?} after the signal");

    for report in &reports {
        assert_eq!(report.loaded, 24, "every kernel loads: {report:?}");
    }
    // The holder logs a compile as it begins, and was signalled in the
    // middle of its first ones: it finished none, so every key is the
    // others' to compile, once between them.
    let holder_began = compiled_in(&holder_log)?;
    let mut per_kernel: HashMap<u32, usize> = HashMap::new();
    for log in &others_logs {
        for number in compiled_in(log)? {
            *per_kernel.entry(number).or_default() += 1;
        }
    }
    for number in KERNELS.0..=KERNELS.1 {
        let by_others = per_kernel.get(&number).copied().unwrap_or(0);
        assert!(
            by_others == 1,
            "kernel {number} is compiled once by the live processes \
             (holder began {holder_began:?}; others {per_kernel:?})"
        );
    }
    let bound = Duration::from_secs_f64(LEASE.parse::<f64>()? + 10.0);
    assert!(
        wall < bound,
        "the others finished {wall:?} after the signal, past the lease and a compile ({bound:?})"
    );
    Ok(())
}

// P4, P12: a claim is held from the moment its key's compile begins until
// that kernel is published, not until the holder's batch ends: a process
// asking for the first kernel of a long batch another process compiles
// gets it as soon as that kernel is done, while the batch still compiles.
#[test]
fn p4_a_kernel_is_published_as_it_loads_and_its_waiter_goes_on() -> Result<()> {
    const KERNELS: (u32, u32) = (0, 23);
    let scratch = Scratch::new("published-early");
    let root = scratch.join("store");
    let holder_log = scratch.join("holder.log");
    let waiter_log = scratch.join("waiter.log");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut holder = spawn_batch(&root, &holder_log, 300, KERNELS)?;
    let run = (|| -> Result<(WorkerReport, usize)> {
        // Kernel 0, the first of its batch, began.
        wait_for_compile(&holder_log, 0, deadline)?;
        let mut waiter = spawn_batch(&root, &waiter_log, 20, (0, 0))?;
        while waiter.try_wait()?.is_none() {
            ensure!(
                Instant::now() < deadline,
                "the waiter ran past the deadline"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        let holder_began = compiled_in(&holder_log)?.len();
        ensure!(
            holder.try_wait()?.is_none(),
            "the holder is still compiling its batch"
        );
        Ok((report_of(waiter.wait_with_output()?)?, holder_began))
    })();
    let _ = holder.kill();
    let _ = holder.wait();
    let (report, holder_began) = run?;
    assert_eq!(report.loaded, 1, "the waiter loads its kernel: {report:?}");
    assert!(
        !waiter_log.exists() || compiled_in(&waiter_log)?.is_empty(),
        "the waiter took kernel 0 from the store instead of compiling it"
    );
    assert!(
        holder_began < 24,
        "the waiter finished while the holder had begun {holder_began} of its 24 compiles"
    );
    Ok(())
}

#[test]
fn p12_a_waiting_batch_names_the_process_that_holds_its_kernels() -> Result<()> {
    // P12: waiting is visible, in the loader's progress and its log.
    let scratch = Scratch::new("holder-named");
    let root = scratch.join("store");
    let holder_log = scratch.join("holder.log");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut holder = spawn_batch(&root, &holder_log, 1000, (0, 1))?;
    let run = (|| -> Result<Option<kiln_engine::Waiting>> {
        wait_for_compile(&holder_log, 0, deadline)?;
        let store = kiln_tests::shared_store(&root);
        let mut loader = kiln_engine::KernelLoader::with_config(
            kiln_engine::fake::FakeTarget::on_store(store),
            kiln_engine::LoaderConfig::default(),
        );
        // Kernel 0, which the holder is compiling now.
        let kernel = kiln_engine::fake::FakeKernel::new(0).sleeping(Duration::from_millis(1000));
        loader.enqueue(Box::new(kernel), ());
        let progress = loader.progress();
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watcher = {
            let done = std::sync::Arc::clone(&done);
            std::thread::spawn(move || {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Some(waiting) = progress.waiting() {
                        return Some(waiting);
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                None
            })
        };
        loader.compile_queued();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        ensure!(
            loader.statistics().compiled == 0,
            "the waiter took the holder's kernel instead of compiling it"
        );
        ensure!(
            loader.progress().waiting().is_none(),
            "a batch that ended waits for nothing"
        );
        Ok(watcher.join().expect("the watcher ends"))
    })();
    let holder_pid = holder.id();
    let _ = holder.kill();
    let _ = holder.wait();
    let waiting = run?.context("the batch waited for the holder")?;
    assert!(waiting.kernels >= 1, "{waiting:?}");
    assert!(
        waiting
            .holders
            .iter()
            .any(|holder| holder.starts_with(&format!("process {holder_pid} on "))),
        "the holder is named with its process and host: {waiting:?}"
    );
    Ok(())
}

#[test]
fn p12_a_holder_killed_mid_compile_loses_its_keys_to_the_others() -> Result<()> {
    // P4, P12
    a_signalled_holder_stalls_nobody_past_its_lease("holder-killed", libc::SIGKILL)
}

#[test]
fn p12_a_holder_stopped_mid_compile_loses_its_keys_after_its_lease() -> Result<()> {
    // P4, P12
    a_signalled_holder_stalls_nobody_past_its_lease("holder-stopped", libc::SIGSTOP)
}

#[test]
fn p3_a_publisher_killed_at_random_moments_leaves_whole_entries_or_none() -> Result<()> {
    // P3
    publisher_killed_at_random_moments("crash", 0, "publish-loop")
}

#[test]
fn p3_f10_a_publisher_killed_while_appending_to_packs_leaves_whole_entries_or_none() -> Result<()> {
    // P3, F10: the same kills on packed entries.
    publisher_killed_at_random_moments("crash-packed", 64 << 10, "publish-loop")
}

#[test]
fn p3_f10_a_writer_killed_while_putting_a_batch_of_copies_leaves_whole_entries_or_none()
-> Result<()> {
    // P3, F10: the same kills on batched puts (a remote tier's
    // write-back), whose frames of many shards are synced together.
    publisher_killed_at_random_moments("crash-batched", 64 << 10, "copy-loop")
}

/// 200 publishers killed at random moments, each packing artifacts below
/// `pack_below` bytes, and more until one of them published something (a
/// loaded machine starts them slowly: all 200 may die before their first
/// publish); then every entry the store shows is whole.
fn publisher_killed_at_random_moments(name: &str, pack_below: u64, mode: &str) -> Result<()> {
    let scratch = Scratch::new(name);
    let root = scratch.join("store");
    let mut random = 0x2545_f491_4f6c_dd1d_u64;
    let started = Instant::now();
    let published = || -> Result<bool> {
        let mut any = false;
        if root.exists() {
            open_store_packing(&root, pack_below).entries(&mut |entry| {
                any |= matches!(entry.entry, kiln_store::Entry::Record(_));
            })?;
        }
        Ok(any)
    };
    let mut kill = 0u64;
    while kill < 200 || !published()? {
        ensure!(
            started.elapsed() < Duration::from_secs(240),
            "{kill} publishers killed, none published anything"
        );
        let mut child = Command::new(WORKER)
            .args([mode, &root.display().to_string(), &kill.to_string()])
            .env("KILN_CACHE_PACK_BELOW", pack_below.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        // A batch syncs its file system twice: its writers live longer,
        // so that kills land in every phase of a batch, not only before
        // the first one ends.
        let (least, spread) = if mode == "copy-loop" {
            (20_000, 180_000)
        } else {
            (2_000, 13_000)
        };
        std::thread::sleep(Duration::from_micros(least + random % spread));
        child.kill()?; // SIGKILL
        child.wait()?;
        kill += 1;
    }
    let killing = started.elapsed();

    let store = open_store_packing(&root, pack_below);
    let report = store.verify(&mut |_| {})?;
    assert!(report.is_clean(), "nothing partial or corrupt: {report:?}");
    assert!(report.objects > 0, "the children published something");
    if pack_below > 0 {
        // F10: every artifact of the loop is small, so nothing is a file.
        ensure!(std::fs::read_dir(root.join("packs"))?.count() > 0);
        ensure!(std::fs::read_dir(root.join("objects"))?.count() == 0);
    }
    let staging_left = std::fs::read_dir(root.join("staging"))?.count();
    assert_eq!(
        staging_left, 0,
        "verify cleared what the dead left in staging"
    );

    let mut entries = Vec::new();
    store.entries(&mut |entry| {
        if let kiln_store::Entry::Record(record) = entry.entry {
            entries.push(record.key);
        }
    })?;
    assert!(!entries.is_empty());
    for key in entries {
        match store.lookup(&key) {
            Lookup::Hit { artifact, .. } => assert!(is_whole_pattern(&artifact)),
            Lookup::Miss(miss) => panic!("a visible entry does not load: {miss}"),
        }
    }
    eprintln!(
        "{kill} kills in {killing:?}, {} objects survived",
        report.objects
    );
    Ok(())
}

#[test]
fn p5_writes_refused_by_the_system_fail_quietly_and_every_kernel_loads() -> Result<()> {
    // P5: a real EFBIG from RLIMIT_FSIZE in a child process.
    writes_refused_by_the_system("fsize", 0)
}

#[test]
fn p5_f10_appends_refused_by_the_system_fail_quietly_and_every_kernel_loads() -> Result<()> {
    // P5, F10: the same refusal when the store packs.
    writes_refused_by_the_system("fsize-packed", 64 << 10)
}

fn writes_refused_by_the_system(name: &str, pack_below: u64) -> Result<()> {
    let scratch = Scratch::new(name);
    let root = scratch.join("store");
    drop(open_store_packing(&root, pack_below));
    let output = Command::new(WORKER)
        .args(["fsize-limited", &root.display().to_string(), "10"])
        .env("KILN_CACHE_PACK_BELOW", pack_below.to_string())
        .output()?;
    let report = report_of(output)?;
    assert_eq!(report.loaded, 10, "every kernel loads: {report:?}");
    assert_eq!(
        report.store_errors, 10,
        "the loader counted each failed write"
    );
    assert!(
        report.put_failures >= 10,
        "the store counted each failed write"
    );
    let store = open_store_packing(&root, pack_below);
    for number in 0..10 {
        assert!(matches!(store.lookup(&fake_key(number)), Lookup::Miss(_)));
    }
    Ok(())
}

#[test]
fn p6_eviction_under_a_byte_limit_never_hands_a_reader_a_torn_artifact() -> Result<()> {
    // P6
    eviction_while_others_read("evict-read", 0)
}

#[test]
fn p6_f10_evicting_packed_entries_never_hands_a_reader_a_torn_artifact() -> Result<()> {
    // P6, F10: eviction rewrites packs while other processes read them.
    eviction_while_others_read("evict-read-packed", 64 << 10)
}

/// Three reader processes while this one evicts and puts again, with
/// artifacts below `pack_below` bytes packed.
fn eviction_while_others_read(name: &str, pack_below: u64) -> Result<()> {
    let scratch = Scratch::new(name);
    let root = scratch.join("store");
    let store = open_store_packing(&root, pack_below);
    let keys = 100u32;
    // Even kernels are small enough for their records to carry the bytes,
    // odd ones are read from their objects: both ways of reading race
    // with eviction.
    let length = |number: u32| {
        if number.is_multiple_of(2) {
            4 << 10
        } else {
            24 << 10
        }
    };
    for number in 0..keys {
        store.put(
            &fake_key(number),
            None,
            &pattern(number, 0, length(number)),
            Duration::ZERO,
        );
    }
    let readers: Vec<_> = (0..3)
        .map(|_| {
            Command::new(WORKER)
                .args([
                    "read-loop",
                    &root.display().to_string(),
                    &keys.to_string(),
                    "2500",
                ])
                .env("KILN_CACHE_PACK_BELOW", pack_below.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let limits = Limits {
        max_bytes: 40 * (16 << 10),
        max_entries: u64::MAX,
    };
    let until = Instant::now() + Duration::from_millis(2000);
    let mut round = 1;
    let mut evicted = 0;
    while Instant::now() < until {
        evicted += store.collect(limits, &mut |_| {})?.evicted;
        for number in 0..keys {
            if !matches!(store.lookup(&fake_key(number)), Lookup::Hit { .. }) {
                store.put(
                    &fake_key(number),
                    None,
                    &pattern(number, round, length(number)),
                    Duration::ZERO,
                );
            }
        }
        round += 1;
    }
    let mut hits = 0;
    for reader in readers {
        let report = report_of(reader.wait_with_output()?)?;
        assert_eq!(
            report.wrong, 0,
            "no reader got torn or foreign bytes: {report:?}"
        );
        assert_eq!(
            report.bad_misses, 0,
            "no reader saw a corrupt entry: {report:?}"
        );
        hits += report.hits;
    }
    assert!(evicted > 0, "eviction ran");
    assert!(hits > 0, "readers read");
    assert!(store.verify(&mut |_| {})?.is_clean());
    Ok(())
}
