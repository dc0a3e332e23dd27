//! `kiln warm` and a program open one store through one reading of the
//! settings (the facade's `Store::config_from_env` and `Store::tiers`):
//! with only `KILN_CACHE_DIR` set, what `kiln warm` stores is what a
//! program's default store (`kiln::Store::from_env()`) finds, without
//! compiling (P14).

mod support;

use std::process::Command;

use kiln_engine::KernelId;
use kiln_test_support::child;
use kiln_wgpu::WgslKernel;
use support::{KILN, Scratch, finish, program_loads_without_compiling, wgsl_kernel};

/// Set in the child half: the program's side.
const CHILD: &str = "KILN_TEST_DEFAULT_STORE_CHILD";

/// The kernel file both sides compile, exactly as it is (its header is a
/// comment).
fn kernel_text() -> String {
    format!("// kiln entry: main\n{}", wgsl_kernel(7))
}

// P14: the store `kiln warm` fills from KILN_CACHE_DIR is the one the
// library's default store opens from it.
#[test]
fn a_program_s_default_store_is_the_one_kiln_warm_filled() {
    if child::is_child(CHILD, "program") {
        program_side();
        return;
    }
    let scratch = Scratch::new("warm-default-store");
    let folder = scratch.folder("kernels");
    let store = scratch.path().join("store");
    std::fs::write(folder.join("scale.wgsl"), kernel_text()).expect("a kernel file");
    let mut warm = Command::new(KILN);
    warm.args(["--json", "warm"])
        .arg(&folder)
        .env("KILN_CACHE_DIR", &store)
        .env_remove("KILN_CACHE_DISABLE")
        .env_remove("KILN_REMOTE_URL");
    let report = finish(&mut warm).succeeded_json();
    assert_eq!(
        report["store"].as_str(),
        Some(store.to_str().expect("a UTF-8 path")),
        "without --dir, KILN_CACHE_DIR is the store: {report:#}"
    );
    let mut program = child::rerun(
        "a_program_s_default_store_is_the_one_kiln_warm_filled",
        CHILD,
        "program",
    );
    program
        .env("KILN_CACHE_DIR", &store)
        .env_remove("KILN_CACHE_DISABLE")
        .env_remove("KILN_REMOTE_URL");
    let ran = finish(&mut program);
    assert!(
        ran.status.success(),
        "the program's side: {}\n{}",
        ran.stdout,
        ran.stderr
    );
}

/// The program: its default store, the target `kiln warm` chose, the same
/// text under a name of its own: one lookup, no compile.
fn program_side() {
    let store = kiln::Store::from_env()
        .expect("the default store opens")
        .expect("KILN_CACHE_DIR names one");
    let kernel =
        WgslKernel::builder(KernelId::named("program.scale"), "main").source(kernel_text());
    program_loads_without_compiling(store, &kernel);
}
