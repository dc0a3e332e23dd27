//! `kiln manifest --profile PROGRAM --out FILE`: a job's manifest (R5),
//! the kernels of the program's warm-start profile that the store holds,
//! by artifact id and object digest. Every rank of a multi-process job
//! reads it (`KernelLoader::with_manifest`), so every rank decides alike
//! which kernels load from the store and which compile in the background.

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use kiln_engine::store::{KeyComponents, KeySubject};
use kiln_engine::{JobManifest, ManifestKernel};
use kiln_store::{DiskStore, Entry};
use serde::Serialize;

use crate::console::outln;
use crate::output::Output;

/// `kiln manifest` options.
#[derive(Debug, Args)]
pub struct Arguments {
    /// The program whose warm-start profile names the job's kernels, as
    /// `kiln profiles` names it.
    #[arg(long)]
    pub profile: String,
    /// The manifest file to write (one per compiler of the profile: a
    /// second one gets the architecture in its name).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

/// What `--json` prints.
#[derive(Debug, Serialize)]
struct Written {
    /// Each manifest written.
    manifests: Vec<WrittenManifest>,
}

#[derive(Debug, Serialize)]
struct WrittenManifest {
    path: String,
    backend: String,
    architecture: String,
    /// Kernels listed: the profiled kernels the store holds.
    kernels: usize,
    /// Profiled kernels the store does not hold: every rank compiles them
    /// in the background.
    left_out: usize,
}

/// Writes the manifest of the program's profile.
pub fn run(store: &DiskStore, arguments: &Arguments, output: &Output) -> Result<()> {
    let profiles = super::coverage::profiles_of(store, &arguments.profile)?;
    if profiles.is_empty() {
        bail!(
            "no warm-start profile of {}: `kiln profiles` lists the programs the store keeps \
             one for",
            arguments.profile
        );
    }
    let mut held: HashMap<(KeyComponents, u128, Vec<u8>), [u8; 32]> = HashMap::new();
    store
        .entries(&mut |info| {
            if let Entry::Record(record) = info.entry
                && let KeySubject::Kernel { digest, .. } = record.key.subject
            {
                held.insert(
                    (record.key.components, digest, record.key.variant),
                    record.object,
                );
            }
        })
        .context("reading the store's entries")?;
    let several = profiles.len() > 1;
    let mut written = Written {
        manifests: Vec::new(),
    };
    for profile in profiles {
        let mut kernels = Vec::new();
        let mut left_out = 0;
        for kernel in &profile.kernels {
            let found = kernel.key_parts().and_then(|(id, variant)| {
                held.get(&(profile.components.clone(), id.digest(), variant.to_vec()))
            });
            match found {
                Some(object) => kernels.push(ManifestKernel {
                    kernel: kernel.kernel.clone(),
                    id: kernel.id.clone(),
                    object: *object,
                }),
                None => left_out += 1,
            }
        }
        let path = if several {
            let mut name = arguments.out.clone().into_os_string();
            name.push(format!(
                ".{}-{}",
                profile.components.backend, profile.components.architecture
            ));
            PathBuf::from(name)
        } else {
            arguments.out.clone()
        };
        let manifest = JobManifest::new(&profile.program, profile.components.clone(), kernels);
        std::fs::write(&path, manifest.to_bytes())
            .with_context(|| format!("could not write {}", path.display()))?;
        written.manifests.push(WrittenManifest {
            path: path.display().to_string(),
            backend: profile.components.backend.clone(),
            architecture: profile.components.architecture.clone(),
            kernels: manifest.kernels.len(),
            left_out,
        });
    }
    output.print(&written, || {
        for manifest in &written.manifests {
            outln!(
                "{}: {} kernels of {} {} listed, {} the store lacks left out",
                manifest.path,
                manifest.kernels,
                manifest.backend,
                manifest.architecture,
                manifest.left_out
            );
        }
    })
}
