//! Measuring loaded candidates, one at a time (T1, T4): with the caller's
//! probe, or with kiln's own warm-up launches and the median of
//! device-timed launches; and the lock that keeps two measurements of one
//! process off one device at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::answer::{CandidateOutcome, Method};
use crate::timing::{DeviceTimer, TimingError};

/// How candidates are measured.
pub enum Measure<'m, L> {
    /// The caller's probe: it runs the loaded candidate as it likes and
    /// says how long it took. An error drops the candidate out (T3).
    Probe(&'m mut dyn FnMut(&L) -> Result<Duration, String>),
    /// kiln's: `warm_up` launches, then `runs` launches each timed on the
    /// device by the target's [`DeviceTimer`], ranked by their median. An
    /// error of `launch` drops the candidate out; an error of the timer is a
    /// failed measurement, reported and not kept (T3).
    Timed {
        /// One launch of a loaded candidate, with the program's arguments.
        launch: &'m mut dyn FnMut(&L) -> Result<(), String>,
        /// Launches before the timed ones: caches, clocks, first-use costs.
        warm_up: u32,
        /// Timed launches; the median is the candidate's time.
        runs: u32,
    },
    /// As [`Timed`](Self::Timed), on a clock the caller gives in place of
    /// the target's: a device whose clock belongs to a stream (CUDA and
    /// HIP events) is timed on the stream the launches go to, say
    /// `kiln_cuda::CudaTimer::on(&stream)`.
    TimedWith {
        /// The clock, on the work `launch` sends.
        timer: &'m mut dyn DeviceTimer,
        /// One launch of a loaded candidate, with the program's arguments.
        launch: &'m mut dyn FnMut(&L) -> Result<(), String>,
        /// Launches before the timed ones.
        warm_up: u32,
        /// Timed launches; the median is the candidate's time.
        runs: u32,
    },
}

impl<L> Measure<'_, L> {
    pub(super) fn method(&self) -> Method {
        match self {
            Self::Probe(_) => Method::Probe,
            Self::Timed { warm_up, runs, .. } | Self::TimedWith { warm_up, runs, .. } => {
                Method::Timed {
                    warm_up: *warm_up,
                    runs: (*runs).max(1),
                }
            }
        }
    }

    /// Measures `loaded`: its outcome, or the timer's failure.
    pub(super) fn measure(
        &mut self,
        loaded: &L,
        timer: Option<&mut dyn DeviceTimer>,
    ) -> Result<CandidateOutcome, TimingError> {
        let failed_to_run = |message: String| CandidateOutcome::FailedToRun { message };
        match self {
            Self::Probe(probe) => Ok(match probe(loaded) {
                Ok(time) => measured(&[time]),
                Err(message) => failed_to_run(message),
            }),
            Self::Timed {
                launch,
                warm_up,
                runs,
            } => {
                let timer = timer
                    .ok_or_else(|| TimingError::new("the target cannot time its device's work"))?;
                timed(loaded, timer, &mut **launch, *warm_up, *runs)
            }
            Self::TimedWith {
                timer,
                launch,
                warm_up,
                runs,
            } => timed(loaded, &mut **timer, &mut **launch, *warm_up, *runs),
        }
    }
}

/// `warm_up` launches of `loaded`, then the median of `runs` launches each
/// timed by `timer`.
fn timed<L>(
    loaded: &L,
    timer: &mut dyn DeviceTimer,
    launch: &mut dyn FnMut(&L) -> Result<(), String>,
    warm_up: u32,
    runs: u32,
) -> Result<CandidateOutcome, TimingError> {
    let failed_to_run = |message: String| CandidateOutcome::FailedToRun { message };
    for _ in 0..warm_up {
        if let Err(message) = launch(loaded) {
            return Ok(failed_to_run(message));
        }
    }
    let mut samples = Vec::with_capacity(runs as usize);
    for _ in 0..runs.max(1) {
        timer.start()?;
        let launched = launch(loaded);
        // The clock stops whether or not the launch went: a started timer
        // is never left running.
        let time = timer.stop()?;
        if let Err(message) = launched {
            return Ok(failed_to_run(message));
        }
        samples.push(time);
    }
    Ok(measured(&samples))
}

/// The outcome of a candidate measured as `samples`: their median and range.
fn measured(samples: &[Duration]) -> CandidateOutcome {
    let nanoseconds = |time: Duration| u64::try_from(time.as_nanos()).unwrap_or(u64::MAX);
    let mut sorted: Vec<u64> = samples.iter().copied().map(nanoseconds).collect();
    sorted.sort_unstable();
    let median = match sorted.len() {
        0 => 0,
        length if length % 2 == 1 => sorted[length / 2],
        length => (sorted[length / 2 - 1] / 2) + (sorted[length / 2] / 2),
    };
    CandidateOutcome::Measured {
        median_ns: median,
        min_ns: sorted.first().copied().unwrap_or(0),
        max_ns: sorted.last().copied().unwrap_or(0),
        samples: u32::try_from(sorted.len()).unwrap_or(u32::MAX),
    }
}

/// The lock of the device named `identity` in this process: whoever
/// measures on it holds it, so two tunings of one process (on two loaders,
/// two threads) never time their candidates on one device at once (T4).
/// Tuners of the same key in other processes wait on the key's claim
/// instead.
pub(super) fn device_lock(identity: &str) -> Arc<Mutex<()>> {
    static DEVICES: OnceLock<Mutex<HashMap<String, Arc<Mutex<()>>>>> = OnceLock::new();
    let mut devices = DEVICES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    Arc::clone(devices.entry(identity.to_owned()).or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_of_a_candidate_is_the_median_of_its_samples() {
        // T1: one slow outlier does not move the median.
        let samples = [5, 100, 6, 7, 4].map(Duration::from_micros);
        assert_eq!(
            measured(&samples),
            CandidateOutcome::Measured {
                median_ns: 6_000,
                min_ns: 4_000,
                max_ns: 100_000,
                samples: 5,
            }
        );
        let even = [2, 4].map(Duration::from_nanos);
        assert!(matches!(
            measured(&even),
            CandidateOutcome::Measured { median_ns: 3, .. }
        ));
    }
}
