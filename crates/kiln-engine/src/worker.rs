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
//!     kiln_engine::worker::run_if_worker(&[/* kiln_cuda::worker_entry(), ... */]);
//!     // ... the program, whose loaders now finalize in worker processes.
//! }
//! ```
//!
//! So a program, a benchmark or a test binary with its own `main`
//! (`harness = false`) needs no second binary; a program without the hook
//! uses `kiln-worker`. Where kiln looks for the
//! program to start, in order:
//!
//! 1. `KILN_WORKER_PROGRAM`: a program (any program whose `main` starts with
//!    [`run_if_worker`]) to start as the worker, for a program that cannot
//!    call the hook itself, such as a libtest test binary.
//! 2. The running program, when its `main` called [`run_if_worker`].
//! 3. kiln's own worker program, `kiln-worker` (installed with the `kiln`
//!    command by `cargo install kiln-tool`), beside the running program,
//!    then on `PATH`, when `kiln-worker --version` says it is of this very
//!    kiln ([`version_line`]): it serves the CUDA and HIP compilers.
//! 4. None: the loader finalizes on threads of its own process, and warns
//!    once per process (through `log`, or on standard error without a
//!    logger), naming every way to get workers.
//!
//! `KILN_WORKER_MODE=threads` keeps on threads every loader that reads its
//! settings from the environment
//! ([`LoaderConfig::worker_mode`](crate::LoaderConfig::worker_mode));
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
//!
//! A lost worker is held against its kernel's failure memory (P11) only
//! when nothing outside the compile explains it: a signal from outside
//! (the out-of-memory killer's `SIGKILL`, `SIGXCPU`, `SIGXFSZ`), a file
//! size or memory limit on the process, a machine short of memory or
//! overloaded, a timeout below [`TIMEOUT_FLOOR`], or another worker lost
//! at the same time rule the kernel out; the kernel's error then says so.
//!
//! # Temporary files
//!
//! Each worker gets a private temporary folder (`TMPDIR`, `TMP` and
//! `TEMP` name it), made when it starts and removed when it ends, however
//! it ends: a compiler killed at the timeout or with its worker leaves no
//! temporary files behind.

#![allow(
    clippy::needless_doctest_main,
    reason = "the hook belongs on the first line of main, which the example shows"
)]

mod exit;
mod pool;
mod prestart;
mod process;
mod program;
mod protocol;
mod reply;
mod serve;
mod temporary;
mod wording;

use std::sync::atomic::{AtomicBool, Ordering};

pub use crate::compiler::{ProcessCompiler, WorkerRecipe};

pub(crate) use exit::Blame;
pub use exit::{LOW_MEMORY_PART, OVERLOAD, TIMEOUT_FLOOR};
pub use pool::WorkerProcesses;
pub(crate) use pool::{ProcessPool, WorkerLost};
pub(crate) use program::worker_program;
pub use program::{WORKER_PROGRAM_NAME, version_line};
pub(crate) use protocol::{Outcome, decode};
pub use serve::{WorkerEntry, entry};

/// The variable naming a program to start as the worker.
pub const WORKER_PROGRAM_VARIABLE: &str = "KILN_WORKER_PROGRAM";

/// Set on a worker process: the protocol its parent speaks.
pub(crate) const WORKER_CHANNEL_VARIABLE: &str = "KILN_WORKER_CHANNEL";

/// Whether this program's `main` called [`run_if_worker`], so that starting
/// it again makes a worker.
static HOOK_CALLED: AtomicBool = AtomicBool::new(false);

/// The hook at the top of `main`: in a worker process, serves compile
/// requests for the compilers of `entries` (and, with kiln-engine's `testing`
/// feature, the fake compiler) until the loader that started it goes away,
/// then exits the process; in any other process, returns at once and lets
/// this process's loaders start it again as their workers.
pub fn run_if_worker(entries: &[WorkerEntry]) {
    match std::env::var(WORKER_CHANNEL_VARIABLE) {
        Ok(protocol) => {
            let status = serve::serve(&protocol, entries);
            // Its loader went away: nobody else removes its folder then.
            temporary::remove_own();
            std::process::exit(status)
        }
        Err(_) => HOOK_CALLED.store(true, Ordering::Release),
    }
}

/// Starts `count` compile workers for the compiler of `recipe` in the
/// background, now, so that the first batch that needs them finds them
/// started (F5): a program calls it where the compiler is known and before
/// its slow start-up work, such as making the device context. A loader set
/// to worker processes calls it when it is made; calling it again asks for
/// no more than `count` in all. Does nothing in a worker process, under
/// `KILN_WORKER_MODE=threads`, or when the program provides no worker (the
/// loader says why at its first batch). Workers no batch took are closed
/// at the end of the first batch that compiled nothing in processes.
///
/// ```no_run
/// # fn compiler_recipe() -> kiln_engine::worker::WorkerRecipe { unimplemented!() }
/// // Before the device context is made: the workers start beside it.
/// kiln_engine::worker::start_early(compiler_recipe(), 16);
/// ```
pub fn start_early(recipe: WorkerRecipe, count: usize) {
    if is_worker_process()
        || std::env::var(crate::config::WORKER_MODE_VARIABLE)
            .is_ok_and(|mode| mode.trim() == "threads")
    {
        return;
    }
    if let Ok(program) = worker_program() {
        prestart::prestart(program, recipe, count);
    }
}

/// Closes the workers [`start_early`] started for `recipe` that no pool
/// took.
pub(crate) fn release_early(recipe: &WorkerRecipe) {
    prestart::release_prestarted(recipe);
}

/// Whether this process is a worker (its loaders never start workers).
pub(crate) fn is_worker_process() -> bool {
    std::env::var_os(WORKER_CHANNEL_VARIABLE).is_some()
}
