//! The store never touches what is not its own: it follows no symbolic link
//! out of its root, adopts no folder that is not a store, takes no error for
//! "gone", and rebuilds its own skeleton. Real files, real processes; the
//! test that needs an unprivileged user runs its verify in a child process
//! that drops to one.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kiln_engine::fake::{FakeKernel, FakeTarget};
use kiln_engine::{ArtifactStore, ArtifactStoreExt, KernelLoader, LoaderConfig, Lookup};
use kiln_store::{DiskStore, Error, Limits, StoreConfig, VerifyReport};
use kiln_test_support::files::{chown_all, plant, snapshot};
use kiln_test_support::{NOBODY, Scratch, child, require};
use kiln_tests::{fake_key, open_store};

/// Loads kernels `numbers` through a loader on `store`, which stores them.
fn load(store: &DiskStore, numbers: impl IntoIterator<Item = u32>) {
    let shared: Arc<dyn ArtifactStore> = Arc::new(store.clone());
    let mut loader =
        KernelLoader::with_config(FakeTarget::on_store(shared), LoaderConfig::default());
    for number in numbers {
        let kernel = FakeKernel::new(number);
        loader
            .load(&kernel, &kernel.artifact_id())
            .expect("the fake kernel loads");
    }
}

/// Files no store wrote, some named as a store names its own, at
/// `folder/<shard>/<file>` as a store's first shard level holds them.
fn decoys(folder: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    plant(
        folder,
        [
            ("0", "notes.txt".to_owned()),
            ("0", "ab".repeat(32)),
            ("f", "data.bin".to_owned()),
            ("f", "0".repeat(64)),
            ("", "999999999-0.part".to_owned()),
            ("", "draft.txt".to_owned()),
        ]
        .map(|(shard, name)| (Path::new(shard).join(name), b"the user's work")),
    );
    snapshot(folder)
}

#[test]
fn verify_and_gc_never_follow_a_symlinked_shard_or_staging_out_of_the_store() {
    let scratch = Scratch::new("ownership-follow");
    let root = scratch.join("store");
    let store = open_store(&root);
    load(&store, 0..4);
    let (records, objects, staging) = (
        scratch.join("records-outside"),
        scratch.join("objects-outside"),
        scratch.join("staging-outside"),
    );
    let before: Vec<_> = [&records, &objects, &staging]
        .into_iter()
        .map(|folder| decoys(folder))
        .collect();
    symlink(&records, root.join("records/77")).expect("a link in records");
    fs::create_dir_all(root.join("objects/78")).expect("an object shard");
    symlink(objects.join("0"), root.join("objects/78/9")).expect("a link in objects");
    fs::remove_dir_all(root.join("staging")).expect("staging goes");
    symlink(&staging, root.join("staging")).expect("a link at staging");

    let report = store.verify(&mut |_| {}).expect("verify runs");
    let _ = store.collect(
        Limits {
            max_bytes: 0,
            max_entries: 0,
        },
        &mut |_| {},
    );
    let after: Vec<_> = [&records, &objects, &staging]
        .into_iter()
        .map(|folder| snapshot(folder))
        .collect();
    assert_eq!(after, before, "nothing outside the store changed");
    assert!(
        !report.is_clean(),
        "links where folders should be are reported: {report:?}"
    );
    for link in ["records/77", "objects/78/9", "staging"] {
        assert!(
            report
                .unchecked
                .iter()
                .any(|(path, _)| path.ends_with(link)),
            "{link} is named among what verify could not check: {report:?}"
        );
    }
}

#[test]
fn a_put_never_writes_through_a_symlinked_shard_or_staging() {
    let scratch = Scratch::new("ownership-put");
    let root = scratch.join("store");
    let outside = scratch.join("outside");
    fs::create_dir_all(&outside).expect("the outside folder");
    let store = open_store(&root);
    for tree in ["objects", "records", "kernels"] {
        for shard in 0..=255u8 {
            symlink(&outside, root.join(tree).join(format!("{shard:02x}")))
                .expect("a link for every shard");
        }
    }
    fs::remove_dir_all(root.join("staging")).expect("staging goes");
    symlink(&outside, root.join("staging")).expect("a link at staging");

    load(&store, 0..3);
    assert_eq!(
        snapshot(&outside),
        BTreeMap::new(),
        "nothing was written outside the store"
    );
    for number in 0..3 {
        assert!(
            matches!(store.lookup(&fake_key(number)), Lookup::Hit { .. }),
            "kernel {number} was stored inside the store"
        );
    }
}

