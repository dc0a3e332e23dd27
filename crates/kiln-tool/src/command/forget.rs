//! `kiln forget KERNEL`: forgets the failures the store remembers of a
//! kernel (P11), so the next process compiles it again.

use anyhow::Result;
use clap::Args;
use kiln_engine::store::{FAILURE_BLOB_KIND, RememberedFailure};
use kiln_engine::{Blobs, Lookup};
use kiln_store::{DiskStore, Entry};
use serde::Serialize;

use crate::console::outln;
use crate::output::Output;

/// `kiln forget` options.
#[derive(Debug, Args)]
pub struct Arguments {
    /// The kernel: part of its name or of its `name#digest` text as logs
    /// and `kiln ls` print it; `all` forgets every remembered failure.
    #[arg(value_parser = kernel_pattern)]
    pub kernel: String,
}

/// A pattern that names some kernels: an empty one would be part of every
/// kernel's name, and forget them all unasked.
fn kernel_pattern(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err(
            "an empty pattern names no kernel: give part of its name, or `all` to forget every \
             remembered failure"
                .to_owned(),
        );
    }
    Ok(text.to_owned())
}

/// What `kiln forget --json` prints.
#[derive(Debug, Serialize)]
struct Forgotten {
    /// The kernels whose failures are forgotten, as `kiln ls` names them.
    forgotten: Vec<String>,
}

/// Forgets every remembered failure of the kernels matching the query.
pub fn run(store: &DiskStore, arguments: &Arguments, output: &Output) -> Result<()> {
    let everything = arguments.kernel == "all";
    let mut matching = Vec::new();
    store.entries(&mut |entry| {
        let Entry::Blob(record) = entry.entry else {
            return;
        };
        if record.key.kind != FAILURE_BLOB_KIND {
            return;
        }
        let kernel = record
            .key
            .components
            .iter()
            .find(|(name, _)| name == "kernel")
            .map_or_else(String::new, |(_, value)| value.clone());
        if everything || kernel.contains(arguments.kernel.as_str()) {
            matching.push((kernel, record.key));
        }
    })?;
    let mut forgotten = Vec::new();
    let empty = RememberedFailure::forgotten().to_bytes();
    for (kernel, key) in matching {
        // Only what still holds something: forgetting twice says nothing.
        let holds = match store.lookup_blob(&key) {
            Lookup::Hit { artifact, .. } => {
                RememberedFailure::from_bytes(&artifact).is_some_and(|memory| !memory.is_empty())
            }
            Lookup::Miss(_) => false,
        };
        if !holds {
            continue;
        }
        super::forget_blob(store, &key, &empty, &format!("the failure of {kernel}"))?;
        forgotten.push(kernel);
    }
    output.print(
        &Forgotten {
            forgotten: forgotten.clone(),
        },
        || {
            if forgotten.is_empty() {
                outln!(
                    "{}: the store remembers no failure of such a kernel",
                    arguments.kernel
                );
            }
            for kernel in &forgotten {
                outln!("forgot the failure of {kernel}: the next warm start compiles it again");
            }
        },
    )
}
