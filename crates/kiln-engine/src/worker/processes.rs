//! The loader's side: a pool of worker processes for one compiler recipe.

use std::collections::BTreeSet;
use std::io::{self, BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::WorkerRecipe;
use super::exit::{self, Blame, Headroom};
use super::protocol::{self, Outcome, PROTOCOL, Reply, Request};
use super::reply::Within;
use super::temporary::TemporaryFolder;

/// How long a starting worker has to answer its first request: the program
/// starts, reaches its hook and opens the compiler's library.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a worker has to exit once its request pipe closed, before it is
/// killed.
const EXIT_GRACE: Duration = Duration::from_secs(5);

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

/// One worker process, its two pipes and its temporary folder.
struct WorkerProcess {
    pid: u32,
    child: Child,
    requests: BufWriter<ChildStdin>,
    replies: BufReader<ChildStdout>,
    temporary: Option<TemporaryFolder>,
}

/// A worker whose request pipe is closed: the process, to be waited for,
/// and its temporary folder, removed when this is dropped, after the
/// process was waited for (every path that closes a worker waits for it,
/// or kills it and waits).
struct Closed {
    child: Child,
    _temporary: Option<TemporaryFolder>,
}

impl std::ops::Deref for Closed {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.child
    }
}

impl std::ops::DerefMut for Closed {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl WorkerProcess {
    /// Starts `program` as a worker and has it build the compiler of
    /// `recipe`.
    fn start(program: &Path, recipe: &WorkerRecipe) -> Result<Self, String> {
        Self::spawn(program, recipe)?.started()
    }

    /// Starts `program` and sends it the start request, without waiting
    /// for its answer: [`started`](Self::started) waits.
    fn spawn(program: &Path, recipe: &WorkerRecipe) -> Result<Self, String> {
        let temporary = TemporaryFolder::make()
            .inspect_err(|error| {
                log::debug!("a compile worker shares this process's temporary folder: {error}");
            })
            .ok();
        let mut command = Command::new(program);
        command
            .env(super::WORKER_CHANNEL_VARIABLE, PROTOCOL)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(temporary) = &temporary {
            for variable in ["TMPDIR", "TMP", "TEMP", super::temporary::VARIABLE] {
                command.env(variable, temporary.path());
            }
        }
        let mut child = command.spawn().map_err(|error| error.to_string())?;
        let pid = child.id();
        let requests = BufWriter::new(child.stdin.take().expect("stdin was piped"));
        let replies = BufReader::new(child.stdout.take().expect("stdout was piped"));
        let mut worker = Self {
            pid,
            child,
            requests,
            replies,
            temporary,
        };
        let start = Request::Start {
            protocol: PROTOCOL.to_owned(),
            compiler: recipe.compiler.to_owned(),
            recipe: recipe.recipe.clone(),
        };
        if let Err(error) = protocol::write_frame(&mut worker.requests, &start) {
            let status = worker.stop();
            return Err(format!(
                "{error} ({}); does its main call kiln_engine::worker::run_if_worker first?",
                describe_status(status.as_ref().ok())
            ));
        }
        Ok(worker)
    }

    /// Waits for the answer to the start request [`spawn`](Self::spawn)
    /// sent: the worker, once it has built its compiler.
    fn started(mut self) -> Result<Self, String> {
        let answer =
            protocol::read_frame::<Reply>(&mut Within::new(&mut self.replies, START_TIMEOUT));
        match answer {
            Ok(Some(Reply::Started)) => Ok(self),
            Ok(Some(Reply::Refused { reason })) => {
                drop(self.stop());
                Err(format!("the worker refused: {reason}"))
            }
            Ok(Some(other)) => {
                drop(self.stop());
                Err(format!("the worker answered its start with {other:?}"))
            }
            Ok(None) => {
                let status = self.stop();
                Err(format!(
                    "it closed its pipe ({}); does its main call \
                     kiln_engine::worker::run_if_worker first?",
                    describe_status(status.as_ref().ok())
                ))
            }
            Err(error) => {
                let status = self.stop();
                Err(format!(
                    "{error} ({}); does its main call kiln_engine::worker::run_if_worker first?",
                    describe_status(status.as_ref().ok())
                ))
            }
        }
    }