#[test]
fn a_folder_that_is_neither_empty_nor_a_store_is_refused_and_left_as_it_was() {
    let scratch = Scratch::new("ownership-project");
    let project = scratch.join("project");
    plant(
        &project,
        [
            ("README", b"a project".as_slice()),
            ("objects/ab/c/notes", b"the user's notes"),
            ("records/ab/c/results.csv", b"1,2,3"),
            (
                &format!("records/ab/c/{}", "ab".repeat(32)),
                b"not a record",
            ),
            ("staging/draft.txt", b"a draft"),
            ("staging/999999999-0.part", b"not a staging file"),
        ],
    );
    let before = snapshot(&project);
    let names = |folder: &Path| -> Vec<_> {
        let mut names: Vec<_> = fs::read_dir(folder)
            .expect("the folder lists")
            .flatten()
            .map(|entry| entry.file_name())
            .collect();
        names.sort();
        names
    };
    let top = names(&project);

    let opened = DiskStore::open(StoreConfig::at(&project));
    if let Ok(store) = &opened {
        let _ = store.verify(&mut |_| {});
        let _ = store.collect(
            Limits {
                max_bytes: 0,
                max_entries: 0,
            },
            &mut |_| {},
        );
    }
    assert_eq!(snapshot(&project), before, "no file of the project changed");
    assert_eq!(names(&project), top, "nothing was added to the project");
    match opened {
        Err(error @ Error::NotAStore { .. }) => {
            let message = error.to_string();
            assert!(
                message.contains("not a kiln store") && message.contains("empty"),
                "the refusal says what to do: {message}"
            );
        }
        other => panic!("a project folder is refused as a store: {other:?}"),
    }
}

#[test]
fn an_empty_folder_or_one_whose_store_creation_died_becomes_a_store() {
    let scratch = Scratch::new("ownership-empty");
    let empty = scratch.join("empty");
    fs::create_dir_all(&empty).expect("an empty folder");
    load(&open_store(&empty), [1]);
    // A store whose creator died before it wrote the marker: only staging
    // files under their own names.
    let unfinished = scratch.join("unfinished");
    fs::create_dir_all(unfinished.join("staging")).expect("a staging folder");
    fs::write(unfinished.join("staging/999999999-0.part"), b"kiln").expect("a staging file");
    let store = open_store(&unfinished);
    load(&store, [1]);
    assert!(matches!(store.lookup(&fake_key(1)), Lookup::Hit { .. }));
}

#[test]
fn processes_opening_one_new_folder_at_once_all_open_the_store_they_made() {
    // Each finds no marker; the first to finish writes it and the skeleton
    // before another lists the folder, which is then a store, not a
    // foreign folder.
    let scratch = Scratch::new("ownership-race");
    for round in 0..40 {
        let root = scratch.join(&format!("store-{round}"));
        let opened: Vec<Result<DiskStore, Error>> = std::thread::scope(|scope| {
            let openers: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| DiskStore::open(StoreConfig::at(root.clone()))))
                .collect();
            openers
                .into_iter()
                .map(|opener| opener.join().expect("an opener does not panic"))
                .collect()
        });
        for result in opened {
            assert!(result.is_ok(), "round {round}: {:?}", result.err());
        }
    }
}

#[test]
fn a_store_of_the_previous_layout_keeps_its_entries_and_is_upgraded() {
    // A store written before named blobs (layout 1) is layout 3 without
    // them and without packs: a new kiln serves what it holds, read-only or
    // not, and marks it as layout 3 once it may write, so an older kiln
    // does not take its blobs for damage nor miss its packed entries.
    let scratch = Scratch::new("ownership-layout-1");
    let root = scratch.join("store");
    load(&open_store(&root), [1]);
    fs::write(root.join("LAYOUT"), "kiln store layout 1\n").expect("the old marker");
    let read_only = DiskStore::open(StoreConfig {
        read_only: true,
        ..StoreConfig::at(root.clone())
    })
    .expect("a layout 1 store opens to read");
    assert!(matches!(read_only.lookup(&fake_key(1)), Lookup::Hit { .. }));
    assert_eq!(
        fs::read_to_string(root.join("LAYOUT")).expect("a marker"),
        "kiln store layout 1\n",
        "a read-only open writes nothing"
    );
    let store = open_store(&root);
    assert!(matches!(store.lookup(&fake_key(1)), Lookup::Hit { .. }));
    assert_eq!(
        fs::read_to_string(root.join("LAYOUT"))
            .expect("a marker")
            .trim(),
        "kiln store layout 3"
    );
}

