//! Failure memory (P11): what a kernel's compile came to when it failed,
//! kept in the store beside its artifacts, so that the next process reports
//! the same failure without compiling it again.
//!
//! A failure is remembered as a named blob ([`BlobKey`]) of kind
//! [`FAILURE_BLOB_KIND`], named after the kernel's full store key: the
//! compiler's identity, its options and the kernel (whose id covers its
//! source). A change of any of them is another key, so the kernel compiles
//! again. What is remembered:
//!
//! - a compile error (lower or finalize) reported by the compiler or the
//!   generator: at once, with every diagnostic;
//! - a compile that crashed or hung a worker process, or panicked: counted,
//!   and quarantined the second time ([`QUARANTINE_AFTER`]), since a crash
//!   once may be the machine's rather than the kernel's. The quarantine
//!   keeps what each crash was and says how to compile the kernel again.
//!
//! Never remembered: a failure its compiler marks as not the kernel's
//! ([`CompileFailure::transient`]), a device's refusal, anything of a store
//! error, and a worker lost to its environment rather than its kernel: a
//! signal or a limit from outside, a machine short of memory or overloaded,
//! a timeout below [`TIMEOUT_FLOOR`](crate::worker::TIMEOUT_FLOOR) (the
//! loader leaves those out before asking [`RememberedFailure::after`]). A memory is forgotten by writing over it an empty one
//! ([`RememberedFailure::forgotten`]): `kiln forget` does, a loader asked to
//! retry failures ([`LoaderConfig::retry_failed`](crate::LoaderConfig::retry_failed))
//! ignores memories and forgets each one whose kernel then compiles.

use serde::{Deserialize, Serialize};

use super::blob::BlobKey;
use super::key::{StoreKey, hex};
use crate::diagnostic::CompileFailure;
use crate::error::{Failure, KernelError, Stage};
use crate::id::KernelId;

/// The kind of the blobs failures are remembered under, as `kiln ls` names
/// it.
pub const FAILURE_BLOB_KIND: &str = "remembered failure";

/// How many crashes, hangs or panics of one kernel's compile quarantine it.
pub const QUARANTINE_AFTER: u32 = 2;

/// What a store remembers of one kernel's failed compiles (P11).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RememberedFailure {
    /// The step that failed.
    pub stage: Stage,
    /// The failure to report without compiling, once remembered; `None`
    /// while only a crash is counted, or once forgotten.
    pub failure: Option<RememberedCause>,
    /// How many times compiling it crashed, hung or panicked.
    pub crashes: u32,
    /// The last crash's message, while it is counted.
    pub last_crash: Option<String>,
}

/// Why a remembered kernel fails.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RememberedCause {
    /// The compiler or the generator reported an error.
    Compile(CompileFailure),
    /// Its compile crashed, hung or panicked [`QUARANTINE_AFTER`] times,
    /// each time alone, with headroom.
    Quarantined {
        /// How many times.
        crashes: u32,
        /// What was seen each time, the first first (the last two kept).
        seen: Vec<String>,
    },
}

/// What a quarantine says to do to compile the kernel again.
pub const UNDO_QUARANTINE: &str = "to compile it again, forget it (`kiln forget KERNEL`), \
     retry remembered failures (`kiln warm --retry-failed`, KILN_RETRY_FAILED=1), or change \
     its compiler, options or source";

impl RememberedFailure {
    /// The blob a failure of the kernel stored under `key` is remembered
    /// under.
    pub fn blob_key(key: &StoreKey) -> BlobKey {
        BlobKey::new(FAILURE_BLOB_KIND)
            .component("kernel", key.subject_text())
            .component("key", hex(&key.digest()))
    }

    /// A memory of nothing: what forgetting writes.
    pub fn forgotten() -> Self {
        Self {
            stage: Stage::Finalize,
            failure: None,
            crashes: 0,
            last_crash: None,
        }
    }

    /// What it remembers, in words: the failure it reports, or the crashes
    /// counted so far; `None` when it holds nothing.
    pub fn describe(&self) -> Option<String> {
        match &self.failure {
            Some(RememberedCause::Compile(failure)) => {
                Some(format!("failed to {}: {failure}", self.stage))
            }
            Some(RememberedCause::Quarantined { crashes, seen }) => {
                Some(quarantine_message(*crashes, seen))
            }
            None if self.crashes > 0 => Some(format!(
                "its compile crashed, hung or panicked {} time(s), last: {}; once more \
                 quarantines it",
                self.crashes,
                self.last_crash.as_deref().unwrap_or("-")
            )),
            None => None,
        }
    }

    /// The bytes it is stored as.
    pub fn to_bytes(&self) -> Vec<u8> {
        crate::encoding::encode(self).expect("a remembered failure is plain data and serializes")
    }

