//! `kiln stats --remote` against a real redis-server: the fleet's remote
//! hit rate over the kernels asked of the remote tier, and `--zero` on a
//! node that only reads the remote refused, naming what to do, with
//! nothing zeroed (P10).

mod support;

use std::time::Duration;

use kiln_engine::store::BlobKey;
use kiln_engine::{ArtifactStore, ArtifactStoreExt, Blobs, Lookup, StoreKey};
use kiln_remote::TieredStore;
use serde_json::Value;
use support::remote::{keygen, kiln_with, open, redis, remote};
use support::{Scratch, fake_key as key, filled};

/// `kiln --json stats --remote URL`'s fleet counts, as a node with
/// `variables` sees them.
fn fleet_counts(scratch: &Scratch, url: &str, variables: &[(&str, &str)]) -> Value {
    let stats = kiln_with(
        &scratch.join("store"),
        &["--json", "stats", "--remote", url],
        variables,
    )
    .succeeded_json();
    stats["remote"].clone()
}

// P10
#[test]
fn a_node_that_got_every_kernel_from_the_remote_shows_a_remote_hit_rate_of_100_percent() {
    let scratch = Scratch::new("stats-remote-rate");
    let Some(server) = redis(&scratch, "the fleet's remote hit rate against redis-server") else {
        return;
    };
    let url = server.url();
    let (fleet, _) = keygen(&scratch, false);
    let variables = [("KILN_REMOTE_KEY", fleet.as_str())];

    // A builder publishes 9 kernels; a node asks for them as one batch,
    // which reads their failure memories in the same round trip.
    let builder = TieredStore::new(open(&scratch.join("builder")), remote(&url, &variables));
    let keys: Vec<StoreKey> = (0..9).map(key).collect();
    for found in builder.lookup_many(&keys) {
        assert!(matches!(found, Lookup::Miss(_)));
    }
    for key in &keys {
        builder.put(key, None, b"an artifact", Duration::from_millis(5));
    }
    assert!(builder.flush(Duration::from_secs(10)));
    drop(builder);
    let scratch_node = scratch.join("node");
    let node = TieredStore::new(open(&scratch_node), remote(&url, &variables));
    // The builder's own 9 misses are counted too: zero them first, so the
    // fleet is the node alone.
    assert!(node.remote().zero_fleet_counts());
    for found in node.lookup_many(&keys) {
        assert!(matches!(found, Lookup::Hit { .. }), "{found:?}");
    }
    // Named blobs asked beside them (a pipeline cache, a profile, tuning
    // answers) that the remote does not hold: no kernel was asked.
    for number in 0..36 {
        let blob = BlobKey::new("warm-start profile").component("program", number.to_string());
        assert!(matches!(node.lookup_blob(&blob), Lookup::Miss(_)));
    }
    assert!(node.flush(Duration::from_secs(10)));

    let shown = fleet_counts(&scratch, &url, &[("KILN_REMOTE_KEY", &fleet)]);
    assert_eq!(shown["fleet"]["remote_hits"], 9, "{shown:#}");
    assert_eq!(
        shown["fleet"]["remote_misses"], 0,
        "the failure memories and blobs read beside the kernels are no kernels asked: {shown:#}"
    );
    assert_eq!(shown["hit_rate"], 1.0, "{shown:#}");
    let text = kiln_with(
        &scratch.join("store"),
        &["stats", "--remote", &url],
        &[("KILN_REMOTE_KEY", &fleet)],
    );
    assert!(text.status.success(), "{}", text.stderr);
    assert!(
        text.stdout.contains("9 of 9 kernels asked (100.0 %)"),
        "{}",
        text.stdout
    );
}

// P10
#[test]
fn zeroing_the_fleet_s_counts_from_a_node_that_only_reads_the_remote_is_refused_and_zeroes_nothing()
{
    let scratch = Scratch::new("stats-zero-reader");
    let Some(server) = redis(&scratch, "kiln stats --zero against redis-server") else {
        return;
    };
    let url = server.url();
    let (signing, public) = keygen(&scratch, true);
    let public = public.expect("a public key");
    let (fleet, _) = keygen(&scratch, false);

    // A builder that signs counts something in the fleet's counts.
    let builder = TieredStore::new(
        open(&scratch.join("builder")),
        remote(&url, &[("KILN_REMOTE_SIGNING_KEY", signing.as_str())]),
    );
    assert!(matches!(builder.lookup(&key(1)), Lookup::Miss(_)));
    builder.put(&key(1), None, b"an artifact", Duration::from_millis(5));
    assert!(builder.flush(Duration::from_secs(10)));
    drop(builder);
    // A local store with counts of its own.
    let local = scratch.join("store");
    drop(filled(&local, 2));
    let local_counts = |variables: &[(&str, &str)]| {
        kiln_with(&local, &["--json", "stats"], variables).succeeded_json()["activity"].clone()
    };
    let before = local_counts(&[]);
    assert!(
        before["backends"]
            .as_array()
            .is_some_and(|backends| !backends.is_empty()),
        "the local store counted its compiles: {before:#}"
    );
    let trusted = [("KILN_REMOTE_TRUSTED_KEYS", public.as_str())];
    let counted = fleet_counts(&scratch, &url, &trusted);
    assert_eq!(counted["fleet"]["written"], 1, "{counted:#}");

    // A verify-only node (trusted keys only) and a read-only one: refused,
    // exit 1, saying what to do, whether the remote was named on the
    // command line or by KILN_REMOTE_URL, with and without a local store.
    let read_only = [
        ("KILN_REMOTE_KEY", fleet.as_str()),
        ("KILN_REMOTE_READ_ONLY", "1"),
    ];
    for variables in [&trusted[..], &read_only[..]] {
        for (store, arguments, with_url) in [
            (
                &local,
                &["stats", "--zero", "--remote", url.as_str()][..],
                false,
            ),
            (&local, &["stats", "--zero"], true),
            (
                &scratch.join("none"),
                &["stats", "--zero", "--remote", url.as_str()],
                false,
            ),
        ] {
            let mut variables = variables.to_vec();
            if with_url {
                variables.push(("KILN_REMOTE_URL", url.as_str()));
            }
            let refused = kiln_with(store, arguments, &variables);
            assert_eq!(refused.status.code(), Some(1), "{refused:?}");
            assert!(
                refused.stderr.contains("cannot be zeroed from this node")
                    && refused.stderr.contains("KILN_REMOTE_SIGNING_KEY")
                    && refused.stderr.contains("nothing was zeroed"),
                "{}",
                refused.stderr
            );
            assert!(!scratch.join("none").exists(), "no store made");
        }
    }
    assert_eq!(local_counts(&[]), before, "the local counts are kept");
    let kept = fleet_counts(&scratch, &url, &trusted);
    assert_eq!(
        kept["fleet"], counted["fleet"],
        "the fleet's counts are kept"
    );

    // A node that writes the remote zeroes both.
    let writer = [("KILN_REMOTE_SIGNING_KEY", signing.as_str())];
    let zeroed = kiln_with(
        &local,
        &["--json", "stats", "--zero", "--remote", &url],
        &writer,
    );
    assert_eq!(zeroed.succeeded_json()["zeroed"], true);
    assert_eq!(
        local_counts(&[])["backends"].as_array().map(Vec::len),
        Some(0),
        "the local counts start again"
    );
    let after = fleet_counts(&scratch, &url, &trusted);
    assert_eq!(after["fleet"]["written"], 0, "{after:#}");
    assert_eq!(after["fleet"]["processes"], 0, "{after:#}");
}
