//! The store conformance suite on a [`RemoteStore`](kiln_remote::RemoteStore)
//! over a real three-shard Redis Cluster (three redis-servers on loopback
//! ports, made one cluster by `redis-cli --cluster create`): keys spread
//! over the shards, a batch's lookups one pipeline per shard (P10).

mod support;

kiln_engine::store_conformance_suite!(match support::subjects::Remote::cluster() {
    Some(subject) => subject,
    None => return,
});
