//! `kiln warm --profile PROGRAM` (L12): prebuilds what a program's
//! warm-start profile says it loaded, from what the store holds, and names
//! every kernel it could not prebuild and why. A real program's profile,
//! written by a real loader (wgpu on naga, compile-only: any machine), and
//! the real binary.

mod support;

use std::path::Path;
use std::sync::Arc;

use kiln_engine::profile::{Program, StoredProfile, profile_blob_key};
use kiln_engine::store::BlobKey;
use kiln_engine::{
    ArtifactId, ArtifactStore, ArtifactStoreExt, Blobs, Kernel, KernelId, KernelLoader,
    KeyComponents, KeyedCompiler, Lookup, StoreKey,
};
use kiln_store::{DiskStore, StoreConfig};
use kiln_wgpu::{WgpuCompiler, WgpuTarget, WgpuVariant, WgslKernel};
use serde_json::Value;
use support::{Scratch, run, wgsl_kernel};

/// The program's kernels: one per value.
fn kernel(value: u32) -> WgslKernel {
    WgslKernel::builder(KernelId::named(format!("server.fill{value}")), "main")
        .source(wgsl_kernel(value))
}

/// Runs "server" once on the store at `root`, loading a kernel of each of
/// `values`, so its profile names them; the keys of their artifacts.
fn run_server(root: &Path, values: &[u32]) -> Vec<StoreKey> {
    let store: Arc<dyn ArtifactStore> =
        Arc::new(DiskStore::open(StoreConfig::at(root)).expect("the store opens"));
    let mut loader = KernelLoader::new(WgpuTarget::compile_only().with_store(store))
        .with_profile(Program::named("server"));
    let compiler = WgpuCompiler::default();
    let mut keys = Vec::new();
    for value in values {
        let kernel = kernel(*value);
        let id = ArtifactId::new(kernel.id(), WgpuVariant);
        loader.load(&kernel, &id).expect("the kernel compiles");
        keys.push(StoreKey::for_artifact(
            &compiler.key_components(),
            &id,
            compiler.entry_point(&id),
        ));
    }
    loader.save_profile();
    keys
}

/// The report's one profile.
fn profile_of(report: &Value) -> &Value {
    let profiles = report["profiles"].as_array().expect("a list of profiles");
    assert_eq!(profiles.len(), 1, "{report:#}");
    &profiles[0]
}

// L12: a kernel the store holds is prebuilt (in the store); one it holds
// nothing of is named, with why and what would build it; the run then
// fails with exit code 3, as a warm with failed kernels does.
#[test]
fn warm_from_a_profile_names_what_it_could_and_could_not_prebuild() {
    let scratch = Scratch::new("warm-profile");
    let root = scratch.path().join("store");
    let keys = run_server(&root, &[1, 2]);

    let whole = run(&root, &["--json", "warm", "--profile", "server"]);
    let report = whole.succeeded_json();
    let shown = profile_of(&report);
    assert_eq!(shown["backend"], "wgpu");
    assert_eq!(
        (shown["in_store"].as_u64(), shown["not_prebuilt"].as_u64()),
        (Some(2), Some(0)),
        "{report:#}"
    );

    // The store loses one kernel's artifact: the profile alone cannot
    // build it again.
    let store = DiskStore::open(StoreConfig::at(&root)).expect("the store opens");
    store.remove(&keys[1]);
    let partial = run(&root, &["--json", "warm", "--profile", "server"]);
    assert_eq!(partial.status.code(), Some(3), "{}", partial.stderr);
    let report = partial.json();
    let shown = profile_of(&report);
    assert_eq!(
        (
            shown["in_store"].as_u64(),
            shown["rebuilt"].as_u64(),
            shown["not_prebuilt"].as_u64()
        ),
        (Some(1), Some(0), Some(1)),
        "{report:#}"
    );
    let missing: Vec<&Value> = shown["kernels"]
        .as_array()
        .expect("the kernels")
        .iter()
        .filter(|kernel| kernel["outcome"] == "not_prebuilt")
        .collect();
    assert_eq!(missing.len(), 1);
    assert!(
        missing[0]["kernel"]
            .as_str()
            .is_some_and(|name| name.contains("server.fill2")),
        "the kernel is named: {report:#}"
    );
    let reason = missing[0]["reason"].as_str().expect("a reason");
    assert!(
        reason.contains("not their source") && reason.contains("kiln warm DIR"),
        "why, and what would build it: {reason}"
    );

    let table = run(&root, &["warm", "--profile", "server"]);
    assert_eq!(table.status.code(), Some(3));
    assert!(
        table.stdout.contains("wgpu not prebuilt: ") && table.stdout.contains("server.fill2"),
        "{}",
        table.stdout
    );
}

