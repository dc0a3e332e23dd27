//! `kiln explain KERNEL`: why a kernel misses.

use anyhow::Result;
use clap::Args;
use kiln_core::{Explanation, StoreKey};
use kiln_store::{DiskStore, KernelHistory};
use serde::Serialize;

use super::Output;
use crate::console::outln;
use crate::format;

/// `kiln explain` options.
#[derive(Debug, Args)]
pub struct Arguments {
    /// The kernel: part of its name, its `name#digest` text as logs print
    /// it, or its 32-digit id digest.
    pub kernel: String,
}

#[derive(Debug, Serialize)]
struct Explained {
    kernel: String,
    explanation: Explanation,
    stored_under: Option<StoreKey>,
    last_missed_under: Option<StoreKey>,
}

/// Names what changed at the last miss of every kernel matching the query,
/// or says it was never seen.
pub fn run(store: &DiskStore, arguments: &Arguments, output: &Output) -> Result<()> {
    let histories = store.find_kernels(&arguments.kernel)?;
    let explained: Vec<Explained> = histories
        .iter()
        .map(|history| explain(store, history))
        .collect();
    output.print(&explained, || {
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
        }
    })
}

/// Explains the kernel's last miss by comparing the key it missed under
/// with the key the store held for it then (P9); without a miss, says
/// whether it is held.
fn explain(store: &DiskStore, history: &KernelHistory) -> Explained {
    let stored = history.stored.as_ref();
    let asked = history.asked.as_ref();
    let explanation = match (asked, history.held_at_miss.as_ref()) {
        (Some(asked), Some(held)) => match held.key.first_difference(&asked.key) {
            Some(difference) => Explanation::Changed {
                difference,
                stored_at: held.at,
            },
            None => Explanation::Gone { stored_at: held.at },
        },
        (Some(_), None) => Explanation::NeverSeen,
        (None, _) => match stored {
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
    Explained {
        kernel: format!("{}#{:032x}", history.name, history.digest),
        explanation,
        stored_under: stored.map(|seen| seen.key.clone()),
        last_missed_under: asked.map(|seen| seen.key.clone()),
    }
}
