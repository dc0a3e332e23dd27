//! The store conformance suite's subjects: remote stores and two-level
//! stores on one Redis (or cluster) per test, each store under a prefix of
//! its own.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use kiln_engine::conformance::StoreSubject;
use kiln_remote::{Keys, RemoteStore, TieredStore};
use kiln_store::{DiskStore, StoreConfig};

use super::{Redis, config, fleet_keys, fresh_prefix, open};

/// Remote stores on one Redis or cluster.
pub struct Remote {
    pub redis: Redis,
    pub keys: Keys,
}

impl Remote {
    /// On one redis-server, or `None` after printing why not.
    pub fn single() -> Option<Self> {
        Self::on(Redis::single(), "the remote store's conformance suite")
    }

    /// On a three-shard cluster, or `None` after printing why not.
    pub fn cluster() -> Option<Self> {
        Self::on(
            Redis::cluster(),
            "the remote store's conformance suite on a cluster",
        )
    }

    fn on(redis: Result<Redis, String>, what: &str) -> Option<Self> {
        match redis {
            Ok(redis) => Some(Self {
                redis,
                keys: fleet_keys(),
            }),
            Err(reason) => {
                super::skip(what, &reason);
                None
            }
        }
    }
}

impl StoreSubject for Remote {
    type Store = RemoteStore;

    fn store(&self) -> RemoteStore {
        open(&self.redis.url(), self.keys.clone(), &fresh_prefix())
    }

    /// Another process's handle: its own connections, counters and claim
    /// tokens, on the same Redis under the same prefix.
    fn in_another_process(&self, store: &RemoteStore) -> Option<RemoteStore> {
        Some(open(
            &self.redis.url(),
            self.keys.clone(),
            &store.config().prefix,
        ))
    }

    fn with_lease(&self, lease: Duration) -> Option<RemoteStore> {
        let mut config = config(&self.redis.url(), self.keys.clone(), &fresh_prefix());
        config.lease = lease;
        Some(RemoteStore::open(config).expect("a store with a key opens"))
    }
}

/// Two-level stores: a disk store in a scratch folder before a remote
/// store on one Redis.
pub struct Tiered {
    pub remote: Remote,
    /// The disk root of each store, by its remote prefix.
    roots: Mutex<HashMap<String, PathBuf>>,
}

impl Tiered {
    /// On one redis-server, or `None` after printing why not.
    pub fn single() -> Option<Self> {
        Remote::on(Redis::single(), "the two-level store's conformance suite").map(|remote| Self {
            remote,
            roots: Mutex::new(HashMap::new()),
        })
    }

    fn open(&self, root: &std::path::Path, prefix: &str) -> TieredStore {
        let local = DiskStore::open(StoreConfig::at(root)).expect("a store opens in scratch");
        let remote = open(&self.remote.redis.url(), self.remote.keys.clone(), prefix);
        TieredStore::new(local, remote)
    }
}

impl StoreSubject for Tiered {
    type Store = TieredStore;

    fn store(&self) -> TieredStore {
        let prefix = fresh_prefix();
        let root = self.remote.redis.scratch.join(&format!("disk-{prefix}"));
        let store = self.open(&root, &prefix);
        self.roots
            .lock()
            .expect("no test panicked holding the map")
            .insert(prefix, root);
        store
    }

    /// Another process: the same disk root and the same remote prefix,
    /// opened again.
    fn in_another_process(&self, store: &TieredStore) -> Option<TieredStore> {
        let prefix = store.remote().config().prefix.clone();
        let root = self
            .roots
            .lock()
            .expect("no test panicked holding the map")
            .get(&prefix)
            .cloned()
            .expect("every store of the suite was made by `store`");
        Some(self.open(&root, &prefix))
    }
}