    /// The memory stored as `bytes`; `None` when they are not one whole
    /// (a memory written by another kiln, or damaged): no memory.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        match crate::encoding::decode::<Self>(bytes) {
            Ok((memory, read)) if read == bytes.len() => Some(memory),
            _ => None,
        }
    }

    /// Whether it holds anything: a failure to report or a crash counted.
    pub fn is_empty(&self) -> bool {
        self.failure.is_none() && self.crashes == 0
    }

    /// What to remember of `error`, a kernel's failure to lower or
    /// finalize, after `before` (what was remembered when its compile
    /// began): `None` when the failure is not the kernel's to remember.
    /// `crashed` says its worker process died or was killed at the
    /// timeout.
    pub fn after(before: Option<&Self>, error: &KernelError, crashed: bool) -> Option<Self> {
        if !matches!(error.stage, Stage::Lower | Stage::Finalize) {
            return None;
        }
        let counted = |message: String| {
            let crashes = before.map_or(0, |before| before.crashes) + 1;
            let seen: Vec<String> = before
                .and_then(|before| before.last_crash.clone())
                .into_iter()
                .chain([message.clone()])
                .collect();
            Self {
                stage: error.stage,
                failure: (crashes >= QUARANTINE_AFTER)
                    .then_some(RememberedCause::Quarantined { crashes, seen }),
                crashes,
                last_crash: Some(message),
            }
        };
        match &error.failure {
            Failure::Compile(failure) if crashed => {
                let message = failure.to_string();
                let message = message.strip_prefix("error: ").unwrap_or(&message);
                Some(counted(message.to_owned()))
            }
            Failure::Compile(failure) if failure.transient => None,
            Failure::Compile(failure) => Some(Self {
                stage: error.stage,
                failure: Some(RememberedCause::Compile((**failure).clone())),
                crashes: before.map_or(0, |before| before.crashes),
                last_crash: None,
            }),
            Failure::Panicked { message } => Some(counted(format!("panicked: {message}"))),
            Failure::Refused(_) => None,
        }
    }

    /// The error to report for `kernel` without compiling it, when the
    /// memory holds one.
    pub fn error_for(&self, kernel: &KernelId) -> Option<KernelError> {
        let failure = match self.failure.as_ref()? {
            RememberedCause::Compile(failure) => Failure::Compile(Box::new(failure.clone())),
            RememberedCause::Quarantined { crashes, seen } => Failure::Compile(Box::new(
                CompileFailure::message(quarantine_message(*crashes, seen)),
            )),
        };
        Some(KernelError {
            kernel: kernel.clone(),
            stage: self.stage,
            failure,
        })
    }
}

/// What a quarantine reports: how often, what was seen, how to undo it.
fn quarantine_message(crashes: u32, seen: &[String]) -> String {
    let mut message = format!(
        "quarantined: its compile crashed, hung or panicked {crashes} times, each time alone \
         on a machine with headroom"
    );
    for (number, what) in seen.iter().enumerate() {
        message.push_str(&format!("; {}: {what}", ordinal(number)));
    }
    message.push_str("; ");
    message.push_str(UNDO_QUARANTINE);
    message
}

fn ordinal(number: usize) -> &'static str {
    match number {
        0 => "first",
        1 => "then",
        _ => "and",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostic::Diagnostic;

    fn error(failure: Failure) -> KernelError {
        KernelError {
            kernel: KernelId::named("kiln.test").parameter(&1).build(),
            stage: Stage::Finalize,
            failure,
        }
    }

    // P11
    #[test]
    fn a_compile_error_is_remembered_at_once_with_every_diagnostic() {
        let failure = CompileFailure::new(vec![
            Diagnostic::error("first"),
            Diagnostic::error("second"),
        ]);
        let memory = RememberedFailure::after(
            None,
            &error(Failure::Compile(Box::new(failure.clone()))),
            false,
        )
        .expect("remembered");
        let again = memory
            .error_for(&KernelId::named("kiln.test").parameter(&2).build())
            .expect("reported");
        assert_eq!(
            again.kernel,
            KernelId::named("kiln.test").parameter(&2).build()
        );
        assert_eq!(again.stage, Stage::Finalize);
        assert_eq!(again.compile_failure(), Some(&failure));
    }

    // P11
    #[test]
    fn a_crash_is_counted_and_quarantines_the_second_time() {
        let crash = error(Failure::Compile(Box::new(CompileFailure::message(
            "the compiler crashed",
        ))));
        let once = RememberedFailure::after(None, &crash, true).expect("counted");
        assert_eq!(once.crashes, 1);
        assert!(once.error_for(&crash.kernel).is_none(), "compiled again");
        let twice = RememberedFailure::after(Some(&once), &crash, true).expect("counted");
        let reported = twice
            .error_for(&crash.kernel)
            .expect("quarantined")
            .to_string();
        assert!(reported.contains("quarantined"), "{reported}");
        // What was seen, and how to undo it.
        assert!(
            reported.contains("first: the compiler crashed"),
            "{reported}"
        );
        assert!(reported.contains("kiln forget"), "{reported}");
        assert!(reported.contains("--retry-failed"), "{reported}");
        let panicked = error(Failure::Panicked {
            message: "boom".into(),
        });
        let once = RememberedFailure::after(None, &panicked, false).expect("counted");
        assert!(once.error_for(&crash.kernel).is_none());
    }

    // P11
    #[test]
    fn what_is_not_the_kernel_s_is_never_remembered() {
        let mut transient = CompileFailure::message("out of memory");
        transient.transient = true;
        assert!(
            RememberedFailure::after(None, &error(Failure::Compile(Box::new(transient))), false)
                .is_none()
        );
        let refused = KernelError {
            stage: Stage::Load,
            ..error(Failure::Refused(crate::DeviceRefusal::new("no")))
        };
        assert!(RememberedFailure::after(None, &refused, false).is_none());
        assert!(RememberedFailure::forgotten().is_empty());
    }
}
