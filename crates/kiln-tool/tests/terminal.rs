//! The command in a real terminal, driven by tmux: `kiln warm`'s progress
//! bar is on screen and counting while a batch of slow kernels compiles;
//! its table and `stats`, `ls` and `records` keep within 80 columns with
//! every number beside its unit; a pipe gets one record a line, never
//! wrapped; `--help` wraps between words.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kiln_test_support::require::skip_unless;
use support::kernels::{slow_kernel, write_kernel};
use support::{KILN, Scratch, backend, finish, kiln};

/// How many slow kernels the watched batch compiles.
const SLOW: usize = 6;

/// A tmux server of this test's own (its socket named after the test and
/// the process), killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// A server with one detached session `width` columns wide running
    /// `shell` (a command line), or `None` when tmux is not here.
    fn start(name: &str, width: u16, shell: &str) -> Option<Self> {
        let socket = format!("kiln-{name}-{}", std::process::id());
        let started = Command::new("tmux")
            .args(["-L", &socket, "-f", "/dev/null", "new-session", "-d"])
            .args(["-x", &width.to_string(), "-y", "50"])
            .args(["-s", "test"])
            .arg(format!("{shell}; echo KILN-TEST-DONE; sleep 120"))
            .env_remove("TMUX")
            .status()
            .ok()?;
        started.success().then_some(Self { socket })
    }

    /// The pane's text, wrapped lines joined (`-J`), so a line longer
    /// than the pane shows as one long line.
    fn capture(&self) -> String {
        Command::new("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p", "-J", "-t", "test"])
            .output()
            .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
            .unwrap_or_default()
    }

    /// Captures the pane until `done` says so or `deadline` passes; every
    /// capture is kept.
    fn watch(&self, deadline: Duration, done: impl Fn(&str) -> bool) -> Vec<String> {
        let started = Instant::now();
        let mut captures = Vec::new();
        while started.elapsed() < deadline {
            let capture = self.capture();
            let finished = done(&capture);
            captures.push(capture);
            if finished {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        captures
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

/// Whether tmux runs here; says why not when it does not.
fn has_tmux() -> bool {
    let found = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|output| output.status.success());
    if !found {
        eprintln!("skipped: tmux is not installed, and these tests drive a terminal through it");
    }
    found
}

/// A shell word of `path`.
fn quoted(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

/// `kiln --dir STORE` as a shell command line.
fn kiln_line(store: &Path, arguments: &str) -> String {
    format!(
        "env -u KILN_CACHE_DISABLE -u KILN_LOG {} --dir {} {arguments}",
        quoted(Path::new(KILN)),
        quoted(store)
    )
}

/// `SLOW` slow CUDA kernels, each of its own text, so none is found by
/// another's.
fn slow_kernels(folder: &Path) {
    for number in 0..SLOW {
        let text = slow_kernel().replace(".5f", &format!(".5{number}f"));
        write_kernel(folder, &format!("slow{number}.cu"), text);
    }
}

/// The lines of `text` longer than `width` columns, but for lines that
/// name a folder (`... in /tmp/...`, a toolkit's headers): a path is
/// prose, never cut.
fn too_wide(text: &str, width: usize) -> Vec<&str> {
    text.lines()
        .filter(|line| !line.contains(" /"))
        .filter(|line| line.trim_end().chars().count() > width)
        .collect()
}

/// A line that is only a unit: a number's unit split from it.
fn split_unit(text: &str) -> Option<&str> {
    text.lines()
        .map(str::trim)
        .find(|line| ["s", "ms", "B", "KiB", "MiB", "%"].contains(line))
}

#[test]
fn warm_s_bar_is_on_screen_and_counting_mid_batch_and_its_table_fits_80_columns() {
    if !has_tmux() {
        return;
    }
    let scratch = Scratch::new("terminal-bar");
    let folder = scratch.folder("kernels");
    let store = scratch.path().join("store");
    slow_kernels(&folder);
    // Without NVRTC nothing is slow: the JSON report says so first.
    let probe = scratch.folder("probe");
    write_kernel(&probe, "one.cu", slow_kernel());
    let report = finish(kiln(&store, &["--json", "warm", "--backend", "cuda"]).arg(&probe)).json();
    if let Some(reason) = backend(&report, "cuda")["unavailable"].as_str() {
        skip_unless(&["KILN_REQUIRE_NVRTC"], "a CUDA batch's bar", reason);
        return;
    }
    let line = kiln_line(&store, &format!("warm --backend cuda {}", quoted(&folder)));
    let tmux = Tmux::start("bar", 80, &line).expect("tmux starts a session");
    let captures = tmux.watch(Duration::from_secs(120), |screen| {
        screen.contains("KILN-TEST-DONE")
    });
    let last = captures.last().cloned().unwrap_or_default();
    assert!(last.contains("KILN-TEST-DONE"), "warm ended:\n{last}");
    let total = format!("/{SLOW} kernels");
    let bars: Vec<&str> = captures
        .iter()
        .flat_map(|capture| capture.lines())
        .filter(|line| line.starts_with("warm cuda: [") && line.contains(&total))
        .collect();
    assert!(
        !bars.is_empty(),
        "the bar was on screen in none of {} captures; the last:\n{last}",
        captures.len()
    );
    let counts: Vec<usize> = bars
        .iter()
        .filter_map(|line| line.split_once("] ")?.1.split_once('/')?.0.parse().ok())
        .collect();
    assert!(
        counts.iter().any(|&count| count < SLOW),
        "the bar showed the batch before its end: {bars:?}"
    );
    assert!(
        !last.contains("warm cuda: ["),
        "the bar is cleared at the end:\n{last}"
    );
    assert!(
        too_wide(&last, 80).is_empty(),
        "warm's table keeps to 80 columns:\n{last}"
    );
    assert!(split_unit(&last).is_none(), "no unit alone:\n{last}");
    let compiled: usize = last
        .lines()
        .find(|line| line.starts_with("cuda "))
        .map_or(0, |row| row.split_whitespace().count());
    assert!(compiled > 3, "warm's table has a cuda row:\n{last}");

    // The store's tables at 80 columns, then whole in a pipe.
    for command in ["stats", "ls", "records"] {
        let tmux = Tmux::start(command, 80, &kiln_line(&store, command)).expect("tmux");
        let captures = tmux.watch(Duration::from_secs(60), |screen| {
            screen.contains("KILN-TEST-DONE")
        });
        let screen = captures.last().cloned().unwrap_or_default();
        assert!(
            too_wide(&screen, 80).is_empty(),
            "kiln {command} keeps to 80 columns:\n{screen}"
        );
        assert!(
            split_unit(&screen).is_none(),
            "kiln {command} keeps each number beside its unit:\n{screen}"
        );
    }
}

#[test]
fn a_piped_listing_is_one_whole_record_a_line() {
    let scratch = Scratch::new("terminal-pipe");
    let store = scratch.path().join("store");
    let folder = scratch.folder("kernels");
    // A name longer than any terminal's table would keep on one line.
    let long = "a_kernel_whose_name_runs_on_".repeat(5);
    write_kernel(
        &folder,
        &format!("{long}.wgsl"),
        "@group(0) @binding(0) var<storage, read_write> v: array<f32>;\n\
         @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) \
         { v[i.x] = v[i.x] * 3.0; }\n",
    );
    let warmed = finish(kiln(&store, &["warm", "--backend", "wgpu"]).arg(&folder));
    assert!(warmed.status.success(), "{}", warmed.stderr);
    let listed = finish(&mut kiln(&store, &["ls"]));
    assert!(listed.status.success(), "{}", listed.stderr);
    let rows: Vec<&str> = listed.stdout.lines().skip(1).collect();
    assert!(!rows.is_empty(), "{}", listed.stdout);
    assert!(
        rows.iter().any(|row| row.contains(long.as_str())),
        "a pipe gets the whole name on its row:\n{}",
        listed.stdout
    );
    let header_columns = listed
        .stdout
        .lines()
        .next()
        .map_or(0, |header| header.split_whitespace().count());
    assert!(header_columns >= 5, "no column is left out in a pipe");
}

/// The words of `text`, in order.
fn words(text: &str) -> Vec<&str> {
    text.split_whitespace().collect()
}

#[test]
fn help_wraps_between_words_at_the_terminal_s_width() {
    let help = |columns: &str| {
        finish(
            Command::new(KILN)
                .args(["warm", "--help"])
                .env("COLUMNS", columns)
                .env("LINES", "50"),
        )
    };
    let narrow = help("60");
    let wide = help("400");
    assert!(narrow.status.success(), "{}", narrow.stderr);
    assert!(
        too_wide(&narrow.stdout, 60).is_empty(),
        "help keeps to 60 columns:\n{}",
        narrow.stdout
    );
    assert!(
        narrow.stdout.lines().count() > wide.stdout.lines().count(),
        "help wraps at 60 columns:\n{}",
        narrow.stdout
    );
    assert_eq!(
        words(&narrow.stdout),
        words(&wide.stdout),
        "every word whole, in its place"
    );
}
