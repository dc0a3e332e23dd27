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
