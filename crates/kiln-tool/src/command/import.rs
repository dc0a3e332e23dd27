//! `kiln import FILE`: verify a bundle and add its entries. The bundle's
//! signature must verify with a key trusted here (`KILN_REMOTE_KEY`,
//! `KILN_REMOTE_TRUSTED_KEYS`, or this machine's own signing key); an
//! unsigned or badly signed bundle is refused, naming why, unless
//! `--trust-unsigned` says to trust its author anyway.

use std::fs::File;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use kiln_engine::KeyComponents;
use kiln_store::{BundleHeader, BundleSeal, DiskStore, ImportReport, read_header};

use crate::console::errln;
use crate::output::Output;
use crate::progress::ProgressBar;
use crate::remote::{CompilerChoice, configured_keys};
use crate::table::print_pairs;

/// `kiln import` options.
#[derive(Debug, Args)]
pub struct Arguments {
    /// The bundle to read.
    pub file: PathBuf,
    /// What the bundle must have been built for. Without these, a bundle is
    /// refused when the store already holds entries of other compilers and
    /// none like the bundle's.
    #[command(flatten)]
    pub expected: CompilerChoice,
    /// Import a bundle whose signature does not verify here (unsigned,
    /// signed by an untrusted key, or made before bundles were signed):
    /// trusting its author with native code. Its checksums are still
    /// verified.
    #[arg(long)]
    pub trust_unsigned: bool,
    /// Import into an empty store a bundle built for another target
    /// (backend, compiler or architecture) than this machine's compiler
    /// makes: one whose kernels this machine cannot build itself.
    #[arg(long)]
    pub any_target: bool,
}

/// Imports, refusing a foreign bundle and naming the component that differs.
pub fn run(store: &DiskStore, arguments: &Arguments, output: &Output) -> Result<()> {
    let path = &arguments.file;
    if store.is_read_only() {
        bail!(
            "the store at {} is read-only: import into a writable store, or unset KILN_CACHE_READ_ONLY",
            store.root().display()
        );
    }
    let mut file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let header = read_header(path, &mut file)?;
    drop(file);
    let expected = expectation(store, &header, &arguments.expected);
    if expected.is_none() && !arguments.any_target && store.targets().is_empty() {
        check_target_here(&header)?;
    }
    let keys = configured_keys()?;
    let verdict = std::cell::RefCell::new(None);
    let judge = |seal: &BundleSeal<'_>| {
        let judged = keys.verify_bundle(seal.signed, seal.signature);
        let outcome = match &judged {
            Ok(_) => Ok(()),
            Err(_) if arguments.trust_unsigned => Ok(()),
            Err(why) => Err(format!(
                "{why}; import it anyway with --trust-unsigned only if you trust its author"
            )),
        };
        *verdict.borrow_mut() = Some(judged);
        outcome
    };
    let mut bar = ProgressBar::new("import");
    let report = store.import_checked(
        path,
        expected.as_ref(),
        &mut |progress| bar.update(progress),
        &judge,
    )?;
    drop(bar);
    let signed_by = match verdict.into_inner() {
        Some(Ok(signer)) => Some(signer.to_string()),
        Some(Err(why)) => {
            errln!("kiln: warning: imported a bundle that is not trusted here ({why})");
            None
        }
        None => None,
    };
    #[derive(serde::Serialize)]
    struct Imported {
        #[serde(flatten)]
        report: ImportReport,
        /// Who signed it, when its signature verified here.
        signed_by: Option<String>,
    }
    let imported = Imported { report, signed_by };
    output.print(&imported, || {
        print_pairs(&[
            ("built for", header.components.to_string()),
            (
                "signed by",
                imported
                    .signed_by
                    .clone()
                    .unwrap_or_else(|| "not verified (--trust-unsigned)".into()),
            ),
            (
                "objects",
                format!("{} ({} new)", report.objects, report.new_objects),
            ),
            ("records", report.records.to_string()),
            ("replaced", report.replaced.to_string()),
        ]);
    })
}

/// The components the bundle is checked against: the ones given on the
/// command line (the bundle's own where none is given), else the store's
/// compiler closest to the bundle's, else none (an empty store takes any
/// bundle).
fn expectation(
    store: &DiskStore,
    header: &BundleHeader,
    choice: &CompilerChoice,
) -> Option<KeyComponents> {
    let bundle = &header.components;
    if choice.is_given() {
        return Some(KeyComponents {
            backend: choice
                .backend
                .clone()
                .unwrap_or_else(|| bundle.backend.clone()),
            compiler: choice
                .compiler
                .clone()
                .unwrap_or_else(|| bundle.compiler.clone()),
            architecture: choice
                .architecture
                .clone()
                .unwrap_or_else(|| bundle.architecture.clone()),
            options: bundle.options.clone(),
        });
    }
    let targets = store.targets();
    if targets.is_empty()
        || targets
            .iter()
            .any(|target| header.mismatch(target).is_none())
    {
        return None;
    }
    // The closest: same backend, then same compiler.
    let closeness = |target: &KeyComponents| {
        u8::from(target.backend == bundle.backend) * 2
            + u8::from(target.compiler == bundle.compiler)
    };
    targets.into_iter().max_by_key(closeness)
}

/// Refuses, for an empty store, a bundle built for another target than
/// this machine's compiler of its backend makes (P15). A backend this kiln
/// does not build (the test target) has nothing here to differ from.
fn check_target_here(header: &BundleHeader) -> Result<()> {
    let bundle = &header.components;
    let Some(backend) = crate::backend::named(&bundle.backend) else {
        return Ok(());
    };
    let here = match backend.recompiler() {
        Ok(recompiler) => recompiler.components_here(&bundle.architecture),
        Err(why) => bail!(
            "the bundle is of {}, and this machine has no {} compiler to check it against \
             ({why}): nothing was imported; --any-target imports it anyway",
            bundle,
            bundle.backend
        ),
    };
    if let Some(refusal) = header.mismatch(&here) {
        bail!(
            "{refusal}: the bundle was built for another target than this machine's, and the \
             store is empty; nothing was imported; --any-target imports it anyway"
        );
    }
    Ok(())
}
