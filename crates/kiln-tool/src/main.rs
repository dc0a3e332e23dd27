//! `kiln`: fill the artifact store and look after it from the command line.
//!
//! Every subcommand is a module of [`command`], taking the opened store and
//! the output settings; adding one is a new module and one line in
//! [`Command`]. Every subcommand prints an aligned table for people, or
//! JSON with `--json`, and shows a progress bar on a terminal when it runs
//! for more than a moment.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::{Parser, Subcommand};
use kiln_store::DiskStore;

mod backend;
mod command;
mod console;
mod exit;
mod format;
mod header;
mod health;
mod kernel;
mod logger;
mod manifest;
mod output;
mod progress;
mod remote;
mod shape;
mod table;

/// Inspect and maintain kiln's artifact store.
#[derive(Debug, Parser)]
#[command(name = "kiln", version, about, long_about = LONG_ABOUT, after_long_help = exit::TABLE)]
struct Cli {
    /// The store's folder; default: the platform's cache folder
    ///
    /// [env: KILN_CACHE_DIR]
    // The variable is read where the store's settings are (kiln-store's
    // `StoreConfig::from_env`), once: without `--dir`, a command works on
    // the configured store, which KILN_CACHE_DISABLE turns off; the line
    // above says so as clap's `env` would, without a second reader.
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        hide_short_help = true,
        help_heading = GLOBAL
    )]
    dir: Option<PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long, global = true, hide_short_help = true, help_heading = GLOBAL)]
    json: bool,
    /// Print tables at full width, with every compiler's whole version
    /// (default: the terminal's width, 100 columns when not a terminal).
    #[arg(long, global = true, hide_short_help = true, help_heading = GLOBAL)]
    wide: bool,
    /// Show more of what the library says on standard error: -v notes,
    /// -vv debugging lines, -vvv everything. Replaces KILN_LOG's level.
    #[arg(
        short,
        long,
        global = true,
        action = clap::ArgAction::Count,
        conflicts_with = "quiet",
        hide_short_help = true,
        help_heading = GLOBAL
    )]
    verbose: u8,
    /// Show only errors on standard error, no warnings.
    #[arg(short, long, global = true, hide_short_help = true, help_heading = GLOBAL)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

/// The heading of the options every subcommand takes, shown apart from
/// the subcommand's own, and with `--help` only: `-h` shows a command's
/// own options and names them in one line.
const GLOBAL: &str = "Global options";

/// The line `-h` ends with in place of the global options.
const GLOBAL_SHORT: &str =
    "Global options: --dir DIR, --json, --wide, -v, -q (--help describes them)";

/// What `kiln --help` says before the options; the exit codes follow them.
const LONG_ABOUT: &str = "\
Inspect and maintain kiln's artifact store, and fill it from a folder of kernels.

Logging: warnings go to standard error. KILN_LOG sets what is shown: a level
(off, error, warn, info, debug, trace) and module=level directives, such as
KILN_LOG=info,kiln_store=debug; -v, -vv, -vvv and -q replace its level.

