//! A tuning answer as the store keeps it (T2): the winner, every
//! candidate's measurement or failure, and how they were measured, filed as
//! a named blob under the tuning key, the candidates' artifact keys and the
//! device's identity.
//!
//! An answer is a blob, so every store that keeps blobs keeps answers with
//! no code of its own — verified on every read, published atomically,
//! evicted as any entry, and, through a remote tier, shared signed. The
//! candidates' artifact keys carry the compiler's identity, version and
//! options (P1), so a changed candidate or compiler is another blob name and
//! tunes again; the device identity carries the driver, so does a new
//! driver (T3).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::store::{BlobKey, StoreKey, hex};

/// The kind of the blobs tuning answers are kept under, as `kiln ls` and
/// `kiln tunes` name it.
pub const ANSWER_BLOB_KIND: &str = "tuning answer";

/// The version of [`TuningAnswer`]'s encoding: an answer of another is
/// none, and the key tunes again.
const ANSWER_FORMAT: u32 = 1;

/// What a tuning is for, as the program names it: a family and the
/// parameters that make one tuning differ from another (a shape, a data
/// type). The candidates are not part of it: they are keyed by their
/// artifact keys.
///
/// ```
/// use kiln_engine::tune::TuneKey;
///
/// let key = TuneKey::new("matmul").parameter("shape", "1024x1024x1024");
/// assert_eq!(key.to_string(), "matmul (shape: 1024x1024x1024)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TuneKey {
    /// The family.
    pub name: String,
    /// What sets this tuning apart, as `(name, value)` pairs in order.
    pub parameters: Vec<(String, String)>,
}

impl TuneKey {
    /// A key of the family `name` with no parameters yet.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            parameters: Vec::new(),
        }
    }

    /// The key with one more parameter, `name` = `value`.
    #[must_use]
    pub fn parameter(mut self, name: impl Into<String>, value: impl fmt::Display) -> Self {
        self.parameters.push((name.into(), value.to_string()));
        self
    }
}

impl fmt::Display for TuneKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        for (index, (name, value)) in self.parameters.iter().enumerate() {
            let separator = if index == 0 { " (" } else { "; " };
            write!(f, "{separator}{name}: {value}")?;
        }
        if !self.parameters.is_empty() {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// How the candidates were measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Method {
    /// The caller's probe said how long each took.
    Probe,
    /// kiln timed them on the device: `warm_up` launches, then the median
    /// of `runs` device-timed launches.
    Timed {
        /// Launches before the timed ones.
        warm_up: u32,
        /// Timed launches.
        runs: u32,
    },
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Probe => f.write_str("the program's probe"),
            Self::Timed { warm_up, runs } => {
                write!(f, "median of {runs} device-timed launches after {warm_up}")
            }
        }
    }
}

/// What became of one candidate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CandidateOutcome {
    /// Measured: its time (the median of its samples) and the range.
    Measured {
        /// The median, in nanoseconds: what candidates are ranked by.
        median_ns: u64,
        /// The fastest sample.
        min_ns: u64,
        /// The slowest sample.
        max_ns: u64,
        /// How many samples.
        samples: u32,
    },
    /// It did not compile, or the device refused it: dropped out (T3).
    FailedToCompile {
        /// Why.
        message: String,
    },
    /// Launching it failed: dropped out (T3).
    FailedToRun {
        /// Why.
        message: String,
    },
}

/// One candidate of an answer: which kernel it was and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CandidateResult {
    /// The kernel, as logs and `kiln ls` print it (`name#digest`).
    pub kernel: String,
    /// The digest of its artifact key: the answer holds for this very
    /// artifact.
    pub artifact_key: [u8; 32],
    /// What became of it.
    pub outcome: CandidateOutcome,
}

impl CandidateResult {
    /// Its measured time, if it was measured.
    pub fn time(&self) -> Option<Duration> {
        match self.outcome {
            CandidateOutcome::Measured { median_ns, .. } => Some(Duration::from_nanos(median_ns)),
            _ => None,
        }
    }
}

/// A tuning's answer: the winner, every candidate's measurement or
/// failure, and the method (T2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TuningAnswer {
    format: u32,
    /// What was tuned.
    pub key: TuneKey,
    /// The device it was measured on: model and driver.
    pub device: String,
    /// How the candidates were measured.
    pub method: Method,
    /// Every candidate, in the order they were given.
    pub candidates: Vec<CandidateResult>,
    /// The index of the fastest candidate that worked; `None` in an answer
    /// that was forgotten.
    pub winner: Option<usize>,
    /// When it was measured, in seconds since the Unix epoch.
    pub measured_at: u64,
}

