//! The command's logger: what the library says (a damaged entry removed and
//! compiled again, a write that failed, a fall-back to threads) shown on
//! standard error.
//!
//! What is shown is chosen by env_logger's filter, read from `KILN_LOG`
//! (the directives `RUST_LOG` takes: `info`, `kiln_store=debug`,
//! `info,kiln_store::disk=off`; the longest module that matches wins), and
//! by the `-v`/`-q` flags: `-q` shows errors only, `-v` adds notes
//! (`info`), `-vv` debugging lines and `-vvv` everything; a flag replaces
//! `KILN_LOG`'s level alone, and its module directives still apply.
//! Without either, warnings and errors are shown. A directive that does
//! not parse is left out with a warning, so a typo costs a line, never the
//! run.
//!
//! On top of env_logger's filter, two things it does not do: each distinct
//! message is shown once per run (a full disk fails every write of a
//! batch, and one line says it), and lines go through
//! [`console::write_note`], which clears a progress bar's line first, with
//! one `kiln: ` prefix.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use log::{Level, LevelFilter, Log, Metadata, Record};

use crate::console;

/// How many distinct messages are remembered to be shown once; past it,
/// messages are shown without being remembered, so a run that logs without
/// end keeps a bounded set.
const REMEMBERED: usize = 4096;

/// The modules of the graphics stack under the wgpu backend, whose lines
/// are shown from `-vv` on (or when `KILN_LOG` names them).
const GRAPHICS_STACK: [&str; 4] = ["wgpu_hal", "wgpu_core", "wgpu", "naga"];