#[test]
fn files_where_skeleton_folders_should_be_are_replaced_and_the_store_works() {
    let scratch = Scratch::new("ownership-skeleton");
    let root = scratch.join("store");
    drop(open_store(&root));
    for folder in ["objects", "staging", "kernels"] {
        fs::remove_dir_all(root.join(folder)).expect("the folder goes");
        fs::write(root.join(folder), b"damage").expect("a file in its place");
    }
    let store = DiskStore::open(StoreConfig {
        collects_automatically: false,
        ..StoreConfig::at(&root)
    })
    .expect("a damaged skeleton is rebuilt");
    load(&store, [1]);
    assert!(matches!(store.lookup(&fake_key(1)), Lookup::Hit { .. }));
    assert!(store.verify(&mut |_| {}).expect("verify runs").is_clean());
}

#[test]
fn a_folder_at_locks_is_removed_when_empty_and_reported_when_not() {
    let scratch = Scratch::new("ownership-locks");
    let root = scratch.join("store");
    drop(open_store(&root));
    fs::remove_file(root.join("locks")).expect("the lock file goes");
    fs::create_dir(root.join("locks")).expect("an empty folder at locks");
    load(&open_store(&root), [1]);

    fs::remove_file(root.join("locks")).expect("the lock file goes");
    fs::create_dir(root.join("locks")).expect("a folder at locks");
    fs::write(root.join("locks/keep"), b"someone's").expect("a file in it");
    match DiskStore::open(StoreConfig::at(&root)) {
        Err(error @ Error::Damaged { .. }) => {
            assert!(
                error.to_string().contains("locks"),
                "the error names what it could not repair: {error}"
            );
        }
        other => panic!("a folder at locks that holds files is reported: {other:?}"),
    }
    assert!(
        root.join("locks/keep").exists(),
        "the folder's file is kept"
    );
}

#[test]
fn verify_reports_a_folder_where_a_file_should_be() {
    let scratch = Scratch::new("ownership-unchecked");
    let root = scratch.join("store");
    let store = open_store(&root);
    load(&store, [1, 2]);
    let odd = store.object_path(&[0x12; 32]);
    fs::create_dir_all(&odd).expect("a folder named as an object");
    let report = store.verify(&mut |_| {}).expect("verify runs");
    assert!(
        !report.is_clean(),
        "a skipped folder is reported: {report:?}"
    );
    assert!(
        report.unchecked.iter().any(|(path, _)| path == &odd),
        "{report:?}"
    );
    assert!(odd.exists(), "and left alone");
}

/// Sets the modification time of `path` to `age` ago.
fn age(path: &Path, age: Duration) {
    let when = SystemTime::now() - age;
    fs::File::options()
        .write(true)
        .open(path)
        .and_then(|file| file.set_times(fs::FileTimes::new().set_modified(when)))
        .expect("the file's time is set");
}

#[test]
fn staging_files_of_dead_processes_are_swept_at_open_at_most_once_an_hour() {
    let scratch = Scratch::new("ownership-sweep");
    let root = scratch.join("store");
    drop(open_store(&root));
    let staging = root.join("staging");
    let stale = staging.join("999999999-0.part");
    let young = staging.join("999999999-1.part");
    let foreign = staging.join("notes.txt");
    for path in [&stale, &young, &foreign] {
        fs::write(path, b"bytes").expect("a staging file");
    }
    age(&stale, Duration::from_secs(120));
    age(&foreign, Duration::from_secs(120));
    // The store's own last sweep was long ago.
    let swept = root.join("swept");
    if swept.exists() {
        age(&swept, Duration::from_secs(7200));
    }
    drop(open_store(&root));
    assert!(
        !stale.exists(),
        "an old file of a dead process goes at open"
    );
    assert!(young.exists(), "a file younger than a minute stays");
    assert!(foreign.exists(), "a name the store does not give stays");

    let later = staging.join("999999999-2.part");
    fs::write(&later, b"bytes").expect("a staging file");
    age(&later, Duration::from_secs(120));
    drop(open_store(&root));
    assert!(later.exists(), "no second sweep within the hour");
    age(&swept, Duration::from_secs(7200));
    drop(open_store(&root));
    assert!(!later.exists(), "a sweep an hour later");
}

