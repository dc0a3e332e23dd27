//! One batch, one work: what `kiln warm` reports as a backend's summed
//! work, what `kiln records` says its batches' work was, and what `kiln
//! stats` counts as compiling are the same seconds, lower + finalize on
//! the workers, whatever the device load on the loader's thread took (S3).

mod support;

use serde_json::Value;
use support::{Scratch, finish, kiln, wgsl_kernel};

/// `value` as seconds.
fn seconds(value: &Value) -> f64 {
    value.as_f64().unwrap_or_else(|| panic!("seconds: {value}"))
}

// S3
#[test]
fn warm_records_and_stats_agree_on_a_batch_s_work() {
    let scratch = Scratch::new("batch-work");
    let folder = scratch.folder("kernels");
    let kernels = 8;
    for number in 0..kernels {
        std::fs::write(folder.join(format!("k{number}.wgsl")), wgsl_kernel(number))
            .expect("a kernel file");
    }
    let store = scratch.join("store");
    let warmed = finish(kiln(&store, &["--json", "warm", "--backend", "wgpu"]).arg(&folder))
        .succeeded_json();
    let backend = &warmed["backends"][0];
    assert_eq!(backend["compiled"], kernels, "{warmed:#}");
    let warm_work = seconds(&backend["work_seconds"]);
    assert!(warm_work > 0.0, "{warmed:#}");

    let records = finish(&mut kiln(&store, &["--json", "records"])).succeeded_json();
    let batches: Vec<&Value> = records
        .as_array()
        .into_iter()
        .flatten()
        .filter(|batch| batch["backend"] == "wgpu")
        .collect();
    assert!(!batches.is_empty(), "{records:#}");
    let recorded: f64 = batches
        .iter()
        .map(|batch| seconds(&batch["work_seconds"]))
        .sum();
    let stats = finish(&mut kiln(&store, &["--json", "stats"])).succeeded_json();
    let counted = stats["activity"]["backends"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|backend| backend["backend"] == "wgpu")
        .map(|backend| seconds(&backend["compile_seconds"]))
        .expect("wgpu's counts");
    // The same durations, added up as floating point or as nanoseconds.
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * f64::from(kernels) + 1e-9;
    assert!(
        close(recorded, warm_work),
        "records {recorded} s, warm {warm_work} s: {records:#}"
    );
    assert!(
        close(counted, warm_work),
        "stats {counted} s, warm {warm_work} s: {stats:#}"
    );
}
