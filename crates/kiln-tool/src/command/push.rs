//! `kiln push`: copies the disk store's artifacts, and then its named blobs
//! (warm-start profiles, tuning answers, pipeline caches: P15), to the
//! fleet's remote tier, each signed with this machine's key (P10,
//! docs/FLEET.md). A node that holds no signing key cannot push, and is
//! told how to get one.

use anyhow::Result;
use kiln_store::DiskStore;

use crate::output::Output;
use crate::remote::{TransferArguments, print_transfer, transfer, transfer_blobs};

/// Pushes every chosen artifact and named blob of `store` to the remote.
pub fn run(store: &DiskStore, arguments: &TransferArguments, output: &Output) -> Result<()> {
    let (report, remote) = transfer(store, arguments, "push", kiln_remote::push)?;
    let blobs = transfer_blobs(
        store,
        &remote,
        arguments,
        "push blobs",
        kiln_remote::push_blobs,
    )?;
    print_transfer(&report, &blobs, "pushed", &remote, output)
}
