//! The disk store under several real processes: single flight, crashes,
//! refused writes and eviction while others read. Each test names the rule
//! it proves.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use kiln_core::fake::FakeCompiler;
use kiln_core::{ArtifactStore, Lookup};
use kiln_store::Limits;
use kiln_test_support::Scratch;
use kiln_tests::{WorkerReport, fake_key, is_whole_pattern, open_store, pattern};

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

#[test]
fn p3_a_publisher_killed_at_random_moments_leaves_whole_entries_or_none() -> Result<()> {
    // P3
    let scratch = Scratch::new("crash");
    let root = scratch.join("store");
    let mut random = 0x2545_f491_4f6c_dd1d_u64;
    let started = Instant::now();
    for kill in 0..200u64 {
        let mut child = Command::new(WORKER)
            .args([
                "publish-loop",
                &root.display().to_string(),
                &kill.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        std::thread::sleep(Duration::from_micros(2_000 + random % 13_000));
        child.kill()?; // SIGKILL
        child.wait()?;
    }
    let killing = started.elapsed();

    let store = open_store(&root);
    let report = store.verify(&mut |_| {})?;
    assert!(report.is_clean(), "nothing partial or corrupt: {report:?}");
    assert!(report.objects > 0, "the children published something");
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
        "200 kills in {killing:?}, {} objects survived",
        report.objects
    );
    Ok(())
}

#[test]
fn p5_writes_refused_by_the_system_fail_quietly_and_every_kernel_loads() -> Result<()> {
    // P5: a real EFBIG from RLIMIT_FSIZE in a child process.
    let scratch = Scratch::new("fsize");
    let root = scratch.join("store");
    drop(open_store(&root));
    let output = Command::new(WORKER)
        .args(["fsize-limited", &root.display().to_string(), "10"])
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
    let store = open_store(&root);
    for number in 0..10 {
        assert!(matches!(store.lookup(&fake_key(number)), Lookup::Miss(_)));
    }
    Ok(())
}

#[test]
fn p6_eviction_under_a_byte_limit_never_hands_a_reader_a_torn_artifact() -> Result<()> {
    // P6
    let scratch = Scratch::new("evict-read");
    let root = scratch.join("store");
    let store = open_store(&root);
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