// L12: a profile written under another compiler (an older naga, as after
// an upgrade), whose artifacts the store holds with their recipes, is
// prebuilt for this machine's compiler: finalized again from the recipe
// and stored, so the next run finds it in the store, and so does the
// program.
#[test]
fn warm_from_a_profile_rebuilds_another_compiler_s_artifacts_from_their_recipes() {
    let scratch = Scratch::new("warm-profile-rebuild");
    let root = scratch.path().join("store");
    let keys = run_server(&root, &[4]);
    let store = DiskStore::open(StoreConfig::at(&root)).expect("the store opens");
    let here = WgpuCompiler::default().key_components();
    let older = KeyComponents {
        compiler: format!("{} (older)", here.compiler),
        ..here.clone()
    };
    // The program's profile and artifact as that other compiler left
    // them: the same kernel under its key, and none under this one's.
    let profile_name = profile_blob_key("server", &here);
    let Lookup::Hit {
        artifact: bytes, ..
    } = store.lookup_blob(&profile_name)
    else {
        panic!("the program wrote its profile");
    };
    let mut profile = StoredProfile::from_bytes(&bytes).expect("a profile");
    let Lookup::Hit {
        artifact: value, ..
    } = store.lookup(&keys[0])
    else {
        panic!("the program stored its kernel");
    };
    let kernel = kernel(4);
    let id = ArtifactId::new(kernel.id(), WgpuVariant);
    let theirs = StoreKey::for_artifact(&older, &id, WgpuCompiler::default().entry_point(&id));
    assert!(matches!(
        store.put(&theirs, None, &value, std::time::Duration::ZERO),
        kiln_engine::StoreOutcome::Stored { .. }
    ));
    store.remove(&keys[0]);
    forget_profile(&store, &profile_name, &here);
    profile.components = older.clone();
    let older_name = profile_blob_key("server", &older);
    assert!(matches!(
        store.put_blob(&older_name, &profile.to_bytes()),
        kiln_engine::StoreOutcome::Stored { .. }
    ));

    let first = run(&root, &["--json", "warm", "--profile", "server"]);
    let report = first.succeeded_json();
    let shown = profile_of(&report);
    assert_eq!(
        (
            shown["in_store"].as_u64(),
            shown["rebuilt"].as_u64(),
            shown["not_prebuilt"].as_u64()
        ),
        (Some(0), Some(1), Some(0)),
        "{report:#}"
    );
    let second = run(&root, &["--json", "warm", "--profile", "server"]);
    let report = second.succeeded_json();
    assert_eq!(
        profile_of(&report)["in_store"].as_u64(),
        Some(1),
        "{report:#}"
    );
    assert!(
        matches!(store.lookup(&keys[0]), Lookup::Hit { .. }),
        "the program's key now holds the kernel"
    );
}

/// Writes `name`'s profile as forgotten (no kernels).
fn forget_profile(store: &DiskStore, name: &BlobKey, components: &KeyComponents) {
    let nothing = StoredProfile::forgotten("server", components);
    assert!(matches!(
        store.put_blob(name, &nothing.to_bytes()),
        kiln_engine::StoreOutcome::Stored { .. }
    ));
}

// A program the store keeps no profile of is an error that says where
// the profiles are listed; a folder and a profile together are a usage
// error.
#[test]
fn warm_from_an_unknown_profile_says_which_programs_there_are() {
    let scratch = Scratch::new("warm-profile-unknown");
    let root = scratch.path().join("store");
    run_server(&root, &[3]);
    let unknown = run(&root, &["warm", "--profile", "client"]);
    assert_eq!(unknown.status.code(), Some(1), "{}", unknown.stderr);
    assert!(
        unknown.stderr.contains("no warm-start profile of client")
            && unknown.stderr.contains("kiln profiles"),
        "{}",
        unknown.stderr
    );
    let both = run(&root, &["warm", "--profile", "server", "some-folder"]);
    assert_eq!(both.status.code(), Some(2), "{}", both.stderr);
}
