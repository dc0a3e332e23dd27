//! `kiln export FILE`: the store's entries in one bundle, signed when a
//! key of the remote tier that signs is configured (`KILN_REMOTE_SIGNING_KEY`,
//! else `KILN_REMOTE_KEY`), so that `kiln import` elsewhere can trust it.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;
use kiln_engine::KeyComponents;
use kiln_store::{DiskStore, ExportReport};

use crate::console::errln;
use crate::format;
use crate::output::Output;
use crate::progress::ProgressBar;
use crate::remote::{CompilerChoice, configured_keys};
use crate::table::print_pairs;

/// `kiln export` options.
#[derive(Debug, Args)]
pub struct Arguments {
    /// The bundle to write.
    pub file: PathBuf,
    #[command(flatten)]
    pub compiler: CompilerChoice,
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
    let keys = configured_keys()?;
    let signer = keys.sign_bundle(&[]).map(|(_, signer)| signer.to_string());
    let sign = |signed: &[u8]| {
        keys.sign_bundle(signed)
            .map(|(signature, _)| signature)
            .expect("these keys signed above")
    };
    let mut bar = ProgressBar::new("export");
    let report = store.export_signed(
        &arguments.file,
        chosen.as_ref(),
        &mut |progress| bar.update(progress),
        signer
            .is_some()
            .then_some(&sign as &dyn Fn(&[u8]) -> Vec<u8>),
    )?;
    drop(bar);
    if signer.is_none() {
        errln!(
            "kiln: note: the bundle is not signed (no KILN_REMOTE_SIGNING_KEY or KILN_REMOTE_KEY \
             here): importing it takes `kiln import --trust-unsigned`"
        );
    }
    #[derive(serde::Serialize)]
    struct Exported {
        #[serde(flatten)]
        report: ExportReport,
        /// Who signed it: a public key, or "the fleet key"; `None` unsigned.
        signed_by: Option<String>,
    }
    let exported = Exported {
        report,
        signed_by: signer,
    };
    output.print(&exported, || {
        print_pairs(&[
            ("bundle", arguments.file.display().to_string()),
            ("size", format::bytes(report.bytes)),
            ("objects", report.objects.to_string()),
            ("records", report.records.to_string()),
            ("skipped, did not verify", report.skipped.to_string()),
            (
                "signed by",
                exported
                    .signed_by
                    .clone()
                    .unwrap_or_else(|| "nobody: unsigned".into()),
            ),
        ]);
    })
}
