//! `kiln tunes` through the real binary (T5): the answers a tuning kept in
//! the store are listed with their winner and spread, and forgotten, after
//! which the next tuning measures again.

mod support;

use std::sync::Arc;
use std::time::Duration;

use kiln_engine::fake::{FakeKernel, FakeModule, FakeTarget};
use kiln_engine::tune::{Candidate, Measure, Origin, TuneKey};
use kiln_engine::{ArtifactStore, KernelLoader, LoaderConfig};
use kiln_store::{DiskStore, StoreConfig};
use support::{Scratch, run};

/// Tunes four fake candidates on the store at `root`; candidate 2 runs
/// fastest (10 µs), the others 40 µs and up.
fn tune(root: &std::path::Path, name: &str) -> Origin {
    let store: Arc<dyn ArtifactStore> =
        Arc::new(DiskStore::open(StoreConfig::at(root)).expect("the store opens"));
    let mut loader =
        KernelLoader::with_config(FakeTarget::on_store(store), LoaderConfig::default())
            .without_profile();
    let candidates: Vec<_> = (0..4)
        .map(|number| Candidate::new(Box::new(FakeKernel::new(number)), ()))
        .collect();
    let mut probe = |module: &Arc<FakeModule>| {
        Ok(if module.text.ends_with('2') {
            Duration::from_micros(10)
        } else {
            Duration::from_micros(40 + module.text.len() as u64)
        })
    };
    let key = TuneKey::new(name).parameter("n", 64);
    loader
        .tune(&key, &candidates, Measure::Probe(&mut probe))
        .expect("tuned")
        .origin
}

// T5
#[test]
fn answers_are_listed_with_winner_and_spread_and_forgotten() {
    let scratch = Scratch::new("tunes");
    let root = scratch.join("store");
    assert_eq!(tune(&root, "matmul"), Origin::Measured);
    assert_eq!(tune(&root, "softmax"), Origin::Measured);

    let listed = run(&root, &["--json", "tunes"]).succeeded_json();
    let answers = listed.as_array().expect("an array of answers");
    assert_eq!(answers.len(), 2, "{listed:#}");
    let matmul = &answers[0];
    assert_eq!(matmul["key"], "matmul (n: 64)");
    assert_eq!(matmul["device"], "fake device (driver kiln-fake 1)");
    assert_eq!(matmul["winner_index"], 2);
    assert!(
        matmul["winner"]
            .as_str()
            .is_some_and(|winner| winner.starts_with("kiln.fake#")),
        "{matmul}"
    );
    assert_eq!(
        (matmul["measured"].as_u64(), matmul["failed"].as_u64()),
        (Some(4), Some(0))
    );
    assert_eq!(matmul["fastest_seconds"].as_f64(), Some(10e-6));
    assert!(
        matmul["spread"].as_f64().is_some_and(|spread| spread > 4.0),
        "{matmul}"
    );

    let human = run(&root, &["tunes", "soft"]);
    let text = human.stdout.clone();
    assert!(
        text.contains("softmax (n: 64)") && !text.contains("matmul"),
        "{text}"
    );

    let forgotten = run(&root, &["--json", "tunes", "matmul", "--forget"]).succeeded_json();
    assert_eq!(
        forgotten["forgotten"][0],
        "matmul (n: 64) on fake device (driver kiln-fake 1)"
    );
    let left = run(&root, &["--json", "tunes"]).succeeded_json();
    assert_eq!(left.as_array().map(Vec::len), Some(1), "{left:#}");
    assert_eq!(
        tune(&root, "matmul"),
        Origin::Measured,
        "forgotten: measured again"
    );
    assert_eq!(tune(&root, "softmax"), Origin::Stored);
}
