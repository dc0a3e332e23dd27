//! The `kiln` binary against real stores.

mod support;

use std::sync::Arc;

use anyhow::Result;
use kiln_engine::fake::{FakeKernel, FakeTarget};
use kiln_engine::{KernelLoader, LoaderConfig};
use support::{Scratch, filled, object_of, run};

#[test]
fn stats_and_ls_describe_the_store_as_tables_or_json() {
    let scratch = Scratch::new("stats");
    let root = scratch.join("store");
    filled(&root, 3);
    let stats = run(&root, &["stats", "--json"]).succeeded_json();
    assert_eq!(stats["entries"], 3);
    assert_eq!(stats["compilers"][0]["backend"], "fake");
    let table = run(&root, &["stats"]);
    assert!(table.stdout.contains("entries"));

    let listed = run(&root, &["ls", "--json"]).succeeded_json();
    assert_eq!(
        listed.as_array().map(Vec::len),
        Some(6),
        "three kernel and three source records"
    );
    // The JSON shape: snake_case, digests as hex strings, no number wider
    // than 64 bits (docs/CLI.md).
    let entry = &listed[0];
    assert!(
        entry["object"]
            .as_str()
            .is_some_and(|digest| digest.len() == 64),
        "{entry:#}"
    );
    assert!(entry["key"]["digest"].is_string(), "{entry:#}");
    assert!(entry["key"]["key_digest"].is_string(), "{entry:#}");
    assert!(entry["size"].is_u64(), "{entry:#}");
    let table = run(&root, &["ls", "--kernels-only"]).stdout;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "a header and three rows:\n{table}");
    let column = lines[0].find("TARGET").expect("a TARGET column");
    assert!(
        lines[1..]
            .iter()
            .all(|line| line[column..].starts_with("fake")),
        "aligned:\n{table}"
    );
}

#[test]
fn verify_removes_a_corrupt_object_and_reports_it() {
    // P2
    let scratch = Scratch::new("verify");
    let root = scratch.join("store");
    let store = filled(&root, 2);
    let object = object_of(&store, 1);
    std::fs::write(&object, b"not the artifact").expect("corrupted");
    let report = run(&root, &["verify", "--json"]).succeeded_json();
    assert_eq!(report["bad_objects"], 1);
    assert_eq!(
        report["dangling_records"], 2,
        "its id and source records went with it"
    );
    assert!(!object.exists());
    let again = run(&root, &["verify", "--json"]).succeeded_json();
    assert_eq!(again["bad_objects"], 0);
}

#[test]
fn gc_brings_the_store_under_the_size_given() {
    // P6
    let scratch = Scratch::new("gc");
    let root = scratch.join("store");
    filled(&root, 5);
    let report = run(&root, &["gc", "--max-size", "0", "--json"]).succeeded_json();
    assert_eq!(report["evicted"], 5);
    assert_eq!(report["after"]["entries"], 0);
    let bad = run(&root, &["gc", "--max-size", "lots"]);
    assert!(!bad.status.success());
}

#[test]
fn export_and_import_move_a_store_and_refuse_another_architecture() {
    // P8
    let scratch = Scratch::new("bundle");
    let source = scratch.join("source");
    let destination = scratch.join("destination");
    filled(&source, 4);
    let bundle = scratch.join("warm.kiln");
    let bundle_text = bundle.display().to_string();
    let exported = run(&source, &["export", &bundle_text, "--json"]).succeeded_json();
    assert_eq!(exported["records"], 8);

    let refused = run(&destination, &["import", &bundle_text, "--arch", "fake_2"]);
    assert!(!refused.status.success());
    let message = &refused.stderr;
    assert!(
        message.contains("architecture"),
        "names the component: {message}"
    );

    let imported = run(
        &destination,
        &["import", &bundle_text, "--trust-unsigned", "--json"],
    )
    .succeeded_json();
    assert_eq!(imported["records"], 8);
    let stats = run(&destination, &["stats", "--json"]).succeeded_json();
    assert_eq!(stats["entries"], 4);
}

