//! `kiln stats`: what the store holds against its limits, and what every
//! process that used it did with it, per backend (hits, misses, compiles,
//! failures, compile time spent and saved), like `ccache -s`;
//! `kiln stats --zero` starts those counts again. With a remote tier
//! (`--remote`, `KILN_REMOTE_URL`), also whether it answers now and what
//! every process that used it counted: remote hits and misses, entries
//! that did not verify, timeouts, breaker trips, queue drops.

use std::path::Path;

use anyhow::{Context, Result, anyhow};
use clap::Args;
use kiln_store::{BackendActivity, DiskStore};
use serde::Serialize;

use crate::console::outln;
use crate::format;
use crate::output::Output;
use crate::table::{Table, print_pairs};

/// `kiln stats` options.
#[derive(Debug, Args)]
pub struct Arguments {
    /// Set the hit, miss, compile and failure counts to zero (what the
    /// store holds is kept).
    #[arg(long)]
    pub zero: bool,
    #[command(flatten)]
    pub remote: crate::remote::RemoteUrl,
}

#[derive(Debug, Serialize)]
struct Stats {
    root: String,
    bytes: u64,
    entries: u64,
    /// What the store's folder takes on disk: files and folders, and the
    /// bytes allocated to them (the counted `bytes` are what the limit
    /// compares).
    files: u64,
    allocated_bytes: u64,
    max_bytes: u64,
    max_entries: u64,
    compilers: Vec<kiln_engine::KeyComponents>,
    activity: ActivityReport,
    /// The request path's health, from the kept batch records.
    health: crate::health::HealthReport,
    /// The remote tier, when one is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    remote: Option<RemoteReport>,
}

/// The remote tier as `kiln stats` sees it.
#[derive(Debug, Serialize)]
struct RemoteReport {
    /// Its address, without a password.
    url: String,
    /// Whether it answered a PING now.
    reachable: bool,
    /// How long that took, in milliseconds.
    round_trip_ms: f64,
    /// The breaker of this process after the probe: "closed" when the
    /// remote answers, "open" when it is left alone for a while.
    breaker: &'static str,
    /// What every process that writes the remote counted, added up there;
    /// `None` when it did not answer.
    fleet: Option<kiln_remote::FleetCounts>,
    /// The fleet's remote hits over the kernels asked of the remote tier
    /// (hits + misses; the named blobs read beside them are not asked);
    /// `None` before any.
    hit_rate: Option<f64>,
}

/// The counts of every process that used the store.
#[derive(Debug, Serialize)]
struct ActivityReport {
    /// When counting started, in seconds since the Unix epoch; 0 when
    /// nothing was counted yet.
    since: u64,
    backends: Vec<BackendReport>,
}

#[derive(Debug, Serialize)]
struct BackendReport {
    backend: String,
    /// Kernels found in the store by their id, those a warm-start profile
    /// loaded among them.
    hits: u64,
    /// Of the hits, the kernels warm-start profiles loaded before their
    /// program asked for them, as the store's kept batch records count
    /// them (the last few of every process).
    profile_hits: u64,
    rekeyed: u64,
    misses: u64,
    /// (hits + rekeyed) / (hits + rekeyed + misses); `None` before any
    /// lookup.
    hit_rate: Option<f64>,
    compiles: u64,
    failures: u64,
    failures_remembered: u64,
    compile_seconds: f64,
    saved_seconds: f64,
}

impl From<BackendActivity> for BackendReport {
    fn from(counts: BackendActivity) -> Self {
        let found = counts.hits + counts.rekeyed;
        let asked = found + counts.misses;
        Self {
            hit_rate: (asked > 0).then(|| found as f64 / asked as f64),
            backend: counts.backend,
            hits: counts.hits,
            profile_hits: 0,
            rekeyed: counts.rekeyed,
            misses: counts.misses,
            compiles: counts.compiles,
            failures: counts.failures,
            failures_remembered: counts.failures_remembered,
            compile_seconds: counts.compile_nanos as f64 * 1e-9,
            saved_seconds: counts.saved_nanos as f64 * 1e-9,
        }
    }
}

/// What `--zero` did.
#[derive(Debug, Serialize)]
struct Zeroed {
    root: String,
    zeroed: bool,
}

