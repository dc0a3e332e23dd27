//! Workers started ahead of any loader's need (F5): a registry of the
//! process, by program and recipe, that the first pool of a recipe takes
//! its workers from, and closes what no pool took.

use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Instant;

use super::WorkerRecipe;
use super::process::{EXIT_GRACE, START_TIMEOUT, WorkerProcess, wait_within};

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
pub(super) fn prestart(program: PathBuf, recipe: WorkerRecipe, count: usize) {
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
pub(super) fn take_prestarted(program: &Path, recipe: &WorkerRecipe) -> Option<WorkerProcess> {
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
pub(super) fn release_prestarted(recipe: &WorkerRecipe) {
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
