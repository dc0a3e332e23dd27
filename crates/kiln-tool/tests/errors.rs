//! How the command says it failed: each cause once, and nothing of the
//! graphics stack's own probing read as kiln's error.

mod support;

use support::{Scratch, finish, kiln, wgsl_kernel};

#[test]
fn a_cause_the_message_already_names_is_said_once() {
    let scratch = Scratch::new("errors-once");
    let file = scratch.join("a-file");
    std::fs::write(&file, b"not a folder").expect("a file");
    let failed = finish(&mut kiln(&file, &["gc"]));
    assert_eq!(failed.status.code(), Some(1), "{failed:?}");
    let cause = std::io::Error::from_raw_os_error(libc::EEXIST).to_string();
    assert_eq!(
        failed.stderr.matches(&cause).count(),
        1,
        "{cause:?} once: {}",
        failed.stderr
    );
    let json = finish(&mut kiln(&file, &["--json", "gc"])).json();
    let message = json["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(message.matches(&cause).count(), 1, "{json:#}");
}

#[test]
fn a_machine_without_a_vulkan_driver_shows_no_kiln_error_lines() {
    let scratch = Scratch::new("errors-no-driver");
    let folder = scratch.folder("kernels");
    std::fs::write(folder.join("one.wgsl"), wgsl_kernel(1)).expect("a kernel file");
    let store = scratch.join("store");
    let missing = scratch.join("no-driver.json");
    let run = finish(
        kiln(&store, &["--json", "warm", "--backend", "wgpu"])
            .arg(&folder)
            .env("VK_ICD_FILENAMES", &missing)
            .env("VK_DRIVER_FILES", &missing)
            .env_remove("KILN_LOG"),
    );
    assert!(
        !run.stderr
            .lines()
            .any(|line| line.starts_with("kiln: error:")),
        "the Vulkan loader's lines are not kiln's errors: {}",
        run.stderr
    );
    // No device: the kernels compile all the same, for no adapter.
    let report = run.succeeded_json();
    assert_eq!(report["backends"][0]["compiled"], 1, "{report:#}");
}
