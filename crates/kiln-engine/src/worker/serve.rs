//! The worker's side: the compilers a worker can serve, and serving one:
//! rebuild the compiler from its recipe, then finalize whatever the loader
//! sends until it closes the pipe.

use std::fs::File;
use std::io::{self, BufReader, BufWriter};
use std::panic::AssertUnwindSafe;
use std::time::Instant;

use super::protocol::{self, Outcome, PROTOCOL, Reply, Request};
use crate::compiler::{ArtifactCompiler, Finalized, ProcessCompiler};
use crate::diagnostic::CompileFailure;
use crate::id::ArtifactId;
use crate::panic::panic_message;

/// A compiler rebuilt in the worker, finalizing encoded requests.
pub(crate) trait Finalizer {
    /// Finalizes the encoded `id` and `lowered` form.
    fn finalize(&self, id: &[u8], lowered: &[u8]) -> Outcome;
}

struct Typed<C>(C);

impl<C: ProcessCompiler> Finalizer for Typed<C> {
    fn finalize(&self, id: &[u8], lowered: &[u8]) -> Outcome {
        let request = protocol::decode::<ArtifactId<C::Variant>>(id).and_then(|id| {
            protocol::decode::<<C as ArtifactCompiler>::Lowered>(lowered)
                .map(|lowered| (id, lowered))
        });
        let (id, lowered) = match request {
            Ok(request) => request,
            Err(error) => {
                return Outcome::Failed(CompileFailure::message(format!(
                    "the worker could not read the request: {error}"
                )));
            }
        };
        match std::panic::catch_unwind(AssertUnwindSafe(|| self.0.finalize(&id, lowered))) {
            Ok(Ok(Finalized {
                artifact,
                diagnostics,
            })) => match protocol::encode(&artifact) {
                Ok(artifact) => Outcome::Built {
                    artifact,
                    diagnostics,
                },
                Err(error) => Outcome::Failed(CompileFailure::message(format!(
                    "the worker could not encode the artifact: {error}"
                ))),
            },
            Ok(Err(failure)) => Outcome::Failed(failure),
            Err(payload) => Outcome::Panicked(panic_message(payload)),
        }
    }
}

/// [`WorkerEntry::start`] of `C`.
fn start<C: ProcessCompiler>(recipe: &[u8]) -> Result<Box<dyn Finalizer>, String> {
    let recipe = protocol::decode::<C::Recipe>(recipe)
        .map_err(|error| format!("the recipe of {} does not decode: {error}", C::NAME))?;
    let compiler = C::from_recipe(recipe)?;
    compiler.warm_up();
    Ok(Box::new(Typed(compiler)))
}

/// A compiler a worker can serve, for
/// [`run_if_worker`](super::run_if_worker)'s list.
#[derive(Clone, Copy)]
pub struct WorkerEntry {
    compiler: &'static str,
    start: StartWorker,
}

/// Builds a compiler from its encoded recipe, in the worker.
type StartWorker = fn(&[u8]) -> Result<Box<dyn Finalizer>, String>;

impl WorkerEntry {
    /// The name of the compiler it serves.
    pub fn compiler(&self) -> &'static str {
        self.compiler
    }
}

impl std::fmt::Debug for WorkerEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerEntry")
            .field("compiler", &self.compiler)
            .finish_non_exhaustive()
    }
}

/// The entry that lets a worker serve compiler `C`.
pub fn entry<C: ProcessCompiler>() -> WorkerEntry {
    WorkerEntry {
        compiler: C::NAME,
        start: start::<C>,
    }
}

/// Serves the loader on this process's standard input and output; returns
/// the process's exit code.
pub(crate) fn serve(protocol: &str, entries: &[WorkerEntry]) -> i32 {
    let entries = served(entries);
    let (input, output) = match channel() {
        Ok(channel) => channel,
        Err(error) => {
            eprintln!("kiln worker: cannot set up its pipes: {error}");
            return 70;
        }
    };
    let mut input = BufReader::new(input);
    let mut output = BufWriter::new(output);
    let result = (|| -> io::Result<()> {
        let (asked, compiler, recipe) = match protocol::read_frame(&mut input)? {
            Some(Request::Start {
                protocol,
                compiler,
                recipe,
            }) => (protocol, compiler, recipe),
            // The loader's process ended before it asked anything (one
            // that needed no compile exits while its early workers still
            // start): nothing to answer, nothing to say.
            None => return Ok(()),
            Some(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the first request was not Start",
                ));
            }
        };
        let started = if asked != PROTOCOL || protocol != PROTOCOL {
            Err(format!(
                "the worker speaks {PROTOCOL} and the loader {asked}: build both from one kiln"
            ))
        } else {
            match entries.iter().find(|entry| entry.compiler == compiler) {
                Some(entry) => std::panic::catch_unwind(|| (entry.start)(&recipe))
                    .unwrap_or_else(|_| Err(format!("building {compiler} panicked"))),
                None => Err(format!(
                    "this program's worker hook does not serve {compiler}: it serves {}; add \
                     {compiler}'s worker entry to run_if_worker",
                    entries
                        .iter()
                        .map(|entry| entry.compiler)
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            }
        };
        let finalizer = match started {
            Ok(finalizer) => {
                protocol::write_frame(&mut output, &Reply::Started)?;
                finalizer
            }
            Err(reason) => {
                return protocol::write_frame(&mut output, &Reply::Refused { reason });
            }
        };
        while let Some(request) = protocol::read_frame::<Request>(&mut input)? {
            let Request::Finalize { id, lowered } = request else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a second Start request",
                ));
            };
            let began = Instant::now();
            let outcome = finalizer.finalize(&id, &lowered);
            let reply = Reply::Finalized {
                outcome,
                work: began.elapsed(),
            };
            protocol::write_frame(&mut output, &reply)?;
        }
        Ok(())
    })();
    match result {
        Ok(()) => 0,
        // The loader went away mid-frame: nothing is left to answer.
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => 0,
        Err(error) => {
            eprintln!("kiln worker {}: {error}", std::process::id());
            70
        }
    }
}

/// The compilers a worker serves: the program's and, with the `testing`
/// feature, the fake one, so that the tests of any crate can finalize fake
/// kernels in worker processes. A production worker serves only what its
/// program listed.
fn served(entries: &[WorkerEntry]) -> Vec<WorkerEntry> {
    #[allow(unused_mut, reason = "only the testing feature adds an entry")]
    let mut served = entries.to_vec();
    #[cfg(feature = "testing")]
    served.push(entry::<crate::fake::FakeCompiler>());
    served
}

/// The request pipe (standard input) and the reply pipe: standard output,
/// moved to a descriptor of its own, with standard output itself pointed at
/// standard error so that nothing the compiler prints lands in a frame.
#[cfg(unix)]
fn channel() -> io::Result<(File, File)> {
    use std::os::fd::AsFd;
    let input = io::stdin().as_fd().try_clone_to_owned()?;
    let output = io::stdout().as_fd().try_clone_to_owned()?;
    // SAFETY: descriptors 1 and 2 are open (the loader gave this process
    // both); dup2 makes 1 another name of 2 and touches no Rust-owned value.
    if unsafe { libc::dup2(2, 1) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((File::from(input), File::from(output)))
}

#[cfg(not(unix))]
fn channel() -> io::Result<(File, File)> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "compile workers run on unix only",
    ))
}
