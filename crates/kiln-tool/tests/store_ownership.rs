//! The `kiln` binary never touches what is not the store's own: no file
//! outside the store through a symbolic link, no folder that is not a
//! store, no record taken for dangling because its object could not be
//! read.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use kiln_test_support::files::{chown_all, plant, snapshot};
use kiln_test_support::{NOBODY, child, require};
use support::{Scratch, filled, kiln, object_of, run};

/// Files of a user's, at `folder/<shard>/<file>` as a store's first shard
/// level holds them, some named as a store names its own.
fn decoys(folder: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    plant(
        folder,
        [
            ("0", "notes.txt".to_owned()),
            ("0", "ab".repeat(32)),
            ("f", "0".repeat(64)),
            ("", "999999999-0.part".to_owned()),
        ]
        .map(|(shard, name)| (Path::new(shard).join(name), b"the user's work")),
    );
    snapshot(folder)
}

/// A store of three kernels and, beside it in one scratch folder, a folder
/// of a user's files that no command may change.
struct StoreBesideDecoys {
    /// The folder of both, removed with the test.
    _scratch: Scratch,
    root: PathBuf,
    outside: PathBuf,
    before: BTreeMap<PathBuf, Vec<u8>>,
}

impl StoreBesideDecoys {
    fn new(test: &str) -> Self {
        let scratch = Scratch::new(test);
        let root = scratch.join("store");
        filled(&root, 3);
        let outside = scratch.join("outside");
        let before = decoys(&outside);
        Self {
            _scratch: scratch,
            root,
            outside,
            before,
        }
    }

    fn assert_outside_unchanged(&self) {
        assert_eq!(
            snapshot(&self.outside),
            self.before,
            "nothing outside the store changed"
        );
    }
}

#[test]
fn verify_never_removes_files_outside_the_store_through_a_symlinked_shard() {
    let store = StoreBesideDecoys::new("verify-link");
    symlink(&store.outside, store.root.join("records/77")).expect("a link in records");
    let output = run(&store.root, &["verify", "--json"]);
    store.assert_outside_unchanged();
    let report: serde_json::Value =
        serde_json::from_str(&output.stdout).expect("verify printed JSON");
    assert!(
        report["unchecked"].to_string().contains("records/77"),
        "the link is reported: {report:#}"
    );
}

#[test]
fn gc_never_empties_the_folder_staging_links_to() {
    let store = StoreBesideDecoys::new("gc-link");
    fs::remove_dir_all(store.root.join("staging")).expect("staging goes");
    symlink(&store.outside, store.root.join("staging")).expect("a link at staging");
    let output = run(&store.root, &["gc", "--max-size", "0", "--json"]);
    store.assert_outside_unchanged();
    assert!(output.status.success(), "gc ran: {}", output.stderr);
}

#[test]
fn warm_never_writes_through_a_symlinked_shard() {
    let scratch = Scratch::new("warm-link");
    let root = scratch.join("store");
    drop(filled(&root, 0));
    let outside = scratch.join("outside");
    fs::create_dir_all(&outside).expect("the outside folder");
    for tree in ["objects", "records", "kernels"] {
        for shard in 0..=255u8 {
            symlink(&outside, root.join(tree).join(format!("{shard:02x}")))
                .expect("a link for every shard");
        }
    }
    let kernels = scratch.join("kernels");
    fs::create_dir_all(&kernels).expect("a kernel folder");
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/kernels");
    fs::copy(examples.join("gelu.wgsl"), kernels.join("gelu.wgsl")).expect("a kernel");
    let output = run(
        &root,
        &["--json", "warm", kernels.to_str().expect("a UTF-8 path")],
    );
    assert_eq!(
        snapshot(&outside),
        BTreeMap::new(),
        "nothing was written outside the store: {}",
        output.stderr
    );
    let stats = run(&root, &["--json", "stats"]);
    let stats: serde_json::Value = serde_json::from_str(&stats.stdout).expect("stats JSON");
    assert!(
        stats["entries"].as_u64().unwrap_or(0) > 0,
        "the kernels were stored inside the store: {stats:#}"
    );
}

#[test]
fn verify_and_gc_refuse_a_folder_that_is_not_a_store_and_change_nothing() {
    let scratch = Scratch::new("project");
    let project = scratch.join("project");
    plant(
        &project,
        [
            ("README", b"a project".as_slice()),
            ("objects/ab/c/notes", b"the user's notes"),
            (&format!("records/ab/c/{}", "ab".repeat(32)), b"results"),
            ("staging/draft.txt", b"a draft"),
        ],
    );
    let before = snapshot(&project);
    for arguments in [&["verify"][..], &["gc", "--max-size", "0"]] {
        let output = run(&project, arguments);
        let stderr = &output.stderr;
        assert_eq!(snapshot(&project), before, "{arguments:?} changed nothing");
        for name in ["LAYOUT", "locks", "usage"] {
            assert!(
                !project.join(name).exists(),
                "{arguments:?} wrote no {name}"
            );
        }
        assert!(
            !output.status.success() && stderr.contains("not a kiln store"),
            "{arguments:?} refuses and says why: {stderr}"
        );
    }
}

#[test]
fn verify_as_a_user_who_may_not_read_a_shard_reports_it_and_keeps_its_records() {
    if !require::is_root() {
        require::skip_without_root(
            "verifying as an unprivileged user",
            "only root can give the store to user 65534 and run kiln as it",
        );
        return;
    }
    let scratch = Scratch::new("eacces");
    fs::set_permissions(scratch.path(), fs::Permissions::from_mode(0o755))
        .expect("the scratch folder is open to all");
    let root = scratch.join("store");
    let store = filled(&root, 2);
    let object = object_of(&store, 1);
    let shard = object
        .parent()
        .and_then(Path::parent)
        .expect("objects live two shards deep")
        .to_path_buf();
    let records = snapshot(&root.join("records"));
    chown_all(&root, NOBODY);
    fs::set_permissions(&shard, fs::Permissions::from_mode(0o000)).expect("chmod 000");
    let mut command = kiln(&root, &["verify", "--json"]);
    child::run_as(&mut command, NOBODY);
    let output = command.output();
    fs::set_permissions(&shard, fs::Permissions::from_mode(0o755)).expect("chmod back");
    let output = match output {
        Ok(output) => output,
        Err(error) => {
            require::skip_without_root(
                "verifying as an unprivileged user",
                &format!("cannot start kiln as uid {NOBODY}: {error}"),
            );
            return;
        }
    };
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!(
            "verify printed JSON: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    assert_eq!(report["dangling_records"], 0, "{report:#}");
    assert_eq!(
        snapshot(&root.join("records")),
        records,
        "every record stays"
    );
    assert!(
        report["unchecked"]
            .to_string()
            .contains(shard.to_str().expect("a UTF-8 path")),
        "the shard it could not read is named: {report:#}"
    );
}
