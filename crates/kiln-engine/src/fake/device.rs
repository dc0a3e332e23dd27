//! The fake device's clock: launches of fake kernels take the time a test
//! says they take, on a clock no host's speed changes, so that tests of
//! tuning (T1–T4) prove which candidate won without timing anything.
//!
//! A fake device has a number, as the GPUs of one machine do: several
//! targets on devices 0 and 1 of one model stand for a machine with two
//! identical GPUs (one identity, a clock and a launch count each), and the
//! modules each makes say which device they were loaded on.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::FakeTarget;
use crate::id::DeviceId;
use crate::timing::{DeviceTimer, TimedTarget, TimingError};

/// The backend name of the fake devices' [`DeviceId`]s.
pub const FAKE_BACKEND: &str = "fake";

/// The fake device: who it says it is, which of the machine's devices it
/// is, and a clock its launches advance. Cheap to clone; every clone is
/// the same device and shares the clock.
#[derive(Debug, Clone)]
pub struct FakeDevice {
    identity: Arc<str>,
    number: u32,
    clock: Arc<AtomicU64>,
    launches: Arc<AtomicU64>,
    timing_fails: bool,
}

impl Default for FakeDevice {
    fn default() -> Self {
        Self::new("fake device (driver kiln-fake 1)")
    }
}

impl FakeDevice {
    /// A device that names itself `identity` (model and driver).
    pub fn new(identity: impl Into<Arc<str>>) -> Self {
        Self {
            identity: identity.into(),
            number: 0,
            clock: Arc::new(AtomicU64::new(0)),
            launches: Arc::new(AtomicU64::new(0)),
            timing_fails: false,
        }
    }

    /// Device `number` of the machine, of the same model and driver (the
    /// same identity, so the same tuning answers, T2) but another device:
    /// a clock and a launch count of its own, and the modules its targets
    /// load say `number`.
    #[must_use]
    pub fn with_number(mut self, number: u32) -> Self {
        self.number = number;
        self.clock = Arc::new(AtomicU64::new(0));
        self.launches = Arc::new(AtomicU64::new(0));
        self
    }

    /// Which of the machine's devices it is: 0 unless
    /// [`with_number`](Self::with_number) said otherwise.
    pub fn number(&self) -> u32 {
        self.number
    }

    /// Its id, as a [`KernelCache`](crate::KernelCache) of it is made for:
    /// `fake:N`.
    pub fn id(&self) -> DeviceId {
        DeviceId::new(FAKE_BACKEND, u64::from(self.number))
    }

    /// How many times work ran on it ([`run`](Self::run)): a test's count
    /// of its launches.
    pub fn launches(&self) -> u64 {
        self.launches.load(Ordering::SeqCst)
    }

    /// The same device, whose timer fails: a measurement that fails.
    #[must_use]
    pub fn with_failing_timer(mut self) -> Self {
        self.timing_fails = true;
        self
    }

    /// Runs work that takes `time` on the device: what a test's launch of a
    /// fake kernel does.
    pub fn run(&self, time: Duration) {
        let nanoseconds = u64::try_from(time.as_nanos()).unwrap_or(u64::MAX);
        self.launches.fetch_add(1, Ordering::SeqCst);
        self.clock.fetch_add(nanoseconds, Ordering::SeqCst);
    }

    /// The device's clock: how long everything run on it took, in all.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.clock.load(Ordering::SeqCst))
    }
}

/// A timer reading the fake device's clock.
#[derive(Debug)]
pub struct FakeTimer {
    device: FakeDevice,
    started: Option<Duration>,
}

impl DeviceTimer for FakeTimer {
    fn start(&mut self) -> Result<(), TimingError> {
        if self.device.timing_fails {
            return Err(TimingError::new("fake device: the timer is broken"));
        }
        self.started = Some(self.device.elapsed());
        Ok(())
    }

    fn stop(&mut self) -> Result<Duration, TimingError> {
        let started = self
            .started
            .take()
            .ok_or_else(|| TimingError::new("fake device: the timer was never started"))?;
        Ok(self.device.elapsed().saturating_sub(started))
    }
}

impl TimedTarget for FakeTarget {
    type Timer = FakeTimer;

    fn device_identity(&self) -> String {
        self.device.identity.to_string()
    }

    fn timer(&self) -> Result<FakeTimer, TimingError> {
        Ok(FakeTimer {
            device: self.device.clone(),
            started: None,
        })
    }
}