#[test]
fn explain_names_a_changed_compiler_or_says_never_seen() -> Result<()> {
    // P9
    let scratch = Scratch::new("explain");
    let root = scratch.join("store");
    let store = filled(&root, 1);
    let newer = kiln_engine::fake::FakeCompiler::default().with_key_components(
        kiln_engine::KeyComponents::new("fake", "kiln-fake 2", "fake_1", ""),
    );
    let target = FakeTarget::on_store(Arc::new(store)).with_compiler(newer);
    let mut loader = KernelLoader::with_config(
        target,
        LoaderConfig {
            // A store filled for the command line to read holds no
            // warm-start profile of the test (L12).
            profile: false,
            ..LoaderConfig::default()
        },
    );
    let kernel = FakeKernel::new(0);
    loader.load(&kernel, &kernel.artifact_id())?;

    let explained = run(&root, &["explain", "kiln.fake"]);
    let text = &explained.stdout;
    assert!(text.contains("compiler changed"), "{text}");
    let never = run(&root, &["explain", "no.such.kernel"]);
    assert!(never.stdout.contains("never seen"));
    let as_json = run(&root, &["explain", "kiln.fake", "--json"]).succeeded_json();
    // The JSON shape: snake_case, digests as hex strings (docs/CLI.md).
    let explanation = &as_json[0]["explanation"];
    assert_eq!(explanation["state"], "changed", "{as_json:#}");
    assert_eq!(explanation["component"], "compiler", "{as_json:#}");
    assert_eq!(explanation["asked"], "kiln-fake 2", "{as_json:#}");
    let digest = as_json[0]["last_missed_under"]["digest"]
        .as_str()
        .expect("a digest as text");
    assert!(
        digest.len() == 32 && digest.bytes().all(|byte| byte.is_ascii_hexdigit()),
        "{as_json:#}"
    );
    Ok(())
}

#[test]
fn import_into_an_empty_store_refuses_a_bundle_of_another_target_unless_told() {
    // P15: a bundle whose compiler is not this machine's is refused by an
    // empty store, naming the component, unless --any-target.
    use kiln_engine::{ArtifactStoreExt, KeyComponents, StoreKey};

    let scratch = Scratch::new("bundle-target");
    let source = scratch.join("source");
    let store = kiln_store::DiskStore::open(kiln_store::StoreConfig::at(&source)).expect("opens");
    let elsewhere = KeyComponents::new("wgpu", "naga 0.0.1-of-another-machine", "baseline", "");
    let key = StoreKey::for_artifact(&elsewhere, &FakeKernel::new(1).artifact_id(), None);
    store.put(
        &key,
        None,
        b"an artifact of elsewhere",
        std::time::Duration::ZERO,
    );
    let bundle = scratch.join("elsewhere.kiln");
    let bundle_text = bundle.display().to_string();
    run(&source, &["export", &bundle_text, "--json"]).succeeded_json();

    let destination = scratch.join("destination");
    let refused = run(&destination, &["import", &bundle_text, "--trust-unsigned"]);
    assert_eq!(refused.status.code(), Some(1), "{}", refused.stdout);
    assert!(
        refused.stderr.contains("compiler") && refused.stderr.contains("--any-target"),
        "names the component and the way out: {}",
        refused.stderr
    );
    let imported = run(
        &destination,
        &[
            "import",
            &bundle_text,
            "--trust-unsigned",
            "--any-target",
            "--json",
        ],
    )
    .succeeded_json();
    assert_eq!(imported["records"], 1);
}

#[test]
fn warm_with_dir_touches_no_other_store_and_warns_of_none() {
    // P1: `--dir DIR` names the one store a command works on; the default
    // store's place is left alone, writable or not.
    let scratch = Scratch::new("warm-dir-only");
    let folder = scratch.join("kernels");
    std::fs::create_dir_all(&folder).expect("a folder");
    support::kernels::wgsl_kernels(&folder, 2);
    let store = scratch.join("store");
    for (case, home) in [
        ("a writable home", scratch.join("home")),
        ("a home that cannot be written", scratch.join("home-file")),
    ] {
        if case.starts_with("a home that") {
            std::fs::write(&home, b"a file, not a folder").expect("a file");
        } else {
            std::fs::create_dir_all(&home).expect("a home");
        }
        let finished = support::finish(
            support::warm(&store, &[], &folder)
                .env_remove("KILN_CACHE_DIR")
                .env_remove("XDG_CACHE_HOME")
                .env("HOME", &home),
        );
        assert!(finished.status.success(), "{case}: {}", finished.stderr);
        assert!(
            !home.join(".cache").exists(),
            "{case}: no store was made in the default place"
        );
        assert!(
            !finished.stderr.contains("memory only"),
            "{case}: no warning about a store not asked for: {}",
            finished.stderr
        );
    }
}

#[test]
fn stats_and_ls_on_a_regular_file_or_a_device_say_what_it_is() {
    let scratch = Scratch::new("stats-not-a-folder");
    let file = scratch.join("a-file");
    std::fs::write(&file, b"not a store").expect("a file");
    for (root, what) in [
        (file.as_path(), "a regular file"),
        (std::path::Path::new("/dev/null"), "a device"),
    ] {
        for command in ["stats", "ls"] {
            let finished = run(root, &[command]);
            assert!(
                finished.stdout.contains(what) && !finished.stdout.contains("yet"),
                "{command} on {}: {}{}",
                root.display(),
                finished.stdout,
                finished.stderr
            );
        }
    }
    assert_eq!(std::fs::read(&file).expect("reads"), b"not a store");
}
