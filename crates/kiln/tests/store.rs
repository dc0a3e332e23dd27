//! The store in one line: `kiln::Store::from_env()` opens the store the
//! `KILN_CACHE_*` variables name, so that a second process loads what the
//! first compiled (P1, P5 of the disk store, through the facade), and
//! `KILN_CACHE_DISABLE=1` leaves a target storeless. Each case runs in child
//! processes, since the variables belong to the whole process.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use kiln::fake::{FakeKernel, FakeTarget};
use kiln::{ArtifactStore, KernelLoader, KernelOutcome, Store};
use kiln_test_support::{Scratch, child};

/// The variable that tells a child what to do.
const CHILD: &str = "KILN_FACADE_STORE_CHILD";

/// The kernels every child loads.
fn kernels() -> Vec<FakeKernel> {
    (0..16).map(FakeKernel::new).collect()
}

/// This test binary again, running `test` as the child `role`, with the
/// `KILN_CACHE_*` variables of the parent's environment removed.
fn child_command(test: &str, role: &str) -> Command {
    let mut command = child::rerun(test, CHILD, role);
    for (variable, _) in std::env::vars_os() {
        if variable.to_string_lossy().starts_with("KILN_CACHE_") {
            command.env_remove(&variable);
        }
    }
    command
}

fn run(mut command: Command) -> String {
    let output = command.output().expect("the test binary starts again");
    assert!(output.status.success(), "{}", child::describe(&output));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Loads every kernel through a loader on `store` and prints how many the
/// batch compiled and how many it read from the store.
fn load_all(store: Arc<dyn ArtifactStore>) {
    // A process of its own: no warm-start profile loads ahead of the
    // batch it proves (L12).
    let mut loader = KernelLoader::new(FakeTarget::on_store(store)).without_profile();
    let kernels = kernels();
    for kernel in &kernels {
        loader.enqueue(Box::new(kernel.clone()), ());
    }
    loader.compile_queued();
    for kernel in &kernels {
        let _module = loader
            .load(kernel, &kernel.artifact_id())
            .unwrap_or_else(|error| panic!("{error}"));
    }
    let batch = &loader.records()[0];
    println!(
        "compiled={} from_store={}",
        batch.count(KernelOutcome::Compiled),
        batch.count(KernelOutcome::FromStore)
    );
}

// L5a, P1 through the facade: what one process stored, the next loads
// instead of compiling it.
#[test]
fn the_store_from_the_environment_is_in_kiln_cache_dir_and_shared_between_processes() {
    const TEST: &str =
        "the_store_from_the_environment_is_in_kiln_cache_dir_and_shared_between_processes";
    if child::is_child(CHILD, "load") {
        let store = Store::from_env()
            .expect("the store in KILN_CACHE_DIR opens")
            .expect("KILN_CACHE_DISABLE is not set");
        return load_all(store);
    }
    let scratch = Scratch::new("facade-store-env");
    let root = scratch.join("store");
    let child_at = |root: &Path| {
        let mut command = child_command(TEST, "load");
        command.env("KILN_CACHE_DIR", root);
        command
    };
    let first = run(child_at(&root));
    assert!(
        first.contains("compiled=16 from_store=0"),
        "the first process compiles every kernel: {first}"
    );
    assert!(
        root.is_dir(),
        "the store was made where KILN_CACHE_DIR says"
    );
    let second = run(child_at(&root));
    assert!(
        second.contains("compiled=0 from_store=16"),
        "the second process compiles nothing: {second}"
    );
    // The same folder opened by path is the same store.
    load_all_expecting_hits(Store::at(&root).expect("the store opens by path"));
}

fn load_all_expecting_hits(store: Arc<dyn ArtifactStore>) {
    // A process of its own: no warm-start profile loads ahead of the
    // batch it proves (L12).
    let mut loader = KernelLoader::new(FakeTarget::on_store(store)).without_profile();
    for kernel in kernels() {
        let _module = loader
            .load(&kernel, &kernel.artifact_id())
            .unwrap_or_else(|error| panic!("{error}"));
    }
    assert!(
        loader
            .records()
            .iter()
            .all(|batch| batch.count(KernelOutcome::Compiled) == 0),
        "Store::at opens the store from_env filled: {:?}",
        loader.records()
    );
}

#[test]
fn kiln_cache_disable_leaves_the_target_storeless_and_writes_nothing() {
    const TEST: &str = "kiln_cache_disable_leaves_the_target_storeless_and_writes_nothing";
    if child::is_child(CHILD, "disabled") {
        let store = Store::from_env().expect("a disabled store is no error");
        assert!(store.is_none(), "KILN_CACHE_DISABLE=1 gives no store");
        println!("storeless");
        return;
    }
    let scratch = Scratch::new("facade-store-disabled");
    let root = scratch.join("store");
    let mut command = child_command(TEST, "disabled");
    command
        .env("KILN_CACHE_DIR", &root)
        .env("KILN_CACHE_DISABLE", "1");
    assert!(run(command).contains("storeless"));
    assert!(
        !root.exists(),
        "a disabled store makes no folder, even where KILN_CACHE_DIR points"
    );
}

#[test]
fn a_variable_that_does_not_parse_is_an_error_naming_it() {
    const TEST: &str = "a_variable_that_does_not_parse_is_an_error_naming_it";
    if child::is_child(CHILD, "malformed") {
        let error = Store::from_env().expect_err("a size that is no size is refused");
        println!("error: {error}");
        return;
    }
    let scratch = Scratch::new("facade-store-malformed");
    let mut command = child_command(TEST, "malformed");
    command
        .env("KILN_CACHE_DIR", scratch.join("store"))
        .env("KILN_CACHE_MAX_SIZE", "lots");
    let printed = run(command);
    assert!(
        printed.contains("KILN_CACHE_MAX_SIZE"),
        "the error names the variable: {printed}"
    );
}
