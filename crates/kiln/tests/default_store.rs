//! On by default: a target made without a store, in a program on the
//! facade, is on the default store (`KILN_CACHE_DIR`, with the fleet tier
//! behind it when `KILN_REMOTE_URL` and a key are set), so that a program's
//! second run compiles nothing with no store line at all;
//! `KILN_CACHE_DISABLE=1` and `without_store()` turn it off, and a target
//! given another store never opens the default one. Each case runs in child
//! processes, since the variables belong to the whole process.

#![cfg(feature = "wgpu")]

mod support;

use std::path::Path;
use std::process::Command;

use kiln::wgpu::{WgpuTarget, WgpuVariant};
use kiln::{CompilationTarget, KernelLoader, Store};
use kiln_test_support::redis::{RedisServer, skip};
use kiln_test_support::{Scratch, child};
use support::{fill_kernels, load_in_one_batch, report_line as report};

/// The variable that tells a child what to do.
const CHILD: &str = "KILN_FACADE_DEFAULT_STORE_CHILD";

/// This test binary again, running `test` as the child `role`, with the
/// store and fleet variables of the parent's environment removed.
fn program(test: &str, role: &str) -> Command {
    support::program(test, CHILD, role, &["KILN_REMOTE_*", "KILN_MODE"])
}

/// Loads every kernel through `target` and reports whether it had a store,
/// and how many the batch compiled and read from the store.
fn load_all(target: WgpuTarget) {
    let has_store = target.store().is_some();
    // A process of its own: no warm-start profile loads ahead of the
    // batch it proves (L12).
    let mut loader = KernelLoader::new(target).without_profile();
    let batch = load_in_one_batch(
        &mut loader,
        &fill_kernels("default_store.fill"),
        &WgpuVariant,
    );
    println!("report: store={has_store} {batch}");
}

// On by default (P1 through the default store): no store line, and the
// second process compiles nothing.
#[test]
fn a_target_without_a_store_is_on_the_default_store() {
    const TEST: &str = "a_target_without_a_store_is_on_the_default_store";
    match std::env::var(CHILD).as_deref() {
        Ok("plain") => return load_all(WgpuTarget::compile_only()),
        Ok("without") => return load_all(WgpuTarget::compile_only().without_store()),
        _ => {}
    }
    let scratch = Scratch::new("facade-default-store");
    let root = scratch.join("store");
    let at = |role: &str, root: &Path| {
        let mut command = program(TEST, role);
        command.env("KILN_CACHE_DIR", root);
        command
    };
    assert_eq!(
        report(at("plain", &root)),
        "store=true compiled=4 from_store=0"
    );
    assert_eq!(
        report(at("plain", &root)),
        "store=true compiled=0 from_store=4",
        "the second run reads what the first stored"
    );

    let mut disabled = at("plain", &root);
    disabled.env("KILN_CACHE_DISABLE", "1");
    assert_eq!(report(disabled), "store=false compiled=4 from_store=0");

    let emptied = scratch.join("emptied");
    assert_eq!(
        report(at("without", &emptied)),
        "store=false compiled=4 from_store=0"
    );
}

// A target given its store before its first batch never opens the default
// one: its folder is never made.
#[cfg(feature = "cuda")]
#[test]
fn a_target_given_a_store_never_opens_the_default_one() {
    use kiln::cuda::{Architecture, CudaTarget};
    const TEST: &str = "a_target_given_a_store_never_opens_the_default_one";
    if child::is_child(CHILD, "chosen") {
        let chosen = std::env::var("KILN_FACADE_CHOSEN_STORE").expect("the parent names it");
        let store = Store::at(chosen).expect("the chosen store opens");
        let target = match CudaTarget::compile_only(Architecture::new(9, 0)) {
            Ok(target) => target.with_store(store.clone()),
            Err(error) => return println!("report: no_nvrtc ({error})"),
        };
        let same = target
            .store()
            .is_some_and(|bound| std::sync::Arc::ptr_eq(bound, &store));
        let none = CudaTarget::compile_only(Architecture::new(9, 0))
            .expect("NVRTC opened above")
            .without_store()
            .store()
            .is_none();
        return println!("report: chosen={same} without={none}");
    }
    let scratch = Scratch::new("facade-default-store-chosen");
    let default_root = scratch.join("default");
    let mut command = program(TEST, "chosen");
    command
        .env("KILN_CACHE_DIR", &default_root)
        .env("KILN_FACADE_CHOSEN_STORE", scratch.join("chosen"));
    let answer = report(command);
    if answer.starts_with("no_nvrtc") {
        if kiln_test_support::require::is_required(&["KILN_REQUIRE_NVRTC"]) {
            panic!("KILN_REQUIRE_NVRTC=1 and {answer}");
        }
        return kiln_test_support::skip("a CUDA target given a store", &answer);
    }
    assert_eq!(answer, "chosen=true without=true");
    assert!(!default_root.exists(), "the default store was never opened");
}

// P10 through the default store: with KILN_REMOTE_URL and a key set, the
// fleet tier is behind the default store, so a process on another disk
// store reads what the first stored, compiling nothing.
#[test]
fn the_default_store_has_the_fleet_tier_behind_it_when_one_is_set() {
    const TEST: &str = "the_default_store_has_the_fleet_tier_behind_it_when_one_is_set";
    if child::is_child(CHILD, "fleet") {
        return load_all(WgpuTarget::compile_only());
    }
    let scratch = Scratch::new("facade-default-store-fleet");
    let mut server = match RedisServer::start(&scratch.folder("redis"), &[]) {
        Ok(server) => server,
        Err(why) => return skip("the default store's fleet tier", &why),
    };
    let key = kiln_remote::keygen::fleet_key()
        .expect("a fleet key")
        .secret_text();
    let machine = |name: &str| {
        let mut command = program(TEST, "fleet");
        command
            .env("KILN_CACHE_DIR", scratch.join(name))
            .env("KILN_REMOTE_URL", server.url())
            .env("KILN_REMOTE_KEY", &key);
        command
    };
    assert_eq!(
        report(machine("first")),
        "store=true compiled=4 from_store=0"
    );
    assert_eq!(
        report(machine("second")),
        "store=true compiled=0 from_store=4",
        "another machine's disk store, the same fleet"
    );
    server.stop();
}