/// The variable that makes this test binary the unprivileged verifier.
const VERIFY_AS_NOBODY: &str = "KILN_TEST_VERIFY_AS_NOBODY";

/// Runs this test, as user `NOBODY`, to verify the store at `root` and print
/// its report; `Err` with the reason when that cannot be done here.
fn verify_as_nobody(root: &Path) -> Result<VerifyReport, String> {
    let mut verifier = child::rerun(
        "a_shard_verify_may_not_read_is_reported_and_its_records_are_kept",
        VERIFY_AS_NOBODY,
        root,
    );
    child::run_as(&mut verifier, NOBODY);
    let output = verifier
        .output()
        .map_err(|error| format!("cannot start a process as uid {NOBODY}: {error}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find_map(|line| line.split_once("verify report: ").map(|(_, report)| report))
        .ok_or_else(|| {
            format!(
                "the verifier printed no report:\n{stdout}\n{}",
                String::from_utf8_lossy(&output.stderr)
            )
        })?;
    serde_json::from_str(line).map_err(|error| error.to_string())
}

#[test]
fn a_shard_verify_may_not_read_is_reported_and_its_records_are_kept() {
    if let Some(root) = std::env::var_os(VERIFY_AS_NOBODY) {
        // The child: verify as the unprivileged user, print the report.
        let store = DiskStore::open(StoreConfig::at(PathBuf::from(root))).expect("the store opens");
        let report = store.verify(&mut |_| {}).expect("verify runs");
        println!(
            "verify report: {}",
            serde_json::to_string(&report).expect("the report serializes")
        );
        return;
    }
    if !require::is_root() {
        require::skip_without_root(
            "verifying as an unprivileged user",
            "only root can give the store to user 65534 and run a verifier as it",
        );
        return;
    }
    let scratch = Scratch::new("ownership-eacces");
    fs::set_permissions(scratch.path(), fs::Permissions::from_mode(0o755))
        .expect("the scratch folder is open to all");
    let root = scratch.join("store");
    let store = open_store(&root);
    load(&store, [1, 2]);
    let record = store.record(&fake_key(1)).expect("kernel 1 is stored");
    let object = store.object_path(&record.object);
    let shard = object
        .parent()
        .and_then(Path::parent)
        .expect("objects live two shards deep")
        .to_path_buf();
    let records_before = snapshot(&root.join("records"));
    chown_all(&root, NOBODY);
    fs::set_permissions(&shard, fs::Permissions::from_mode(0o000)).expect("chmod 000");

    let verified = verify_as_nobody(&root);
    fs::set_permissions(&shard, fs::Permissions::from_mode(0o755)).expect("chmod back");
    let report = match verified {
        Ok(report) => report,
        Err(reason) => {
            require::skip_without_root("verifying as an unprivileged user", &reason);
            return;
        }
    };
    assert_eq!(report.dangling_records, 0, "{report:?}");
    assert_eq!(
        snapshot(&root.join("records")),
        records_before,
        "every record stays"
    );
    assert!(object.exists(), "the object stays");
    assert!(!report.is_clean(), "{report:?}");
    assert!(
        report
            .unchecked
            .iter()
            .any(|(path, _)| path.starts_with(&shard)),
        "the shard it could not read is named: {report:?}"
    );
}

/// Replaces the shard folder that holds `file` (`tree/ab/c/<name>`) at its
/// first level, `tree/ab`, with a link to `outside`, where a file of the
/// same name holding `bytes` waits at `outside/c/<name>`; returns that file.
fn link_shard_out(file: &Path, outside: &Path, bytes: &[u8]) -> PathBuf {
    let shard = file.parent().expect("a second shard level");
    let first = shard.parent().expect("a first shard level");
    let planted = outside
        .join(shard.file_name().expect("a shard name"))
        .join(file.file_name().expect("a file name"));
    fs::create_dir_all(planted.parent().expect("a folder")).expect("the outside folders");
    fs::write(&planted, bytes).expect("the outside file");
    fs::remove_dir_all(first).expect("the shard goes");
    symlink(outside, first).expect("a link in its place");
    planted
}

/// Stores kernel 1 as `artifact` in a store of `test`'s own, links the
/// shard of its file that `file_of` names out to a damaged copy, and checks
/// that a lookup misses (`why`) and removes nothing through the link.
fn assert_a_lookup_through_a_linked_shard_removes_nothing(
    test: &str,
    artifact: &[u8],
    file_of: impl Fn(&DiskStore) -> PathBuf,
    why: &str,
) {
    let scratch = Scratch::new(test);
    let store = open_store(&scratch.join("store"));
    store.put(&fake_key(1), None, artifact, Duration::ZERO);
    let damaged = link_shard_out(&file_of(&store), &scratch.join("outside"), b"damaged");
    assert!(
        matches!(store.lookup(&fake_key(1)), Lookup::Miss(_)),
        "{why}"
    );
    assert_eq!(fs::read(&damaged).expect("still there"), b"damaged");
}

#[test]
fn a_lookup_removes_nothing_through_a_symlinked_record_shard() {
    // A damaged file under the record's exact name, behind a link where the
    // record's shard should be.
    assert_a_lookup_through_a_linked_shard_removes_nothing(
        "ownership-lookup-record",
        b"small artifact",
        |store| store.record_path(&fake_key(1)),
        "a damaged record is no hit",
    );
}

#[test]
fn a_lookup_removes_nothing_through_a_symlinked_object_shard() {
    // A large artifact: its kernel's record points at the object.
    assert_a_lookup_through_a_linked_shard_removes_nothing(
        "ownership-lookup-object",
        &kiln_tests::pattern(1, 0, 64 << 10),
        |store| store.object_path(&store.record(&fake_key(1)).expect("stored").object),
        "an object of the wrong length is no hit",
    );
}

#[test]
fn a_put_clears_nothing_through_a_symlinked_record_shard() {
    // A folder outside the store stands at the record's name behind a link
    // where the record's shard should be: the put replaces the link and
    // leaves the folder and what it holds.
    let scratch = Scratch::new("ownership-clear");
    let store = open_store(&scratch.join("store"));
    store.put(&fake_key(1), None, b"first", Duration::ZERO);
    let record = store.record_path(&fake_key(1));
    let outside = scratch.join("outside");
    let planted = link_shard_out(&record, &outside, b"");
    fs::remove_file(&planted).expect("the planted file goes");
    fs::create_dir(&planted).expect("a folder at the record's name");
    fs::write(planted.join("results.csv"), b"1,2,3").expect("the user's file");
    let before = snapshot(&outside);

    store.put(&fake_key(1), None, b"second", Duration::ZERO);
    assert_eq!(snapshot(&outside), before, "nothing outside changed");
    match store.lookup(&fake_key(1)) {
        Lookup::Hit { artifact, .. } => assert_eq!(artifact, b"second"),
        Lookup::Miss(miss) => panic!("the entry was stored inside the store: {miss}"),
    }
}

#[test]
fn nothing_is_removed_from_a_store_whose_marker_is_gone() {
    let scratch = Scratch::new("ownership-marker");
    let root = scratch.join("store");
    let store = open_store(&root);
    store.put(&fake_key(1), None, b"small artifact", Duration::ZERO);
    let record = store.record_path(&fake_key(1));
    fs::write(&record, b"damaged").expect("the record is damaged");
    fs::remove_file(root.join("LAYOUT")).expect("the marker goes");

    assert!(matches!(store.lookup(&fake_key(1)), Lookup::Miss(_)));
    assert_eq!(fs::read(&record).expect("kept by the lookup"), b"damaged");
    match store.verify(&mut |_| {}) {
        Err(Error::NotAStore { .. }) => {}
        other => panic!("verify refuses a folder without the marker: {other:?}"),
    }
    assert_eq!(fs::read(&record).expect("kept by verify"), b"damaged");
}
