//! The `kiln` binary never touches what is not the store's own: no file
//! outside the store through a symbolic link, no folder that is not a
//! store, no record taken for dangling because its object could not be
//! read.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use kiln_core::fake::{FakeKernel, FakeTarget};
use kiln_core::{KernelLoader, LoaderConfig};
use kiln_store::{DiskStore, StoreConfig};
use kiln_test_support::{NOBODY, Scratch, child};

const KILN: &str = env!("CARGO_BIN_EXE_kiln");

/// A store at `root` holding `kernels` fake kernels.
fn filled(root: &Path, kernels: u32) -> DiskStore {
    let store = DiskStore::open(StoreConfig::at(root)).expect("the store opens");
    let target = FakeTarget::on_store(Arc::new(store.clone()));
    let mut loader = KernelLoader::with_config(target, LoaderConfig::default());
    for number in 0..kernels {
        let kernel = FakeKernel::new(number);
        loader.load(&kernel, &kernel.artifact_id()).expect("loads");
    }
    store
}

/// `kiln --dir ROOT ARGUMENTS...`, prepared.
fn kiln(root: &Path, arguments: &[&str]) -> Command {
    let mut command = Command::new(KILN);
    command
        .arg("--dir")
        .arg(root)
        .args(arguments)
        .env_remove("KILN_CACHE_DISABLE");
    command
}

fn run(mut command: Command) -> Output {
    command.output().expect("kiln runs")
}

/// Every file under `folder` and what it holds, without following links.
fn snapshot(folder: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut found = BTreeMap::new();
    let mut pending = vec![folder.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in fs::read_dir(&current).expect("the folder lists").flatten() {
            if entry.file_type().expect("a file type").is_dir() {
                pending.push(entry.path());
            } else {
                found.insert(entry.path(), fs::read(entry.path()).unwrap_or_default());
            }
        }
    }
    found
}

/// Files of a user's, at `folder/<shard>/<file>` as a store's first shard
/// level holds them, some named as a store names its own.
fn decoys(folder: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    for (shard, name) in [
        ("0", "notes.txt".to_owned()),
        ("0", "ab".repeat(32)),
        ("f", "0".repeat(64)),
        ("", "999999999-0.part".to_owned()),
    ] {
        let shard = folder.join(shard);
        fs::create_dir_all(&shard).expect("a decoy folder");
        fs::write(shard.join(name), b"the user's work").expect("a decoy file");
    }
    snapshot(folder)
}

#[test]
fn verify_never_removes_files_outside_the_store_through_a_symlinked_shard() {
    let scratch = Scratch::new("verify-link");
    let root = scratch.join("store");
    filled(&root, 3);
    let outside = scratch.join("outside");
    let before = decoys(&outside);
    symlink(&outside, root.join("records/77")).expect("a link in records");
    let output = run(kiln(&root, &["verify", "--json"]));
    assert_eq!(
        snapshot(&outside),
        before,
        "nothing outside the store changed"
    );
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("verify printed JSON");
    assert!(
        report["unchecked"].to_string().contains("records/77"),
        "the link is reported: {report:#}"
    );
}

#[test]
fn gc_never_empties_the_folder_staging_links_to() {
    let scratch = Scratch::new("gc-link");
    let root = scratch.join("store");
    filled(&root, 3);
    let outside = scratch.join("outside");
    let before = decoys(&outside);
    fs::remove_dir_all(root.join("staging")).expect("staging goes");
    symlink(&outside, root.join("staging")).expect("a link at staging");
    let output = run(kiln(&root, &["gc", "--max-size", "0", "--json"]));
    assert_eq!(
        snapshot(&outside),
        before,
        "nothing outside the store changed"
    );
    assert!(
        output.status.success(),
        "gc ran: {}",
        String::from_utf8_lossy(&output.stderr)
    );
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
    let output = run(kiln(
        &root,
        &["--json", "warm", kernels.to_str().expect("a UTF-8 path")],
    ));
    assert_eq!(
        snapshot(&outside),
        BTreeMap::new(),
        "nothing was written outside the store: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stats = run(kiln(&root, &["--json", "stats"]));
    let stats: serde_json::Value = serde_json::from_slice(&stats.stdout).expect("stats JSON");
    assert!(
        stats["entries"].as_u64().unwrap_or(0) > 0,
        "the kernels were stored inside the store: {stats:#}"
    );
}

#[test]
fn verify_and_gc_refuse_a_folder_that_is_not_a_store_and_change_nothing() {
    let scratch = Scratch::new("project");
    let project = scratch.join("project");
    for (path, bytes) in [
        ("README", b"a project".as_slice()),
        ("objects/ab/c/notes", b"the user's notes"),
        (&format!("records/ab/c/{}", "ab".repeat(32)), b"results"),
        ("staging/draft.txt", b"a draft"),
    ] {
        let path = project.join(path);
        fs::create_dir_all(path.parent().expect("a folder")).expect("the project's folders");
        fs::write(path, bytes).expect("the project's files");
    }
    let before = snapshot(&project);
    for arguments in [&["verify"][..], &["gc", "--max-size", "0"]] {
        let output = run(kiln(&project, arguments));
        let stderr = String::from_utf8_lossy(&output.stderr);
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
    let scratch = Scratch::new("eacces");
    fs::set_permissions(scratch.path(), fs::Permissions::from_mode(0o755))
        .expect("the scratch folder is open to all");
    let root = scratch.join("store");
    let store = filled(&root, 2);
    let key = kiln_core::StoreKey::for_artifact(
        &kiln_core::fake::FakeCompiler::default_key_components(),
        &FakeKernel::new(1).artifact_id(),
        None,
    );
    let object = store.object_path(&store.record(&key).expect("stored").object);
    let shard = object
        .parent()
        .and_then(Path::parent)
        .expect("objects live two shards deep")
        .to_path_buf();
    let records = snapshot(&root.join("records"));
    let mut pending = vec![root.clone()];
    while let Some(path) = pending.pop() {
        std::os::unix::fs::chown(&path, Some(NOBODY), Some(NOBODY)).expect("chown");
        if path.is_dir() {
            pending.extend(
                fs::read_dir(&path)
                    .expect("lists")
                    .flatten()
                    .map(|e| e.path()),
            );
        }
    }
    fs::set_permissions(&shard, fs::Permissions::from_mode(0o000)).expect("chmod 000");
    let mut command = kiln(&root, &["verify", "--json"]);
    child::run_as(&mut command, NOBODY);
    let output = command.output();
    fs::set_permissions(&shard, fs::Permissions::from_mode(0o755)).expect("chmod back");
    let output = match output {
        Ok(output) => output,
        Err(error) => {
            kiln_core::conformance::skip(
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
