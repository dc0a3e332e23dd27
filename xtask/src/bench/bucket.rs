//! The table's F6 bucket rows (`bucket`): a cold node with the bucket
//! 50 and 200 ms away against no remote, and a node with an empty disk
//! loading the batch from the bucket against a local-disk warm start, on
//! a real S3 server behind the loopback latency proxy; each with the
//! bucket's requests per batch.

use super::RecordsOf;
use super::sample::{Sample, median, time};

/// Both bucket rows.
pub(super) fn f6_bucket_rows(of: &RecordsOf<'_>, rows: &mut Vec<[String; 4]>) {
    cold_row(of, rows);
    warm_row(of, rows);
}

/// The round trips the records were run at, in the order first seen.
fn rtts(samples: &[Sample]) -> Vec<String> {
    let mut rtts: Vec<String> = Vec::new();
    for sample in samples {
        if !rtts.contains(&sample.size) {
            rtts.push(sample.size.clone());
        }
    }
    rtts.sort_by_key(|rtt| rtt.parse::<u64>().unwrap_or(u64::MAX));
    rtts
}

fn wall(samples: &[Sample]) -> Option<f64> {
    median(samples.iter().map(|sample| sample.wall).collect())
}

/// One GET through the proxy at `rtt` (its `bucket_round_trip` records),
/// else the proxy's round trip itself.
fn one_get(of: &RecordsOf<'_>, rtt: &str) -> f64 {
    wall(&of("bucket", "bucket_round_trip", rtt, None))
        .unwrap_or_else(|| rtt.parse::<f64>().unwrap_or(0.0) / 1000.0)
}

/// The median of the number just before `words` in each sample's note,
/// after `section` in it.
fn noted(samples: &[Sample], section: &str, words: &str) -> Option<f64> {
    median(
        samples
            .iter()
            .filter_map(|sample| {
                let note = &sample.note[sample.note.find(section)?..];
                let before = &note[..note.find(words)?];
                before.split_whitespace().last()?.parse().ok()
            })
            .collect(),
    )
}

/// What a batch asked of the bucket (its requests and calls, and the keys
/// its batch pack answered), and what its flush sent after it.
fn requests(samples: &[Sample]) -> String {
    let number = |section: &str, words: &str| {
        noted(samples, section, words).map_or("?".to_owned(), |number| format!("{number:.0}"))
    };
    format!(
        "batch {} requests in {} calls, {} keys from a pack; flush {} requests",
        number("batch ", " requests"),
        number("batch ", " calls"),
        number("batch ", " keys from a pack"),
        number("flush ", " requests"),
    )
}

fn cold_row(of: &RecordsOf<'_>, rows: &mut Vec<[String; 4]>) {
    let alone = of("bucket", "bucket_cold_alone", "", None);
    let distant = of("bucket", "bucket_cold_rtt", "", None);
    let (Some(alone_wall), false) = (wall(&alone), distant.is_empty()) else {
        return;
    };
    let kernels = alone.first().map_or(0, |sample| sample.kernels);
    let steps = noted(&distant, "", " steps talk").unwrap_or(2.0);
    let mut measured = vec![format!("no remote {}", time(alone_wall))];
    let mut ratios = Vec::new();
    for rtt in rtts(&distant) {
        let samples = of("bucket", "bucket_cold_rtt", &rtt, None);
        let Some(at) = wall(&samples) else { continue };
        let trip = one_get(of, &rtt);
        measured.push(format!(
            "{rtt} ms away {} ({}; one GET {})",
            time(at),
            requests(&samples),
            time(trip)
        ));
        ratios.push(format!(
            "{rtt} ms: / (no remote + {steps:.0} GETs) **{:.2}**",
            at / (alone_wall + steps * trip)
        ));
    }
    rows.push([
        format!(
            "F6 bucket cold ×{kernels}, Garage behind a latency proxy (medians of {} runs)",
            alone.len()
        ),
        measured.join("; "),
        ratios.join("; "),
        "≤ 1.2 × (no remote + k round trips), k the calls on the launch path; a round trip is \
         one GET through the proxy"
            .to_owned(),
    ]);
}

fn warm_row(of: &RecordsOf<'_>, rows: &mut Vec<[String; 4]>) {
    let local = of("bucket", "bucket_local_warm", "", None);
    let remote = of("bucket", "bucket_warm_rtt", "", None);
    let (Some(local_wall), false) = (wall(&local), remote.is_empty()) else {
        return;
    };
    let kernels = local.first().map_or(0, |sample| sample.kernels);
    let mut measured = vec![format!("local disk {}", time(local_wall))];
    let mut ratios = Vec::new();
    for rtt in rtts(&remote) {
        let samples = of("bucket", "bucket_warm_rtt", &rtt, None);
        let Some(at) = wall(&samples) else { continue };
        measured.push(format!(
            "from the bucket {rtt} ms away {} ({})",
            time(at),
            requests(&samples)
        ));
        ratios.push(format!(
            "{rtt} ms: / (2 × local + one GET) **{:.2}**",
            at / (2.0 * local_wall + one_get(of, &rtt))
        ));
    }
    rows.push([
        format!("F6 bucket warm start ×{kernels}, an empty disk"),
        measured.join("; "),
        ratios.join("; "),
        "≤ 1".to_owned(),
    ]);
}
