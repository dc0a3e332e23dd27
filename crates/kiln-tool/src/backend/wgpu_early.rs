//! The wgpu device `kiln warm` opens on a thread of its own while it reads
//! the folder and opens the store: Vulkan's loader loads every installed
//! driver when it makes its instance, tens of milliseconds that otherwise
//! come before the batch on the one thread that does everything else.
//!
//! The device is opened early only when the wgpu backend will run (it is
//! asked for and takes one of the folder's kernel files); the wgpu backend
//! takes it with [`open_wgpu_device`], which opens one itself when none was
//! started.
//! [`Opened`] joins the thread however the command ends: no thread of it
//! outlives the command.

use std::sync::{Mutex, PoisonError};
use std::thread::JoinHandle;

use kiln_wgpu::WgpuDevice;

type Opening = Result<WgpuDevice, kiln_wgpu::Error>;

/// The device opened early, while it is being opened or once it is.
enum Early {
    Running(JoinHandle<Opening>),
    // Boxed: a device is much larger than a thread's handle.
    Done(Box<Opening>),
}

static EARLY: Mutex<Option<Early>> = Mutex::new(None);

fn slot() -> std::sync::MutexGuard<'static, Option<Early>> {
    EARLY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The thread's answer; a thread that could not answer (it never panics:
/// [`WgpuDevice::open`] does not) opens the device here instead.
fn joined(handle: JoinHandle<Opening>) -> Opening {
    handle.join().unwrap_or_else(|_| WgpuDevice::open())
}

/// Joins the early thread, if any, however the command ends; a device no
/// backend took is dropped then.
pub(crate) struct Opened(());

impl Drop for Opened {
    fn drop(&mut self) {
        let early = slot().take();
        if let Some(Early::Running(handle)) = early {
            drop(joined(handle));
        }
    }
}

/// Starts opening the wgpu device on a thread of its own when `wanted`
/// (the wgpu backend will run); the returned guard joins it.
pub(crate) fn start(wanted: bool) -> Opened {
    if wanted {
        match std::thread::Builder::new()
            .name("kiln-wgpu-open".into())
            .spawn(WgpuDevice::open)
        {
            Ok(handle) => *slot() = Some(Early::Running(handle)),
            // No thread: the backend opens the device itself, as before.
            Err(error) => log::debug!("wgpu: the device opens in turn ({error})"),
        }
    }
    Opened(())
}

/// Waits for the early thread to finish, keeping its answer: before the
/// command changes its environment, which the Vulkan loader reads.
pub(crate) fn settle() {
    let mut slot = slot();
    if let Some(Early::Running(handle)) = slot.take() {
        *slot = Some(Early::Done(Box::new(joined(handle))));
    }
}

/// The wgpu device: the one opened early when there is one, else one
/// opened now ([`WgpuDevice::open`]).
///
/// # Errors
///
/// [`WgpuDevice::open`]'s.
pub(crate) fn open_wgpu_device() -> Opening {
    let early = slot().take();
    match early {
        Some(Early::Running(handle)) => joined(handle),
        Some(Early::Done(opening)) => *opening,
        None => WgpuDevice::open(),
    }
}

/// Starts the wgpu batch's compile workers now, beside the device still
/// opening, when every one of its `kernels` is to compile: the run's store
/// is empty and there is no remote tier (`cold`). A batch the store may
/// answer whole starts none (the loader starts them once it knows what it
/// must compile); the pool of the batch takes these, as many as it would
/// have started.
pub(crate) fn start_workers(kernels: usize, cold: bool) {
    use kiln_engine::ArtifactCompiler;

    let config = kiln_engine::LoaderConfig::from_env_or_default();
    if !cold || kernels == 0 || config.worker_mode != kiln_engine::WorkerMode::Processes {
        return;
    }
    // The compiler the wgpu backend's target finalizes with.
    let compiler = kiln_wgpu::WgpuCompiler::in_workers(kiln_wgpu::DEFAULT_WORKER_MEMORY);
    if let Some(recipe) = compiler.worker_recipe() {
        kiln_engine::worker::start_early(recipe, config.parallelism.get().min(kernels));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f9_a_device_opened_early_is_taken_once_and_the_guard_joins_the_thread() {
        // Without a start, nothing is pending and the guard has nothing to
        // join.
        drop(Opened(()));
        assert!(slot().is_none());
        drop(start(false));
        assert!(slot().is_none(), "nothing started when not wanted");
        let guard = start(true);
        settle();
        assert!(matches!(*slot(), Some(Early::Done(_))), "settled");
        // Whatever this machine has (an adapter or none), the backend gets
        // the early answer, and the slot is empty after.
        let first = open_wgpu_device();
        assert!(slot().is_none());
        drop(first);
        drop(guard);
        // A start no backend took is joined by the guard.
        let guard = start(true);
        drop(guard);
        assert!(slot().is_none());
    }
}
