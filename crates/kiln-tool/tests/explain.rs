//! `kiln explain` answers from what the store holds (P9): a kernel a cold
//! `kiln warm`, a program's run, an import or a pull put in the store is
//! held, by part of its name and by its full id, never "never seen".

mod support;

use std::path::Path;

use kiln_test_support::redis::{RedisServer, skip};
use serde_json::Value;
use support::{Scratch, filled, finish, kiln, run, wgsl_kernel};

/// `kiln --json explain QUERY` on `store`: one kernel, its explanation.
fn explained(store: &Path, query: &str) -> Value {
    let answer = run(store, &["--json", "explain", query]).succeeded_json();
    let kernels = answer.as_array().expect("a list of kernels");
    assert_eq!(kernels.len(), 1, "{query}: {answer:#}");
    kernels[0].clone()
}

/// Asserts that every one of `kernels` (name parts) is explained as held
/// in `store`, by that name and by the full id it is listed under.
fn assert_held(store: &Path, kernels: &[&str]) {
    for query in kernels {
        let by_name = explained(store, query);
        assert_eq!(
            by_name["explanation"]["state"], "held",
            "{query}: {by_name:#}"
        );
        let full = by_name["kernel"].as_str().expect("the full id").to_owned();
        let by_id = explained(store, &full);
        assert_eq!(by_id["explanation"]["state"], "held", "{full}: {by_id:#}");
        let text = run(store, &["explain", query]).stdout;
        assert!(!text.contains("never seen"), "{query}: {text}");
    }
}

// P9 after a cold kiln warm.
#[test]
fn after_a_cold_warm_every_kernel_is_held() {
    let scratch = Scratch::new("explain-warm");
    let folder = scratch.join("kernels");
    std::fs::create_dir_all(&folder).expect("a kernel folder");
    for number in 0..2u32 {
        std::fs::write(
            folder.join(format!("k{number:03}.wgsl")),
            wgsl_kernel(number),
        )
        .expect("a kernel file");
    }
    let store = scratch.join("store");
    let warmed = finish(kiln(&store, &["--json", "warm"]).arg(&folder)).succeeded_json();
    assert_eq!(warmed["backends"][0]["compiled"], 2, "{warmed:#}");
    assert_held(&store, &["warm/k000", "warm/k001"]);
}

// P9 after a program's run: a loader that compiled and stored.
#[test]
fn after_a_programs_run_every_kernel_is_held() {
    let scratch = Scratch::new("explain-program");
    let store = scratch.join("store");
    drop(filled(&store, 2));
    let all = run(&store, &["--json", "explain", "kiln.fake"]).succeeded_json();
    let kernels = all.as_array().expect("a list");
    assert_eq!(kernels.len(), 2, "{all:#}");
    for kernel in kernels {
        assert_eq!(kernel["explanation"]["state"], "held", "{kernel:#}");
        let full = kernel["kernel"].as_str().expect("the full id");
        assert_held(&store, &[full]);
    }
}

// P9 after an import: the importing store's histories name what it holds.
#[test]
fn after_an_import_every_kernel_is_held() {
    let scratch = Scratch::new("explain-import");
    let source = scratch.join("source");
    drop(filled(&source, 2));
    let bundle = scratch.join("kernels.kiln");
    let bundle_text = bundle.display().to_string();
    run(&source, &["export", &bundle_text, "--json"]).succeeded_json();
    let destination = scratch.join("destination");
    let imported = run(
        &destination,
        &["import", &bundle_text, "--trust-unsigned", "--json"],
    )
    .succeeded_json();
    assert!(
        imported["records"].as_u64().unwrap_or(0) >= 2,
        "{imported:#}"
    );
    let all = run(&destination, &["--json", "explain", "kiln.fake"]).succeeded_json();
    assert_eq!(all.as_array().map(Vec::len), Some(2), "{all:#}");
    for kernel in all.as_array().into_iter().flatten() {
        assert_eq!(kernel["explanation"]["state"], "held", "{kernel:#}");
    }
}

// P9 after a pull from the fleet tier.
#[test]
fn after_a_pull_every_kernel_is_held() {
    let scratch = Scratch::new("explain-pull");
    let server = match RedisServer::start(&scratch.folder("redis"), &[]) {
        Ok(server) => server,
        Err(why) => return skip("kiln explain after a pull", &why),
    };
    let url = server.url();
    let made = run(&scratch.join("unused"), &["--json", "keygen"]).succeeded_json();
    let secret = made["secret"].as_str().expect("a secret").to_owned();
    let source = scratch.join("source");
    drop(filled(&source, 2));
    let with_key = |store: &Path, arguments: &[&str]| {
        let mut command = kiln(store, arguments);
        command.env_remove("KILN_REMOTE_SIGNING_KEY");
        command.env_remove("KILN_REMOTE_TRUSTED_KEYS");
        command.env("KILN_REMOTE_KEY", &secret);
        finish(&mut command)
    };
    with_key(&source, &["--json", "push", "--remote", &url]).succeeded_json();
    let destination = scratch.join("destination");
    let pulled = with_key(&destination, &["--json", "pull", "--remote", &url]).succeeded_json();
    assert!(pulled["copied"].as_u64().unwrap_or(0) >= 2, "{pulled:#}");
    let all = run(&destination, &["--json", "explain", "kiln.fake"]).succeeded_json();
    assert_eq!(all.as_array().map(Vec::len), Some(2), "{all:#}");
    for kernel in all.as_array().into_iter().flatten() {
        assert_eq!(kernel["explanation"]["state"], "held", "{kernel:#}");
    }
}
