//! The fake target's device step (F9): it makes a fake module of each
//! artifact, records which thread made it and how many were being made at
//! once, so that tests prove where the loader made its device objects
//! rather than infer it from timings.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use super::{FakeArtifact, FakeCompiler, FakeModule, FakeTarget};
use crate::error::DeviceRefusal;
use crate::id::{ArtifactId, DeviceId, KernelId};
use crate::store::ArtifactStore;
use crate::target::{CompilationTarget, DeviceStep};

/// The fake device's step: makes a [`FakeModule`] of each artifact, on
/// whichever thread the loader asks, and counts where and how many at once.
#[derive(Debug, Default)]
pub struct FakeDeviceStep {
    /// Described rather than loaded: a compile-only target's (L11).
    compile_only: bool,
    /// The number of the device it loads on ([`FakeDevice::number`]).
    ///
    /// [`FakeDevice::number`]: super::FakeDevice::number
    device: u32,
    /// How long each device object takes to make.
    time: Duration,
    /// The driver needs one thread: the loader's makes every object.
    one_thread: bool,
    /// The driver serializes its device objects: made several at once,
    /// they are done no sooner.
    serialized: bool,
    running: AtomicUsize,
    most_running: AtomicUsize,
    made_on: Mutex<HashMap<KernelId, ThreadId>>,
}

impl FakeDeviceStep {
    /// The same device step on device `number`: records afresh.
    pub(super) fn on_device(&self, number: u32) -> Arc<FakeDeviceStep> {
        Arc::new(FakeDeviceStep {
            compile_only: self.compile_only,
            device: number,
            time: self.time,
            one_thread: self.one_thread,
            serialized: self.serialized,
            ..FakeDeviceStep::default()
        })
    }

    /// The thread that made the device object of `kernel`, last time it
    /// was made.
    pub fn made_on(&self, kernel: &KernelId) -> Option<ThreadId> {
        self.lock().get(kernel).copied()
    }

    /// Every thread that made a device object.
    pub fn threads(&self) -> std::collections::HashSet<ThreadId> {
        self.lock().values().copied().collect()
    }

    /// How many device objects were made, each kernel counted once.
    pub fn made(&self) -> usize {
        self.lock().len()
    }

    /// The most device objects being made at the same moment, as measured
    /// while they were made.
    pub fn most_at_once(&self) -> usize {
        self.most_running.load(Ordering::SeqCst)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<KernelId, ThreadId>> {
        self.made_on
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl DeviceStep<FakeCompiler> for FakeDeviceStep {
    type Made = FakeModule;

    fn on_workers(&self) -> bool {
        !self.one_thread
    }

    fn spreads(&self) -> bool {
        !self.serialized
    }

    fn make(
        &self,
        id: &ArtifactId<()>,
        artifact: &FakeArtifact,
    ) -> Result<FakeModule, DeviceRefusal> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_running.fetch_max(now, Ordering::SeqCst);
        if !self.time.is_zero() {
            std::thread::sleep(self.time);
        }
        self.lock()
            .insert(id.kernel.clone(), std::thread::current().id());
        self.running.fetch_sub(1, Ordering::SeqCst);
        if artifact.refused {
            return Err(DeviceRefusal {
                message: format!("fake device: invalid image for {}", id.kernel),
                code: Some(200),
            });
        }
        Ok(FakeModule {
            kernel: id.kernel.clone(),
            text: artifact.text.clone(),
            described: self.compile_only,
            device: self.device,
        })
    }
}

impl FakeTarget {
    /// The device step, with what it recorded of where it ran.
    pub fn fake_device_step(&self) -> &FakeDeviceStep {
        &self.device_step
    }

    /// The same target, whose device takes `time` to make each device
    /// object (a pipeline or module load standing in for a driver's).
    /// Its records start afresh.
    #[must_use]
    pub fn with_device_time(mut self, time: Duration) -> Self {
        self.device_step = Arc::new(FakeDeviceStep {
            compile_only: self.compile_only,
            device: self.device_step.device,
            time,
            one_thread: self.device_step.one_thread,
            serialized: self.device_step.serialized,
            ..FakeDeviceStep::default()
        });
        self
    }

    /// The same target, whose driver makes device objects on one thread
    /// only: the loader's thread makes each one as it publishes it. Its
    /// records start afresh.
    #[must_use]
    pub fn with_device_on_one_thread(mut self) -> Self {
        self.device_step = Arc::new(FakeDeviceStep {
            compile_only: self.compile_only,
            device: self.device_step.device,
            time: self.device_step.time,
            one_thread: true,
            serialized: self.device_step.serialized,
            ..FakeDeviceStep::default()
        });
        self
    }

    /// The same target, whose driver serializes its device objects (as
    /// CUDA's and HIP's module loads are): a round with nothing to compile
    /// makes every one on the loader's thread. Its records start afresh.
    #[must_use]
    pub fn with_serialized_device(mut self) -> Self {
        self.device_step = Arc::new(FakeDeviceStep {
            compile_only: self.compile_only,
            device: self.device_step.device,
            time: self.device_step.time,
            one_thread: self.device_step.one_thread,
            serialized: true,
            ..FakeDeviceStep::default()
        });
        self
    }

    /// A device step for a target made now, compile-only or not.
    pub(super) fn new_device_step(compile_only: bool) -> Arc<FakeDeviceStep> {
        Arc::new(FakeDeviceStep {
            compile_only,
            ..FakeDeviceStep::default()
        })
    }
}

impl CompilationTarget for FakeTarget {
    type Compiler = FakeCompiler;
    type Loaded = Arc<FakeModule>;
    type Device = FakeDeviceStep;

    fn compiler(&self) -> &Arc<FakeCompiler> {
        &self.compiler
    }

    fn device_step(&self) -> &Arc<FakeDeviceStep> {
        &self.device_step
    }

    fn store(&self) -> Option<&Arc<dyn ArtifactStore>> {
        self.store.as_ref()
    }

    /// Its device's id (`fake:N`), unless it is compile-only.
    fn device_id(&self) -> Option<DeviceId> {
        (!self.compile_only).then(|| self.device.id())
    }

    fn publish(
        &mut self,
        _id: &ArtifactId<()>,
        _artifact: &FakeArtifact,
        made: FakeModule,
    ) -> Result<Arc<FakeModule>, DeviceRefusal> {
        if !self.compile_only {
            self.loaded += 1;
        }
        Ok(Arc::new(made))
    }
}
