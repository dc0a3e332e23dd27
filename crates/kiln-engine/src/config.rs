//! The loader's settings: a plain struct with defaults, each overridable by a
//! `KILN_*` environment variable.
//!
//! | variable | field | default | allowed |
//! |---|---|---|---|
//! | `KILN_PARALLELISM` | [`LoaderConfig::parallelism`] | the machine's available cores | 1 to [`parallelism_limit`]; more is capped, with a warning |
//! | `KILN_RECORD_LIMIT` | [`LoaderConfig::record_limit`] | 256 batches | any whole number |
//! | `KILN_WORKER_MODE` | [`LoaderConfig::worker_mode`] | `processes` | `threads` or `processes` |
//! | `KILN_COMPILE_TIMEOUT` | [`LoaderConfig::compile_timeout`] | 300 s | seconds, above 0 and at most a day |
//! | `KILN_RETRY_FAILED` | [`LoaderConfig::retry_failed`] | `0` | `1`, `true`, `0` or `false` |
//! | `KILN_PROFILE` | [`LoaderConfig::profile`] | `1` | `1`, `true`, `0` or `false` |
//!
//! A variable that does not read as what it should hold is an error of
//! [`LoaderConfig::from_env`], naming it. A loader made with
//! [`KernelLoader::new`](crate::KernelLoader::new) cannot fail, so it reads
//! with [`LoaderConfig::from_env_or_default`] instead: the default for that
//! variable alone, the others still applied, and a warning naming the
//! variable, its value and what is used. A setting the user typed and kiln
//! did not honour must never go unsaid, so warnings of the settings go to
//! the program's logger (the `log` crate) or, when it installed none, to
//! standard error; each is said once per process, however many loaders read
//! the environment.
//!
//! The one duration, `KILN_COMPILE_TIMEOUT`, is read in seconds (`2.5`
//! allowed).

use std::collections::HashSet;
use std::convert::Infallible;
use std::num::NonZeroUsize;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

/// The variable choosing `threads` or `processes` for every loader that
/// reads its settings from the environment.
pub const WORKER_MODE_VARIABLE: &str = "KILN_WORKER_MODE";

/// Where a loader finalizes its kernels: the setting
/// ([`LoaderConfig::worker_mode`]), and what a batch did
/// ([`BatchRecord::mode`](crate::BatchRecord::mode)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkerMode {
    /// Threads of this process.
    Threads,
    /// Separate worker processes.
    Processes,
}

/// The most workers `KILN_PARALLELISM` can ask for: four per available
/// core, and never more than [`MAX_PARALLELISM`].
///
/// Compiling is bound by the cores, so workers beyond a few per core only
/// cost memory and threads; a value far past them is a mistake (a `0`
/// too many), and starting it could exhaust the process's thread limit.
/// A [`LoaderConfig`] built in code is taken as it is.
pub fn parallelism_limit() -> NonZeroUsize {
    available_cores()
        .saturating_mul(NonZeroUsize::new(4).expect("4 is not zero"))
        .min(MAX_PARALLELISM)
}

/// The most workers `KILN_PARALLELISM` can ask for on any machine.
pub const MAX_PARALLELISM: NonZeroUsize = NonZeroUsize::new(1024).expect("1024 is not zero");

fn available_cores() -> NonZeroUsize {
    std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN)
}

/// How a [`KernelLoader`](crate::KernelLoader) runs its batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoaderConfig {
    /// How many workers lower and finalize at once. Default: the machine's
    /// available cores. `KILN_PARALLELISM`, at most [`parallelism_limit`].
    pub parallelism: NonZeroUsize,
    /// How many batch records the loader keeps before dropping the oldest:
    /// records are for inspection, and a long-running process must not
    /// grow without bound. `KILN_RECORD_LIMIT`.
    pub record_limit: usize,
    /// Whether batches may finalize in worker processes. Default:
    /// [`WorkerMode::Processes`], which finalizes in them when the compiler
    /// can and the program provides a worker (see [`crate::worker`]), and on
    /// threads otherwise; [`WorkerMode::Threads`] keeps every compile in
    /// this process. `KILN_WORKER_MODE`.
    pub worker_mode: WorkerMode,
    /// The longest one kernel may compile in a worker process: past it the
    /// worker is killed and replaced, and that kernel alone fails, naming
    /// the timeout. A compile on threads of this process cannot be stopped
    /// and is not timed. Default: [`DEFAULT_COMPILE_TIMEOUT`].
    /// `KILN_COMPILE_TIMEOUT`, in seconds.
    pub compile_timeout: Duration,
    /// Whether batches compile the kernels their store remembers as failed
    /// (P11) instead of reporting the remembered failure without
    /// compiling; each one that then compiles is forgotten. Default:
    /// `false`. `KILN_RETRY_FAILED`; `kiln warm --retry-failed` sets it.
    pub retry_failed: bool,
    /// Whether a loader with a store keeps a warm-start profile of its
    /// program (L12): reads the kernels the program's last process loaded
    /// and loads them ahead, and writes what this run asked for when it is
    /// dropped. The program is the executable's file name unless the loader
    /// is given one ([`KernelLoader::with_profile`](crate::KernelLoader::with_profile)).
    /// A storeless loader keeps none, and a read-only store is never
    /// written. Default: `true`. `KILN_PROFILE`.
    pub profile: bool,
}

