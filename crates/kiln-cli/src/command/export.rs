//! `kiln export FILE`: the store's entries in one bundle.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;
use kiln_core::KeyComponents;
use kiln_store::DiskStore;

use super::Output;
use crate::format;
use crate::progress::ProgressBar;
use crate::table::print_pairs;

/// `kiln export` options.
#[derive(Debug, Args)]
pub struct Arguments {
    /// The bundle to write.
    pub file: PathBuf,
    #[command(flatten)]
    pub compiler: CompilerChoice,
}

/// Picks one of the compilers a store holds entries of, by any of its
/// components.
#[derive(Debug, Clone, Args)]
pub struct CompilerChoice {
    /// The backend: cuda, hip, wgpu.
    #[arg(long)]
    pub backend: Option<String>,
    /// The compiler identity and version.
    #[arg(long)]
    pub compiler: Option<String>,
    /// The architecture.
    #[arg(long = "arch")]
    pub architecture: Option<String>,
}

impl CompilerChoice {
    /// Whether any component was given.
    pub fn is_given(&self) -> bool {
        self.backend.is_some() || self.compiler.is_some() || self.architecture.is_some()
    }

    /// Whether `components` agrees with every component given.
    pub fn matches(&self, components: &KeyComponents) -> bool {
        let agrees = |given: &Option<String>, actual: &str| {
            given.as_deref().is_none_or(|given| given == actual)
        };
        agrees(&self.backend, &components.backend)
            && agrees(&self.compiler, &components.compiler)
            && agrees(&self.architecture, &components.architecture)
    }
}

/// Exports, streaming.
pub fn run(store: &DiskStore, arguments: &Arguments, output: &Output) -> Result<()> {
    let chosen = if arguments.compiler.is_given() {
        let matching: Vec<KeyComponents> = store
            .targets()
            .into_iter()
            .filter(|components| arguments.compiler.matches(components))
            .collect();
        match matching.as_slice() {
            [one] => Some(one.clone()),
            [] => bail!("the store holds no entries of such a compiler"),
            several => bail!(
                "{} compilers match; narrow it down: {}",
                several.len(),
                several
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        }
    } else {
        None
    };
    let mut bar = ProgressBar::new("export");
    let report = store.export(&arguments.file, chosen.as_ref(), &mut |progress| {
        bar.update(progress)
    })?;
    drop(bar);
    output.print(&report, || {
        print_pairs(&[
            ("bundle", arguments.file.display().to_string()),
            ("size", format::bytes(report.bytes)),
            ("objects", report.objects.to_string()),
            ("records", report.records.to_string()),
            ("skipped, did not verify", report.skipped.to_string()),
        ]);
    })
}
