//! The command's logger: what the library says (a damaged entry removed and
//! compiled again, a write that failed, a fall-back to threads) shown on
//! standard error.
//!
//! What is shown is chosen by `KILN_LOG` and the `-v`/`-q` flags:
//!
//! - `KILN_LOG` holds comma-separated directives: a level alone (`off`,
//!   `error`, `warn`, `info`, `debug`, `trace`) sets the level of every
//!   module, and `module=level` (`kiln_store=debug`) that of a module and
//!   the modules below it; the longest module that matches wins.
//! - `-q` shows errors only, `-v` adds notes (`info`), `-vv` debugging
//!   lines and `-vvv` everything; a flag replaces `KILN_LOG`'s level alone,
//!   and its module directives still apply.
//! - Without either, warnings and errors are shown.
//!
//! Each distinct message is shown once per run: a full disk fails every
//! write of a batch, and one line says it. Lines go through
//! [`console::write_note`], which clears a progress bar's line first.
//!
//! This is the crate's own [`log::Log`], so the command adds no dependency
//! for it.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;

use log::{Level, LevelFilter, Log, Metadata, Record};

use crate::console;

/// How many distinct messages are remembered to be shown once; past it,
/// messages are shown without being remembered, so a run that logs without
/// end keeps a bounded set.
const REMEMBERED: usize = 4096;

/// Which messages are shown: a level for every module, and levels for
/// some.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// The level of modules no directive names.
    pub default: LevelFilter,
    /// `(module, level)` pairs, in the order given.
    pub modules: Vec<(String, LevelFilter)>,
}

impl Filter {
    /// The filter `KILN_LOG`'s `text` asks for (warnings, for an empty
    /// text). A directive that does not parse is left out and named in the
    /// returned list of problems, so a typo costs a warning, never the run.
    pub fn parse(text: &str) -> (Self, Vec<String>) {
        let mut filter = Self {
            default: LevelFilter::Warn,
            modules: Vec::new(),
        };
        let mut problems = Vec::new();
        for directive in text.split(',').map(str::trim).filter(|d| !d.is_empty()) {
            match directive.split_once('=') {
                Some((module, level)) => match level.trim().parse::<LevelFilter>() {
                    Ok(level) if !module.trim().is_empty() => {
                        filter.modules.push((module.trim().to_owned(), level));
                    }
                    _ => problems.push(directive.to_owned()),
                },
                None => match directive.parse::<LevelFilter>() {
                    Ok(level) => filter.default = level,
                    Err(_) => problems.push(directive.to_owned()),
                },
            }
        }
        (filter, problems)
    }

    /// The level `target` (a module path) is shown at.
    pub fn level_of(&self, target: &str) -> LevelFilter {
        self.modules
            .iter()
            .filter(|(module, _)| {
                target == module
                    || target
                        .strip_prefix(module.as_str())
                        .is_some_and(|rest| rest.starts_with("::"))
            })
            .max_by_key(|(module, _)| module.len())
            .map_or(self.default, |(_, level)| *level)
    }

    /// The most detailed level any module is shown at.
    fn most_detailed(&self) -> LevelFilter {
        self.modules
            .iter()
            .map(|(_, level)| *level)
            .chain([self.default])
            .max()
            .unwrap_or(LevelFilter::Warn)
    }
}

/// The level `-v` repeated `verbose` times, or `-q`, asks for; `None`
/// when neither was given.
pub fn flag_level(verbose: u8, quiet: bool) -> Option<LevelFilter> {
    match (quiet, verbose) {
        (true, _) => Some(LevelFilter::Error),
        (false, 0) => None,
        (false, 1) => Some(LevelFilter::Info),
        (false, 2) => Some(LevelFilter::Debug),
        (false, _) => Some(LevelFilter::Trace),
    }
}

/// The logger installed for the run.
struct Logger {
    filter: Filter,
    /// Hashes of the messages shown so far.
    shown: Mutex<HashSet<u64>>,
}

impl Logger {
    /// Whether `record` is new: shown for the first time.
    fn is_new(&self, record: &Record<'_>) -> bool {
        let mut hasher = DefaultHasher::new();
        record.level().hash(&mut hasher);
        record.target().hash(&mut hasher);
        record.args().to_string().hash(&mut hasher);
        let digest = hasher.finish();
        let mut shown = self
            .shown
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if shown.contains(&digest) {
            return false;
        }
        if shown.len() < REMEMBERED {
            shown.insert(digest);
        }
        true
    }
}

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= self.filter.level_of(metadata.target())
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) || !self.is_new(record) {
            return;
        }
        console::write_note(format_args!("{}", line(record)));
    }

    fn flush(&self) {}
}

/// How `record` is shown: `kiln: warning: ...`, as the command's own
/// messages are, with the module for debugging lines.
fn line(record: &Record<'_>) -> String {
    let level = match record.level() {
        Level::Error => "error",
        Level::Warn => "warning",
        Level::Info => "note",
        Level::Debug => "debug",
        Level::Trace => "trace",
    };
    let message = record.args().to_string();
    let message = without_prefix(&message);
    if record.level() >= Level::Debug {
        format!("kiln: {level}: {}: {message}", record.target())
    } else {
        format!("kiln: {level}: {message}")
    }
}

