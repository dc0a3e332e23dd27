//! The command's one progress bar, on indicatif: for passes over the whole
//! store (export, import, push, pull, verify) and for `kiln warm`'s
//! batches, with the rate and the time left.
//!
//! It appears only on a terminal and only once a pass has run for a
//! moment, so quick commands and pipes print nothing extra, and clears
//! itself when done. indicatif draws it on standard error; a message
//! written meanwhile goes through [`console`], which suspends the bar while
//! the message is written, so the message stands on a line of its own. A batch's bar counts
//! the kernels that are settled (loaded or failed), never the ones merely
//! started; `kiln warm --progress plain` prints the same count as lines,
//! for a log or a CI job.

use std::io::{self, IsTerminal};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use indicatif::{ProgressDrawTarget, ProgressStyle};
use kiln_engine::BatchProgress;
use kiln_store::Progress;

use crate::console::{self, errln};
use crate::format;

/// How long a pass runs before the bar appears.
const QUIET_FOR: Duration = Duration::from_millis(300);
/// How often a batch's count is read.
const POLL: Duration = Duration::from_millis(50);
/// Redraws a second, at most.
const REDRAWS: u8 = 10;

/// How progress is shown (`--progress`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Shown {
    /// A bar on standard error when it is a terminal; nothing otherwise.
    #[default]
    Auto,
    /// A line on standard error each time the count changes, terminal or
    /// not.
    Plain,
    /// Nothing.
    Never,
}

/// A bar that follows one pass over the store.
#[derive(Debug)]
pub struct ProgressBar {
    bar: indicatif::ProgressBar,
    label: &'static str,
    started: Instant,
    shown: bool,
    enabled: bool,
}

impl ProgressBar {
    /// A bar for `label`, drawn only when standard error is a terminal.
    pub fn new(label: &'static str) -> Self {
        Self {
            bar: indicatif::ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden()),
            label,
            started: Instant::now(),
            shown: false,
            enabled: io::stderr().is_terminal(),
        }
    }

    /// Shows `progress`.
    pub fn update(&mut self, progress: &Progress) {
        if !self.enabled {
            return;
        }
        let rate = progress.bytes as f64 / self.started.elapsed().as_secs_f64().max(1e-3);
        self.bar.set_message(format!(
            "{}  {}/s",
            format::bytes(progress.bytes),
            format::bytes(rate as u64)
        ));
        let template = match progress.total.filter(|total| *total > 0) {
            Some(total) => {
                self.bar.set_length(total);
                "{prefix}: [{bar:20}] {pos}/{len}  {msg}  ETA {eta}"
            }
            None => "{prefix}: {pos} files  {msg}",
        };
        self.bar.set_style(style(template));
        self.bar
            .set_prefix(format!("{} {}", self.label, progress.phase));
        self.bar.set_position(progress.done);
        if !self.shown && self.started.elapsed() >= QUIET_FOR {
            self.shown = true;
            show(&self.bar);
        }
    }
}

impl Drop for ProgressBar {
    fn drop(&mut self) {
        finish(&self.bar, self.shown);
    }
}

/// A bar over one batch of `kiln warm`, fed from the loader's
/// [`BatchProgress`] by a thread of its own while the loader compiles:
/// the kernels settled so far of the batch's, and what the batch waits
/// for when other processes compile some of them (P12).
pub struct BatchBar {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl BatchBar {
    /// A bar of the batch of `total` kernels that `progress` follows,
    /// labelled `label`, shown as `shown` says.
    pub fn start(label: &'static str, total: usize, progress: BatchProgress, shown: Shown) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let drawn = match shown {
            Shown::Auto => io::stderr().is_terminal(),
            Shown::Plain => true,
            Shown::Never => false,
        };
        let thread = drawn.then(|| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || follow(label, total, &progress, shown, &stop))
        });
        Self { stop, thread }
    }
}

impl Drop for BatchBar {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Follows `progress` until `stop`, then once more: the bar (or the
/// lines) end on the batch's last count.
fn follow(label: &str, total: usize, progress: &BatchProgress, shown: Shown, stop: &AtomicBool) {
    let bar =
        indicatif::ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::hidden())
            .with_style(style(
                "warm {prefix}: [{bar:20}] {pos}/{len} kernels, {per_sec}, ETA {eta} {msg}",
            ))
            .with_prefix(label.to_owned());
    let started = Instant::now();
    let mut on_screen = false;
    let mut last_line = None;
    loop {
        // Read before the stop flag: the last round sees the batch's end.
        let stopping = stop.load(Ordering::Relaxed);
        let kernels = match progress.kernels() {
            0 => total,
            kernels => kernels,
        };
        let settled = progress.settled().min(kernels);
        bar.set_length(kernels as u64);
        bar.set_position(settled as u64);
        let waiting = progress
            .waiting()
            .map(|waiting| format!("waiting for {waiting}"));
        bar.set_message(waiting.clone().unwrap_or_default());
        match shown {
            Shown::Plain => {
                let line = (settled, kernels, waiting);
                if last_line.as_ref() != Some(&line) {
                    errln!(
                        "warm {label}: {settled}/{kernels} kernels settled, {:.1}/s, ETA {}{}",
                        bar.per_sec(),
                        // Nothing done yet says nothing of the time left.
                        if settled == 0 {
                            "-".to_owned()
                        } else {
                            format::seconds(bar.eta().as_secs_f64())
                        },
                        line.2
                            .as_ref()
                            .map_or_else(String::new, |waiting| format!(", {waiting}"))
                    );
                    last_line = Some(line);
                }
            }
            Shown::Auto if !on_screen && started.elapsed() >= QUIET_FOR => {
                on_screen = true;
                show(&bar);
            }
            Shown::Auto | Shown::Never => {}
        }
        if stopping {
            break;
        }
        std::thread::sleep(POLL);
    }
    finish(&bar, on_screen);
}

/// The style of a bar from `template`; a template of this module's own
/// always parses.
fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("#>-")
}

/// Draws `bar` on standard error from now on, at most [`REDRAWS`] times a
/// second, and tells [`console`] it is on screen.
fn show(bar: &indicatif::ProgressBar) {
    bar.set_draw_target(ProgressDrawTarget::stderr_with_hz(REDRAWS));
    console::show_bar(bar);
}

/// Clears `bar` from the screen, when `shown` there.
fn finish(bar: &indicatif::ProgressBar, shown: bool) {
    bar.finish_and_clear();
    if shown {
        console::hide_bar();
    }
}
