//! `kiln push` and `kiln pull` carry the named blobs a store keeps beside
//! its kernels — warm-start profiles, tuning answers, pipeline caches —
//! so that a node that pulls starts warm: against a real redis-server and
//! real stores (P15, P10).

mod support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kiln_engine::fake::{FakeKernel, FakeModule, FakeTarget};
use kiln_engine::profile::Program;
use kiln_engine::store::{BlobKey, RememberedFailure};
use kiln_engine::tune::{Candidate, Measure, Origin, TuneKey};
use kiln_engine::{ArtifactStore, Blobs, KernelLoader, LoaderConfig, Lookup, StoreOutcome};
use serde_json::Value;
use support::Scratch;
use support::remote::{keygen, kiln_with, open, redis};

/// A pipeline cache as the wgpu backend names one; its bytes are the
/// driver's, opaque to kiln.
fn pipeline_cache() -> (BlobKey, Vec<u8>) {
    let key = BlobKey::new("wgpu pipeline cache")
        .component("adapter", "test adapter")
        .component("driver", "test driver 1");
    (key, vec![0x5a; 3000])
}

/// A loader of fake kernels on the disk store at `root`.
fn loader(root: &Path, program: Option<&str>) -> KernelLoader<FakeTarget> {
    let store: Arc<dyn ArtifactStore> = Arc::new(open(root));
    let loader = KernelLoader::with_config(FakeTarget::on_store(store), LoaderConfig::default());
    match program {
        Some(name) => loader.with_profile(Program::named(name)),
        None => loader.without_profile(),
    }
}

/// A run of program `server` that launches fake kernels `0..6`: how many
/// kernels were on the device after its first launch, and how many it
/// compiled.
fn serve(root: &Path) -> (usize, u64) {
    let mut loader = loader(root, Some("server"));
    let mut after_first = 0;
    for number in 0..6 {
        let kernel = FakeKernel::new(number);
        loader.load(&kernel, &kernel.artifact_id()).expect("loads");
        if after_first == 0 {
            after_first = loader.target().loaded();
        }
    }
    (after_first, loader.statistics().compiled)
}

/// Tunes four fake candidates (10..14) on the store at `root`: its origin,
/// how many measurements it made, and how many kernels it compiled.
fn tune(root: &Path) -> (Origin, usize, u64) {
    let mut loader = loader(root, None);
    let candidates: Vec<_> = (10..14)
        .map(|number| Candidate::new(Box::new(FakeKernel::new(number)), ()))
        .collect();
    let measured = AtomicUsize::new(0);
    let mut probe = |module: &Arc<FakeModule>| {
        measured.fetch_add(1, Ordering::Relaxed);
        Ok(if module.text.ends_with("12") {
            Duration::from_micros(10)
        } else {
            Duration::from_micros(40)
        })
    };
    let key = TuneKey::new("matmul").parameter("n", 64);
    let origin = loader
        .tune(&key, &candidates, Measure::Probe(&mut probe))
        .expect("tuned")
        .origin;
    (
        origin,
        measured.load(Ordering::Relaxed),
        loader.statistics().compiled,
    )
}

/// A source store with a profile (two runs of `server`), a tuning answer
/// and a pipeline cache; and a remembered failure, which is the machine's
/// own and never travels.
fn warm_source(root: &Path) {
    assert_eq!(serve(root).0, 1, "the first run has no profile");
    assert_eq!(serve(root).0, 6, "the second loads its profile's six ahead");
    let (origin, measured, _) = tune(root);
    assert_eq!((origin, measured), (Origin::Measured, 4));
    let (key, bytes) = pipeline_cache();
    assert!(matches!(
        open(root).put_blob(&key, &bytes),
        StoreOutcome::Stored { .. }
    ));
    let failure = RememberedFailure::blob_key(&support::fake_key(99));
    assert!(matches!(
        open(root).put_blob(&failure, &RememberedFailure::forgotten().to_bytes()),
        StoreOutcome::Stored { .. }
    ));
}

