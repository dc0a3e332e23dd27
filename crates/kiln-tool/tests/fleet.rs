//! `kiln push`, `kiln pull`, signed bundles and `kiln stats` with a remote
//! tier, against a real redis-server and real stores (P8, P10).

mod support;

use std::path::Path;
use std::time::Duration;

use kiln_engine::{ArtifactStore, ArtifactStoreExt, Lookup};
use kiln_store::Entry;
use serde_json::Value;
use support::remote::{keygen, kiln_with, open, redis, remote};
use support::{Finished, Scratch, fake_batch, fake_key, filled};

/// Every artifact of `source`, looked up in `destination`: the same bytes.
fn assert_same_entries(source: &Path, destination: &Path) -> usize {
    let (source, destination) = (open(source), open(destination));
    let mut keys = Vec::new();
    source
        .entries(&mut |info| {
            if let Entry::Record(record) = info.entry {
                keys.push(record.key);
            }
        })
        .expect("the store lists its entries");
    for key in &keys {
        let Lookup::Hit { artifact, .. } = source.lookup(key) else {
            panic!("the source holds {}", key.subject_text());
        };
        match destination.lookup(key) {
            Lookup::Hit {
                artifact: copied, ..
            } => assert!(copied == artifact),
            other => panic!("{} was not copied: {other:?}", key.subject_text()),
        }
    }
    keys.len()
}

/// Loads fake kernels `0..count` from the store at `root`: none compiles.
fn loads_without_compiling(root: &Path, count: u32) {
    let mut loader = fake_batch(open(root), count);
    for number in 0..count {
        let kernel = kiln_engine::fake::FakeKernel::new(number);
        assert!(loader.load(&kernel, &kernel.artifact_id()).is_ok());
    }
    let statistics = loader.statistics();
    assert_eq!(statistics.compiled, 0, "{statistics:?}");
    assert_eq!(statistics.hits, u64::from(count), "{statistics:?}");
}

// P10
#[test]
fn push_then_pull_into_an_empty_store_gives_the_same_loadable_entries() {
    let scratch = Scratch::new("cli-push-pull");
    let Some(server) = redis(&scratch, "kiln push and pull against redis-server") else {
        return;
    };
    let url = server.url();
    let (secret, public) = keygen(&scratch, true);
    let public = public.expect("a signing key has a public key");
    let source = scratch.join("source");
    drop(filled(&source, 4));
    let builder = [("KILN_REMOTE_SIGNING_KEY", secret.as_str())];
    let node = [("KILN_REMOTE_TRUSTED_KEYS", public.as_str())];

    // A node holding only public keys cannot push, and is told how to.
    let refused = kiln_with(&source, &["push", "--remote", &url], &node);
    assert_eq!(refused.status.code(), Some(1), "{}", refused.stdout);
    assert!(
        refused.stderr.contains("kiln keygen --signing"),
        "{}",
        refused.stderr
    );
    assert!(!refused.stderr.contains(&secret));

    let pushed =
        kiln_with(&source, &["--json", "push", "--remote", &url], &builder).succeeded_json();
    assert_eq!(pushed["entries"], 8, "{pushed:#}");
    assert_eq!(pushed["copied"], 8, "{pushed:#}");
    assert_eq!(pushed["failed"], 0, "{pushed:#}");

    // A node pulls into an empty store: every entry, verified, the same.
    let destination = scratch.join("destination");
    let pulled =
        kiln_with(&destination, &["--json", "pull", "--remote", &url], &node).succeeded_json();
    assert_eq!(pulled["copied"], 8, "{pulled:#}");
    assert_eq!(pulled["refused"], 0, "{pulled:#}");
    assert_eq!(assert_same_entries(&source, &destination), 8);
    loads_without_compiling(&destination, 4);

    // Again: nothing to copy.
    let again =
        kiln_with(&destination, &["--json", "pull", "--remote", &url], &node).succeeded_json();
    assert_eq!(again["copied"], 0, "{again:#}");
    assert_eq!(again["already_held"], 8, "{again:#}");

    // Only one compiler's entries, when asked.
    let none = kiln_with(
        &scratch.join("other"),
        &["--json", "pull", "--remote", &url, "--arch", "no_such_arch"],
        &node,
    )
    .succeeded_json();
    assert_eq!(none["entries"], 0, "{none:#}");
}

