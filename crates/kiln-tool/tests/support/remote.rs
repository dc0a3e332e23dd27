//! The remote tier in the tests: a real redis-server, keys made by `kiln
//! keygen`, the binary run with exactly the remote variables a test names,
//! and a process's own remote store, opened as a program opens it.

use std::path::Path;
use std::time::Duration;

use kiln_remote::{Keys, RemoteConfig, RemoteStore};
use kiln_store::{DiskStore, StoreConfig};
use kiln_test_support::redis::{RedisServer, skip};

use super::{Finished, Scratch, finish, kiln, run};

/// The variables of the remote tier's keys and mode.
pub const REMOTE_VARIABLES: [&str; 5] = [
    "KILN_REMOTE_URL",
    "KILN_REMOTE_KEY",
    "KILN_REMOTE_SIGNING_KEY",
    "KILN_REMOTE_TRUSTED_KEYS",
    "KILN_REMOTE_READ_ONLY",
];

/// `kiln --dir STORE ARGUMENTS...` with exactly the remote variables
/// `variables`, none inherited.
pub fn kiln_with(store: &Path, arguments: &[&str], variables: &[(&str, &str)]) -> Finished {
    let mut command = kiln(store, arguments);
    for variable in REMOTE_VARIABLES {
        command.env_remove(variable);
    }
    // A loaded machine never times a working Redis out; a test that wants
    // another timeout names it.
    command.env("KILN_REMOTE_TIMEOUT", "10");
    for (variable, value) in variables {
        command.env(variable, value);
    }
    finish(&mut command)
}

/// A redis-server of its own, or `None` after saying why `what` skips.
pub fn redis(scratch: &Scratch, what: &str) -> Option<RedisServer> {
    match RedisServer::start(&scratch.folder("redis"), &[]) {
        Ok(server) => Some(server),
        Err(why) => {
            skip(what, &why);
            None
        }
    }
}

/// A secret made by `kiln keygen`: a fleet key, or with `signing` a
/// signing key with its public key.
pub fn keygen(scratch: &Scratch, signing: bool) -> (String, Option<String>) {
    let mut arguments = vec!["--json", "keygen"];
    if signing {
        arguments.push("--signing");
    }
    let made = run(&scratch.join("unused"), &arguments).succeeded_json();
    (
        made["secret"].as_str().expect("a secret").to_owned(),
        made["public"].as_str().map(str::to_owned),
    )
}

/// The disk store at `root`, as a program opens it.
pub fn open(root: &Path) -> DiskStore {
    DiskStore::open(StoreConfig::at(root)).expect("the store opens")
}

/// A remote store of `url` with the key variables `variables`: each call
/// is a process of the fleet, with counts of its own.
pub fn remote(url: &str, variables: &[(&str, &str)]) -> RemoteStore {
    let keys = Keys::with_overrides(|name| {
        variables
            .iter()
            .find(|(variable, _)| *variable == name)
            .map(|(_, value)| (*value).to_owned())
    })
    .expect("the keys read");
    let mut config = RemoteConfig::new(url.to_owned(), keys);
    config.timeout = Duration::from_secs(2);
    RemoteStore::open(config).expect("the remote opens")
}
