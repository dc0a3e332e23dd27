//! How long work takes on a device, as the device counts it: the
//! [`TimedTarget`] a backend implements beside its [`CompilationTarget`]
//! so that kiln can measure tuning candidates itself (T1), and the device
//! identity a measurement holds for (T2).
//!
//! A timer says how long the work launched between its
//! [`start`](DeviceTimer::start) and [`stop`](DeviceTimer::stop) ran, and
//! waits for that work to finish: events recorded on the stream where a
//! device has them, timestamp queries, or at the least a wait for the queue
//! to drain around the launches. What it measures is the device's time,
//! never the host's time to submit.

use std::fmt;
use std::time::Duration;

use crate::target::CompilationTarget;

/// Why a device could not time its work: a measurement that failed, which
/// is reported and never kept (T3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimingError {
    /// What the device or its driver said.
    pub message: String,
}

impl TimingError {
    /// A timing error saying `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

impl fmt::Display for TimingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TimingError {}

/// A clock on one device's work.
///
/// # Contract
///
/// - [`start`](Self::start) waits for the work launched before it, so that
///   none of it is counted, and marks the start.
/// - [`stop`](Self::stop) waits for the work launched since `start` and
///   returns how long it took on the device; it is called once after each
///   `start`.
/// - Neither panics on a device error: it is a [`TimingError`].
pub trait DeviceTimer {
    /// Waits for the work launched so far, then starts timing.
    ///
    /// # Errors
    ///
    /// The device could not be waited for or timed.
    fn start(&mut self) -> Result<(), TimingError>;

    /// Waits for the work launched since [`start`](Self::start) and says how
    /// long it ran.
    ///
    /// # Errors
    ///
    /// The device could not be waited for or timed.
    fn stop(&mut self) -> Result<Duration, TimingError>;
}

/// A target whose device can say who it is and time its own work: what
/// tuning needs of a backend.
///
/// # Contract
///
/// - [`device_identity`](Self::device_identity) names everything that
///   changes how fast a kernel runs on the device and that the artifact
///   keys do not already hold: the device's model and its driver's
///   version. Two devices with the same identity take the same tuning
///   answer (T2); a new driver is another identity, and tunes again.
/// - [`timer`](Self::timer) is cheap and touches no kernel.
pub trait TimedTarget: CompilationTarget {
    /// This device's clock.
    type Timer: DeviceTimer;

    /// The device's model and driver, as one line.
    fn device_identity(&self) -> String;

    /// A clock on this device.
    ///
    /// # Errors
    ///
    /// The target has no device to time (compile-only), or the device
    /// cannot time its work.
    fn timer(&self) -> Result<Self::Timer, TimingError>;
}
