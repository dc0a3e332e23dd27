//! `kiln pull`: copies what the fleet's remote tier holds and the disk
//! store lacks into the disk store, each entry verified against this
//! machine's keys first (P10, docs/FLEET.md). An entry that does not
//! verify is never written: it is counted and reported.

use anyhow::{Result, bail};
use kiln_store::DiskStore;

use crate::console::errln;
use crate::output::Output;
use crate::remote::{TransferArguments, print_transfer, transfer};

/// Pulls every chosen artifact of the remote the store lacks.
pub fn run(store: &DiskStore, arguments: &TransferArguments, output: &Output) -> Result<()> {
    let (report, remote) = transfer(store, arguments, "pull", kiln_remote::pull)?;
    if report.refused > 0 {
        errln!(
            "kiln: warning: {} of the remote did not verify with this machine's keys and \
             were not pulled",
            crate::format::count(report.refused, "entry")
        );
    }
    print_transfer(&report, "pulled", &remote, output)?;
    if report.failed > 0 && report.copied == 0 && report.entries > report.already_held {
        bail!(
            "nothing could be written to the store at {}",
            store.root().display()
        );
    }
    Ok(())
}
