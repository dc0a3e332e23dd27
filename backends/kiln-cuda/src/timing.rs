//! Timing a CUDA device's work for tuning (T1) with events: a start and an
//! end event recorded on the stream the candidates launch on, and the
//! driver's elapsed time between them, so what is counted is the device's
//! time alone, never the host's to submit; and the identity a tuning answer
//! holds for (T2): the GPU's model and architecture and the driver's
//! version.
//!
//! Events belong to a stream, and the launches are the program's, on its
//! own streams (B5): [`CudaTimer::on`] times the stream they go to, through
//! [`Measure::TimedWith`](kiln_engine::tune::Measure::TimedWith). The
//! target's own [`timer`](TimedTarget::timer) times the context's default
//! stream, for launches that go there.

use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::sys::{CUevent_flags, CUresult};
use cudarc::driver::{CudaEvent, CudaStream, DriverError};
use kiln_engine::{DeviceTimer, TimedTarget, TimingError};

use crate::error::driver_message;
use crate::target::CudaTarget;

/// A clock on one CUDA stream's work: two events with timing on.
/// [`start`](DeviceTimer::start) waits for the work launched on the stream
/// before it and records the start event; [`stop`](DeviceTimer::stop)
/// records the end event, waits for it, and says the time between.
#[derive(Debug)]
pub struct CudaTimer {
    stream: Arc<CudaStream>,
    start: CudaEvent,
    end: CudaEvent,
    started: bool,
}

impl CudaTimer {
    /// A clock on `stream`: the stream a tune's launches go to.
    ///
    /// # Errors
    ///
    /// The driver could not make the events.
    pub fn on(stream: &Arc<CudaStream>) -> Result<Self, TimingError> {
        let context = stream.context();
        let event = || {
            context
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(|error| failed("cuEventCreate", error))
        };
        Ok(Self {
            stream: Arc::clone(stream),
            start: event()?,
            end: event()?,
            started: false,
        })
    }

    /// The stream it times.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl DeviceTimer for CudaTimer {
    fn start(&mut self) -> Result<(), TimingError> {
        self.stream
            .synchronize()
            .map_err(|error| failed("cuStreamSynchronize", error))?;
        self.start
            .record(&self.stream)
            .map_err(|error| failed("cuEventRecord", error))?;
        self.started = true;
        Ok(())
    }

    fn stop(&mut self) -> Result<Duration, TimingError> {
        if !std::mem::take(&mut self.started) {
            return Err(TimingError::new("the timer was stopped without a start"));
        }
        self.end
            .record(&self.stream)
            .map_err(|error| failed("cuEventRecord", error))?;
        self.end
            .synchronize()
            .map_err(|error| failed("cuEventSynchronize", error))?;
        let milliseconds = self
            .start
            .elapsed_ms(&self.end)
            .map_err(|error| failed("cuEventElapsedTime", error))?;
        Ok(duration_of(milliseconds))
    }
}

/// The events' elapsed milliseconds as a duration; the driver's clock has
/// about half a microsecond's resolution, and never runs backwards, but a
/// value that is not a time is none.
fn duration_of(milliseconds: f32) -> Duration {
    Duration::try_from_secs_f64(f64::from(milliseconds) / 1e3).unwrap_or(Duration::ZERO)
}

/// A driver call of the timer that failed.
fn failed(call: &str, error: DriverError) -> TimingError {
    TimingError::new(format!("{call} failed: {}", driver_message(error)))
}

/// The driver's CUDA version, as `13.0`; `None` when it cannot say.
fn driver_version() -> Option<String> {
    let mut version = 0;
    // SAFETY: the driver is loaded (a target with a device opened it), and
    // the call writes one integer through the pointer it is given.
    let result = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) };
    (result == CUresult::CUDA_SUCCESS)
        .then(|| format!("{}.{}", version / 1000, version % 1000 / 10))
}

impl TimedTarget for CudaTarget {
    type Timer = CudaTimer;

    /// The GPU's name and architecture and the driver's CUDA version: two
    /// GPUs of one model on one driver share their tuning answers.
    fn device_identity(&self) -> String {
        let Some(device) = self.device() else {
            return format!("compile-only {} (no device)", self.architecture());
        };
        format!(
            "{} ({}; CUDA driver {})",
            device.name(),
            device.architecture(),
            driver_version().unwrap_or_else(|| "of unknown version".to_owned())
        )
    }

    /// A clock on the default stream of the device's context. Launches on
    /// a stream of the program's own are timed on that stream: give
    /// [`CudaTimer::on`] to
    /// [`Measure::TimedWith`](kiln_engine::tune::Measure::TimedWith).
    fn timer(&self) -> Result<CudaTimer, TimingError> {
        let device = self.device().ok_or_else(|| {
            TimingError::new("a compile-only target has no device to time: open one to tune")
        })?;
        CudaTimer::on(&device.context().default_stream())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t1_elapsed_milliseconds_become_a_duration() {
        assert_eq!(duration_of(1.5), Duration::from_micros(1500));
        assert_eq!(duration_of(0.0), Duration::ZERO);
        assert_eq!(duration_of(f32::NAN), Duration::ZERO, "not a time");
        assert_eq!(duration_of(-1.0), Duration::ZERO);
    }

    #[test]
    fn t1_a_compile_only_target_names_itself_and_has_no_clock() {
        let Ok(target) = CudaTarget::compile_only(crate::Architecture::new(9, 0)) else {
            kiln_engine::conformance::skip("a compile-only CUDA target's clock", "no NVRTC");
            return;
        };
        assert_eq!(target.device_identity(), "compile-only sm_90 (no device)");
        let error = target.timer().expect_err("no device to time");
        assert!(error.message.contains("compile-only"), "{error}");
    }
}
