//! The remote tier under real processes sharing one redis-server: this
//! test binary runs itself again as each child (the test's own name, with
//! `KILN_REMOTE_TEST_CHILD` saying which part it plays).
//!
//! - P12: four nodes, each with its own disk store, split a batch through
//!   the remote's leases; one is killed with SIGKILL in the middle of its
//!   first compiles, and the others take its keys over once its leases run
//!   out: every key is compiled exactly once by the live nodes.
//! - P10: processes of one machine (one disk store) fetch each remote
//!   entry once between them, the others reading it from disk; a local
//!   hit never asks the remote.

mod support;

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kiln_engine::fake::{FakeCompiler, FakeKernel, FakeTarget};
use kiln_engine::{
    ArtifactId, ArtifactStore, ArtifactStoreExt, KernelId, KernelLoader, KeyComponents,
    LoaderConfig, Lookup, StoreKey,
};
use kiln_remote::{FleetKey, Keys, RemoteStore, TieredStore};
use kiln_store::{DiskStore, StoreConfig};
use support::{Redis, config, fresh_prefix};

/// Set on a child: the part it plays (`node`, `reader`).
const CHILD: &str = "KILN_REMOTE_TEST_CHILD";
/// Set on a child: its disk store, its compile log, the remote's address,
/// prefix and fleet key, and its batch.
const ROOT: &str = "KILN_REMOTE_TEST_ROOT";
const LOG: &str = "KILN_REMOTE_TEST_LOG";
const URL: &str = "KILN_REMOTE_TEST_URL";
const PREFIX: &str = "KILN_REMOTE_TEST_PREFIX";
const FLEET_KEY: &str = "KILN_REMOTE_TEST_KEY";
const KERNELS: &str = "KILN_REMOTE_TEST_KERNELS";
const COMPILE_MS: &str = "KILN_REMOTE_TEST_COMPILE_MS";
/// Set on a reader: when to start, in milliseconds since the epoch, so
/// that the readers of one machine ask at the same moment.
const START_AT: &str = "KILN_REMOTE_TEST_START_AT";

/// A node's lease on the remote: short, so a killed holder's keys are
/// taken over soon; the claim timeout is long, so a node that fell back
/// to it would blow the test's deadline.
const LEASE: Duration = Duration::from_secs(1);
const CLAIM_TIMEOUT: Duration = Duration::from_secs(60);

fn variable(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("a child is given {name}"))
}

fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

/// The two-level store a child opens: its disk store at `ROOT`, the remote
/// the parent started.
fn child_store() -> TieredStore {
    let keys = Keys {
        fleet: Some(FleetKey::from_text(&variable(FLEET_KEY)).expect("the parent's fleet key")),
        ..Keys::default()
    };
    let mut remote = config(&variable(URL), keys, &variable(PREFIX));
    remote.lease = LEASE;
    remote.claim_timeout = CLAIM_TIMEOUT;
    let disk = DiskStore::open(StoreConfig {
        lock_timeout: CLAIM_TIMEOUT,
        collects_automatically: false,
        // A scratch store: no power cut to survive. Synced, a write-back
        // waits for a shared disk, on a busy machine past what the other
        // processes of the machine wait for it (then they fetch too).
        durable: false,
        ..StoreConfig::at(variable(ROOT))
    })
    .expect("the child's disk store opens");
    TieredStore::new(disk, RemoteStore::open(remote).expect("the remote opens"))
}

/// Runs this test again as a child playing `part`, with `settings`.
fn spawn(test: &str, part: &str, settings: &[(&str, String)]) -> Child {
    let mut command = Command::new(std::env::current_exe().expect("this test binary"));
    command
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, part)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, value) in settings {
        command.env(name, value);
    }
    command.spawn().expect("a child starts")
}

/// The numbers a child printed after `report: `.
fn report(output: &Output) -> Vec<u64> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "a child failed ({}): {stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        // The harness writes its test line first, on the same line.
        .find_map(|line| line.split_once("report: ").map(|(_, numbers)| numbers))
        .unwrap_or_else(|| panic!("a child printed no report: {stdout}"))
        .split(' ')
        .map(|number| number.parse().expect("a report holds numbers"))
        .collect()
}