/// `KILN_LOG`'s `text` split into the directives env_logger takes and
/// those it would refuse (a level that is no level, an empty module),
/// named so the run can warn of them. A `/filter` suffix is kept.
pub fn checked_directives(text: &str) -> (String, Vec<String>) {
    let (directives, message_filter) = match text.split_once('/') {
        Some((directives, filter)) => (directives, Some(filter)),
        None => (text, None),
    };
    let is_module = |name: &str| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':' || c == '-')
    };
    let mut accepted = Vec::new();
    let mut refused = Vec::new();
    for directive in directives
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
    {
        let fine = match directive.split_once('=') {
            Some((module, level)) => {
                is_module(module.trim()) && level.trim().parse::<LevelFilter>().is_ok()
            }
            None => directive.parse::<LevelFilter>().is_ok() || is_module(directive),
        };
        if fine {
            accepted.push(directive);
        } else {
            refused.push(directive.to_owned());
        }
    }
    let mut accepted = accepted.join(",");
    if let Some(filter) = message_filter {
        accepted.push('/');
        accepted.push_str(filter);
    }
    (accepted, refused)
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
    /// env_logger's, used for its filter only: the lines are written here.
    filter: env_logger::Logger,
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
        self.filter.enabled(metadata)
    }

    fn log(&self, record: &Record<'_>) {
        if !self.filter.matches(record) || !self.is_new(record) {
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
    // Another crate's line names it, so it is not read as kiln's own.
    if record.level() >= Level::Debug {
        // A debugging line says when, from the logger's start, so that a
        // slow start can be read off the lines around it.
        match STARTED.get() {
            Some(started) => format!(
                "kiln: {level}: {}: [{:.3} ms] {message}",
                record.target(),
                started.elapsed().as_secs_f64() * 1e3
            ),
            None => format!("kiln: {level}: {}: {message}", record.target()),
        }
    } else if !record.target().starts_with("kiln") {
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

/// The filter `KILN_LOG`'s `text` (`None`: unset) and the flags ask
/// for, and the directives of `text` left out.
fn filter(text: Option<&str>, verbose: u8, quiet: bool) -> (env_logger::Logger, Vec<String>) {
    let mut builder = env_logger::Builder::new();
    builder.filter_level(LevelFilter::Warn);
    // Below -vv, what the graphics stack says as it looks for a device is
    // not shown: a machine without a Vulkan driver is no error of the run
    // (`kiln warm` says the backend is unavailable, and why), and its
    // loader's lines would read as kiln's. KILN_LOG may name them.
    if flag_level(verbose, quiet).is_none_or(|level| level < LevelFilter::Debug) {
        for module in GRAPHICS_STACK {
            builder.filter_module(module, LevelFilter::Off);
        }
    }
    let (accepted, refused) = checked_directives(text.unwrap_or_default());
    builder.parse_filters(&accepted);
    if let Some(level) = flag_level(verbose, quiet) {
        builder.filter_level(level);
    }
    (builder.build(), refused)
}

/// When the logger was installed: the origin of the debugging lines' times.
static STARTED: OnceLock<Instant> = OnceLock::new();

/// Installs the logger for the run: `KILN_LOG`'s filter, its level replaced
/// by the flags' when given. A directive of `KILN_LOG` that does not parse
/// is reported as a warning and left out.
pub fn install(verbose: u8, quiet: bool) {
    STARTED.get_or_init(Instant::now);
    let text = std::env::var("KILN_LOG").ok();
    let (filter, problems) = filter(text.as_deref(), verbose, quiet);
    let most_detailed = filter.filter();
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
             debug, trace), a module, or module=level, such as kiln_store=debug"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `filter` shows a `level` line of `target`.
    fn shows(filter: &env_logger::Logger, level: Level, target: &str) -> bool {
        filter.enabled(&Metadata::builder().level(level).target(target).build())
    }

    #[test]
    fn a_level_alone_sets_every_module_and_a_module_its_own_tree() {
        let (modules, problems) = filter(
            Some("info, kiln_store=debug,kiln_store::disk=off"),
            0,
            false,
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert!(shows(&modules, Level::Info, "kiln_cuda::target"));
        assert!(!shows(&modules, Level::Debug, "kiln_cuda::target"));
        assert!(shows(&modules, Level::Debug, "kiln_store"));
        assert!(shows(&modules, Level::Debug, "kiln_store::maintenance"));
        assert!(!shows(&modules, Level::Error, "kiln_store::disk::read"));
        assert_eq!(modules.filter(), LevelFilter::Debug);
    }

    #[test]
    fn warnings_are_shown_by_default_and_a_bad_directive_is_named() {
        let (default, problems) = filter(None, 0, false);
        assert!(problems.is_empty());
        assert!(shows(&default, Level::Warn, "kiln_store"));
        assert!(!shows(&default, Level::Info, "kiln_store"));
        let (kept, problems) = filter(Some("kiln_store=loud,=debug,a b"), 0, false);
        assert_eq!(problems, ["kiln_store=loud", "=debug", "a b"]);
        assert!(shows(&kept, Level::Warn, "kiln_cuda"), "warnings kept");
        assert!(!shows(&kept, Level::Info, "kiln_cuda"));
    }

    #[test]
    fn a_flag_replaces_the_level_and_keeps_the_modules() {
        let (verbose, _) = filter(Some("error,kiln_store=debug"), 1, false);
        assert!(shows(&verbose, Level::Info, "kiln_cuda"), "-v: notes");
        assert!(shows(&verbose, Level::Debug, "kiln_store"), "kept");
        let (quiet, _) = filter(Some("info"), 0, true);
        assert!(!shows(&quiet, Level::Warn, "kiln_cuda"));
        assert!(shows(&quiet, Level::Error, "kiln_cuda"));
    }

    #[test]
    fn the_graphics_stack_is_heard_from_vv_on_or_when_named() {
        let (default, _) = filter(None, 0, false);
        assert!(!shows(&default, Level::Error, "wgpu_hal::vulkan::instance"));
        assert!(shows(&default, Level::Warn, "kiln_wgpu::target"));
        let (verbose, _) = filter(None, 1, false);
        assert!(!shows(&verbose, Level::Error, "wgpu_hal"));
        let (debug, _) = filter(None, 2, false);
        assert!(shows(&debug, Level::Debug, "wgpu_hal::vulkan"));
        let (named, _) = filter(Some("wgpu_hal=warn"), 0, false);
        assert!(shows(&named, Level::Error, "wgpu_hal::vulkan"));
        let shown = line(
            &Record::builder()
                .level(Level::Error)
                .target("wgpu_hal::vulkan::instance")
                .args(format_args!("Found no drivers!"))
                .build(),
        );
        assert_eq!(
            shown,
            "kiln: error: wgpu_hal::vulkan::instance: Found no drivers!"
        );
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
            filter: filter(None, 0, false).0,
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
