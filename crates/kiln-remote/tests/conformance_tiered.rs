//! The store conformance suite on a [`TieredStore`](kiln_remote::TieredStore):
//! a real disk store before a remote store on a real redis-server (P10).
//! Its leases are the disk store's and the remote's, proved by their own
//! suites; here the suite says that rule does not apply.

mod support;

kiln_engine::store_conformance_suite!(match support::subjects::Tiered::single() {
    Some(subject) => subject,
    None => return,
});