/// Waits for `child` until `deadline`, killing it past it.
fn wait(mut child: Child, deadline: Instant) -> Output {
    while child
        .try_wait()
        .expect("the child can be waited for")
        .is_none()
    {
        if Instant::now() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output().expect("the child ends");
            panic!(
                "a child ran past the test's deadline: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.wait_with_output().expect("the child ends")
}

fn compiled_in(log: &Path) -> Vec<u32> {
    FakeCompiler::read_compile_log(log)
        .expect("the compile log reads")
        .into_iter()
        .map(|(_, number)| number)
        .collect()
}

/// A node: one batch of `KERNELS` kernels on two workers, each compiling
/// for `COMPILE_MS`, on its own disk store behind the remote; reports how
/// many loaded with the right text.
fn node() {
    let store = Arc::new(child_store());
    let log = PathBuf::from(variable(LOG));
    let kernels: u32 = variable(KERNELS).parse().expect("a number of kernels");
    let millis: u64 = variable(COMPILE_MS).parse().expect("a compile time");
    let target = FakeTarget::on_store(Arc::clone(&store) as Arc<dyn ArtifactStore>)
        .with_compiler(FakeCompiler::default().logging_compiles_to(&log));
    let mut loader = KernelLoader::with_config(
        target,
        LoaderConfig {
            parallelism: NonZeroUsize::new(2).expect("two workers"),
            ..LoaderConfig::default()
        },
    );
    let batch: Vec<FakeKernel> = (0..kernels)
        .map(|number| FakeKernel::new(number).sleeping(Duration::from_millis(millis)))
        .collect();
    for kernel in &batch {
        loader.enqueue(Box::new(kernel.clone()), ());
    }
    loader.compile_queued();
    let mut loaded = 0u64;
    for (number, kernel) in (0..kernels).zip(&batch) {
        if let Ok(module) = loader.load(kernel, &kernel.artifact_id())
            && module.text == format!("fake kernel {number}")
        {
            loaded += 1;
        }
    }
    // What this node published reaches the remote before it ends.
    assert!(store.flush(Duration::from_secs(30)), "the queue drains");
    println!("report: {loaded}");
}

#[test]
fn p12_four_nodes_take_over_the_keys_of_one_killed_with_sigkill() {
    match std::env::var(CHILD).as_deref() {
        Ok("node") => return node(),
        Ok(other) => panic!("no part {other:?} in this test"),
        Err(_) => {}
    }
    let Ok(redis) = Redis::single().map_err(|reason| support::skip("sigkill takeover", &reason))
    else {
        return;
    };
    const TEST: &str = "p12_four_nodes_take_over_the_keys_of_one_killed_with_sigkill";
    const KERNELS_ASKED: u32 = 24;
    let fleet_key = kiln_remote::keygen::fleet_key()
        .expect("random bytes")
        .secret_text();
    let prefix = fresh_prefix();
    let settings = |node: usize, millis: u64| -> Vec<(&str, String)> {
        vec![
            (
                ROOT,
                redis
                    .scratch
                    .join(&format!("node-{node}"))
                    .display()
                    .to_string(),
            ),
            (
                LOG,
                redis
                    .scratch
                    .join(&format!("node-{node}.log"))
                    .display()
                    .to_string(),
            ),
            (URL, redis.url()),
            (PREFIX, prefix.clone()),
            (FLEET_KEY, fleet_key.clone()),
            (KERNELS, KERNELS_ASKED.to_string()),
            (COMPILE_MS, millis.to_string()),
        ]
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    // The holder: compiles slower than anything the test waits for, so it
    // is in its first ones when killed however loaded the machine is.
    const HOLDER_COMPILE: Duration = Duration::from_secs(60);
    let mut holder = spawn(
        TEST,
        "node",
        &settings(0, HOLDER_COMPILE.as_millis() as u64),
    );
    let holder_log = redis.scratch.join("node-0.log");
    while compiled_in(&holder_log).is_empty() {
        assert!(Instant::now() < deadline, "the holder began no compile");
        std::thread::sleep(Duration::from_millis(2));
    }
    let first_began = Instant::now();
    let others: Vec<Child> = (1..4)
        .map(|node| spawn(TEST, "node", &settings(node, 20)))
        .collect();
    // The others looked their batch up and are claiming its keys, which
    // the holder holds: they listen on the fleet's channel (as the holder
    // does) from their first claim on.
    let channel = format!("{prefix}claims");
    let listening = || {
        redis.servers[0]
            .command(&["PUBSUB", "NUMSUB", &channel])
            .and_then(|reply| {
                reply
                    .lines()
                    .nth(3)
                    .and_then(|count| count.trim_start_matches(':').parse::<u32>().ok())
            })
    };
    while listening() != Some(4) {
        assert!(
            Instant::now() < deadline,
            "the holder and the three others never all listened: {:?}",
            listening()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        first_began.elapsed() < HOLDER_COMPILE,
        "the holder is still in its first compiles when killed"
    );
    holder.kill().expect("SIGKILL reaches the holder");
    let killed = Instant::now();
    let _ = holder.wait();
    let reports: Vec<Vec<u64>> = others
        .into_iter()
        .map(|other| report(&wait(other, deadline)))
        .collect();
    eprintln!(
        "the live nodes finished {:?} after the kill",
        killed.elapsed()
    );
    for report in &reports {
        assert_eq!(report[0], u64::from(KERNELS_ASKED), "every kernel loads");
    }
    // The holder logs a compile as it begins and finished none: every key
    // is the live nodes', compiled once between them.
    let holder_began = compiled_in(&holder_log);
    let mut per_kernel: HashMap<u32, usize> = HashMap::new();
    for node in 1..4 {
        for number in compiled_in(&redis.scratch.join(&format!("node-{node}.log"))) {
            *per_kernel.entry(number).or_default() += 1;
        }
    }
    for number in 0..KERNELS_ASKED {
        assert_eq!(
            per_kernel.get(&number).copied().unwrap_or(0),
            1,
            "kernel {number} is compiled once by the live nodes (the killed one began \
             {holder_began:?}; the others {per_kernel:?})"
        );
    }
    assert!(
        holder_began.iter().all(|number| *number < KERNELS_ASKED),
        "the killed holder was in its batch: {holder_began:?}"
    );
}

fn remote_key(number: u32) -> StoreKey {
    let components = KeyComponents::new("cuda", "nvrtc 13.0", "sm_90", "-O3");
    let id = ArtifactId::new(
        KernelId::named("processes.kernel")
            .parameter(&number)
            .build(),
        0u8,
    );
    StoreKey::for_artifact(&components, &id, None)
}

fn remote_bytes(number: u32) -> Vec<u8> {
    (0..4000u32).map(|index| (index ^ number) as u8).collect()
}

/// How long a process waits for another process of its machine to write
/// a remote entry to disk, without any copy landing, before it fetches the
/// entry too: the remote's timeout (2 s here), at most 1 s.
const COPY_WAIT: Duration = Duration::from_secs(1);

/// A reader: at `START_AT`, one lookup of `KERNELS` keys through its
/// two-level store; reports the hits with the right bytes, the keys it
/// asked the remote for, the copies it read from another process, and the
/// milliseconds its lookup took and until what it fetched was on disk.
fn reader() {
    let store = child_store();
    let kernels: u32 = variable(KERNELS).parse().expect("a number of kernels");
    let keys: Vec<StoreKey> = (0..kernels).map(remote_key).collect();
    let start_at: u64 = variable(START_AT).parse().expect("a start time");
    while now_millis() < start_at {
        std::thread::sleep(Duration::from_millis(1));
    }
    let started = Instant::now();
    let found = store.lookup_many(&keys);
    let looked_up = started.elapsed();
    let right = (0..kernels)
        .zip(found)
        .filter(|(number, found)| {
            matches!(found, Lookup::Hit { artifact, .. } if *artifact == remote_bytes(*number))
        })
        .count();
    assert!(
        store.flush(Duration::from_secs(30)),
        "the write-backs drain"
    );
    let on_disk = started.elapsed();
    let statistics = store.tiered_statistics();
    let asked = statistics.remote.store;
    let asked_remote = asked.hits + asked.absent + asked.corrupt + asked.foreign + asked.unreadable;
    println!(
        "report: {right} {asked_remote} {} {} {}",
        statistics.copies_read,
        looked_up.as_millis(),
        on_disk.as_millis()
    );
}

#[test]
fn p10_the_processes_of_one_machine_fetch_each_remote_entry_once() {
    match std::env::var(CHILD).as_deref() {
        Ok("reader") => return reader(),
        Ok(other) => panic!("no part {other:?} in this test"),
        Err(_) => {}
    }
    let Ok(redis) =
        Redis::single().map_err(|reason| support::skip("one fetch per machine", &reason))
    else {
        return;
    };
    const TEST: &str = "p10_the_processes_of_one_machine_fetch_each_remote_entry_once";
    const KERNELS_ASKED: u32 = 32;
    const READERS: usize = 4;
    let fleet = kiln_remote::keygen::fleet_key().expect("random bytes");
    let prefix = fresh_prefix();
    // A builder elsewhere published the entries.
    let builder = support::open(
        &redis.url(),
        Keys {
            fleet: Some(fleet.clone()),
            ..Keys::default()
        },
        &prefix,
    );
    for number in 0..KERNELS_ASKED {
        let stored = builder.put(
            &remote_key(number),
            None,
            &remote_bytes(number),
            Duration::from_millis(30),
        );
        assert!(matches!(stored, kiln_engine::StoreOutcome::Stored { .. }));
    }
    let machine = redis.scratch.join("machine");
    let settings = |start_at: u64| -> Vec<(&str, String)> {
        vec![
            (ROOT, machine.display().to_string()),
            (URL, redis.url()),
            (PREFIX, prefix.clone()),
            (FLEET_KEY, fleet.secret_text()),
            (KERNELS, KERNELS_ASKED.to_string()),
            (START_AT, start_at.to_string()),
        ]
    };
    // Make the machine's disk store before the readers race to.
    drop(DiskStore::open(StoreConfig::at(&machine)).expect("the machine's disk store opens"));
    let deadline = Instant::now() + Duration::from_secs(60);
    let start_at = now_millis() + 1_500;
    let readers: Vec<Child> = (0..READERS)
        .map(|_| spawn(TEST, "reader", &settings(start_at)))
        .collect();
    let reports: Vec<Vec<u64>> = readers
        .into_iter()
        .map(|reader| report(&wait(reader, deadline)))
        .collect();
    eprintln!(
        "readers (right, asked the remote, copies read, ms looking up, ms until on disk): \
         {reports:?}"
    );
    for report in &reports {
        assert_eq!(report[0], u64::from(KERNELS_ASKED), "every key is a hit");
    }
    let fetched: u64 = reports.iter().map(|report| report[1]).sum();
    let copies: u64 = reports.iter().map(|report| report[2]).sum();
    // A reader that fetched without waiting for another's copies: it held
    // the claims of what it fetched.
    let wait_ms = COPY_WAIT.as_millis() as u64;
    let (first, waited): (Vec<&Vec<u64>>, Vec<&Vec<u64>>) = reports
        .iter()
        .filter(|report| report[1] > 0)
        .partition(|report| report[3] < wait_ms);
    assert!(
        first.iter().map(|report| report[1]).sum::<u64>() <= u64::from(KERNELS_ASKED),
        "no key is fetched twice by readers that did not wait for its copy: {reports:?}"
    );
    // The wait only saves fetches: a key another reader fetches first
    // and whose copy does not land within the wait (a busy machine's
    // disk) is fetched again, by a reader that waited all of it. Copies
    // of the first fetcher on disk within the wait leave the machine one
    // fetch of each key.
    let copies_late = reports
        .iter()
        .filter(|report| report[1] > 0)
        .min_by_key(|report| report[3])
        .is_some_and(|earliest| earliest[4] >= wait_ms);
    assert!(
        fetched == u64::from(KERNELS_ASKED) || (copies_late && !waited.is_empty()),
        "each key is fetched from the remote once by the machine, unless its copy landed \
         later than the {COPY_WAIT:?} wait: {reports:?}"
    );
    assert!(
        fetched >= u64::from(KERNELS_ASKED),
        "every key was fetched by someone: {reports:?}"
    );
    eprintln!("{copies} keys were read from another reader's copy");

    // Later processes read the machine's copies: no remote call at all.
    let late = spawn(TEST, "reader", &settings(0));
    let late = report(&wait(late, deadline));
    assert_eq!(
        late[..3],
        [u64::from(KERNELS_ASKED), 0, 0],
        "a local hit never asks the remote"
    );
}
