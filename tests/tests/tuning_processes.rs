//! Tuning across real processes on one disk store: an answer measured once
//! serves every later process (T2), and processes tuning one key at once
//! measure it once (T4).

use std::process::{Command, Stdio};

use anyhow::{Context, Result, ensure};
use kiln_test_support::Scratch;

const TUNER: &str = env!("CARGO_BIN_EXE_kiln-test-tuner");

/// Launches per measured candidate: one warm-up and three timed.
const LAUNCHES_EACH: usize = 4;
/// Candidates that load: sixteen, less one that fails to compile and one
/// the device refuses.
const MEASURED: usize = 14;

fn spawn(root: &std::path::Path, log: &std::path::Path) -> Result<std::process::Child> {
    Ok(Command::new(TUNER)
        .arg(root)
        .arg(log)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?)
}

fn report(child: std::process::Child) -> Result<serde_json::Value> {
    let output = child.wait_with_output()?;
    ensure!(
        output.status.success(),
        "tuner failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().context("the tuner printed nothing")?;
    Ok(serde_json::from_str(line)?)
}

fn launches(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log).map_or(0, |text| text.lines().count())
}

#[test]
fn t2_a_second_process_gets_the_winner_with_no_compile_and_no_measurement() -> Result<()> {
    let scratch = Scratch::new("tune-later");
    let (root, log) = (scratch.join("store"), scratch.join("launches.log"));
    let first = report(spawn(&root, &log)?)?;
    assert_eq!(first["winner"], 9);
    assert_eq!(first["origin"], "Measured");
    assert_eq!(first["finalized"], 16);
    assert_eq!(launches(&log), MEASURED * LAUNCHES_EACH);

    let second = report(spawn(&root, &log)?)?;
    assert_eq!(second["winner"], 9);
    assert_eq!(second["origin"], "Stored");
    assert_eq!(
        second["finalized"], 0,
        "no compile of losers, nor of the winner"
    );
    assert_eq!(launches(&log), MEASURED * LAUNCHES_EACH, "no measurement");
    Ok(())
}

#[test]
fn t4_two_processes_tuning_one_key_at_once_measure_it_once() -> Result<()> {
    let scratch = Scratch::new("tune-together");
    let (root, log) = (scratch.join("store"), scratch.join("launches.log"));
    // The store is made before either tuner opens it, so both open the
    // same one.
    drop(kiln_tests::open_store(&root));
    let tuners = [spawn(&root, &log)?, spawn(&root, &log)?];
    let reports = tuners.map(report);
    let mut origins = Vec::new();
    for report in reports {
        let report = report?;
        assert_eq!(report["winner"], 9, "{report}");
        origins.push(report["origin"].as_str().unwrap_or_default().to_owned());
    }
    let measured = origins
        .iter()
        .filter(|origin| *origin == "Measured")
        .count();
    assert_eq!(measured, 1, "one measured: {origins:?}");
    assert!(
        origins
            .iter()
            .any(|origin| origin == "Waited" || origin == "Stored"),
        "the other took its answer: {origins:?}"
    );
    assert_eq!(
        launches(&log),
        MEASURED * LAUNCHES_EACH,
        "measured once in all"
    );
    Ok(())
}

#[test]
fn p15_a_bundle_carries_tuning_answers_and_pipeline_caches_to_an_empty_store() -> Result<()> {
    // P15: export on one store, import on an empty one; a new process
    // tunes with no compile and no measurement, and finds the pipeline
    // cache.
    use kiln_engine::store::BlobKey;
    use kiln_engine::{Blobs, Lookup};

    let scratch = Scratch::new("tune-bundle");
    let (source, log) = (scratch.join("source"), scratch.join("launches.log"));
    let first = report(spawn(&source, &log)?)?;
    assert_eq!(first["origin"], "Measured");
    let measured = launches(&log);
    let cache = BlobKey::new("wgpu pipeline cache")
        .component("adapter", "test adapter")
        .component("driver", "test driver 1");
    let cache_bytes = vec![0x5a_u8; 3000];
    let store = kiln_tests::open_store(&source);
    assert!(matches!(
        store.put_blob(&cache, &cache_bytes),
        kiln_engine::StoreOutcome::Stored { .. }
    ));
    let bundle = scratch.join("warm.kiln");
    let exported = store.export(&bundle, None, &mut |_| {})?;
    assert!(
        exported.blobs >= 2,
        "the answer and the cache: {exported:?}"
    );
    drop(store);

    let destination = scratch.join("destination");
    let imported =
        kiln_tests::open_store(&destination)
            .import_checked(&bundle, None, &mut |_| {}, &|_| Ok(()))?;
    assert_eq!(imported.blobs, exported.blobs, "{imported:?}");

    let later = report(spawn(&destination, &log)?)?;
    assert_eq!(later["winner"], first["winner"]);
    assert_eq!(later["origin"], "Stored", "{later}");
    assert_eq!(later["finalized"], 0, "no compile");
    assert_eq!(launches(&log), measured, "no tuning launch");
    match kiln_tests::open_store(&destination).lookup_blob(&cache) {
        Lookup::Hit { artifact, .. } => assert_eq!(artifact, cache_bytes),
        Lookup::Miss(miss) => panic!("the pipeline cache is not found: {miss:?}"),
    }
    Ok(())
}
