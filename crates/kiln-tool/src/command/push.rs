//! `kiln push`: copies the disk store's artifacts to the fleet's remote
//! tier, each signed with this machine's key (P10, docs/FLEET.md). A node
//! that holds no signing key cannot push, and is told how to get one.

use anyhow::Result;
use kiln_store::DiskStore;

use crate::output::Output;
use crate::remote::{TransferArguments, print_transfer, transfer};

/// Pushes every chosen artifact of `store` to the remote.
pub fn run(store: &DiskStore, arguments: &TransferArguments, output: &Output) -> Result<()> {
    let (report, remote) = transfer(store, arguments, "push", kiln_remote::push)?;
    print_transfer(&report, "pushed", &remote, output)
}