/// A library message without the `kiln: ` it starts with so that a
/// program's log tells it apart (`kiln store: ` becomes `store: `): this
/// command's own prefix says that already.
fn without_prefix(message: &str) -> &str {
    if let Some(rest) = message.strip_prefix("kiln: ") {
        return rest;
    }
    match message.strip_prefix("kiln ") {
        Some(rest)
            if rest
                .split_once(": ")
                .is_some_and(|(part, _)| part.ends_with("store")) =>
        {
            rest
        }
        _ => message,
    }
}

/// Installs the logger for the run: `KILN_LOG`'s filter, its level replaced
/// by the flags' when given. A directive of `KILN_LOG` that does not parse
/// is reported as a warning and left out.
pub fn install(verbose: u8, quiet: bool) {
    let (mut filter, problems) = match std::env::var("KILN_LOG") {
        Ok(text) => Filter::parse(&text),
        Err(_) => Filter::parse(""),
    };
    if let Some(level) = flag_level(verbose, quiet) {
        filter.default = level;
    }
    let most_detailed = filter.most_detailed();
    let logger = Logger {
        filter,
        shown: Mutex::new(HashSet::new()),
    };
    // Only `main` installs a logger, once, and it lives as long as the
    // process: leaking it is what a `'static` logger is.
    if log::set_logger(Box::leak(Box::new(logger))).is_ok() {
        log::set_max_level(most_detailed);
    }
    for directive in problems {
        log::warn!(
            "KILN_LOG: {directive:?} is not a directive: write a level (off, error, warn, info, \
             debug, trace) or module=level, such as kiln_store=debug"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_level_alone_sets_every_module_and_a_module_its_own_tree() {
        let (filter, problems) = Filter::parse("info, kiln_store=debug,kiln_store::disk=off");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(filter.level_of("kiln_cuda::target"), LevelFilter::Info);
        assert_eq!(filter.level_of("kiln_store"), LevelFilter::Debug);
        assert_eq!(
            filter.level_of("kiln_store::maintenance"),
            LevelFilter::Debug
        );
        assert_eq!(filter.level_of("kiln_store::disk::read"), LevelFilter::Off);
        assert_eq!(
            filter.level_of("kiln_storehouse"),
            LevelFilter::Info,
            "a module's name is matched whole"
        );
        assert_eq!(filter.most_detailed(), LevelFilter::Debug);
    }

    #[test]
    fn warnings_are_shown_by_default_and_a_bad_directive_is_named() {
        let (filter, problems) = Filter::parse("");
        assert_eq!(filter.default, LevelFilter::Warn);
        let (filter, problems_too) = Filter::parse("loud,kiln_store=,=debug");
        assert_eq!(filter.default, LevelFilter::Warn, "kept");
        assert!(problems.is_empty());
        assert_eq!(problems_too, ["loud", "kiln_store=", "=debug"]);
    }

    #[test]
    fn flags_choose_the_level() {
        assert_eq!(flag_level(0, false), None);
        assert_eq!(flag_level(0, true), Some(LevelFilter::Error));
        assert_eq!(flag_level(1, false), Some(LevelFilter::Info));
        assert_eq!(flag_level(2, false), Some(LevelFilter::Debug));
        assert_eq!(flag_level(5, false), Some(LevelFilter::Trace));
    }

    #[test]
    fn a_library_message_is_shown_with_one_kiln_prefix() {
        let line_of = |level, args: std::fmt::Arguments<'_>| {
            line(
                &Record::builder()
                    .level(level)
                    .target("kiln_store")
                    .args(args)
                    .build(),
            )
        };
        assert_eq!(
            line_of(
                Level::Warn,
                format_args!("kiln: the remote store answers again")
            ),
            "kiln: warning: the remote store answers again"
        );
        assert_eq!(
            line_of(Level::Warn, format_args!("kiln store: cannot remove x")),
            "kiln: warning: store: cannot remove x"
        );
        assert_eq!(
            line_of(Level::Error, format_args!("kilned: kept")),
            "kiln: error: kilned: kept"
        );
        assert_eq!(
            line_of(Level::Warn, format_args!("kiln warm: named")),
            "kiln: warning: kiln warm: named",
            "a command's name is kept"
        );
        assert_eq!(
            line_of(Level::Debug, format_args!("kiln: opened")),
            "kiln: debug: kiln_store: opened"
        );
    }

    #[test]
    fn a_message_is_shown_once() {
        let logger = Logger {
            filter: Filter::parse("").0,
            shown: Mutex::new(HashSet::new()),
        };
        let shown = |args: std::fmt::Arguments<'_>| {
            logger.is_new(
                &Record::builder()
                    .level(Level::Warn)
                    .target("kiln_store")
                    .args(args)
                    .build(),
            )
        };
        assert!(shown(format_args!("disk full")));
        assert!(!shown(format_args!("disk full")), "the same message again");
        assert!(shown(format_args!("quota exceeded")));
    }
}
