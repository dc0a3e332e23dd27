//! The child process of kiln's multi-process tuning tests.
//!
//! ```text
//! kiln-test-tuner ROOT LAUNCH_LOG   tunes sixteen fake candidates on the store at ROOT
//! ```
//!
//! Every launch appends a line to LAUNCH_LOG, so the test counts the
//! measurements of all its processes. It prints one JSON object: the
//! winner, where its answer came from, and how many kernels this process
//! compiled.

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
