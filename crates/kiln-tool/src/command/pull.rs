//! `kiln pull`: copies what the fleet's remote tier holds and the disk
//! store lacks into the disk store, each entry verified against this
//! machine's keys first (P10, docs/FLEET.md): the artifacts, then the
//! named blobs a push carried (warm-start profiles, tuning answers,
//! pipeline caches: P15), so the node starts warm. An entry that does not
//! verify is never written: it is counted and reported. A named blob the
//! store already holds is kept as it is.

use anyhow::{Result, bail};
use kiln_store::DiskStore;

use crate::console::errln;
use crate::output::Output;
use crate::remote::{TransferArguments, print_transfer, transfer, transfer_blobs};

/// Pulls every chosen artifact and named blob of the remote the store
/// lacks.
pub fn run(store: &DiskStore, arguments: &TransferArguments, output: &Output) -> Result<()> {
    let (report, remote) = transfer(store, arguments, "pull", kiln_remote::pull)?;
    let blobs = transfer_blobs(
        store,
        &remote,
        arguments,
        "pull blobs",
        kiln_remote::pull_blobs,
    )?;
    if report.refused + blobs.refused > 0 {
        errln!(
            "kiln: warning: {} of the remote did not verify with this machine's keys and \
             were not pulled",
            crate::format::count(report.refused + blobs.refused, "entry")
        );
    }
    print_transfer(&report, &blobs, "pulled", &remote, output)?;
    if report.failed > 0 && report.copied == 0 && report.entries > report.already_held {
        bail!(
            "nothing could be written to the store at {}",
            store.root().display()
        );
    }
    Ok(())
}