/// Prints the usage counters, the limits, the compilers seen and the
/// activity of every process; or zeroes the activity.
pub fn run(store: &DiskStore, arguments: &Arguments, output: &Output) -> Result<()> {
    let root = store.root().display().to_string();
    let remote = remote(arguments)?;
    if arguments.zero {
        // Refused before anything is zeroed, so a run that cannot do all
        // it was asked does none of it.
        check_fleet_can_be_zeroed(remote.as_ref())?;
        store.zero_activity().context("zeroing the statistics")?;
        zero_fleet(remote.as_ref())?;
        let zeroed = Zeroed { root, zeroed: true };
        return output.print(&zeroed, || {
            outln!("statistics of {} zeroed", zeroed.root);
        });
    }
    let usage = store.usage();
    let footprint = store.footprint();
    let config = store.config();
    let activity = store.activity();
    let kept = store.kept_batches();
    let stats = Stats {
        root,
        bytes: usage.bytes,
        entries: usage.entries,
        files: footprint.files,
        allocated_bytes: footprint.allocated_bytes,
        max_bytes: config.max_bytes,
        max_entries: config.max_entries,
        compilers: store.targets(),
        activity: ActivityReport {
            since: activity.since,
            backends: activity
                .backends
                .into_iter()
                .map(|counts| {
                    let mut report = BackendReport::from(counts);
                    report.profile_hits = kept
                        .iter()
                        .filter(|stored| stored.backend == report.backend)
                        .map(|stored| stored.batch.profile_hits as u64)
                        .sum();
                    report
                })
                .collect(),
        },
        health: crate::health::HealthReport::of(&kept),
        remote: remote.as_ref().map(remote_report),
    };
    output.print(&stats, || print(&stats))
}

/// What `stats` prints where no store is yet.
#[derive(Debug, Serialize)]
struct WithoutStore {
    root: String,
    exists: bool,
    /// The remote tier, when one is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    remote: Option<RemoteReport>,
}

/// Where no store is yet: says so, creating none, and reports on the
/// remote tier when there is one (and zeroes its fleet counts with
/// `--zero`).
pub fn run_without_store(root: &Path, arguments: &Arguments, output: &Output) -> Result<()> {
    let remote = remote(arguments)?;
    if arguments.zero {
        check_fleet_can_be_zeroed(remote.as_ref())?;
        zero_fleet(remote.as_ref())?;
    }
    let report = WithoutStore {
        root: root.display().to_string(),
        exists: false,
        remote: remote.as_ref().map(remote_report),
    };
    output.print(&report, || {
        outln!("{}", super::no_store_words(root));
        if let Some(remote) = &report.remote {
            print_remote(remote);
        }
    })
}

/// The remote tier of `--remote`, else of `KILN_REMOTE_URL`.
fn remote(arguments: &Arguments) -> Result<Option<kiln_remote::RemoteStore>> {
    let configured = std::env::var("KILN_REMOTE_URL").ok();
    let on_the_command_line =
        arguments.remote.url.is_some() && arguments.remote.url.as_deref() != configured.as_deref();
    match crate::remote::open_remote(arguments.remote.url.as_deref()) {
        Ok(remote) => Ok(remote),
        // Asked for on the command line, a remote that cannot open is the
        // answer; only configured, it does not hide the local counts.
        Err(error) if !on_the_command_line => {
            crate::console::errln!("kiln: warning: {}", crate::message_of(&error));
            Ok(None)
        }
        Err(error) => Err(error),
    }
}

/// Refuses to zero where the fleet's counts in `remote` cannot be: a node
/// that only reads the remote tier (no key that signs, or read-only)
/// writes nothing there, its counts included.
fn check_fleet_can_be_zeroed(remote: Option<&kiln_remote::RemoteStore>) -> Result<()> {
    match remote {
        Some(remote) if !remote.writes() => Err(anyhow!(
            "the fleet's counts in the remote tier at {} cannot be zeroed from this node, which \
             only reads it (it holds no KILN_REMOTE_KEY or KILN_REMOTE_SIGNING_KEY, or \
             KILN_REMOTE_READ_ONLY is set): run `kiln stats --zero` on a node that writes the \
             remote tier, or, to zero only this machine's counts, without --remote and with \
             KILN_REMOTE_URL unset; nothing was zeroed",
            remote.config().url_for_display()
        )),
        _ => Ok(()),
    }
}

/// Zeroes the fleet's counts in `remote`.
///
/// # Errors
///
/// The remote did not answer: the counts are as they were.
fn zero_fleet(remote: Option<&kiln_remote::RemoteStore>) -> Result<()> {
    match remote {
        Some(remote) if !remote.zero_fleet_counts() => Err(anyhow!(
            "the fleet's counts in the remote tier at {} were not zeroed: it did not answer \
             (run `kiln stats --remote URL` to see whether it does, then zero again)",
            remote.config().url_for_display()
        )),
        _ => Ok(()),
    }
}