    /// Sends `request` and reads its reply, waiting at most `timeout` for
    /// the whole reply, every byte of it (an error of kind `TimedOut` past
    /// it): a worker that sends part of a frame and stops costs one
    /// timeout.
    fn round_trip(&mut self, request: &Request, timeout: Duration) -> io::Result<Reply> {
        protocol::write_frame(&mut self.requests, request)?;
        protocol::read_frame(&mut Within::new(&mut self.replies, timeout))?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the worker closed its pipe mid-request",
            )
        })
    }

    /// Closes the request pipe, leaving the process to exit on its own.
    fn close(self) -> Closed {
        let Self {
            child, temporary, ..
        } = self;
        Closed {
            child,
            _temporary: temporary,
        }
    }

    /// Stops the worker: closes its pipe, kills it when it does not exit.
    fn stop(self) -> io::Result<ExitStatus> {
        let mut child = self.close();
        if let Some(status) = wait_within(&mut child, Duration::from_millis(200)) {
            return Ok(status);
        }
        drop(child.kill());
        child.wait()
    }

    /// The exit status of a worker whose pipe broke: it is dead or dying.
    fn reap(self) -> Option<ExitStatus> {
        let mut child = self.close();
        match wait_within(&mut child, EXIT_GRACE) {
            Some(status) => Some(status),
            None => {
                drop(child.kill());
                child.wait().ok()
            }
        }
    }
}

/// Workers started ahead of any loader's need (F5), by program and
/// recipe, waiting to be taken by the first pool that needs one.
struct Prestarted {
    program: PathBuf,
    recipe: WorkerRecipe,
    /// Started and answered: ready to take.
    ready: Vec<WorkerProcess>,
    /// Spawned and not answered yet.
    pending: usize,
}

/// Every prestart of the process, and the signal that one became ready.
fn registry() -> &'static (Mutex<Vec<Prestarted>>, Condvar) {
    static PRESTARTS: OnceLock<(Mutex<Vec<Prestarted>>, Condvar)> = OnceLock::new();
    PRESTARTS.get_or_init(Default::default)
}

fn lock_prestarts() -> std::sync::MutexGuard<'static, Vec<Prestarted>> {
    registry()
        .0
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Starts up to `count` workers of `recipe` from `program` in the
/// background, unless as many are started or starting already: the first
/// pool of that recipe takes them instead of starting its own inside its
/// first batch.
pub(crate) fn prestart(program: PathBuf, recipe: WorkerRecipe, count: usize) {
    let wanted = {
        let mut prestarts = lock_prestarts();
        let entry = match prestarts
            .iter_mut()
            .position(|entry| entry.program == program && entry.recipe == recipe)
        {
            Some(index) => &mut prestarts[index],
            None => {
                prestarts.push(Prestarted {
                    program: program.clone(),
                    recipe: recipe.clone(),
                    ready: Vec::new(),
                    pending: 0,
                });
                prestarts.last_mut().expect("just pushed")
            }
        };
        let wanted = count.saturating_sub(entry.ready.len() + entry.pending);
        entry.pending += wanted;
        wanted
    };
    if wanted == 0 {
        return;
    }
    let starter = {
        let (program, recipe) = (program.clone(), recipe.clone());
        move || {
            // Spawn them all first, so they build their compilers at once,
            // then take each answer as it comes, on a thread of its own: a
            // worker that is ready serves a batch at once, whichever of
            // them is slow to start.
            let began = Instant::now();
            let spawned: Vec<Result<WorkerProcess, String>> = (0..wanted)
                .map(|_| WorkerProcess::spawn(&program, &recipe))
                .collect();
            let waiting: Vec<Mutex<Option<Result<WorkerProcess, String>>>> = spawned
                .into_iter()
                .map(|worker| Mutex::new(Some(worker)))
                .collect();
            let answer = |waiting: &Mutex<Option<Result<WorkerProcess, String>>>| {
                let worker = waiting
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .take();
                if let Some(worker) = worker {
                    prestarted(
                        &program,
                        &recipe,
                        worker.and_then(WorkerProcess::started),
                        began,
                    );
                }
            };
            std::thread::scope(|scope| {
                for worker in &waiting {
                    let spawned = std::thread::Builder::new()
                        .name("kiln-worker-answer".into())
                        .spawn_scoped(scope, || answer(worker));
                    // Without a thread of its own, its answer is taken here.
                    if spawned.is_err() {
                        answer(worker);
                    }
                }
            });
        }
    };
    let started = std::thread::Builder::new()
        .name("kiln-worker-start".into())
        .spawn(starter);
    if started.is_err() {
        let mut prestarts = lock_prestarts();
        if let Some(entry) = prestarts
            .iter_mut()
            .find(|entry| entry.program == program && entry.recipe == recipe)
        {
            entry.pending -= wanted;
        }
    }
}