impl TuningAnswer {
    pub(super) fn new(
        key: TuneKey,
        device: String,
        method: Method,
        candidates: Vec<CandidateResult>,
    ) -> Self {
        let winner = candidates
            .iter()
            .enumerate()
            .filter_map(|(index, candidate)| Some((candidate.time()?, index)))
            .min()
            .map(|(_, index)| index);
        Self {
            format: ANSWER_FORMAT,
            key,
            device,
            method,
            candidates,
            winner,
            measured_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_secs()),
        }
    }

    /// An answer of nothing, for `key` on `device`: what forgetting writes
    /// in its place, so the next tuner of the key measures again.
    pub fn forgotten(key: TuneKey, device: String) -> Self {
        Self {
            format: ANSWER_FORMAT,
            key,
            device,
            method: Method::Probe,
            candidates: Vec::new(),
            winner: None,
            measured_at: 0,
        }
    }

    /// Whether it names a winner: `false` once forgotten.
    pub fn is_answer(&self) -> bool {
        self.winner.is_some()
    }

    /// The winning candidate.
    pub fn winning(&self) -> Option<&CandidateResult> {
        self.candidates.get(self.winner?)
    }

    /// The fastest and the slowest measured times, when any candidate was
    /// measured: how much the choice mattered.
    pub fn spread(&self) -> Option<(Duration, Duration)> {
        let times = self.candidates.iter().filter_map(CandidateResult::time);
        let fastest = times.clone().min()?;
        Some((fastest, times.max().unwrap_or(fastest)))
    }

    /// How many candidates were measured.
    pub fn measured(&self) -> usize {
        self.candidates
            .iter()
            .filter(|candidate| candidate.time().is_some())
            .count()
    }

    /// The bytes it is stored as.
    pub fn to_bytes(&self) -> Vec<u8> {
        crate::encoding::encode(self).expect("a tuning answer is plain data and serializes")
    }

    /// The answer stored as `bytes`; `None` when they are not one whole
    /// answer of this format (damaged, or written by another kiln): no
    /// answer, and the key tunes again.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        match crate::encoding::decode::<Self>(bytes) {
            Ok((answer, read)) if read == bytes.len() && answer.format == ANSWER_FORMAT => {
                Some(answer)
            }
            _ => None,
        }
    }
}

/// The blob name of the answer to `key` on `device` for candidates whose
/// artifact keys are `candidates`, in order.
pub(super) fn answer_blob_key(key: &TuneKey, device: &str, candidates: &[StoreKey]) -> BlobKey {
    BlobKey::new(ANSWER_BLOB_KIND)
        .component("tuning", key.to_string())
        .component("device", device)
        .component("candidates", hex(&candidates_digest(key, candidates)))
}

/// A digest of the tuning key and every candidate's artifact key: what
/// changes when a candidate, the compiler or its options do.
fn candidates_digest(key: &TuneKey, candidates: &[StoreKey]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new_derive_key("kiln tuning candidates");
    crate::encoding::encode_to(key, &mut hasher).expect("a tuning key is plain data");
    for candidate in candidates {
        hasher.update(&candidate.digest());
    }
    *hasher.finalize().as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(kernel: &str, nanoseconds: u64) -> CandidateResult {
        CandidateResult {
            kernel: kernel.into(),
            artifact_key: [0; 32],
            outcome: CandidateOutcome::Measured {
                median_ns: nanoseconds,
                min_ns: nanoseconds,
                max_ns: nanoseconds,
                samples: 1,
            },
        }
    }

    #[test]
    fn the_winner_is_the_fastest_candidate_that_worked() {
        // T1, T3
        let failed = CandidateResult {
            kernel: "broken".into(),
            artifact_key: [0; 32],
            outcome: CandidateOutcome::FailedToRun {
                message: "no".into(),
            },
        };
        let answer = TuningAnswer::new(
            TuneKey::new("t"),
            "device".into(),
            Method::Probe,
            vec![
                measured("a", 30),
                failed,
                measured("b", 10),
                measured("c", 20),
            ],
        );
        assert_eq!(answer.winner, Some(2));
        assert_eq!(
            answer.spread(),
            Some((Duration::from_nanos(10), Duration::from_nanos(30)))
        );
        assert_eq!(answer.measured(), 3);
        assert_eq!(TuningAnswer::from_bytes(&answer.to_bytes()), Some(answer));
    }

    #[test]
    fn an_answer_of_nothing_names_no_winner_and_bad_bytes_are_no_answer() {
        // T5, P2
        let forgotten = TuningAnswer::forgotten(TuneKey::new("t"), "device".into());
        assert!(!forgotten.is_answer());
        assert!(TuningAnswer::from_bytes(b"not an answer").is_none());
        let mut bytes = forgotten.to_bytes();
        bytes.push(0);
        assert!(TuningAnswer::from_bytes(&bytes).is_none(), "trailing bytes");
    }

    #[test]
    fn a_changed_candidate_device_or_key_names_another_answer() {
        // T2, T3
        let components = crate::store::KeyComponents::new("fake", "kiln-fake 1", "fake_1", "");
        let artifact = |number: u32| {
            StoreKey::for_artifact(
                &components,
                &crate::ArtifactId::new(
                    crate::KernelId::named("kiln.fake")
                        .parameter(&number)
                        .build(),
                    (),
                ),
                None,
            )
        };
        let key = TuneKey::new("t").parameter("n", 4);
        let base = answer_blob_key(&key, "device 1", &[artifact(1), artifact(2)]);
        assert_eq!(
            base,
            answer_blob_key(&key, "device 1", &[artifact(1), artifact(2)])
        );
        for other in [
            answer_blob_key(&key, "device 1", &[artifact(1), artifact(3)]),
            answer_blob_key(&key, "device 2", &[artifact(1), artifact(2)]),
            answer_blob_key(
                &TuneKey::new("t").parameter("n", 5),
                "device 1",
                &[artifact(1), artifact(2)],
            ),
        ] {
            assert_ne!(base.digest(), other.digest());
        }
    }
}
