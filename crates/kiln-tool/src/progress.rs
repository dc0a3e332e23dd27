//! A progress bar on standard error, for passes over the whole store.
//!
//! It appears only on a terminal and only once a pass has run for a moment,
//! so quick commands and pipes print nothing extra; it redraws at most ten
//! times a second and clears itself when done.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use kiln_store::Progress;

use crate::{console, format};

/// How long a pass runs before the bar appears.
const QUIET_FOR: Duration = Duration::from_millis(300);
const REDRAW: Duration = Duration::from_millis(100);
const WIDTH: usize = 30;

/// A bar that follows one pass.
#[derive(Debug)]
pub struct ProgressBar {
    label: &'static str,
    started: Instant,
    drawn_at: Option<Instant>,
    enabled: bool,
}

impl ProgressBar {
    /// A bar for `label`, drawn only when standard error is a terminal.
    pub fn new(label: &'static str) -> Self {
        Self {
            label,
            started: Instant::now(),
            drawn_at: None,
            enabled: std::io::stderr().is_terminal(),
        }
    }

    /// Shows `progress`, if it is time to.
    pub fn update(&mut self, progress: &Progress) {
        if !self.enabled || self.started.elapsed() < QUIET_FOR {
            return;
        }
        if self.drawn_at.is_some_and(|drawn| drawn.elapsed() < REDRAW) {
            return;
        }
        self.drawn_at = Some(Instant::now());
        let bar = match progress.total.filter(|total| *total > 0) {
            Some(total) => {
                let filled =
                    ((progress.done.min(total) as f64 / total as f64) * WIDTH as f64) as usize;
                format!(
                    "[{}{}] {}/{}",
                    "#".repeat(filled),
                    "-".repeat(WIDTH - filled),
                    progress.done,
                    total
                )
            }
            None => format::count(progress.done, "file"),
        };
        let rate = progress.bytes as f64 / self.started.elapsed().as_secs_f64().max(1e-3);
        console::draw_bar(format_args!(
            "{} {}: {bar}  {}  {}/s",
            self.label,
            progress.phase,
            format::bytes(progress.bytes),
            format::bytes(rate as u64)
        ));
    }
}

impl Drop for ProgressBar {
    fn drop(&mut self) {
        if self.drawn_at.is_some() {
            console::draw_bar(format_args!(""));
        }
    }
}

/// A progress bar on standard error while one backend's batch of `kiln
/// warm` runs: how many of its kernels are settled (loaded or failed).
/// Drawn only on a terminal, and only once the batch has run for a moment.
pub struct BatchBar {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BatchBar {
    /// A bar of the batch `progress` follows; while the batch waits for
    /// kernels other processes compile, it names them (P12).
    pub fn start(label: &'static str, progress: kiln_engine::BatchProgress) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let thread = std::io::stderr().is_terminal().then(|| {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let started = Instant::now();
                let mut drawn = false;
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(REDRAW);
                    if started.elapsed() < QUIET_FOR {
                        continue;
                    }
                    let total = progress.kernels();
                    let done = progress.settled().min(total);
                    let filled = (done * WIDTH).checked_div(total).unwrap_or(WIDTH);
                    let doing = match progress.waiting() {
                        Some(waiting) => format!("waiting for {waiting}"),
                        None => "compiling".to_owned(),
                    };
                    console::draw_bar(format_args!(
                        "warm {label}: [{}{}] {done}/{total} {doing}",
                        "#".repeat(filled),
                        "-".repeat(WIDTH - filled)
                    ));
                    drawn = true;
                }
                if drawn {
                    console::draw_bar(format_args!(""));
                }
            })
        });
        Self { stop, thread }
    }
}

impl Drop for BatchBar {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
