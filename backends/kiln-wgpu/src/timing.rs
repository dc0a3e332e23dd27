//! Timing a wgpu device's work for tuning (T1): the queue is drained
//! before the timed launches and waited for after them, so what is counted
//! is the time the device took to run them, with the submission and the
//! wait around it; and the identity a tuning answer holds for (T2).
//!
//! Timestamp queries would count the device's time alone, but they need
//! a feature (`TIMESTAMP_QUERY_INSIDE_ENCODERS`) that kiln's devices do not
//! ask for and the caller's launches would have to write; a drained queue
//! times every adapter, a software one (lavapipe) included, and ranks
//! candidates the same way once the work is longer than a submission.

use std::time::{Duration, Instant};

use kiln_engine::{DeviceTimer, TimedTarget, TimingError};

use crate::device::WgpuDevice;
use crate::target::WgpuTarget;

/// The longest a timer waits for the device: past it, the measurement
/// fails rather than hang (a lost or stuck device).
const LONGEST_WAIT: Duration = Duration::from_secs(60);

/// A clock on a wgpu device's queue: [`start`](DeviceTimer::start) waits
/// for the work submitted before, [`stop`](DeviceTimer::stop) for the work
/// submitted since.
#[derive(Debug)]
pub struct WgpuTimer {
    device: WgpuDevice,
    started: Option<Instant>,
}

impl WgpuTimer {
    fn drain(&self) -> Result<(), TimingError> {
        self.device
            .device()
            .poll(wgpu::PollType::Wait {
                submission_index: None,
                timeout: Some(LONGEST_WAIT),
            })
            .map(|_| ())
            .map_err(|error| TimingError::new(format!("waiting for the device: {error}")))
    }
}

impl DeviceTimer for WgpuTimer {
    fn start(&mut self) -> Result<(), TimingError> {
        self.drain()?;
        self.started = Some(Instant::now());
        Ok(())
    }

    fn stop(&mut self) -> Result<Duration, TimingError> {
        let started = self
            .started
            .take()
            .ok_or_else(|| TimingError::new("the timer was stopped without a start"))?;
        self.drain()?;
        Ok(started.elapsed())
    }
}

impl TimedTarget for WgpuTarget {
    type Timer = WgpuTimer;

    /// The adapter's name, kind, identifiers and driver, with the Vulkan
    /// driver's own version where there is one.
    fn device_identity(&self) -> String {
        let Some(device) = self.device() else {
            return "compile-only (no device)".to_owned();
        };
        let info = device.info();
        let mut identity = format!(
            "{} ({:?} {:?}, {:04x}:{:04x}; driver {} {}",
            info.name,
            info.backend,
            info.device_type,
            info.vendor,
            info.device,
            info.driver,
            info.driver_info
        );
        if let Some(driver) = device.driver_identity() {
            identity.push_str(&format!("; version {:#x}", driver.driver_version));
        }
        identity.push(')');
        identity
    }

    fn timer(&self) -> Result<WgpuTimer, TimingError> {
        let device = self.device().ok_or_else(|| {
            TimingError::new("a compile-only target has no device to time: open one to tune")
        })?;
        Ok(WgpuTimer {
            device: device.clone(),
            started: None,
        })
    }
}
