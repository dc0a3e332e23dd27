//! The child process of kiln's multi-process tuning tests.
//!
//! ```text
//! kiln-test-tuner ROOT LAUNCH_LOG             tunes sixteen fake candidates on the store at ROOT
//! kiln-test-tuner profile ROOT FIRST LAST [read-only]
//!                                             launches fake kernels FIRST..LAST on the store at ROOT
//! ```
//!
//! Every launch of a tune appends a line to LAUNCH_LOG, so the test counts
//! the measurements of all its processes. It prints one JSON object: the
//! winner, where its answer came from, and how many kernels this process
//! compiled. The `profile` run is a program that keeps the default
//! warm-start profile (its executable's, L12): it prints how many kernels
//! were on the device when its first launch returned, how many it lowered
//! and how many batches it ran.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kiln_engine::fake::{FakeKernel, FakeModule, FakeTarget};
use kiln_engine::tune::{Candidate, Measure, TuneKey};
use kiln_engine::{KernelLoader, LoaderConfig};
use kiln_tests::shared_store;

fn main() -> Result<()> {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    if arguments.first().is_some_and(|first| first == "profile") {
        return profiled_run(&arguments[1..]);
    }
    let [root, log] = arguments.as_slice() else {
        bail!("usage: kiln-test-tuner ROOT LAUNCH_LOG, not {arguments:?}");
    };
    let target = FakeTarget::on_store(shared_store(Path::new(root)));
    let device = target.device().clone();
    let mut loader = KernelLoader::with_config(target, LoaderConfig::default());
    let candidates: Vec<Candidate<FakeTarget>> = (0..16)
        .map(|number| {
            let kernel = match number {
                5 => FakeKernel::new(number).failing(),
                7 => FakeKernel::new(number).refused(),
                _ => FakeKernel::new(number),
            };
            Candidate::new(Box::new(kernel), ())
        })
        .collect();
    let mut launch = |module: &Arc<FakeModule>| {
        let number: u32 = module
            .text
            .rsplit(' ')
            .next()
            .and_then(|number| number.parse().ok())
            .ok_or("a fake kernel's text ends with its number")?;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .and_then(|mut file| {
                file.write_all(format!("{} {number}\n", std::process::id()).as_bytes())
            })
            .map_err(|error| error.to_string())?;
        // Long enough on the host that a tuner started beside this one
        // arrives while it measures.
        std::thread::sleep(Duration::from_millis(2));
        device.run(match number {
            2 | 11 => Duration::from_millis(5),
            9 => Duration::from_micros(20),
            other => Duration::from_micros(100 + u64::from(other) * 10),
        });
        Ok(())
    };
    let measure = Measure::Timed {
        launch: &mut launch,
        warm_up: 1,
        runs: 3,
    };
    let tuned = loader
        .tune(&TuneKey::new("kiln.test.tune"), &candidates, measure)
        .context("tuning")?;
    let report = serde_json::json!({
        "winner": tuned.winner,
        "origin": format!("{:?}", tuned.origin),
        "finalized": loader.target().fake_compiler().finalized(),
    });
    println!("{report}");
    Ok(())
}

/// A run of a program with the default warm-start profile: launches fake
/// kernels `first..last`, one at a time, as a program's first launches.
fn profiled_run(arguments: &[String]) -> Result<()> {
    let (root, first, last, read_only) = match arguments {
        [root, first, last] => (root, first, last, false),
        [root, first, last, mode] if mode == "read-only" => (root, first, last, true),
        _ => bail!("usage: kiln-test-tuner profile ROOT FIRST LAST [read-only], not {arguments:?}"),
    };
    let (first, last): (u32, u32) = (first.parse()?, last.parse()?);
    let store = kiln_store::DiskStore::open(kiln_store::StoreConfig {
        collects_automatically: false,
        read_only,
        ..kiln_store::StoreConfig::at(root)
    })?;
    // The settings from the environment, as a program has them:
    // `KILN_PROFILE=0` turns the profile off.
    let mut loader = KernelLoader::new(FakeTarget::on_store(Arc::new(store)));
    let mut on_device_at_first_launch = None;
    for number in first..last {
        let kernel = FakeKernel::new(number);
        loader.load(&kernel, &kernel.artifact_id())?;
        on_device_at_first_launch.get_or_insert(loader.target().loaded());
    }
    let report = serde_json::json!({
        "keeps_profile": loader.keeps_profile(),
        "on_device_at_first_launch": on_device_at_first_launch,
        "lowered": loader.target().fake_compiler().lowered(),
        "batches": loader.records().len(),
    });
    println!("{report}");
    Ok(())
}
