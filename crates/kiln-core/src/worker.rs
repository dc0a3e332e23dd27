//! Compile worker processes: finalizing kernels in other processes, for
//! compilers that do not scale inside one (NVRTC locks internally; hipRTC
//! runs one compile at a time) or that can take their process down (hipRTC
//! aborts on an unsupported target).
//!
//! # How a program provides its workers
//!
//! A worker is the program itself, started again: the first line of `main`
//! calls [`run_if_worker`] with the compilers the program uses.
//!
//! ```no_run
//! fn main() {
//!     // In a worker this serves compile requests and never returns; in the
//!     // program itself it returns at once and tells kiln it may start workers.
//!     kiln_core::worker::run_if_worker(&[/* kiln_cuda::worker_entry(), ... */]);
//!     // ... the program, whose loaders now finalize in worker processes.
//! }
//! ```
//!
//! So a program, a benchmark or a test binary with its own `main`
//! (`harness = false`) needs no second binary. Where kiln looks for the
//! program to start, in order:
//!
//! 1. `KILN_WORKER_PROGRAM`: a program (any program whose `main` starts with
//!    [`run_if_worker`]) to start as the worker, for a program that cannot
//!    call the hook itself, such as a libtest test binary.
//! 2. The running program, when its `main` called [`run_if_worker`].
//! 3. None: the loader finalizes on threads of its own process, and logs a
//!    warning once, naming both ways to get workers.
//!
//! `KILN_WORKER_MODE=threads` keeps every loader on threads;
//! [`KernelLoader::with_worker_mode`](crate::KernelLoader::with_worker_mode)
//! chooses for one loader. A process that is itself a worker never starts
//! workers.
//!
//! # What runs where
//!
//! Lowering (the kernel's generator, user code) stays on the loader's
//! worker threads, and so does everything that touches the store or the
//! device. Only [`finalize`](crate::ArtifactCompiler::finalize) crosses: the
//! thread that lowered a kernel hands its lowered form to an idle worker
//! process and waits for the artifact, so the batch's scheduling — each
//! worker taking the next kernel when it finishes one — is unchanged. A
//! compiler crosses as a [`ProcessCompiler::Recipe`]: serializable data from
//! which the worker rebuilds an equal compiler, dispatched on
//! [`ProcessCompiler::NAME`].
//!
//! # The pool
//!
//! One pool per loader, started lazily (a worker starts when a batch first
//! needs one more), kept warm between batches, at most `parallelism`
//! processes (the machine's cores by default), and shut down with the
//! loader: each worker exits when its request pipe closes.
//!
//! # Framing
//!
//! Requests go down the worker's standard input and replies come up its
//! standard output, each a frame: a little-endian `u32` length, then the
//! message in bincode's standard encoding of serde data. The worker moves
//! its standard output aside before serving, so whatever the compiler prints
//! goes to standard error instead of into the frames; the worker's standard
//! error is the program's. The first request names the protocol, the
//! compiler and its recipe; the worker answers `Started` or `Refused` with a
//! reason (an unknown compiler, another compiler version), and a refusal
//! sends the loader back to threads with a warning.
//!
//! # Crashes
//!
//! A worker that dies while finalizing fails only the kernel it held: its
//! error says the compiler crashed and names the signal (`SIGABRT`,
//! `SIGSEGV`, ...) or the exit status. The dead worker is replaced at once,
//! and the rest of the batch goes on. A panic inside the worker's compiler
//! is caught there and comes back as that kernel's panic (L8).

#![allow(
    clippy::needless_doctest_main,
    reason = "the hook belongs on the first line of main, which the example shows"
)]

mod processes;
mod protocol;
mod serve;

use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::target::ArtifactCompiler;

pub use processes::WorkerProcesses;
pub(crate) use processes::{ProcessPool, WorkerLost};
pub(crate) use protocol::{Outcome, decode, encode};

/// The variable naming a program to start as the worker.
pub const WORKER_PROGRAM_VARIABLE: &str = "KILN_WORKER_PROGRAM";

/// The variable choosing `threads` or `processes` for every loader.
pub const WORKER_MODE_VARIABLE: &str = "KILN_WORKER_MODE";

