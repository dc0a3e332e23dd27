//! The `kiln` binary against real stores.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use anyhow::Result;
use kiln_core::fake::{FakeKernel, FakeTarget};
use kiln_core::{KernelLoader, LoaderConfig};
use kiln_store::{DiskStore, StoreConfig};
use kiln_test_support::Scratch;

const KILN: &str = env!("CARGO_BIN_EXE_kiln");

fn filled(root: &Path, kernels: u32) -> DiskStore {
    let store = DiskStore::open(StoreConfig::at(root)).expect("the store opens");
    let target = FakeTarget::on_store(Arc::new(store.clone()));
    let mut loader = KernelLoader::with_config(target, LoaderConfig::default());
    for number in 0..kernels {
        let kernel = FakeKernel::new(number);
        loader.load(&kernel, &kernel.artifact_id()).expect("loads");
    }
    store
}

fn kiln(root: &Path, arguments: &[&str]) -> Output {
    Command::new(KILN)
        .arg("--dir")
        .arg(root)
        .args(arguments)
        .env_remove("KILN_CACHE_DISABLE")
        .output()
        .expect("kiln runs")
}

fn json(output: &Output) -> serde_json::Value {
    assert!(
        output.status.success(),
        "kiln failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("kiln printed JSON")
}

#[test]
fn stats_and_ls_describe_the_store_as_tables_or_json() {
    let scratch = Scratch::new("stats");
    let root = scratch.join("store");
    filled(&root, 3);
    let stats = json(&kiln(&root, &["stats", "--json"]));
    assert_eq!(stats["entries"], 3);
    assert_eq!(stats["compilers"][0]["backend"], "fake");
    let table = kiln(&root, &["stats"]);
    assert!(String::from_utf8_lossy(&table.stdout).contains("entries"));

    let listed = json(&kiln(&root, &["ls", "--json"]));
    assert_eq!(
        listed.as_array().map(Vec::len),
        Some(6),
        "three kernel and three source records"
    );
    let table = String::from_utf8_lossy(&kiln(&root, &["ls", "--kernels-only"]).stdout).to_string();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "a header and three rows:\n{table}");
    let column = lines[0].find("BACKEND").expect("a BACKEND column");
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
    let key = kiln_core::StoreKey::for_artifact(
        &kiln_core::fake::FakeCompiler::default_key_components(),
        &FakeKernel::new(1).artifact_id(),
        None,
    );
    let object = store.object_path(&store.record(&key).expect("stored").object);
    std::fs::write(&object, b"not the artifact").expect("corrupted");
    let report = json(&kiln(&root, &["verify", "--json"]));
    assert_eq!(report["bad_objects"], 1);
    assert_eq!(
        report["dangling_records"], 2,
        "its id and source records went with it"
    );
    assert!(!object.exists());
    let again = json(&kiln(&root, &["verify", "--json"]));
    assert_eq!(again["bad_objects"], 0);
}

#[test]
fn gc_brings_the_store_under_the_size_given() {
    // P6
    let scratch = Scratch::new("gc");
    let root = scratch.join("store");
    filled(&root, 5);
    let report = json(&kiln(&root, &["gc", "--max-size", "0", "--json"]));
    assert_eq!(report["evicted"], 5);
    assert_eq!(report["after"]["entries"], 0);
    let bad = kiln(&root, &["gc", "--max-size", "lots"]);
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
    let exported = json(&kiln(&source, &["export", &bundle_text, "--json"]));
    assert_eq!(exported["records"], 8);

    let refused = kiln(&destination, &["import", &bundle_text, "--arch", "fake_2"]);
    assert!(!refused.status.success());
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(
        message.contains("architecture"),
        "names the component: {message}"
    );

    let imported = json(&kiln(&destination, &["import", &bundle_text, "--json"]));
    assert_eq!(imported["records"], 8);
    let stats = json(&kiln(&destination, &["stats", "--json"]));
    assert_eq!(stats["entries"], 4);
}

#[test]
fn explain_names_a_changed_compiler_or_says_never_seen() -> Result<()> {
    // P9
    let scratch = Scratch::new("explain");
    let root = scratch.join("store");
    let store = filled(&root, 1);
    let newer = kiln_core::fake::FakeCompiler::default().with_key_components(
        kiln_core::KeyComponents::new("fake", "kiln-fake 2", "fake_1", ""),
    );
    let target = FakeTarget::on_store(Arc::new(store)).with_compiler(newer);
    let mut loader = KernelLoader::with_config(target, LoaderConfig::default());
    let kernel = FakeKernel::new(0);
    loader.load(&kernel, &kernel.artifact_id())?;

    let explained = kiln(&root, &["explain", "kiln.fake"]);
    let text = String::from_utf8_lossy(&explained.stdout);
    assert!(text.contains("compiler changed"), "{text}");
    let never = kiln(&root, &["explain", "no.such.kernel"]);
    assert!(String::from_utf8_lossy(&never.stdout).contains("never seen"));
    let as_json = json(&kiln(&root, &["explain", "kiln.fake", "--json"]));
    assert_eq!(
        as_json[0]["explanation"]["Changed"]["difference"]["component"],
        "Compiler"
    );
    Ok(())
}
