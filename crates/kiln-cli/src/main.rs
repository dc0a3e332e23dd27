//! `kiln`: fill the artifact store and look after it from the command line.
//!
//! Every subcommand is a module of [`command`], taking the opened store and
//! the output settings; adding one is a new module and one line in
//! [`Command`]. Every subcommand prints an aligned table for people, or
//! JSON with `--json`, and shows a progress bar on a terminal when it runs
//! for more than a moment.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod command;
mod format;
mod manifest;
mod progress;
mod table;

/// Inspect and maintain kiln's artifact store.
#[derive(Debug, Parser)]
#[command(name = "kiln", version, about)]
struct Cli {
    /// The store's folder; default: KILN_CACHE_DIR, else the platform's
    /// cache folder.
    #[arg(long, global = true, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

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
    /// Compile every kernel of a folder into the store, for every backend here.
    Warm(command::warm::Arguments),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let output = command::Output { json: cli.json };
    let result = command::open_store(cli.dir.as_deref()).and_then(|store| match cli.command {
        Command::Stats(arguments) => command::stats::run(&store, &arguments, &output),
        Command::Ls(arguments) => command::ls::run(&store, &arguments, &output),
        Command::Verify(arguments) => command::verify::run(&store, &arguments, &output),
        Command::Gc(arguments) => command::gc::run(&store, &arguments, &output),
        Command::Export(arguments) => command::export::run(&store, &arguments, &output),
        Command::Import(arguments) => command::import::run(&store, &arguments, &output),
        Command::Explain(arguments) => command::explain::run(&store, &arguments, &output),
        Command::Warm(arguments) => command::warm::run(&store, &arguments, &output),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("kiln: {error:#}");
            ExitCode::FAILURE
        }
    }
}
