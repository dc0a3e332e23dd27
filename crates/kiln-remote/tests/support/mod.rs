//! What the remote store's tests share: redis-server (alone, or three of
//! them as a Redis Cluster) on free loopback ports in a scratch folder,
//! stopped by pid when dropped, and stores on it.
//!
//! A test that finds no `redis-server` prints why it skips, unless
//! `KILN_REQUIRE_REDIS=1` (set by `cargo xtask test`, which installs it)
//! turns the skip into a failure.

#![allow(
    dead_code,
    reason = "each test binary uses its own part of the support"
)]

pub mod warned;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kiln_remote::{Keys, RemoteConfig, RemoteStore, keygen};
use kiln_test_support::Scratch;
pub use kiln_test_support::redis::{RedisServer, find_on_path, redis_server, skip};

pub mod subjects;

/// A Redis alone or a three-shard Redis Cluster, in a scratch folder.
pub struct Redis {
    pub servers: Vec<RedisServer>,
    pub is_cluster: bool,
    // Declared last: the servers stop before their folder goes.
    pub scratch: Scratch,
}

impl Redis {
    /// One redis-server.
    pub fn single() -> Result<Self, String> {
        let scratch = Scratch::new("redis");
        let server = RedisServer::start(scratch.path(), &[])?;
        Ok(Self {
            servers: vec![server],
            is_cluster: false,
            scratch,
        })
    }

    /// Three redis-servers made one cluster of three shards, every slot
    /// served. No test waits for the nodes to count one another failed, so
    /// they never do in a test's time: a server stalled for seconds on a
    /// loaded machine must not take the cluster down by itself.
    pub fn cluster() -> Result<Self, String> {
        Self::cluster_of(0, "15000")
    }

    /// Three primaries with `replicas` replicas each, made one cluster
    /// whose nodes count one another failed after `node_timeout`
    /// milliseconds. The first three servers are the primaries.
    pub fn cluster_of(replicas: usize, node_timeout: &str) -> Result<Self, String> {
        let scratch = Scratch::new("redis-cluster");
        let mut servers = Vec::new();
        for index in 0..3 * (1 + replicas) {
            let folder = scratch.folder(&format!("node-{index}"));
            servers.push(RedisServer::start(
                &folder,
                &[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    node_timeout,
                ],
            )?);
        }
        let cli = redis_server()?
            .parent()
            .map(|folder| folder.join("redis-cli"))
            .filter(|cli| cli.is_file())
            .or_else(|| find_on_path("redis-cli"))
            .ok_or("redis-cli is not installed (it comes with redis-server)")?;
        let output = Command::new(cli)
            .arg("--cluster")
            .arg("create")
            .args(
                servers
                    .iter()
                    .map(|server| format!("127.0.0.1:{}", server.port)),
            )
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|error| format!("cannot run redis-cli: {error}"))?;
        if !output.status.success() {
            return Err(format!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&output.stdout)
            ));
        }
        let started = Instant::now();
        // Every server serves every slot and knows every replica (the
        // cluster's gossip has reached all of them).
        while !servers.iter().all(|server| {
            server
                .command(&["CLUSTER", "INFO"])
                .is_some_and(|info| info.contains("cluster_state:ok"))
                && server.command(&["CLUSTER", "NODES"]).is_some_and(|nodes| {
                    nodes.lines().filter(|line| line.contains("slave")).count() == 3 * replicas
                })
        }) {
            if started.elapsed() > Duration::from_secs(30) {
                return Err(
                    "the cluster did not reach cluster_state:ok with every replica known in 30 s"
                        .into(),
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(Self {
            servers,
            is_cluster: true,
            scratch,
        })
    }

    /// The address a store is given.
    pub fn url(&self) -> String {
        if self.is_cluster {
            let hosts: Vec<String> = self
                .servers
                .iter()
                .map(|server| format!("127.0.0.1:{}", server.port))
                .collect();
            format!("redis+cluster://{}", hosts.join(","))
        } else {
            self.servers[0].url()
        }
    }
}

/// A prefix no other store of this run has.
pub fn fresh_prefix() -> String {
    static MADE: AtomicUsize = AtomicUsize::new(0);
    format!(
        "kiln-test-{}-{}:",
        std::process::id(),
        MADE.fetch_add(1, Ordering::Relaxed)
    )
}

/// A builder's keys: a fleet key and nothing else.
pub fn fleet_keys() -> Keys {
    Keys {
        fleet: Some(keygen::fleet_key().expect("random bytes")),
        ..Keys::default()
    }
}

/// The settings of a test store on `url` under `prefix`: timeouts long
/// enough for a loaded machine, a breaker that probes again soon.
pub fn config(url: &str, keys: Keys, prefix: &str) -> RemoteConfig {
    let mut config = RemoteConfig::new(url, keys);
    config.timeout = Duration::from_secs(2);
    config.retry_after = Duration::from_millis(200);
    config.prefix = prefix.to_owned();
    config
}

/// A store on `url` under `prefix`.
pub fn open(url: &str, keys: Keys, prefix: &str) -> RemoteStore {
    RemoteStore::open(config(url, keys, prefix)).expect("a store with a key opens")
}
