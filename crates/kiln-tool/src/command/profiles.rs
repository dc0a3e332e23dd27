//! `kiln profiles [PROGRAM] [--forget]`: the warm-start profiles the store
//! keeps (L12) — which program, on which backend and architecture, how many
//! kernels its next start loads — and forgetting them.

use anyhow::Result;
use clap::Args;
use kiln_engine::profile::{PROFILE_BLOB_KIND, StoredProfile};
use kiln_engine::store::BlobKey;
use kiln_store::DiskStore;
use serde::Serialize;

use super::ForgetWords;
use crate::console::outln;
use crate::format;
use crate::output::Output;
use crate::table::Table;

/// `kiln profiles` options.
#[derive(Debug, Args)]
pub struct Arguments {
    /// Only the profiles of programs whose name contains this text; `all`,
    /// or nothing, for every profile.
    pub program: Option<String>,
    /// Forget the profiles shown: the program's next start loads nothing
    /// ahead. Give a program, or `all`.
    #[arg(long, requires = "program")]
    pub forget: bool,
}

/// One profile, as `--json` prints it.
#[derive(Debug, Serialize)]
struct ProfileShape {
    /// The program.
    program: String,
    /// `cuda`, `hip`, `wgpu`, ...
    backend: String,
    /// The compiler and its version.
    compiler: String,
    /// The architecture compiled for.
    architecture: String,
    /// Kernels its next start loads ahead.
    kernels: usize,
    /// Of those, the ones the last run asked for.
    asked_last_run: usize,
    /// How many runs wrote it.
    runs: u64,
    /// When it was last written, in seconds since the Unix epoch.
    updated_at: u64,
}

/// Lists the profiles matching the program, or forgets them.
pub fn run(store: &DiskStore, arguments: &Arguments, output: &Output) -> Result<()> {
    let wanted = arguments
        .program
        .as_deref()
        .filter(|program| *program != "all");
    let mut profiles: Vec<(BlobKey, StoredProfile)> =
        super::blobs_of_kind(store, PROFILE_BLOB_KIND, StoredProfile::from_bytes)?
            .into_iter()
            .filter(|(_, profile)| {
                !profile.kernels.is_empty()
                    && wanted.is_none_or(|wanted| profile.program.contains(wanted))
            })
            .collect();
    profiles.sort_by_key(|(_, profile)| profile.to_string());
    if arguments.forget {
        return forget(store, &profiles, output);
    }
    let shown: Vec<ProfileShape> = profiles
        .iter()
        .map(|(_, profile)| ProfileShape {
            program: profile.program.clone(),
            backend: profile.components.backend.clone(),
            compiler: profile.components.compiler.clone(),
            architecture: profile.components.architecture.clone(),
            kernels: profile.kernels.len(),
            asked_last_run: profile
                .kernels
                .iter()
                .filter(|kernel| kernel.age == 0)
                .count(),
            runs: profile.runs,
            updated_at: profile.updated_at,
        })
        .collect();
    output.print(&shown, || {
        if shown.is_empty() {
            outln!("no warm-start profiles: no program has kept one in this store yet");
            return;
        }
        let mut table = Table::new(&[
            "PROGRAM",
            "BACKEND",
            "KERNELS>",
            "ASKED LAST>",
            "RUNS>",
            "UPDATED>",
        ]);
        for profile in &shown {
            table.row(vec![
                profile.program.clone(),
                format!("{} {}", profile.backend, profile.architecture),
                profile.kernels.to_string(),
                profile.asked_last_run.to_string(),
                profile.runs.to_string(),
                format::ago(profile.updated_at),
            ]);
        }
        table.sort();
        outln!("{}", table.render().trim_end());
    })
}

fn forget(store: &DiskStore, profiles: &[(BlobKey, StoredProfile)], output: &Output) -> Result<()> {
    let entries = profiles.iter().map(|(name, profile)| {
        let nothing = StoredProfile::forgotten(&profile.program, &profile.components);
        // As `program on backend architecture`.
        let described = format!(
            "{} on {} {}",
            profile.program, profile.components.backend, profile.components.architecture
        );
        (name.clone(), nothing.to_bytes(), described)
    });
    let words = ForgetWords {
        of: "the profile of",
        none: "no such warm-start profile",
        effect: "its next start loads nothing ahead",
    };
    super::forget_blobs(store, entries, &words, output)
}