/// The default [`LoaderConfig::compile_timeout`]: generous, so that only a
/// compile that hangs reaches it.
pub const DEFAULT_COMPILE_TIMEOUT: Duration = Duration::from_secs(300);

/// The longest `KILN_COMPILE_TIMEOUT` can be: a day.
const MAX_COMPILE_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

impl Default for LoaderConfig {
    fn default() -> Self {
        Self {
            parallelism: available_cores(),
            record_limit: 256,
            worker_mode: WorkerMode::Processes,
            compile_timeout: DEFAULT_COMPILE_TIMEOUT,
            retry_failed: false,
            profile: true,
        }
    }
}

impl LoaderConfig {
    /// The defaults, with every `KILN_*` variable that is set applied.
    ///
    /// # Errors
    ///
    /// A variable that is set and cannot be read, naming it and what it
    /// should hold.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::default().with_overrides(|name| std::env::var(name).ok())
    }

    /// The defaults with the `KILN_*` variables applied; a variable that is
    /// invalid keeps its default, with a warning naming it, its value and
    /// the value used: a misspelt setting must not stop a program from
    /// launching kernels, nor take the valid settings beside it along.
    pub fn from_env_or_default() -> Self {
        Self::default().with_overrides_or_defaults(|name| std::env::var(name).ok())
    }

    /// Applies the overrides `lookup` finds, by variable name. A value above
    /// a variable's limit is capped to it, with a warning.
    ///
    /// # Errors
    ///
    /// A variable that is set and cannot be read.
    pub fn with_overrides(
        self,
        lookup: impl Fn(&'static str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        self.apply(lookup, |error, _used| Err(error))
    }

    /// Applies the overrides `lookup` finds, as
    /// [`from_env_or_default`](Self::from_env_or_default) does: a variable
    /// that cannot be read keeps the value it has, with a warning.
    pub fn with_overrides_or_defaults(
        self,
        lookup: impl Fn(&'static str) -> Option<String>,
    ) -> Self {
        let Ok(config) = self.apply(lookup, |error, used| {
            warn_once(
                error.variable,
                &error.value,
                format!("{error}; using {used}"),
            );
            Ok::<(), Infallible>(())
        });
        config
    }

    /// Applies the overrides `lookup` finds; `refuse` decides what a
    /// variable that cannot be read does, given its error and the value
    /// kept instead.
    fn apply<E>(
        mut self,
        lookup: impl Fn(&'static str) -> Option<String>,
        refuse: impl Fn(ConfigError, String) -> Result<(), E>,
    ) -> Result<Self, E> {
        if let Some(value) = lookup("KILN_PARALLELISM") {
            match read_parallelism(&value) {
                Some(parallelism) => self.parallelism = capped_parallelism(parallelism, &value),
                None => refuse(
                    ConfigError {
                        variable: "KILN_PARALLELISM",
                        value,
                        expected: "a whole number of workers, at least 1",
                    },
                    self.parallelism.to_string(),
                )?,
            }
        }
        if let Some(value) = lookup("KILN_RECORD_LIMIT") {
            match value.trim().parse() {
                Ok(record_limit) => self.record_limit = record_limit,
                Err(_) => refuse(
                    ConfigError {
                        variable: "KILN_RECORD_LIMIT",
                        value,
                        expected: "a whole number of batch records to keep",
                    },
                    self.record_limit.to_string(),
                )?,
            }
        }
        if let Some(value) = lookup(WORKER_MODE_VARIABLE) {
            match read_worker_mode(&value) {
                Some(worker_mode) => self.worker_mode = worker_mode,
                None => refuse(
                    ConfigError {
                        variable: WORKER_MODE_VARIABLE,
                        value,
                        expected: "`threads` or `processes`",
                    },
                    worker_mode_name(self.worker_mode).to_owned(),
                )?,
            }
        }
        if let Some(value) = lookup("KILN_RETRY_FAILED") {
            match value.trim() {
                "1" | "true" => self.retry_failed = true,
                "0" | "false" | "" => self.retry_failed = false,
                _ => refuse(
                    ConfigError {
                        variable: "KILN_RETRY_FAILED",
                        value,
                        expected: "1, true, 0 or false",
                    },
                    self.retry_failed.to_string(),
                )?,
            }
        }
        if let Some(value) = lookup("KILN_PROFILE") {
            match value.trim() {
                "1" | "true" | "" => self.profile = true,
                "0" | "false" => self.profile = false,
                _ => refuse(
                    ConfigError {
                        variable: "KILN_PROFILE",
                        value,
                        expected: "1, true, 0 or false",
                    },
                    self.profile.to_string(),
                )?,
            }
        }
        if let Some(value) = lookup("KILN_COMPILE_TIMEOUT") {
            match read_seconds(&value, MAX_COMPILE_TIMEOUT) {
                Some(timeout) => self.compile_timeout = timeout,
                None => refuse(
                    ConfigError {
                        variable: "KILN_COMPILE_TIMEOUT",
                        value,
                        expected: "seconds, above 0 and at most 86400",
                    },
                    format!("{} s", self.compile_timeout.as_secs_f64()),
                )?,
            }
        }
        Ok(self)
    }
}

/// The duration `value` gives in seconds, above zero and at most `limit`.
fn read_seconds(value: &str, limit: Duration) -> Option<Duration> {
    let seconds: f64 = value.trim().parse().ok()?;
    (seconds.is_finite() && seconds > 0.0 && seconds <= limit.as_secs_f64())
        .then(|| Duration::from_secs_f64(seconds))
}

/// The number of workers `value` asks for: a whole number, at least 1, and
/// one too large for a `usize` asks for as many as can be.
fn read_parallelism(value: &str) -> Option<NonZeroUsize> {
    let digits = value.trim();
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    match digits.parse::<usize>() {
        Ok(parallelism) => NonZeroUsize::new(parallelism),
        Err(_) => Some(NonZeroUsize::MAX),
    }
}

/// The worker mode `value` names; empty names the default, processes.
fn read_worker_mode(value: &str) -> Option<WorkerMode> {
    match value.trim() {
        "threads" => Some(WorkerMode::Threads),
        "processes" | "" => Some(WorkerMode::Processes),
        _ => None,
    }
}

/// How `KILN_WORKER_MODE` names `mode`.
fn worker_mode_name(mode: WorkerMode) -> &'static str {
    match mode {
        WorkerMode::Threads => "threads",
        WorkerMode::Processes => "processes",
    }
}

/// `parallelism`, read from `value`, at most [`parallelism_limit`].
fn capped_parallelism(parallelism: NonZeroUsize, value: &str) -> NonZeroUsize {
    let limit = parallelism_limit();
    if parallelism <= limit {
        return parallelism;
    }
    warn_once(
        "KILN_PARALLELISM",
        value,
        format!(
            "KILN_PARALLELISM={:?} is more workers than compiling can use (at most four per \
             core, {MAX_PARALLELISM} on any machine); using {limit}",
            value.trim()
        ),
    );
    limit
}

/// Says `message`, once per process for this `subject` (a variable, say)
/// and `value`, as a warning through `log`, or on standard error when the
/// program installed no logger (the warning would otherwise reach no one).
pub(crate) fn warn_once(subject: &str, value: &str, message: String) {
    static SAID: OnceLock<Mutex<HashSet<(String, String)>>> = OnceLock::new();
    let is_new = SAID
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .insert((subject.to_owned(), value.to_owned()));
    if is_new {
        warn(&message);
    }
}

/// Says `message` as a warning through `log`, or on standard error when the
/// program installed no logger.
fn warn(message: &str) {
    if log::max_level() == log::LevelFilter::Off {
        eprintln!("kiln: warning: {message}");
    } else {
        log::warn!("{message}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_override_the_defaults() {
        let config = LoaderConfig::default()
            .with_overrides(|name| match name {
                "KILN_PARALLELISM" => Some("3".into()),
                "KILN_RECORD_LIMIT" => Some(" 10 ".into()),
                _ => None,
            })
            .expect("valid values");
        assert_eq!(config.parallelism.get(), 3);
        assert_eq!(config.record_limit, 10);
    }

    #[test]
    fn l12_profiles_are_on_unless_kiln_profile_turns_them_off() {
        assert!(LoaderConfig::default().profile);
        for (value, profile) in [
            ("0", false),
            ("false", false),
            ("1", true),
            (" true ", true),
        ] {
            let config = LoaderConfig::default()
                .with_overrides(|name| (name == "KILN_PROFILE").then(|| value.into()))
                .expect("a valid value");
            assert_eq!(config.profile, profile, "KILN_PROFILE={value:?}");
        }
        let error = LoaderConfig::default()
            .with_overrides(|name| (name == "KILN_PROFILE").then(|| "off".into()))
            .expect_err("`off` is not a value it takes");
        assert_eq!(error.variable, "KILN_PROFILE");
    }

    #[test]
    fn an_invalid_variable_is_named_in_the_error() {
        let error = LoaderConfig::default()
            .with_overrides(|name| (name == "KILN_PARALLELISM").then(|| "0".into()))
            .expect_err("zero workers is invalid");
        assert_eq!(error.variable, "KILN_PARALLELISM");
        assert!(error.to_string().contains("at least 1"), "{error}");
    }

    #[test]
    fn a_parallelism_past_the_limit_is_capped() {
        let config = LoaderConfig::default()
            .with_overrides(|name| (name == "KILN_PARALLELISM").then(|| "100000".into()))
            .expect("a large number is capped, not refused");
        assert_eq!(config.parallelism, parallelism_limit());
        let config = LoaderConfig::default()
            .with_overrides(|name| {
                (name == "KILN_PARALLELISM").then(|| "99999999999999999999999999".into())
            })
            .expect("a number past any machine's is capped, not refused");
        assert_eq!(config.parallelism, parallelism_limit());
        for unreadable in ["abc", "-1", "0", "1.5", "", "+"] {
            LoaderConfig::default()
                .with_overrides(|name| (name == "KILN_PARALLELISM").then(|| unreadable.into()))
                .expect_err(unreadable);
        }
        assert!(parallelism_limit() <= MAX_PARALLELISM);
    }

    #[test]
    fn the_worker_mode_is_threads_or_processes_and_nothing_else() {
        let read = |value: &'static str| {
            LoaderConfig::default()
                .with_overrides(|name| (name == WORKER_MODE_VARIABLE).then(|| value.into()))
        };
        assert_eq!(
            read(" threads ").map(|c| c.worker_mode),
            Ok(WorkerMode::Threads)
        );
        assert_eq!(
            read("processes").map(|c| c.worker_mode),
            Ok(WorkerMode::Processes)
        );
        assert_eq!(read("").map(|c| c.worker_mode), Ok(WorkerMode::Processes));
        let error = read("thread").expect_err("a misspelt mode is refused");
        assert_eq!(error.variable, WORKER_MODE_VARIABLE);
        let config = LoaderConfig::default().with_overrides_or_defaults(|name| {
            (name == WORKER_MODE_VARIABLE).then(|| "both".into())
        });
        assert_eq!(config.worker_mode, WorkerMode::Processes);
    }

    // L6
    #[test]
    fn the_compile_timeout_is_seconds_above_zero_and_at_most_a_day() {
        let read = |value: &'static str| {
            LoaderConfig::default()
                .with_overrides(|name| (name == "KILN_COMPILE_TIMEOUT").then(|| value.into()))
        };
        assert_eq!(
            LoaderConfig::default().compile_timeout,
            DEFAULT_COMPILE_TIMEOUT
        );
        assert_eq!(
            read(" 2.5 ").expect("reads").compile_timeout,
            Duration::from_millis(2_500)
        );
        assert_eq!(
            read("86400").expect("reads").compile_timeout,
            Duration::from_secs(86_400)
        );
        for bad in ["0", "-1", "86401", "NaN", "inf", "ten", ""] {
            let error = read(bad).expect_err(bad);
            assert_eq!(error.variable, "KILN_COMPILE_TIMEOUT", "{bad:?}");
        }
    }

    #[test]
    fn an_unreadable_variable_keeps_its_default_and_the_others_apply() {
        let defaults = LoaderConfig::default();
        let config = defaults
            .clone()
            .with_overrides_or_defaults(|name| match name {
                "KILN_PARALLELISM" => Some("abc".into()),
                "KILN_RECORD_LIMIT" => Some("10".into()),
                _ => None,
            });
        assert_eq!(config.parallelism, defaults.parallelism);
        assert_eq!(config.record_limit, 10);
    }
}