// P15
#[test]
fn p15_a_pulled_node_has_the_profile_the_tuning_answer_and_the_pipeline_cache() {
    let scratch = Scratch::new("cli-push-pull-blobs");
    let Some(server) = redis(&scratch, "kiln push and pull of named blobs") else {
        return;
    };
    let url = server.url();
    let (secret, public) = keygen(&scratch, true);
    let public = public.expect("a signing key has a public key");
    let builder = [("KILN_REMOTE_SIGNING_KEY", secret.as_str())];
    let node = [("KILN_REMOTE_TRUSTED_KEYS", public.as_str())];
    let source = scratch.join("source");
    warm_source(&source);

    let pushed =
        kiln_with(&source, &["--json", "push", "--remote", &url], &builder).succeeded_json();
    let blobs = &pushed["blobs"];
    assert_eq!(
        blobs["entries"], 3,
        "profile, answer, cache; no failure: {pushed:#}"
    );
    assert_eq!(blobs["copied"], 3, "{pushed:#}");
    assert_eq!(blobs["failed"], 0, "{pushed:#}");

    // A node pulls into an empty store: the kernels and the three blobs.
    let destination = scratch.join("destination");
    let pulled =
        kiln_with(&destination, &["--json", "pull", "--remote", &url], &node).succeeded_json();
    assert_eq!(pulled["blobs"]["copied"], 3, "{pulled:#}");
    assert_eq!(pulled["blobs"]["refused"], 0, "{pulled:#}");

    // Seen by the binary, another process: the profile and the answer.
    let profiles = support::run(&destination, &["--json", "profiles"]).succeeded_json();
    assert_eq!(profiles[0]["program"], "server", "{profiles:#}");
    let tunes = support::run(&destination, &["--json", "tunes"]).succeeded_json();
    assert_eq!(tunes[0]["key"], "matmul (n: 64)", "{tunes:#}");
    // Used: the first run on the node loads its six ahead, compiling
    // nothing; the tuning answers from the store, measuring nothing.
    assert_eq!(serve(&destination), (6, 0), "a warm start on the node");
    assert_eq!(tune(&destination), (Origin::Stored, 0, 0));
    let (key, bytes) = pipeline_cache();
    match open(&destination).lookup_blob(&key) {
        Lookup::Hit { artifact, .. } => assert_eq!(artifact, bytes),
        Lookup::Miss(miss) => panic!("the pipeline cache was not pulled: {miss:?}"),
    }

    // Again: the node's own blobs are kept, none copied.
    let again =
        kiln_with(&destination, &["--json", "pull", "--remote", &url], &node).succeeded_json();
    assert_eq!(again["blobs"]["copied"], 0, "{again:#}");
    assert_eq!(again["blobs"]["already_held"], 3, "{again:#}");

    // One compiler's: its profile, which names it; not the others.
    let chosen = kiln_with(
        &scratch.join("fake only"),
        &["--json", "pull", "--remote", &url, "--backend", "fake"],
        &node,
    )
    .succeeded_json();
    assert_eq!(chosen["blobs"]["entries"], 1, "{chosen:#}");
}

// P15, P10
#[test]
fn p15_a_tampered_blob_or_name_is_not_pulled_and_is_reported() {
    let scratch = Scratch::new("cli-pull-blobs-tampered");
    let Some(server) = redis(&scratch, "kiln pull of tampered named blobs") else {
        return;
    };
    let url = server.url();
    let (fleet, _) = keygen(&scratch, false);
    let keys = [("KILN_REMOTE_KEY", fleet.as_str())];
    let source = scratch.join("source");
    warm_source(&source);
    kiln_with(&source, &["--json", "push", "--remote", &url], &keys).succeeded_json();

    // One byte of one name entry and of one blob entry changed in Redis.
    for space in ["n", "b"] {
        let listed = server
            .command(&["KEYS", &format!("kiln:{space}:*")])
            .expect("redis answers");
        let victim = listed
            .lines()
            .find(|line| line.starts_with(&format!("kiln:{space}:")))
            .expect("an entry of the space")
            .to_owned();
        let changed = server
            .command(&["SETRANGE", &victim, "70", "#"])
            .expect("redis answers");
        assert!(changed.starts_with(':'), "{changed}");
    }

    let destination = scratch.join("destination");
    let pulled = kiln_with(&destination, &["--json", "pull", "--remote", &url], &keys);
    let report: Value = pulled.succeeded_json();
    let blobs = &report["blobs"];
    // The changed name lists nothing; the changed blob (when it is not
    // the one whose name changed) is refused where it is read.
    let refused = blobs["refused"].as_u64().expect("a count");
    assert!((1..=2).contains(&refused), "{report:#}");
    assert_eq!(
        blobs["copied"].as_u64().expect("a count") + refused,
        3,
        "{report:#}"
    );
    assert!(
        pulled.stderr.contains("did not verify"),
        "the refusal is said: {}",
        pulled.stderr
    );

    // Another fleet's key verifies no name: nothing listed, all refused.
    let (other, _) = keygen(&scratch, false);
    let stranger = kiln_with(
        &scratch.join("stranger"),
        &["--json", "pull", "--remote", &url],
        &[("KILN_REMOTE_KEY", other.as_str())],
    )
    .succeeded_json();
    assert_eq!(stranger["blobs"]["copied"], 0, "{stranger:#}");
    assert_eq!(stranger["blobs"]["refused"], 3, "{stranger:#}");
}
