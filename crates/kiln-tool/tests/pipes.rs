//! The `kiln` binary's output read by a reader that stops early, as
//! `kiln ls | head` does: the command ends quietly, without a panic.

mod support;

use std::io::Read;
use std::process::{Command, Stdio};

use support::{DEADLINE, Scratch, filled, kiln, wait};

/// Enough kernels that a listing outgrows a pipe's buffer (64 KiB), so the
/// command is still writing when its reader goes.
const KERNELS: u32 = 1500;

/// Runs `command`, reads the first bytes of its output and closes the pipe
/// as `head` does; checks the command then ended quietly.
fn read_the_head_of(mut command: Command) {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the kiln binary starts");
    let mut stdout = child.stdout.take().expect("standard output is piped");
    let mut head = [0u8; 512];
    stdout
        .read_exact(&mut head)
        .expect("kiln prints at least 512 bytes");
    drop(stdout);
    let finished = wait(child, DEADLINE);
    assert!(
        finished.status.success(),
        "a closed pipe ends the output, not the command ({}): {}",
        finished.status,
        finished.stderr
    );
    assert!(
        finished.stderr.is_empty(),
        "nothing to say about it: {}",
        finished.stderr
    );
}

#[test]
fn a_listing_read_by_head_ends_quietly() {
    let scratch = Scratch::new("pipe-ls");
    let root = scratch.join("store");
    filled(&root, KERNELS);
    read_the_head_of(kiln(&root, &["ls"]));
}

#[test]
fn a_json_listing_read_by_head_ends_quietly() {
    let scratch = Scratch::new("pipe-ls-json");
    let root = scratch.join("store");
    filled(&root, KERNELS);
    read_the_head_of(kiln(&root, &["--json", "ls"]));
}

#[test]
fn an_explanation_read_by_head_ends_quietly() {
    let scratch = Scratch::new("pipe-explain");
    let root = scratch.join("store");
    filled(&root, KERNELS);
    read_the_head_of(kiln(&root, &["--json", "explain", "kiln.fake"]));
}

/// A folder of `count` WGSL files that each fail to compile: a report of
/// several KiB, with kernels failed (exit 3).
fn failing_kernels(scratch: &Scratch, count: u32) -> std::path::PathBuf {
    let folder = scratch.folder("kernels");
    for number in 0..count {
        std::fs::write(
            folder.join(format!("bad{number}.wgsl")),
            format!("@compute @workgroup_size(1) fn main() {{ var x: u32 = {number}u + ; }}\n"),
        )
        .expect("a kernel file");
    }
    folder
}

#[test]
fn a_json_report_cut_by_a_file_size_limit_or_a_full_disk_is_said_with_exit_1() {
    let scratch = Scratch::new("pipe-report-cut");
    let folder = failing_kernels(&scratch, 20);
    for (what, output) in [
        ("a file size limit", "report.json"),
        ("a full disk", "/dev/full"),
    ] {
        let path = if output.starts_with('/') {
            std::path::PathBuf::from(output)
        } else {
            scratch.join(output)
        };
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .expect("the output opens");
        let mut command = kiln(
            &scratch.join("store"),
            &["--json", "warm", "--backend", "wgpu"],
        );
        command
            .arg(&folder)
            .env("MESA_SHADER_CACHE_DIR", scratch.join("mesa"))
            .stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::piped());
        if output == "report.json" {
            kiln_test_support::child::limit(&mut command, kiln_test_support::Limit::FileSize(2048));
        }
        let finished = wait(command.spawn().expect("the kiln binary starts"), DEADLINE);
        assert_eq!(
            finished.status.code(),
            Some(1),
            "{what}: a report cut short fails the command: {}",
            finished.stderr
        );
        assert!(
            finished.stderr.contains("kiln: writing the output"),
            "{what}: said on standard error: {}",
            finished.stderr
        );
    }
}
