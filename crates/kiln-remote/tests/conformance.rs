//! The store conformance suite on [`RemoteStore`](kiln_remote::RemoteStore)
//! against a real redis-server: every rule of the `ArtifactStore`
//! contract (P1–P12 as they apply to a store), each test on its own
//! server. Without redis-server each test prints why it skips.

mod support;

kiln_engine::store_conformance_suite!(match support::subjects::Remote::single() {
    Some(subject) => subject,
    None => return,
});
