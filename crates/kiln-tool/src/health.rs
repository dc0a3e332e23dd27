//! The request path's health as a store's kept batch records tell it:
//! compiles a caller waited on and their seconds, loads a fallback served,
//! background batches, kernels still compiling in the background when a
//! process last recorded a batch. `kiln stats` and `kiln records` show it.

use kiln_engine::StoredBatch;
use serde::Serialize;

use crate::format;

/// The health figures of the kept records: each process's newest record
/// (whose figures count since that process started), added up.
#[derive(Debug, Default, Clone, Serialize)]
pub struct HealthReport {
    /// Processes with a kept record.
    pub processes: usize,
    /// Kernels compiled in a batch a caller waited on.
    pub request_path_compiles: u64,
    /// Seconds callers waited on those batches.
    pub request_path_seconds: f64,
    /// Loads a fallback served while its kernel compiled in the background.
    pub fallback_loads: u64,
    /// Kept records of background batches.
    pub background_batches: usize,
    /// Kernels that failed in a background batch.
    pub background_failures: u64,
    /// Kernels waiting for or in a background batch when each process
    /// recorded its newest batch.
    pub compiling: u64,
}

impl HealthReport {
    /// The figures of `kept`, oldest first as the store hands them.
    pub fn of(kept: &[StoredBatch]) -> Self {
        let mut newest: Vec<&StoredBatch> = Vec::new();
        for stored in kept {
            match newest
                .iter_mut()
                .find(|seen| seen.process == stored.process)
            {
                Some(seen) if seen.finished <= stored.finished => *seen = stored,
                Some(_) => {}
                None => newest.push(stored),
            }
        }
        let mut report = Self {
            processes: newest.len(),
            background_batches: kept.iter().filter(|stored| stored.batch.background).count(),
            ..Self::default()
        };
        for stored in newest {
            let health = &stored.batch.health;
            report.request_path_compiles += health.request_path_compiles;
            report.request_path_seconds += health.request_path_seconds;
            report.fallback_loads += health.fallback_loads;
            report.background_failures += health.background_failures;
            report.compiling += health.compiling_now;
        }
        report
    }

    /// One line for a person: what a deployment that ships a complete pack
    /// expects to read as no request waiting on a compile.
    pub fn line(&self) -> String {
        format!(
            "{} request-path compiles ({}), {} fallback loads, {} background batches \
             ({} failed kernels), {} compiling at the last record",
            self.request_path_compiles,
            format::seconds(self.request_path_seconds),
            self.fallback_loads,
            self.background_batches,
            self.background_failures,
            self.compiling
        )
    }
}
