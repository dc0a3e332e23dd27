//! `kiln warm --profile PROGRAM`: prebuild, for this machine's compilers,
//! what the warm-start profiles of PROGRAM (L12) say it loaded last time,
//! so that its next start here, or on a machine sharing this store, loads
//! each profiled kernel with one lookup.
//!
//! A profile names kernels by their artifact ids, never by their source:
//! a kernel is prebuilt when the store holds it already for this machine's
//! compiler, or holds another compiler's artifact of it with the recipe it
//! was finalized from (another NVRTC, say), which is finalized again here.
//! Every other kernel is listed with the reason and what would build it.

use std::path::Path;

use anyhow::{Result, bail};
use kiln_engine::profile::{PROFILE_BLOB_KIND, StoredProfile};
use kiln_store::DiskStore;
use serde::Serialize;

use crate::backend::{self, Outcome, Prebuilt};
use crate::console::outln;
use crate::exit::{self, Exit};
use crate::output::Output;
use crate::table::Table;

/// One profile's kernels, and what came of each.
#[derive(Debug, Serialize)]
struct ProfileReport {
    backend: String,
    compiler: String,
    architecture: String,
    /// Kernels already in the store for this machine's compiler.
    in_store: usize,
    /// Kernels finalized here from a recipe, and stored.
    rebuilt: usize,
    /// Kernels that could not be prebuilt (each says why).
    not_prebuilt: usize,
    kernels: Vec<Prebuilt>,
}

/// What `kiln warm --profile --json` prints.
#[derive(Debug, Serialize)]
struct Report {
    program: String,
    store: String,
    profiles: Vec<ProfileReport>,
}

/// Prebuilds what `program`'s profiles in the store at `dir` (else the
/// configured one, with the fleet tier `remote` names behind it) name.
pub fn run(dir: Option<&Path>, program: &str, remote: Option<&str>, output: &Output) -> Result<()> {
    let disk = match super::super::open_store_to_fill(dir)? {
        Ok(disk) => disk,
        Err(reason) => bail!("{reason}: a profile is read from a store"),
    };
    let profiles = profiles_of(&disk, program)?;
    if profiles.is_empty() {
        bail!(
            "the store at {} keeps no warm-start profile of {program}; `kiln profiles` lists \
             the programs it has profiles of",
            disk.root().display()
        );
    }
    let tiers = kiln::Store::tiers(disk.clone(), remote)?;
    let store = tiers.shared();
    let mut reports = Vec::new();
    for profile in &profiles {
        let components = &profile.components;
        let kernels = match backend::named(&components.backend) {
            None => not_prebuilt(profile, "no backend of that name in this kiln"),
            Some(backend) => match backend.recompiler() {
                Ok(compiler) => compiler.prebuild(store.as_ref(), profile),
                Err(reason) => not_prebuilt(
                    profile,
                    &format!("no {} compiler on this machine: {reason}", backend.name()),
                ),
            },
        };
        let count = |outcome: Outcome| {
            kernels
                .iter()
                .filter(|kernel| kernel.outcome == outcome)
                .count()
        };
        reports.push(ProfileReport {
            backend: components.backend.clone(),
            compiler: components.compiler.clone(),
            architecture: components.architecture.clone(),
            in_store: count(Outcome::InStore),
            rebuilt: count(Outcome::Rebuilt),
            not_prebuilt: count(Outcome::NotPrebuilt),
            kernels,
        });
    }
    if let Some(fleet) = tiers.fleet() {
        fleet.flush(std::time::Duration::from_secs(60));
    }
    let report = Report {
        program: program.to_owned(),
        store: disk.root().display().to_string(),
        profiles: reports,
    };
    output.print(&report, || print(&report))?;
    let missing: usize = report
        .profiles
        .iter()
        .map(|profile| profile.not_prebuilt)
        .sum();
    let total: usize = report
        .profiles
        .iter()
        .map(|profile| profile.kernels.len())
        .sum();
    if missing > 0 {
        return Err(Exit::new(
            exit::KERNELS_FAILED,
            format!("{missing} of {total} profiled kernels could not be prebuilt"),
        )
        .reported()
        .into());
    }
    Ok(())
}

/// Every profile of `program` the store keeps, by name, that holds
/// kernels.
fn profiles_of(store: &DiskStore, program: &str) -> Result<Vec<StoredProfile>> {
    let profiles =
        super::super::blobs_of_kind(store, PROFILE_BLOB_KIND, StoredProfile::from_bytes)?;
    Ok(profiles
        .into_iter()
        .map(|(_, profile)| profile)
        .filter(|profile| profile.program == program && !profile.kernels.is_empty())
        .collect())
}

/// Every kernel of `profile`, none prebuilt, for `reason`.
fn not_prebuilt(profile: &StoredProfile, reason: &str) -> Vec<Prebuilt> {
    profile
        .kernels
        .iter()
        .map(|kernel| Prebuilt {
            kernel: kernel.kernel.clone(),
            outcome: Outcome::NotPrebuilt,
            reason: Some(reason.to_owned()),
        })
        .collect()
}

fn print(report: &Report) {
    outln!(
        "warm-start profiles of {}; store {}",
        report.program,
        report.store
    );
    let mut table = Table::new(&[
        "BACKEND",
        "COMPILER",
        "ARCH",
        "KERNELS>",
        "IN STORE>",
        "REBUILT>",
        "NOT PREBUILT>",
    ]);
    for profile in &report.profiles {
        table.row(vec![
            profile.backend.clone(),
            profile.compiler.clone(),
            profile.architecture.clone(),
            profile.kernels.len().to_string(),
            profile.in_store.to_string(),
            profile.rebuilt.to_string(),
            profile.not_prebuilt.to_string(),
        ]);
    }
    table.print();
    for profile in &report.profiles {
        for kernel in &profile.kernels {
            if let Some(reason) = &kernel.reason {
                outln!(
                    "{} not prebuilt: {}: {reason}",
                    profile.backend,
                    kernel.kernel
                );
            }
        }
    }
}
