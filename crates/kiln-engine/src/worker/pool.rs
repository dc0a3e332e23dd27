//! The loader's side: a pool of worker processes for one compiler recipe,
//! each checked out for one finalize and given back, or replaced when it
//! is lost.

use std::collections::BTreeSet;
use std::io;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::WorkerRecipe;
use super::exit::{self, Blame, Headroom};
use super::prestart::take_prestarted;
use super::process::{Closed, EXIT_GRACE, WorkerProcess, wait_within};
use super::protocol::{Outcome, Reply, Request};
use super::wording::{crash_message, with_blame};

/// Why a kernel sent to a worker came back without an outcome.
#[derive(Debug)]
pub(crate) enum WorkerLost {
    /// No worker could be started: finalize in this process instead.
    Unavailable,
    /// The worker died while it held the kernel, or its compile passed the
    /// timeout and it was killed: what happened, and whose doing it is
    /// (P11).
    Lost {
        /// What happened, for the kernel's error.
        message: String,
        /// Whether nothing outside the compile explains it.
        blame: Blame,
    },
}

/// The worker processes of one loader, for one compiler recipe.
pub(crate) struct ProcessPool {
    program: PathBuf,
    recipe: WorkerRecipe,
    /// How long one finalize may take before its worker is killed.
    timeout: Duration,
    idle: Mutex<Vec<WorkerProcess>>,
    state: Mutex<PoolState>,
}

#[derive(Debug, Default)]
struct PoolState {
    /// Process ids of the workers alive, idle or busy.
    live: BTreeSet<u32>,
    started: usize,
    replaced: usize,
    /// Set once a worker could not start: the pool is not used again.
    unavailable: Option<String>,
    /// When each worker was lost, the last few: a loss while another
    /// compile was under way is not held against its kernel (P11).
    losses: Vec<Instant>,
}

/// How many losses a pool remembers the time of.
const LOSSES_KEPT: usize = 16;

impl PoolState {
    /// Notes a loss now; whether another worker was lost since `began`.
    fn lost_since(&mut self, began: Instant) -> bool {
        let another = self.losses.iter().any(|&lost| lost >= began);
        if self.losses.len() >= LOSSES_KEPT {
            self.losses.remove(0);
        }
        self.losses.push(Instant::now());
        another
    }
}

/// A snapshot of a loader's worker processes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerProcesses {
    /// The program started as the worker, once a pool exists.
    pub program: Option<PathBuf>,
    /// The compiler the workers serve.
    pub compiler: Option<&'static str>,
    /// Process ids of the workers alive now.
    pub running: Vec<u32>,
    /// Workers started since the pool began, replacements included.
    pub started: usize,
    /// Workers that died while compiling and were replaced.
    pub replaced: usize,
    /// Why the loader finalizes on threads instead, when a worker could not
    /// start.
    pub unavailable: Option<String>,
}

impl ProcessPool {
    pub(crate) fn new(program: PathBuf, recipe: WorkerRecipe, timeout: Duration) -> Self {
        Self {
            program,
            recipe,
            timeout,
            idle: Mutex::default(),
            state: Mutex::default(),
        }
    }

    pub(crate) fn recipe(&self) -> &WorkerRecipe {
        &self.recipe
    }

    /// Whether a worker failed to start, so the loader uses threads.
    pub(crate) fn is_unavailable(&self) -> bool {
        self.state().unavailable.is_some()
    }

    pub(crate) fn snapshot(&self) -> WorkerProcesses {
        let state = self.state();
        WorkerProcesses {
            program: Some(self.program.clone()),
            compiler: Some(self.recipe.compiler),
            running: state.live.iter().copied().collect(),
            started: state.started,
            replaced: state.replaced,
            unavailable: state.unavailable.clone(),
        }
    }