// P10
#[test]
fn a_tampered_remote_entry_is_not_pulled_and_is_reported() {
    let scratch = Scratch::new("cli-pull-tampered");
    let Some(server) = redis(&scratch, "kiln pull of a tampered entry") else {
        return;
    };
    let url = server.url();
    let (fleet, _) = keygen(&scratch, false);
    let keys = [("KILN_REMOTE_KEY", fleet.as_str())];
    let source = scratch.join("source");
    drop(filled(&source, 2));
    kiln_with(&source, &["--json", "push", "--remote", &url], &keys).succeeded_json();

    // Change one byte of one artifact entry's payload in Redis.
    let listed = server
        .command(&["KEYS", "kiln:e:*"])
        .expect("redis answers");
    let victim = listed
        .lines()
        .find(|line| line.starts_with("kiln:e:"))
        .expect("an artifact entry")
        .to_owned();
    let changed = server
        .command(&["SETRANGE", &victim, "70", "#"])
        .expect("redis answers");
    assert!(changed.starts_with(':'), "{changed}");

    let destination = scratch.join("destination");
    let pulled = kiln_with(&destination, &["--json", "pull", "--remote", &url], &keys);
    let report: Value = pulled.succeeded_json();
    assert_eq!(report["refused"], 1, "{report:#}");
    assert_eq!(report["copied"], 3, "{report:#}");
    assert!(
        pulled.stderr.contains("did not verify"),
        "the refusal is said: {}",
        pulled.stderr
    );
    // What was refused is not in the store; the rest is.
    let (source, destination) = (open(&source), open(&destination));
    let mut held = 0;
    source
        .entries(&mut |info| {
            if let Entry::Record(record) = info.entry
                && let Lookup::Hit { .. } = destination.lookup(&record.key)
            {
                held += 1;
            }
        })
        .expect("the store lists its entries");
    assert_eq!(held, 3);

    // Another fleet's key verifies nothing: every entry refused.
    let (other, _) = keygen(&scratch, false);
    let stranger = kiln_with(
        &scratch.join("stranger"),
        &["--json", "pull", "--remote", &url],
        &[("KILN_REMOTE_KEY", other.as_str())],
    )
    .succeeded_json();
    assert_eq!(stranger["copied"], 0, "{stranger:#}");
    assert_eq!(stranger["refused"], 4, "{stranger:#}");
}

/// `kiln export` of a store of two kernels at `bundle`, with `keys`.
fn export(scratch: &Scratch, bundle: &Path, keys: &[(&str, &str)]) -> Value {
    let source = scratch.join(&format!(
        "source-{}",
        bundle.file_stem().unwrap().to_string_lossy()
    ));
    drop(filled(&source, 2));
    kiln_with(
        &source,
        &["--json", "export", &bundle.display().to_string()],
        keys,
    )
    .succeeded_json()
}

