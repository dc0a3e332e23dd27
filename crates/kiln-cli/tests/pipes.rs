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