With --json, every command prints one JSON value on standard output, an error
too: {\"error\": {\"message\": ..., \"exit_code\": ...}}; each command's
--help names what it prints.";

#[derive(Debug, Subcommand)]
enum Command {
    /// What the store holds and its limits.
    Stats(command::stats::Arguments),
    /// Every entry, one line each.
    Ls(command::ls::Arguments),
    /// Re-digest everything, remove what is bad, report.
    Verify(command::verify::Arguments),
    /// Evict least recently used entries down to the limits.
    Gc(command::gc::Arguments),
    /// Write the store's entries to one bundle file.
    Export(command::export::Arguments),
    /// Verify a bundle and add its entries to the store.
    Import(command::import::Arguments),
    /// Say why a kernel misses: what changed since the store last held it.
    Explain(command::explain::Arguments),
    /// Print a stored kernel's recipe and artifact (PTX, SASS, ISA, WGSL, SPIR-V); --raw: its bytes.
    Show(command::show::Arguments),
    /// Forget the failures the store remembers of a kernel, so it compiles again.
    Forget(command::forget::Arguments),
    /// The last batches of every process that used the store, and their slowest kernels.
    Records(command::records::Arguments),
    /// Make the keys of a fleet's shared remote tier.
    Keygen(command::keygen::Arguments),
    /// Copy the store's artifacts to the remote tier, signed.
    Push(remote::TransferArguments),
    /// Copy what the remote tier holds and the store lacks, verified.
    Pull(remote::TransferArguments),
    /// Compile every kernel of a folder into the store, for every backend here.
    Warm(command::warm::Arguments),
    /// The tuning answers the store keeps, and forgetting them.
    Tunes(command::tunes::Arguments),
    /// The warm-start profiles of programs the store keeps, and forgetting them.
    Profiles(command::profiles::Arguments),
    /// How much of what a program needs the store or a bundle holds.
    Coverage(command::coverage::Arguments),
    /// Write a job's manifest: the profiled kernels the store holds, for every rank.
    Manifest(command::job_manifest::Arguments),
}

fn main() {
    // Started again as a compile worker, this process serves NVRTC or
    // hipRTC compiles and exits here: a compiler that crashes, or exits
    // from inside (hipRTC does, when a temporary file passes the file size
    // limit), fails only the kernel it held, never the run.
    kiln_engine::worker::run_if_worker(&backend::worker_entries());
    ignore_file_size_signal();
    let cli = match parse() {
        Ok(parsed) => parsed,
        Err(error) => usage_error(&error),
    };
    logger::install(cli.verbose, cli.quiet);
    table::set_width((!cli.wide).then(table::terminal_width).flatten());
    let output = output::Output {
        json: cli.json,
        wide: cli.wide,
    };
    // Only `--dir` names a store to work on regardless; without it, the
    // store is the configured one (KILN_CACHE_DIR), which
    // KILN_CACHE_DISABLE turns off.
    let dir = cli.dir.as_deref();
    let result = match cli.command {
        Command::Stats(arguments) => with_existing_store(
            dir,
            |store| command::stats::run(store, &arguments, &output),
            |root| command::stats::run_without_store(root, &arguments, &output),
        ),
        Command::Ls(arguments) => with_existing_store(
            dir,
            |store| command::ls::run(store, &arguments, &output),
            |root| command::report_no_store(root, &output),
        ),
        Command::Verify(arguments) => with_store(dir, |store| {
            command::verify::run(store, &arguments, &output)
        }),
        Command::Gc(arguments) => {
            with_store(dir, |store| command::gc::run(store, &arguments, &output))
        }
        Command::Export(arguments) => with_store(dir, |store| {
            command::export::run(store, &arguments, &output)
        }),
        Command::Import(arguments) => with_store(dir, |store| {
            command::import::run(store, &arguments, &output)
        }),
        Command::Explain(arguments) => with_store(dir, |store| {
            command::explain::run(store, &arguments, &output)
        }),
        Command::Show(arguments) => {
            with_store(dir, |store| command::show::run(store, &arguments, &output))
        }
        Command::Forget(arguments) => with_store(dir, |store| {
            command::forget::run(store, &arguments, &output)
        }),
        Command::Records(arguments) => with_store(dir, |store| {
            command::records::run(store, &arguments, &output)
        }),
        Command::Keygen(arguments) => command::keygen::run(&arguments, &output),
        Command::Push(arguments) => {
            with_store(dir, |store| command::push::run(store, &arguments, &output))
        }
        Command::Pull(arguments) => {
            with_store(dir, |store| command::pull::run(store, &arguments, &output))
        }
        // Warming opens the store its own way: it fills it, and it runs
        // without one when the store cannot be written and holds nothing.
        Command::Warm(arguments) => command::warm::run(dir, &arguments, &output),
        Command::Tunes(arguments) => {
            with_store(dir, |store| command::tunes::run(store, &arguments, &output))
        }
        Command::Profiles(arguments) => with_store(dir, |store| {
            command::profiles::run(store, &arguments, &output)
        }),
        Command::Coverage(arguments) => with_store(dir, |store| {
            command::coverage::run(store, &arguments, &output)
        }),
        Command::Manifest(arguments) => with_store(dir, |store| {
            command::job_manifest::run(store, &arguments, &output)
        }),
    };
    let printed = console::finish();
    let status = match (result, printed) {
        (Ok(()), Ok(())) => exit::SUCCESS,
        // The output is cut short: that is said first, whatever else the
        // command had to say, and a JSON error after a cut report would be
        // no JSON either.
        (Err(error), Err(written)) => {
            console::errln!("kiln: writing the output: {written}");
            console::errln!("kiln: {}", message_of(&error));
            exit::ERROR
        }
        (Err(error), Ok(())) => {
            let code = exit::code_of(&error);
            let json = output.json && !exit::is_reported(&error);
            report_error(&message_of(&error), code, json);
            code
        }
        (Ok(()), Err(error)) => {
            console::errln!("kiln: writing the output: {error}");
            exit::ERROR
        }
    };
    end(status)
}

/// The command line.
fn parse() -> Result<Cli, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let mut command = Cli::command().after_help(GLOBAL_SHORT);
    let names: Vec<String> = command
        .get_subcommands()
        .map(|subcommand| subcommand.get_name().to_owned())
        .collect();
    for name in names {
        command = command.mut_subcommand(name, |subcommand| {
            subcommand.after_help(GLOBAL_SHORT).after_long_help("")
        });
    }
    let mut matches = command.try_get_matches()?;
    Cli::from_arg_matches_mut(&mut matches)
}

