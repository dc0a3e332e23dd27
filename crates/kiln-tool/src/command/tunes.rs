//! `kiln tunes [KEY] [--forget]`: the tuning answers the store keeps (T5)
//! — what was tuned, on which device, the winner and how much the choice
//! mattered — and forgetting them, so the next process measures again.

use anyhow::Result;
use clap::Args;
use kiln_engine::tune::{ANSWER_BLOB_KIND, TuneKey, TuningAnswer};
use kiln_engine::{Blobs, Lookup};
use kiln_store::{DiskStore, Entry};
use serde::Serialize;

use super::ForgetWords;
use crate::console::outln;
use crate::format;
use crate::output::Output;
use crate::table::Table;

/// `kiln tunes` options.
#[derive(Debug, Args)]
pub struct Arguments {
    /// Only the answers whose tuning key contains this text; `all`, or
    /// nothing, for every answer.
    pub key: Option<String>,
    /// Forget the answers shown: the next process that tunes them
    /// measures again. Give a key, or `all`.
    #[arg(long, requires = "key")]
    pub forget: bool,
}

/// One answer, as `--json` prints it.
#[derive(Debug, Serialize)]
struct AnswerShape {
    /// What was tuned: the family and its parameters.
    key: String,
    /// The device it was measured on, driver included.
    device: String,
    /// The winning kernel, `name#digest`.
    winner: String,
    /// The winner's index among the candidates.
    winner_index: usize,
    /// How the candidates were measured.
    method: String,
    /// Candidates given.
    candidates: usize,
    /// Candidates measured.
    measured: usize,
    /// Candidates that failed to compile or run.
    failed: usize,
    /// The winner's time.
    fastest_seconds: f64,
    /// The slowest measured candidate's time.
    slowest_seconds: f64,
    /// How many times slower the slowest measured candidate ran.
    spread: f64,
    /// When it was measured, in seconds since the Unix epoch.
    measured_at: u64,
}

/// Lists the answers matching the key, or forgets them.
pub fn run(store: &DiskStore, arguments: &Arguments, output: &Output) -> Result<()> {
    let wanted = arguments.key.as_deref().filter(|key| *key != "all");
    let mut names = Vec::new();
    store.entries(&mut |entry| {
        if let Entry::Blob(record) = entry.entry
            && record.key.kind == ANSWER_BLOB_KIND
        {
            names.push(record.key);
        }
    })?;
    let mut answers = Vec::new();
    for name in names {
        let Lookup::Hit { artifact, .. } = store.lookup_blob(&name) else {
            continue;
        };
        let Some(answer) = TuningAnswer::from_bytes(&artifact) else {
            continue;
        };
        let key = answer.key.to_string();
        if answer.is_answer() && wanted.is_none_or(|wanted| key.contains(wanted)) {
            answers.push((name, answer));
        }
    }
    answers.sort_by(|(_, one), (_, other)| {
        (one.key.to_string(), &one.device).cmp(&(other.key.to_string(), &other.device))
    });
    if arguments.forget {
        forget(store, &answers, output)
    } else {
        list(&answers, output)
    }
}

fn shape(answer: &TuningAnswer) -> AnswerShape {
    let (fastest, slowest) = answer.spread().unwrap_or_default();
    let winner = answer.winning();
    AnswerShape {
        key: answer.key.to_string(),
        device: answer.device.clone(),
        winner: winner.map_or_else(String::new, |winner| winner.kernel.clone()),
        winner_index: answer.winner.unwrap_or_default(),
        method: answer.method.to_string(),
        candidates: answer.candidates.len(),
        measured: answer.measured(),
        failed: answer.candidates.len() - answer.measured(),
        fastest_seconds: fastest.as_secs_f64(),
        slowest_seconds: slowest.as_secs_f64(),
        spread: if fastest.is_zero() {
            1.0
        } else {
            slowest.as_secs_f64() / fastest.as_secs_f64()
        },
        measured_at: answer.measured_at,
    }
}

fn list(answers: &[(kiln_engine::store::BlobKey, TuningAnswer)], output: &Output) -> Result<()> {
    let shown: Vec<AnswerShape> = answers.iter().map(|(_, answer)| shape(answer)).collect();
    output.print(&shown, || {
        if shown.is_empty() {
            outln!("no tuning answers: no program has tuned with this store yet");
            return;
        }
        let mut table = Table::new(&[
            "KEY",
            "DEVICE",
            "WINNER",
            "MEASURED>",
            "FAILED>",
            "FASTEST>",
            "SPREAD>",
            "WHEN>",
        ]);
        for answer in &shown {
            table.row(vec![
                answer.key.clone(),
                format::compiler(&answer.device, crate::table::is_wide()),
                format!("#{} {}", answer.winner_index, answer.winner),
                format!("{}/{}", answer.measured, answer.candidates),
                answer.failed.to_string(),
                format::seconds(answer.fastest_seconds),
                format!("{:.1}x", answer.spread),
                format::ago(answer.measured_at),
            ]);
        }
        table.sort();
        outln!("{}", table.render().trim_end());
    })
}

fn forget(
    store: &DiskStore,
    answers: &[(kiln_engine::store::BlobKey, TuningAnswer)],
    output: &Output,
) -> Result<()> {
    let entries = answers.iter().map(|(name, answer)| {
        let nothing = TuningAnswer::forgotten(TuneKey::clone(&answer.key), answer.device.clone());
        // The tuning key and device.
        let described = format!("{} on {}", answer.key, answer.device);
        (name.clone(), nothing.to_bytes(), described)
    });
    let words = ForgetWords {
        of: "the answer of",
        none: "no such tuning answer",
        effect: "the next tuning measures again",
    };
    super::forget_blobs(store, entries, &words, output)
}