/// Probes `remote` and reads the fleet's counts, each within its timeout.
fn remote_report(remote: &kiln_remote::RemoteStore) -> RemoteReport {
    let started = std::time::Instant::now();
    let reachable = remote.is_reachable();
    let round_trip_ms = started.elapsed().as_secs_f64() * 1e3;
    let fleet = if reachable {
        remote.fleet_counts()
    } else {
        None
    };
    let hit_rate = fleet.as_ref().and_then(|fleet| {
        let asked = fleet.remote_hits + fleet.remote_misses;
        (asked > 0).then(|| fleet.remote_hits as f64 / asked as f64)
    });
    RemoteReport {
        hit_rate,
        url: remote.config().url_for_display(),
        reachable,
        round_trip_ms,
        breaker: if remote.remote_statistics().breaker_open {
            "open"
        } else {
            "closed"
        },
        fleet,
    }
}

fn print_remote(remote: &RemoteReport) {
    let mut pairs = vec![
        ("remote", remote.url.clone()),
        (
            "answers",
            if remote.reachable {
                format!("yes, in {:.1} ms", remote.round_trip_ms)
            } else {
                format!("no (gave up after {:.1} ms)", remote.round_trip_ms)
            },
        ),
        ("breaker", remote.breaker.to_owned()),
    ];
    if let Some(fleet) = &remote.fleet {
        pairs.extend([
            ("processes reported", fleet.processes.to_string()),
            (
                "remote hits",
                match remote.hit_rate {
                    None => fleet.remote_hits.to_string(),
                    Some(rate) => format!(
                        "{} of {} kernels asked ({:.1} %)",
                        fleet.remote_hits,
                        fleet.remote_hits + fleet.remote_misses,
                        rate * 100.0
                    ),
                },
            ),
            ("remote misses", fleet.remote_misses.to_string()),
            ("did not verify", fleet.unverified.to_string()),
            ("timeouts", fleet.timeouts.to_string()),
            ("errors", fleet.errors.to_string()),
            ("breaker trips", fleet.breaker_opened.to_string()),
            ("written", fleet.written.to_string()),
            ("write failures", fleet.write_failures.to_string()),
            ("queue drops", fleet.queue_dropped.to_string()),
            ("nondeterministic", fleet.nondeterministic.to_string()),
        ]);
    }
    print_pairs(&pairs);
}

fn print(stats: &Stats) {
    let percent = |used: u64, limit: u64| {
        if limit == 0 {
            String::new()
        } else {
            format!(" ({:.1} %)", used as f64 * 100.0 / limit as f64)
        }
    };
    let mut pairs = vec![
        ("root", stats.root.clone()),
        (
            "size",
            format!(
                "{} of {}{}",
                format::bytes(stats.bytes),
                format::bytes(stats.max_bytes),
                percent(stats.bytes, stats.max_bytes)
            ),
        ),
        (
            "entries",
            format!(
                "{} of {}{}",
                stats.entries,
                stats.max_entries,
                percent(stats.entries, stats.max_entries)
            ),
        ),
        (
            "on disk",
            format!(
                "{} allocated in {}",
                format::bytes(stats.allocated_bytes),
                if stats.files == 1 {
                    "1 file or folder".to_owned()
                } else {
                    format!("{} files and folders", stats.files)
                }
            ),
        ),
    ];
    if stats.compilers.is_empty() {
        pairs.push(("compilers", "none yet".into()));
    }
    for compiler in &stats.compilers {
        pairs.push((
            "compiler",
            if crate::table::is_wide() {
                compiler.to_string()
            } else {
                format!(
                    "{} {}: {}",
                    compiler.backend,
                    compiler.architecture,
                    format::compiler(&compiler.compiler, false)
                )
            },
        ));
    }
    pairs.push((
        "counted since",
        if stats.activity.since == 0 {
            "nothing counted yet".into()
        } else {
            format::ago(stats.activity.since)
        },
    ));
    if stats.health.processes > 0 {
        pairs.push(("request path", stats.health.line()));
    }
    print_pairs(&pairs);
    if let Some(remote) = &stats.remote {
        outln!();
        print_remote(remote);
    }
    if stats.activity.backends.is_empty() {
        return;
    }
    outln!();
    let mut table = Table::new(&[
        "BACKEND",
        "HITS>",
        "?PROFILE>",
        "REKEYED>",
        "MISSES>",
        "HIT RATE>",
        "COMPILES>",
        "FAILED>",
        "?FROM MEMORY>",
        "COMPILING>",
        "SAVED>",
    ]);
    for backend in &stats.activity.backends {
        table.row(vec![
            backend.backend.clone(),
            backend.hits.to_string(),
            backend.profile_hits.to_string(),
            backend.rekeyed.to_string(),
            backend.misses.to_string(),
            backend
                .hit_rate
                .map_or_else(|| "-".into(), |rate| format!("{:.1} %", rate * 100.0)),
            backend.compiles.to_string(),
            backend.failures.to_string(),
            backend.failures_remembered.to_string(),
            format::seconds(backend.compile_seconds),
            format::seconds(backend.saved_seconds),
        ]);
    }
    table.print();
}