fn import(scratch: &Scratch, bundle: &Path, extra: &[&str], keys: &[(&str, &str)]) -> Finished {
    let destination = scratch.join(&format!("destination-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&destination);
    let mut arguments = vec!["--json", "import"];
    let bundle = bundle.display().to_string();
    arguments.push(&bundle);
    arguments.extend_from_slice(extra);
    kiln_with(&destination, &arguments, keys)
}

/// Where the stream of a version 3 bundle starts, and where its
/// signature's bytes are: the magic and the version, the manifest's length
/// and the manifest, the signature's tag, length and bytes.
fn bundle_parts(bytes: &[u8]) -> (std::ops::Range<usize>, usize) {
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4")) as usize;
    let signature_at = 16 + u32_at(12) + 12;
    let stream_at = signature_at + u32_at(signature_at - 4);
    (signature_at..stream_at, stream_at)
}

/// The bundle at `path` with its plain form, what its zstd stream after
/// the head holds, changed by `change`, and the head kept as it was.
fn changed_plain(path: &Path, change: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let bytes = std::fs::read(path).expect("the bundle");
    let (_, stream_at) = bundle_parts(&bytes);
    let (head, stream) = bytes.split_at(stream_at);
    let mut plain = zstd::decode_all(stream).expect("a zstd stream");
    change(&mut plain);
    [
        head.to_vec(),
        zstd::encode_all(&plain[..], 3).expect("compresses"),
    ]
    .concat()
}

fn refused_because(finished: &Finished, reason: &str) {
    assert_eq!(finished.status.code(), Some(1), "{}", finished.stdout);
    assert!(
        finished.stderr.contains(reason) && finished.stderr.contains("--trust-unsigned"),
        "refused naming why ({reason}): {}",
        finished.stderr
    );
}

// P8, P10
#[test]
fn a_bundle_is_imported_only_when_its_signature_verifies_or_it_is_trusted_explicitly() {
    let scratch = Scratch::new("cli-signed-bundles");
    let (secret, public) = keygen(&scratch, true);
    let public = public.expect("a public key");
    let builder = [("KILN_REMOTE_SIGNING_KEY", secret.as_str())];
    let node = [("KILN_REMOTE_TRUSTED_KEYS", public.as_str())];

    // Signed by a builder: a node trusting it imports it.
    let signed = scratch.join("signed.kiln");
    let exported = export(&scratch, &signed, &builder);
    assert_eq!(exported["signed_by"], public.as_str(), "{exported:#}");
    let imported = import(&scratch, &signed, &[], &node).succeeded_json();
    assert_eq!(imported["records"], 4, "{imported:#}");
    assert_eq!(imported["signed_by"], public.as_str(), "{imported:#}");

    // A node trusting another key refuses it, naming the signer.
    let (_, stranger) = keygen(&scratch, true);
    let stranger = stranger.expect("a public key");
    let wrong = import(
        &scratch,
        &signed,
        &[],
        &[("KILN_REMOTE_TRUSTED_KEYS", stranger.as_str())],
    );
    refused_because(&wrong, "does not trust");

    // A changed signature, or changed content, is refused. The signature
    // follows the manifest, ahead of the stream; the manifest holds the
    // stream's digest.
    let mut bytes = std::fs::read(&signed).expect("the bundle");
    let (signature, _) = bundle_parts(&bytes);
    bytes[signature.end - 1] ^= 1;
    let forged = scratch.join("forged.kiln");
    std::fs::write(&forged, &bytes).expect("a forged bundle");
    refused_because(&import(&scratch, &forged, &[], &node), "does not match");
    let bytes = changed_plain(&signed, |plain| {
        let last = plain.len() - 1;
        plain[last] ^= 1;
    });
    std::fs::write(&forged, &bytes).expect("a forged bundle");
    let refused = import(&scratch, &forged, &["--trust-unsigned"], &node);
    assert_eq!(refused.status.code(), Some(1), "changed content is damage");
    assert!(refused.stderr.contains("damaged"), "{}", refused.stderr);
    let mut bytes = std::fs::read(&signed).expect("the bundle");
    bytes[40] ^= 1;
    let damaged = scratch.join("damaged.kiln");
    std::fs::write(&damaged, &bytes).expect("a damaged bundle");
    let refused = import(&scratch, &damaged, &["--trust-unsigned"], &node);
    assert_eq!(refused.status.code(), Some(1), "damage is never trusted");

    // Unsigned: refused, unless trusted explicitly.
    let unsigned = scratch.join("unsigned.kiln");
    let exported = export(&scratch, &unsigned, &[]);
    assert!(exported["signed_by"].is_null(), "{exported:#}");
    refused_because(&import(&scratch, &unsigned, &[], &node), "not signed");
    refused_because(&import(&scratch, &unsigned, &[], &[]), "not signed");
    let trusted = import(&scratch, &unsigned, &["--trust-unsigned"], &node).succeeded_json();
    assert_eq!(trusted["records"], 4, "{trusted:#}");
    assert!(trusted["signed_by"].is_null(), "{trusted:#}");

    // A fleet key signs and verifies too; another fleet's does not.
    let (fleet, _) = keygen(&scratch, false);
    let fleet_keys = [("KILN_REMOTE_KEY", fleet.as_str())];
    let by_fleet = scratch.join("fleet.kiln");
    export(&scratch, &by_fleet, &fleet_keys);
    import(&scratch, &by_fleet, &[], &fleet_keys).succeeded_json();
    let (other, _) = keygen(&scratch, false);
    refused_because(
        &import(
            &scratch,
            &by_fleet,
            &[],
            &[("KILN_REMOTE_KEY", other.as_str())],
        ),
        "does not match",
    );
}

// P10, S4
#[test]
fn stats_show_the_remote_and_what_the_fleet_counted() {
    let scratch = Scratch::new("cli-stats-remote");
    let Some(server) = redis(&scratch, "kiln stats against redis-server") else {
        return;
    };
    let url = server.url();
    let (fleet, _) = keygen(&scratch, false);
    let keys = [("KILN_REMOTE_KEY", fleet.as_str())];

    // One process of the fleet: two misses, a write, a remote hit. Each
    // process has its own remote store and counts.
    let writer = kiln_remote::TieredStore::new(open(&scratch.join("writer")), remote(&url, &keys));
    let key = fake_key;
    assert!(matches!(writer.lookup(&key(1)), Lookup::Miss(_)));
    assert!(matches!(writer.lookup(&key(2)), Lookup::Miss(_)));
    writer.put(&key(1), None, b"artifact one", Duration::from_millis(5));
    assert!(writer.flush(Duration::from_secs(10)));
    let reader = kiln_remote::TieredStore::new(open(&scratch.join("reader")), remote(&url, &keys));
    assert!(matches!(reader.lookup(&key(1)), Lookup::Hit { .. }));
    assert!(reader.flush(Duration::from_secs(10)));

    let stats = kiln_with(
        &scratch.join("store"),
        &["--json", "stats", "--remote", &url],
        &keys,
    )
    .succeeded_json();
    let shown = &stats["remote"];
    assert_eq!(stats["exists"], false, "no local store: {stats:#}");
    assert!(!scratch.join("store").exists(), "stats made none");
    assert_eq!(shown["reachable"], true, "{stats:#}");
    assert_eq!(shown["breaker"], "closed", "{stats:#}");
    let counted = &shown["fleet"];
    assert_eq!(counted["processes"], 2, "{stats:#}");
    assert_eq!(counted["remote_hits"], 1, "{stats:#}");
    assert_eq!(counted["remote_misses"], 2, "{stats:#}");
    assert_eq!(counted["written"], 1, "{stats:#}");
    assert_eq!(counted["unverified"], 0, "{stats:#}");
    assert_eq!(counted["queue_dropped"], 0, "{stats:#}");
    let text = kiln_with(&scratch.join("store"), &["stats", "--remote", &url], &keys);
    assert!(text.status.success(), "{}", text.stderr);
    assert!(text.stdout.contains("remote hits"), "{}", text.stdout);

    // A remote that does not answer: said, with the breaker open, quickly.
    let mut gone = server;
    gone.stop();
    let stats = kiln_with(
        &scratch.join("store"),
        &["--json", "stats", "--remote", &url],
        &keys,
    )
    .succeeded_json();
    assert_eq!(stats["remote"]["reachable"], false, "{stats:#}");
    assert_eq!(stats["remote"]["breaker"], "open", "{stats:#}");
    assert!(stats["remote"]["fleet"].is_null(), "{stats:#}");
}
