//! The files at a store's root that are its history (`activity`,
//! `batches`) and its marker (`LAYOUT`), through the real binary: none of
//! them, unreadable, replaced by a folder or gone, stops the store or is
//! skipped in silence (P5).

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use kiln_test_support::files::chown_all;
use kiln_test_support::{NOBODY, child};
use support::{Finished, Scratch, backend, filled, finish, kiln, run, wgsl_kernel};

/// `kiln --json warm FOLDER` of the wgpu kernels in `folder`.
fn warm(store: &Path, folder: &Path) -> Finished {
    finish(
        kiln(store, &["--json", "warm", "--backend", "wgpu"])
            .arg(folder)
            .env("MESA_SHADER_CACHE_DIR", store.with_extension("mesa")),
    )
}

/// A folder of two WGSL kernels.
fn kernels(scratch: &Scratch) -> std::path::PathBuf {
    let folder = scratch.folder("kernels");
    for value in 0..2 {
        fs::write(folder.join(format!("k{value}.wgsl")), wgsl_kernel(value)).expect("a kernel");
    }
    folder
}

/// How many of `stderr`'s lines contain `text`.
fn lines_with(stderr: &str, text: &str) -> usize {
    stderr.lines().filter(|line| line.contains(text)).count()
}

// P5
#[test]
fn an_activity_or_batches_file_the_user_may_not_read_is_reported_with_what_to_do() {
    let scratch = Scratch::new("root-eacces");
    fs::set_permissions(scratch.path(), fs::Permissions::from_mode(0o755))
        .expect("the scratch folder is open to all");
    let root = scratch.join("store");
    drop(filled(&root, 2));
    for file in ["activity", "batches"] {
        assert!(root.join(file).is_file(), "{file} was written");
    }
    chown_all(&root, NOBODY);
    for file in ["activity", "batches"] {
        fs::set_permissions(root.join(file), fs::Permissions::from_mode(0o000)).expect("chmod");
    }
    for (arguments, file) in [(["stats"], "activity"), (["records"], "batches")] {
        let mut command = kiln(&root, &arguments);
        command.arg("-vv");
        child::run_as(&mut command, NOBODY);
        let output = match command.output() {
            Ok(output) => output,
            Err(error) => {
                kiln_engine::conformance::skip(
                    "reading the store as an unprivileged user",
                    &format!("cannot start kiln as uid {NOBODY}: {error}"),
                );
                return;
            }
        };
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{arguments:?}: {stderr}");
        let path = root.join(file);
        let said = lines_with(&stderr, &format!("{} ", path.display()))
            + lines_with(&stderr, &format!("{}:", path.display()));
        assert!(
            stderr.contains("chmod") && said >= 1,
            "{arguments:?} says it cannot read {file} and what to do: {stderr}"
        );
        // Once for this file (`stats` reads the batch records too, for the
        // request path's health, and says so of that file once as well).
        assert_eq!(
            lines_with(&stderr, &format!("chmod a+rw {}", path.display())),
            1,
            "{arguments:?} says it once: {stderr}"
        );
    }
}

// P5
#[test]
fn a_folder_holding_files_at_activity_or_batches_is_reported_and_the_store_goes_on() {
    let scratch = Scratch::new("root-folder");
    let folder = kernels(&scratch);
    let root = scratch.join("store");
    let first = warm(&root, &folder);
    assert!(first.status.success(), "{}", first.stderr);
    for file in ["activity", "batches"] {
        let path = root.join(file);
        fs::remove_file(&path).expect("the file was there");
        fs::create_dir(&path).expect("a folder in its place");
        fs::write(path.join("notes.txt"), b"someone's").expect("a file in it");
    }
    let again = warm(&root, &folder);
    assert!(
        again.status.success(),
        "the store is used: {}",
        again.stderr
    );
    let report = again.json();
    assert_eq!(
        backend(&report, "wgpu")["from_store"],
        2,
        "the store served its entries: {report:#}\n{}",
        again.stderr
    );
    for file in ["activity", "batches"] {
        assert_eq!(
            lines_with(&again.stderr, &format!("{}", root.join(file).display())),
            1,
            "{file} is named once: {}",
            again.stderr
        );
        assert_eq!(
            fs::read(root.join(file).join("notes.txt")).expect("left as it was"),
            b"someone's"
        );
    }
    assert!(
        again.stderr.contains("move the folder away"),
        "{}",
        again.stderr
    );
    for arguments in [&["stats"][..], &["records"], &["verify"], &["gc"]] {
        let output = run(&root, arguments);
        assert!(
            output.status.success(),
            "{arguments:?} goes on: {}",
            output.stderr
        );
        assert!(
            output.stderr.contains("move the folder away"),
            "{arguments:?} says what is wrong: {}",
            output.stderr
        );
    }
}

// P5
#[test]
fn a_store_that_lost_only_its_layout_file_is_marked_again_and_serves_its_entries() {
    let scratch = Scratch::new("root-layout");
    let folder = kernels(&scratch);
    let root = scratch.join("store");
    let first = warm(&root, &folder);
    assert!(first.status.success(), "{}", first.stderr);
    fs::remove_file(root.join("LAYOUT")).expect("the marker was there");
    // Read only, it cannot be marked: the run goes on without it, saying
    // how to mark it again.
    let read_only = finish(
        kiln(&root, &["--json", "warm", "--backend", "wgpu"])
            .arg(&folder)
            .env("MESA_SHADER_CACHE_DIR", root.with_extension("mesa"))
            .env("KILN_CACHE_READ_ONLY", "1"),
    );
    assert!(read_only.status.success(), "{}", read_only.stderr);
    assert!(
        read_only.stderr.contains("KILN_CACHE_READ_ONLY"),
        "{}",
        read_only.stderr
    );
    assert_eq!(
        backend(&read_only.json(), "wgpu")["compiled"],
        2,
        "{}",
        read_only.stderr
    );
    assert!(
        !root.join("LAYOUT").exists(),
        "a read-only run writes nothing"
    );
    let again = warm(&root, &folder);
    assert!(again.status.success(), "{}", again.stderr);
    let report = again.json();
    assert_eq!(
        backend(&report, "wgpu")["from_store"],
        2,
        "{report:#}\n{}",
        again.stderr
    );
    assert_eq!(
        lines_with(&again.stderr, "LAYOUT"),
        1,
        "said once: {}",
        again.stderr
    );
    assert!(root.join("LAYOUT").is_file(), "marked again");
    // A folder with anything else in it is still refused.
    fs::remove_file(root.join("LAYOUT")).expect("the marker was there");
    fs::write(root.join("notes.txt"), b"someone's").expect("a file of someone's");
    let refused = warm(&root, &folder);
    assert!(
        refused.stderr.contains("not a kiln store"),
        "{}",
        refused.stderr
    );
    assert!(!root.join("LAYOUT").exists(), "not marked");
}