/// Set on a worker process: the protocol its parent speaks.
pub(crate) const WORKER_CHANNEL_VARIABLE: &str = "KILN_WORKER_CHANNEL";

/// Whether this program's `main` called [`run_if_worker`], so that starting
/// it again makes a worker.
static HOOK_CALLED: AtomicBool = AtomicBool::new(false);

/// A compiler that can be rebuilt in a worker process from plain data.
///
/// # Contract
///
/// `from_recipe(compiler.recipe())` finalizes exactly as `compiler` does:
/// same compiler version, same options, so that an artifact built in a
/// worker is interchangeable with one built in the loader's process. A
/// worker that cannot honour that (it finds another compiler version, say)
/// returns an error, and the loader stays on its own threads.
pub trait ProcessCompiler: ArtifactCompiler + Sized + 'static {
    /// The name workers dispatch on: unique among the compilers of a
    /// program, stable across builds (`"kiln-cuda"`).
    const NAME: &'static str;
    /// What a worker rebuilds the compiler from.
    type Recipe: Serialize + DeserializeOwned;

    /// This compiler as a recipe.
    fn recipe(&self) -> Self::Recipe;

    /// The compiler a recipe describes, in the worker.
    ///
    /// # Errors
    ///
    /// The worker cannot build an equal compiler: the library is missing, or
    /// of another version than the recipe names.
    fn from_recipe(recipe: Self::Recipe) -> Result<Self, String>;
}

/// A compiler's name and recipe, encoded: what a loader sends to start a
/// worker. A compiler that can finalize in worker processes returns one from
/// [`ArtifactCompiler::worker_recipe`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerRecipe {
    compiler: &'static str,
    recipe: Vec<u8>,
}

impl WorkerRecipe {
    /// The recipe of `compiler`.
    ///
    /// # Panics
    ///
    /// The recipe does not serialize, which a recipe made of plain data
    /// never fails to.
    pub fn of<C: ProcessCompiler>(compiler: &C) -> Self {
        Self {
            compiler: C::NAME,
            recipe: protocol::encode(&compiler.recipe())
                .expect("a compiler recipe is plain data that serializes"),
        }
    }

    /// The name the worker dispatches on.
    pub fn compiler(&self) -> &'static str {
        self.compiler
    }
}

/// A compiler a worker can serve, for [`run_if_worker`]'s list.
#[derive(Clone, Copy)]
pub struct WorkerEntry {
    compiler: &'static str,
    start: StartWorker,
}

/// Builds a compiler from its encoded recipe, in the worker.
type StartWorker = fn(&[u8]) -> Result<Box<dyn serve::Finalizer>, String>;

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
        start: serve::start::<C>,
    }
}

/// The hook at the top of `main`: in a worker process, serves compile
/// requests for the compilers of `entries` (and the fake compiler, always)
/// until the loader that started it goes away, then exits the process; in
/// any other process, returns at once and lets this process's loaders start
/// it again as their workers.
pub fn run_if_worker(entries: &[WorkerEntry]) {
    match std::env::var(WORKER_CHANNEL_VARIABLE) {
        Ok(protocol) => std::process::exit(serve::serve(&protocol, entries)),
        Err(_) => HOOK_CALLED.store(true, Ordering::Release),
    }
}

/// Whether this process is a worker (its loaders never start workers).
pub(crate) fn is_worker_process() -> bool {
    std::env::var_os(WORKER_CHANNEL_VARIABLE).is_some()
}

/// The program to start as a worker, or why there is none.
pub(crate) fn worker_program() -> Result<std::path::PathBuf, String> {
    if let Some(program) = std::env::var_os(WORKER_PROGRAM_VARIABLE)
        && !program.is_empty()
    {
        return Ok(program.into());
    }
    if HOOK_CALLED.load(Ordering::Acquire) {
        return std::env::current_exe()
            .map_err(|error| format!("this program cannot find its own executable: {error}"));
    }
    Err(format!(
        "no worker program: call kiln_core::worker::run_if_worker(...) as the first line of \
         main, or set {WORKER_PROGRAM_VARIABLE} to a program that does"
    ))
}
