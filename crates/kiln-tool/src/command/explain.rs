//! `kiln explain KERNEL`: why a kernel misses.

use anyhow::Result;
use clap::Args;
use kiln_engine::store::RememberedFailure;
use kiln_engine::{Blobs, Explanation, Lookup, StoreKey};
use kiln_store::{DiskStore, KernelHistory};
use serde::Serialize;

use crate::console::outln;
use crate::format;
use crate::output::Output;
use crate::shape::{ExplanationShape, KeyShape};

/// `kiln explain` options.
#[derive(Debug, Args)]
pub struct Arguments {
    /// The kernel: part of its name, its `name#digest` text as logs print
    /// it, or its 32-digit id digest.
    pub kernel: String,
}

#[derive(Debug)]
struct Explained {
    kernel: String,
    explanation: Explanation,
    /// What the store remembers of its failed compiles.
    remembered_failure: Option<String>,
    stored_under: Option<StoreKey>,
    last_missed_under: Option<StoreKey>,
}

/// One kernel of `kiln explain --json`.
#[derive(Debug, Serialize)]
struct ExplainedShape {
    /// `name#digest`, the digest as 32 hex digits.
    kernel: String,
    explanation: ExplanationShape,
    /// What the store remembers of its failed compiles, in words.
    remembered_failure: Option<String>,
    stored_under: Option<KeyShape>,
    last_missed_under: Option<KeyShape>,
}

impl From<&Explained> for ExplainedShape {
    fn from(explained: &Explained) -> Self {
        Self {
            kernel: explained.kernel.clone(),
            explanation: ExplanationShape::from(&explained.explanation),
            remembered_failure: explained.remembered_failure.clone(),
            stored_under: explained.stored_under.as_ref().map(KeyShape::from),
            last_missed_under: explained.last_missed_under.as_ref().map(KeyShape::from),
        }
    }
}

/// Names what changed at the last miss of every kernel matching the query,
/// or says it was never seen.
pub fn run(store: &DiskStore, arguments: &Arguments, output: &Output) -> Result<()> {
    let histories = store.find_kernels(&arguments.kernel)?;
    let explained: Vec<Explained> = histories
        .iter()
        .map(|history| explain(store, history))
        .collect();
    let shapes: Vec<ExplainedShape> = explained.iter().map(ExplainedShape::from).collect();
    output.print(&shapes, || {
        if explained.is_empty() {
            outln!(
                "{}: never seen: the store never held or missed such a kernel",
                arguments.kernel
            );
        }
        for entry in &explained {
            let when = match &entry.explanation {
                Explanation::Held { stored_at }
                | Explanation::Changed { stored_at, .. }
                | Explanation::Gone { stored_at } => {
                    format!(" (stored {})", format::ago(*stored_at))
                }
                Explanation::NeverSeen => String::new(),
            };
            outln!("{}: {}{when}", entry.kernel, entry.explanation);
            if let Some(failure) = &entry.remembered_failure {
                outln!(
                    "  the store remembers its failure, reported without compiling: {failure}\n  \
                     (`kiln forget {}` or `kiln warm --retry-failed` compiles it again)",
                    entry.kernel
                );
            }
        }
    })
}

/// Explains the kernel's last miss by comparing the key it missed under
/// with the key the store held for it then (P9); without a miss, says
/// whether it is held.
fn explain(store: &DiskStore, history: &KernelHistory) -> Explained {
    let stored = history.stored.as_ref();
    let asked = history.asked.as_ref();
    // A miss explains the kernel when something was held then: it names
    // what changed. A miss with nothing held (a cold warm, a program's
    // first run) is followed by the store of what it compiled, and the
    // kernel is what the store holds now (P9).
    let explanation = match (asked, history.held_at_miss.as_ref()) {
        (Some(asked), Some(held)) => match held.key.first_difference(&asked.key) {
            Some(difference) => Explanation::Changed {
                difference,
                stored_at: held.at,
            },
            None => Explanation::Gone { stored_at: held.at },
        },
        _ => match stored {
            Some(stored)
                if store
                    .record(&stored.key)
                    .is_some_and(|record| record.key == stored.key) =>
            {
                Explanation::Held {
                    stored_at: stored.at,
                }
            }
            Some(stored) => Explanation::Gone {
                stored_at: stored.at,
            },
            None => Explanation::NeverSeen,
        },
    };
    let remembered_failure = asked
        .or(stored)
        .and_then(
            |seen| match store.lookup_blob(&RememberedFailure::blob_key(&seen.key)) {
                Lookup::Hit { artifact, .. } => RememberedFailure::from_bytes(&artifact),
                Lookup::Miss(_) => None,
            },
        )
        .and_then(|memory| memory.describe());
    Explained {
        kernel: format!("{}#{:032x}", history.name, history.digest),
        explanation,
        remembered_failure,
        stored_under: stored.map(|seen| seen.key.clone()),
        last_missed_under: asked.map(|seen| seen.key.clone()),
    }
}