/// Files the answer of a prestarted worker of `recipe` from `program`,
/// started at `began`: ready for the first pool that asks, or gone.
fn prestarted(
    program: &Path,
    recipe: &WorkerRecipe,
    worker: Result<WorkerProcess, String>,
    began: Instant,
) {
    let mut prestarts = lock_prestarts();
    if let Some(entry) = prestarts
        .iter_mut()
        .find(|entry| entry.program == program && entry.recipe == *recipe)
    {
        entry.pending -= 1;
        match worker {
            Ok(worker) => {
                log::debug!(
                    "prestarted compile worker {} ready {:?} after its start",
                    worker.pid,
                    began.elapsed()
                );
                entry.ready.push(worker);
            }
            Err(reason) => log::debug!("a prestarted compile worker failed: {reason}"),
        }
    }
    registry().1.notify_all();
}

/// A prestarted worker of `recipe` from `program`, waiting for one still
/// starting; `None` when none was prestarted or none is left.
fn take_prestarted(program: &Path, recipe: &WorkerRecipe) -> Option<WorkerProcess> {
    let deadline = Instant::now() + START_TIMEOUT;
    let mut prestarts = lock_prestarts();
    loop {
        let entry = prestarts
            .iter_mut()
            .find(|entry| entry.program == program && entry.recipe == *recipe)?;
        if let Some(worker) = entry.ready.pop() {
            return Some(worker);
        }
        if entry.pending == 0 {
            return None;
        }
        let left = deadline.checked_duration_since(Instant::now())?;
        prestarts = registry()
            .1
            .wait_timeout(prestarts, left)
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .0;
    }
}

/// Closes the prestarted workers of `recipe` nobody took, so that a
/// process that needed no compile keeps none alive: their pipes close and
/// they exit. Those still starting are kept: their pool may take them.
pub(crate) fn release_prestarted(recipe: &WorkerRecipe) {
    let idle: Vec<WorkerProcess> = {
        let mut prestarts = lock_prestarts();
        prestarts
            .iter_mut()
            .filter(|entry| entry.recipe == *recipe)
            .flat_map(|entry| std::mem::take(&mut entry.ready))
            .collect()
    };
    if !idle.is_empty() {
        log::debug!(
            "closing {} prestarted compile workers no batch needed",
            idle.len()
        );
    }
    for worker in idle {
        let mut child = worker.close();
        // They exit as their pipe closes; reap them off this thread.
        drop(
            std::thread::Builder::new()
                .name("kiln-worker-reap".into())
                .spawn(move || {
                    if wait_within(&mut child, EXIT_GRACE).is_none() {
                        drop(child.kill());
                        drop(child.wait());
                    }
                }),
        );
    }
}

/// Waits up to `limit` for `child` to exit.
fn wait_within(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            _ => return None,
        }
    }
}

/// The error of a kernel whose worker died while compiling it.
fn crash_message(
    pid: u32,
    status: Option<&ExitStatus>,
    error: &io::Error,
    after: Duration,
) -> String {
    let how = match status {
        Some(status) => describe_status(Some(status)),
        None => format!("its pipe failed ({error})"),
    };
    let what = if status.is_some_and(ExitStatus::success) {
        "the worker ended mid-request"
    } else {
        "the compiler crashed"
    };
    format!(
        "{what}: worker process {pid} {how} after {:.1} s on this kernel; the rest of the \
         batch went on and the worker was replaced",
        after.as_secs_f64()
    )
}

/// `message`, saying when the loss is not held against the kernel.
fn with_blame(message: String, blame: &Blame) -> String {
    match blame {
        Blame::Kernel => message,
        Blame::Environment(why) => {
            format!("{message}; not held against the kernel, since {why}")
        }
    }
}

/// How a process ended: `was killed by signal 6 (SIGABRT)`, or `exited with
/// status 3`.
fn describe_status(status: Option<&ExitStatus>) -> String {
    let Some(status) = status else {
        return "ended in an unknown way".to_owned();
    };
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("was killed by signal {signal} ({})", signal_name(signal));
        }
    }
    match status.code() {
        Some(code) => format!("exited with status {code}"),
        None => format!("ended: {status}"),
    }
}

#[cfg(unix)]
fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGABRT => "SIGABRT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGXCPU => "SIGXCPU",
        _ => "a signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_crash_message_names_the_compiler_crash_and_its_signal() {
        use std::os::unix::process::ExitStatusExt;
        let status = ExitStatus::from_raw(libc::SIGABRT);
        let error = io::Error::new(io::ErrorKind::UnexpectedEof, "closed");
        let message = crash_message(42, Some(&status), &error, Duration::from_millis(1500));
        assert!(message.starts_with("the compiler crashed"), "{message}");
        assert!(message.contains("signal 6 (SIGABRT)"), "{message}");
        assert!(message.contains("worker process 42"), "{message}");
    }
}
