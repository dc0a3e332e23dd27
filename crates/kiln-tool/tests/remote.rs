//! `kiln keygen` and `kiln warm --remote` against a real redis-server
//! (P10): one machine's warm start fills the remote tier; another machine
//! with an empty disk store loads every kernel from it without compiling;
//! without keys the remote tier refuses to start.

mod support;

use std::path::Path;

use kiln_test_support::redis::{RedisServer, skip};
use serde_json::Value;
use support::{Finished, Scratch, backend, finish, kiln, run, wgsl_kernel};

fn warm(store: &Path, folder: &Path, url: &str, key: Option<&str>) -> Finished {
    let mut command = kiln(
        store,
        &["--json", "warm", "--backend", "wgpu", "--remote", url],
    );
    command
        .arg(folder)
        .env("MESA_SHADER_CACHE_DIR", store.with_extension("mesa"))
        .env_remove("KILN_REMOTE_KEY")
        .env_remove("KILN_REMOTE_SIGNING_KEY")
        .env_remove("KILN_REMOTE_TRUSTED_KEYS");
    if let Some(key) = key {
        command.env("KILN_REMOTE_KEY", key);
    }
    finish(&mut command)
}

// P10
#[test]
fn a_fleet_key_made_by_keygen_lets_a_second_machine_load_from_the_remote_tier() {
    let scratch = Scratch::new("cli-remote");
    let server = match RedisServer::start(&scratch.folder("redis"), &[]) {
        Ok(server) => server,
        Err(why) => {
            skip("kiln warm --remote against redis-server", &why);
            return;
        }
    };
    let folder = scratch.folder("kernels");
    for number in 0..4 {
        std::fs::write(folder.join(format!("k{number}.wgsl")), wgsl_kernel(number))
            .expect("a kernel file");
    }
    let made = run(&scratch.join("unused"), &["--json", "keygen"]).succeeded_json();
    assert_eq!(made["kind"], "fleet", "{made:#}");
    let key = made["secret"].as_str().expect("a secret").to_owned();
    assert!(key.starts_with("kiln-fleet-key-v1:"), "{key}");
    let signing = run(&scratch.join("unused"), &["--json", "keygen", "--signing"]).succeeded_json();
    assert!(signing["public"].as_str().is_some(), "{signing:#}");

    // The first machine compiles and writes the remote tier.
    let first = warm(&scratch.join("store-a"), &folder, &server.url(), Some(&key));
    let report: Value = first.succeeded_json();
    assert_eq!(backend(&report, "wgpu")["compiled"], 4, "{report:#}");
    assert!(
        report["remote"]["written"].as_u64() >= Some(4),
        "every artifact went to the remote: {report:#}"
    );
    assert_eq!(report["remote"]["flushed"], true, "{report:#}");

    // Another machine, empty disk: everything from the remote.
    let second = warm(&scratch.join("store-b"), &folder, &server.url(), Some(&key));
    let report: Value = second.succeeded_json();
    let wgpu = backend(&report, "wgpu");
    assert_eq!(wgpu["compiled"], 0, "nothing compiled: {report:#}");
    assert_eq!(wgpu["from_store"], 4, "{report:#}");
    assert!(
        report["remote"]["hits"].as_u64() >= Some(4),
        "the kernels (and the driver's pipeline cache) came from the remote: {report:#}"
    );

    // A machine with another fleet's key reads nothing it cannot verify.
    let other_key = run(&scratch.join("unused"), &["--json", "keygen"]).succeeded_json();
    let third = warm(
        &scratch.join("store-c"),
        &folder,
        &server.url(),
        other_key["secret"].as_str(),
    );
    let report: Value = third.succeeded_json();
    assert_eq!(backend(&report, "wgpu")["compiled"], 4, "{report:#}");
    assert_eq!(report["remote"]["hits"], 0, "{report:#}");
    assert!(
        report["remote"]["unverified"].as_u64() >= Some(4),
        "the other fleet's entries did not verify: {report:#}"
    );

    // No key: the remote tier does not start, and the run says how to
    // make one.
    let keyless = warm(&scratch.join("store-d"), &folder, &server.url(), None);
    assert_eq!(keyless.status.code(), Some(1), "{}", keyless.stdout);
    assert!(
        keyless.stdout.contains("keygen"),
        "the error says how to make keys: {}",
        keyless.stdout
    );
}
