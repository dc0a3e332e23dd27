//! The warnings a test binary logs, counted: a logger installed once that
//! keeps every warning, and the binary's tests one at a time, each seeing
//! only its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Every warning logged while a test held [`one_at_a_time`].
static WARNINGS: Mutex<Vec<String>> = Mutex::new(Vec::new());
static TESTS: Mutex<()> = Mutex::new(());

struct Counting;

impl log::Log for Counting {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record<'_>) {
        if record.level() <= log::Level::Warn {
            WARNINGS
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(record.args().to_string());
        }
    }

    fn flush(&self) {}
}

/// Installs the counting logger once, waits for the other tests of this
/// binary, and forgets what they logged.
pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    if !INSTALLED.swap(true, Ordering::SeqCst) {
        log::set_logger(&Counting).expect("no other logger in this binary");
        log::set_max_level(log::LevelFilter::Warn);
    }
    let turn = TESTS.lock().unwrap_or_else(PoisonError::into_inner);
    WARNINGS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clear();
    turn
}

pub fn warnings() -> Vec<String> {
    WARNINGS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}
