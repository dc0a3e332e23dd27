//! A bundle is a program's whole warm state (P15): `kiln warm` on one
//! store makes the kernels and the driver's pipeline cache, `kiln export`
//! bundles them, `kiln import` puts them in an empty store, and a fresh
//! `kiln warm` there compiles nothing and gives the driver the pipeline
//! cache it carried. Every step is a process of its own; the wgpu part
//! needs a Vulkan adapter with a pipeline cache (lavapipe has one) and
//! skips, saying why, without.

mod support;

use std::path::Path;

use kiln_engine::store::BlobKey;
use kiln_engine::{Blobs, Lookup};
use kiln_store::Entry;
use serde_json::Value;
use support::remote::{keygen, kiln_with};
use support::{Scratch, backend, finish, kiln, wgsl_kernel};

/// `kiln --dir STORE --json warm FOLDER`, with a driver shader cache of
/// `mesa`'s own (so that nothing but kiln's pipeline cache carries the
/// driver's work from one store to the other): its report.
fn warm(store: &Path, folder: &Path, mesa: &Path) -> Value {
    let warmed = finish(
        kiln(store, &["--json", "warm"])
            .arg(folder)
            .env("MESA_SHADER_CACHE_DIR", mesa),
    );
    let report = warmed.json();
    assert!(warmed.status.success(), "{report:#}\n{}", warmed.stderr);
    report
}

/// The pipeline cache blob of the store at `root`: its key and bytes.
fn pipeline_cache(root: &Path) -> Option<(BlobKey, Vec<u8>)> {
    let store = support::remote::open(root);
    let mut keys = Vec::new();
    store
        .entries(&mut |info| {
            if let Entry::Blob(record) = info.entry
                && record.key.kind == "wgpu pipeline cache"
            {
                keys.push(record.key);
            }
        })
        .expect("the store lists its entries");
    let key = keys.pop()?;
    match store.lookup_blob(&key) {
        Lookup::Hit { artifact, .. } => Some((key, artifact)),
        Lookup::Miss(miss) => panic!("the listed cache reads back: {miss:?}"),
    }
}

// P15
#[test]
fn p15_an_imported_bundle_warms_an_empty_store_with_no_compile_and_its_pipeline_cache() {
    let scratch = Scratch::new("bundle-warm");
    let kernels = scratch.join("kernels");
    std::fs::create_dir_all(&kernels).expect("a kernel folder");
    for value in 0..4 {
        std::fs::write(
            kernels.join(format!("fill{value}.wgsl")),
            format!("// kiln entry: main\n{}", wgsl_kernel(value)),
        )
        .expect("a kernel file");
    }
    let (source, destination) = (scratch.join("source"), scratch.join("destination"));

    let first = warm(&source, &kernels, &scratch.join("mesa-source"));
    let wgpu = backend(&first, "wgpu");
    let cache = wgpu["pipeline_cache"].as_str().unwrap_or("none").to_owned();
    if wgpu["on_device"] != true || cache.starts_with("unavailable") {
        kiln_engine::conformance::skip(
            "a bundle's pipeline cache, end to end",
            &format!("wgpu ran without a device pipeline cache here: {cache}"),
        );
        return;
    }
    assert_eq!(wgpu["kernels"], 4, "{wgpu:#}");
    let (key, bytes) = pipeline_cache(&source).expect("the first warm kept a pipeline cache");

    // Signed by the builder, trusted by the node, as a fleet ships one.
    let (secret, public) = keygen(&scratch, true);
    let public = public.expect("a signing key has a public key");
    let builder = [("KILN_REMOTE_SIGNING_KEY", secret.as_str())];
    let node = [("KILN_REMOTE_TRUSTED_KEYS", public.as_str())];
    let bundle = scratch.join("warm.kiln");
    let bundle_text = bundle.display().to_string();
    let exported =
        kiln_with(&source, &["--json", "export", &bundle_text], &builder).succeeded_json();
    assert!(
        exported["blobs"].as_u64().is_some_and(|blobs| blobs >= 1),
        "the pipeline cache travels: {exported:#}"
    );
    let imported =
        kiln_with(&destination, &["--json", "import", &bundle_text], &node).succeeded_json();
    assert_eq!(imported["blobs"], exported["blobs"], "{imported:#}");
    match support::remote::open(&destination).lookup_blob(&key) {
        Lookup::Hit { artifact, .. } => assert!(artifact == bytes, "the same cache"),
        Lookup::Miss(miss) => panic!("the import holds the pipeline cache: {miss:?}"),
    }

    // A fresh process on the imported store: every kernel from the store,
    // none compiled, and the driver handed the cache the bundle carried.
    let later = warm(&destination, &kernels, &scratch.join("mesa-destination"));
    let wgpu = backend(&later, "wgpu");
    assert_eq!(wgpu["from_store"], 4, "{wgpu:#}");
    assert_eq!(wgpu["compiled"].as_u64().unwrap_or(0), 0, "{wgpu:#}");
    let state = wgpu["pipeline_cache"].as_str().unwrap_or("none");
    assert!(
        state.contains("read from the store"),
        "the driver got the bundle's pipeline cache: {wgpu:#}"
    );
    assert!(
        state.starts_with(&bytes.len().to_string()),
        "the bundle's cache, {} bytes: {state}",
        bytes.len()
    );
}