    /// Finalizes the encoded kernel on an idle worker (starting one when
    /// none is idle): its outcome and the worker's compile time.
    pub(crate) fn finalize(
        &self,
        id: Vec<u8>,
        lowered: Vec<u8>,
    ) -> Result<(Outcome, Duration), WorkerLost> {
        let mut worker = self.checkout()?;
        let began = Instant::now();
        match worker.round_trip(&Request::Finalize { id, lowered }, self.timeout) {
            Ok(Reply::Finalized { outcome, work }) => {
                self.give_back(worker);
                Ok((outcome, work))
            }
            Ok(other) => {
                let message = format!(
                    "worker process {} answered a finalize with {other:?}; it was replaced",
                    worker.pid
                );
                self.replace(worker);
                Err(WorkerLost::Lost {
                    message,
                    blame: Blame::Kernel,
                })
            }
            Err(error) if error.kind() == io::ErrorKind::TimedOut => {
                let pid = worker.pid;
                let mut child = worker.close();
                drop(child.kill());
                drop(child.wait());
                let another_lost = self.state().lost_since(began);
                let headroom = Headroom::now(another_lost);
                let blame = exit::timed_out(self.timeout, &headroom);
                let message = with_blame(
                    format!(
                        "the compile did not finish within {} s (KILN_COMPILE_TIMEOUT): worker \
                         process {pid} was killed and replaced; the rest of the batch went on",
                        self.timeout.as_secs_f64()
                    ),
                    &blame,
                );
                log::warn!("{message}");
                self.replace_dead(pid);
                Err(WorkerLost::Lost { message, blame })
            }
            Err(error) => {
                let pid = worker.pid;
                let status = worker.reap();
                let another_lost = self.state().lost_since(began);
                let headroom = Headroom::now(another_lost);
                let blame = exit::crashed(status.as_ref(), &headroom);
                let message = with_blame(
                    crash_message(pid, status.as_ref(), &error, began.elapsed()),
                    &blame,
                );
                log::warn!("{message}");
                self.replace_dead(pid);
                Err(WorkerLost::Lost { message, blame })
            }
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<WorkerProcess>> {
        self.idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn checkout(&self) -> Result<WorkerProcess, WorkerLost> {
        if self.state().unavailable.is_some() {
            return Err(WorkerLost::Unavailable);
        }
        if let Some(worker) = self.idle().pop() {
            return Ok(worker);
        }
        if let Some(worker) = take_prestarted(&self.program, &self.recipe) {
            let mut state = self.state();
            state.live.insert(worker.pid);
            state.started += 1;
            return Ok(worker);
        }
        self.start_one()
    }

    fn start_one(&self) -> Result<WorkerProcess, WorkerLost> {
        match WorkerProcess::start(&self.program, &self.recipe) {
            Ok(worker) => {
                let mut state = self.state();
                state.live.insert(worker.pid);
                state.started += 1;
                log::debug!(
                    "started compile worker {} ({}) for {}",
                    worker.pid,
                    self.program.display(),
                    self.recipe.compiler
                );
                Ok(worker)
            }
            Err(reason) => {
                let reason = format!(
                    "could not start {} as a compile worker for {}: {reason}",
                    self.program.display(),
                    self.recipe.compiler
                );
                let mut state = self.state();
                if state.unavailable.is_none() {
                    log::warn!("{reason}; compiling on threads of this process instead");
                    state.unavailable = Some(reason.clone());
                }
                Err(WorkerLost::Unavailable)
            }
        }
    }

    fn give_back(&self, worker: WorkerProcess) {
        self.idle().push(worker);
    }

    /// Stops a worker that broke the protocol and starts another.
    fn replace(&self, worker: WorkerProcess) {
        let pid = worker.pid;
        drop(worker.stop());
        self.replace_dead(pid);
    }

    /// Forgets a dead worker and starts its replacement, so the pool keeps
    /// its size for the rest of the batch and the next one.
    fn replace_dead(&self, pid: u32) {
        {
            let mut state = self.state();
            state.live.remove(&pid);
            state.replaced += 1;
        }
        if let Ok(worker) = self.start_one() {
            self.give_back(worker);
        }
    }
}

impl Drop for ProcessPool {
    fn drop(&mut self) {
        let workers = std::mem::take(&mut *self.idle());
        // Close every pipe first, so the workers exit together, then reap.
        let closing: Vec<(u32, Closed)> = workers
            .into_iter()
            .map(|worker| (worker.pid, worker.close()))
            .collect();
        for (pid, mut child) in closing {
            if wait_within(&mut child, EXIT_GRACE).is_none() {
                log::warn!("compile worker {pid} did not exit after its pipe closed; killing it");
                drop(child.kill());
                drop(child.wait());
            }
        }
    }
}

impl std::fmt::Debug for ProcessPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessPool")
            .field("program", &self.program)
            .field("compiler", &self.recipe.compiler)
            .field("state", &*self.state())
            .finish_non_exhaustive()
    }
}