/// `error` and its causes, each after a colon, as `{:#}` writes them, but
/// a cause whose text the message before it already ends with is said
/// once: an error that shows its source (`cannot create the store folder
/// X: File exists (os error 17)`) is not followed by that source again.
fn message_of(error: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if message.ends_with(&text) {
            continue;
        }
        if !message.is_empty() {
            message.push_str(": ");
        }
        message.push_str(&text);
    }
    message
}

/// Says why the command failed: on standard error, and also as a JSON
/// object on standard output under `--json`, so a program reading the
/// output always reads one JSON value.
fn report_error(message: &str, code: i32, json: bool) {
    console::errln!("kiln: {message}");
    if json {
        let error = serde_json::json!({ "error": { "message": message, "exit_code": code } });
        console::outln!("{error:#}");
        // A failure to write it is the end of the output either way.
        let _ = console::finish();
    }
}

/// Ends a command line that does not parse: help and the version are
/// printed as asked (exit 0); anything else is a usage error (exit 2),
/// as JSON too when `--json` was among the arguments.
fn usage_error(error: &clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    ) {
        let _ = error.print();
        end(exit::SUCCESS)
    }
    let json = std::env::args_os().any(|argument| argument == "--json");
    if json {
        let message = error.render().to_string();
        let first = message.lines().next().unwrap_or_default();
        let first = first.strip_prefix("error: ").unwrap_or(first);
        let value = serde_json::json!({ "error": { "message": first, "exit_code": exit::USAGE } });
        console::outln!("{value:#}");
        let _ = console::finish();
    }
    let _ = error.print();
    end(exit::USAGE)
}

/// Ends the process with `status` once everything is said and stored,
/// without the C library's exit handlers: a Vulkan driver's teardown at
/// exit has crashed a finished run (lavapipe, about one run in twenty-five
/// of `kiln warm` on a read-only store: SIGSEGV after the report was
/// printed), which would turn a run that did all its work into a failure.
/// Every file kiln writes is whole before this point (published by rename,
/// synced where durable), standard output was flushed by
/// `console::finish`, and standard error is not buffered.
fn end(status: i32) -> ! {
    // SAFETY: `_exit` ends the process at once; nothing in this process
    // relies on an exit handler or a destructor running after this point.
    unsafe { libc::_exit(status) }
}

/// Runs `command` on the store at `dir` (else the configured one).
fn with_store(dir: Option<&Path>, command: impl FnOnce(&DiskStore) -> Result<()>) -> Result<()> {
    command(&command::open_store(dir)?)
}

/// Runs `command` on the store at `dir` (else the configured one) when
/// there is one; else `without` with where it would be, creating nothing.
fn with_existing_store(
    dir: Option<&Path>,
    command: impl FnOnce(&DiskStore) -> Result<()>,
    without: impl FnOnce(&Path) -> Result<()>,
) -> Result<()> {
    match command::open_existing_store(dir)? {
        Some(store) => command(&store),
        None => without(&command::store_root(dir)?),
    }
}

/// Turns the file size limit (`ulimit -f`) from a signal that kills the
/// process into a write error: a store write over the limit then fails
/// alone and is counted like any failed write (P5), and the run ends as it
/// would have, with its report.
fn ignore_file_size_signal() {
    // SAFETY: called first thing in `main`, before any other thread
    // exists, and `SIG_IGN` runs no code in the handler: no other part of
    // the process relies on SIGXFSZ's default action.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}
