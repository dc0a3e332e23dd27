//! Finding the program a loader starts as its compile workers: the one a
//! variable names, the program itself when its `main` calls the hook, or
//! kiln's own worker program, `kiln-worker`, beside the program or on
//! `PATH`, of this very kiln.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::protocol::PROTOCOL;
use super::{HOOK_CALLED, WORKER_PROGRAM_VARIABLE};

/// The name of kiln's own worker program, installed beside `kiln`
/// (`cargo install kiln-tool`).
pub const WORKER_PROGRAM_NAME: &str = "kiln-worker";

/// The longest `kiln-worker --version` may take to answer.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

/// What `kiln-worker --version` prints, and what a loader checks it
/// against: the kiln and the protocol it was built with. A worker of
/// another kiln is not started.
pub fn version_line() -> String {
    format!(
        "{WORKER_PROGRAM_NAME} {} {PROTOCOL}",
        env!("CARGO_PKG_VERSION")
    )
}

/// The program to start as a worker, or why there is none (said once per
/// process by the loader, with how to get one).
pub(crate) fn worker_program() -> Result<PathBuf, String> {
    if let Some(program) = std::env::var_os(WORKER_PROGRAM_VARIABLE)
        && !program.is_empty()
    {
        return Ok(program.into());
    }
    if HOOK_CALLED.load(Ordering::Acquire) {
        return std::env::current_exe()
            .map_err(|error| format!("this program cannot find its own executable: {error}"));
    }
    // Searched once: the program's folder and PATH do not change under it.
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            find_kiln_worker(
                std::env::current_exe().ok().as_deref(),
                std::env::var_os("PATH"),
            )
        })
        .clone()
}

/// `kiln-worker` beside `program`, else on `path`, of this kiln.
fn find_kiln_worker(program: Option<&Path>, path: Option<OsString>) -> Result<PathBuf, String> {
    let beside = program
        .and_then(Path::parent)
        .map(|folder| folder.join(WORKER_PROGRAM_NAME));
    let on_path = path
        .iter()
        .flat_map(std::env::split_paths)
        .filter(|folder| !folder.as_os_str().is_empty())
        .map(|folder| folder.join(WORKER_PROGRAM_NAME));
    let mut refused = Vec::new();
    for candidate in beside.into_iter().chain(on_path) {
        if !candidate.is_file() {
            continue;
        }
        match check_version(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(reason) => refused.push(format!("{} {reason}", candidate.display())),
        }
    }
    let mut reason = format!(
        "no worker program: install kiln's ({WORKER_PROGRAM_NAME}, with `cargo install kiln-tool`) \
         beside the program or on PATH, set {WORKER_PROGRAM_VARIABLE} to it, or call \
         kiln::worker::run_if_worker(...) as the first line of main"
    );
    if !refused.is_empty() {
        reason.push_str(&format!(" (not used: {})", refused.join("; ")));
    }
    Err(reason)
}

/// Whether `candidate --version` says it is a worker of this kiln.
fn check_version(candidate: &Path) -> Result<(), String> {
    let mut child = Command::new(candidate)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|error| format!("does not start: {error}"))?;
    let deadline = Instant::now() + VERSION_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                // Killed and reaped: a worker that hangs here would hang a
                // batch too.
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "did not answer --version within {} s",
                    VERSION_TIMEOUT.as_secs()
                ));
            }
            Err(error) => return Err(format!("cannot be waited for: {error}")),
        }
    };
    let mut said = String::new();
    if let Some(stdout) = child.stdout.take() {
        let _ = stdout.take(4096).read_to_string(&mut said);
    }
    let said = said.trim();
    let wanted = version_line();
    if status.success() && said == wanted {
        Ok(())
    } else if said.starts_with(WORKER_PROGRAM_NAME) {
        Err(format!(
            "is {said:?}, and this program's kiln is {wanted:?}: install the kiln-tool of the same \
             version"
        ))
    } else {
        Err("is not kiln's worker program (its --version says otherwise)".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_worker_program_anywhere_says_every_way_to_get_one() {
        let folder = std::env::temp_dir().join(format!("kiln-no-worker-{}", std::process::id()));
        std::fs::create_dir_all(&folder).expect("a scratch folder");
        let reason = find_kiln_worker(
            Some(&folder.join("program")),
            Some(OsString::from(folder.as_os_str())),
        )
        .expect_err("there is none");
        for way in [
            "cargo install kiln-tool",
            WORKER_PROGRAM_VARIABLE,
            "run_if_worker",
        ] {
            assert!(reason.contains(way), "{way} in {reason}");
        }
        std::fs::remove_dir_all(&folder).ok();
    }

    #[cfg(unix)]
    #[test]
    fn a_worker_program_of_another_kiln_is_not_used() {
        use std::os::unix::fs::PermissionsExt;
        let folder = std::env::temp_dir().join(format!("kiln-other-worker-{}", std::process::id()));
        std::fs::create_dir_all(&folder).expect("a scratch folder");
        let worker = folder.join(WORKER_PROGRAM_NAME);
        std::fs::write(
            &worker,
            format!("#!/bin/sh\necho '{WORKER_PROGRAM_NAME} 0.0.0-other {PROTOCOL}'\n"),
        )
        .expect("a stand-in worker");
        std::fs::set_permissions(&worker, std::fs::Permissions::from_mode(0o755))
            .expect("made executable");
        let reason = find_kiln_worker(Some(&folder.join("program")), None)
            .expect_err("another kiln's worker is refused");
        assert!(reason.contains("0.0.0-other"), "{reason}");

        std::fs::write(&worker, format!("#!/bin/sh\necho '{}'\n", version_line()))
            .expect("a stand-in worker of this kiln");
        assert_eq!(
            find_kiln_worker(None, Some(OsString::from(folder.as_os_str()))),
            Ok(worker.clone()),
            "found on PATH"
        );
        assert_eq!(
            find_kiln_worker(Some(&folder.join("program")), None),
            Ok(worker),
            "found beside the program"
        );
        std::fs::remove_dir_all(&folder).ok();
    }
}
