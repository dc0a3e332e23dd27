//! The disk store's writes against real limits: a file size limit, a full
//! disk, a read-only mount, damaged entries in the way of a put, and the
//! size limit at the end of every batch. Each test names the rule it proves.
//!
//! The tests that need a file system of their own mount a small tmpfs (CI
//! runs as root); where mounting is impossible they say why and skip.

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kiln_engine::fake::FakeKernel;
use kiln_engine::{
    ArtifactStore, ArtifactStoreExt, Claim, ClaimWait, Claims, KernelOutcome, Lookup, Miss,
    Records, StoreKey, StoreOutcome,
};
use kiln_store::error::{WriteCause, WriteFailure};
use kiln_store::{DiskStore, Error, StoreConfig};
use kiln_test_support::{Limit, Scratch, Tmpfs, child};
use kiln_tests::{fake_key, fake_text, load, loader_on, open_store, pattern};

/// Set in the environment of a test's own child process: what it runs.
const CHILD: &str = "KILN_STORE_WRITES_CHILD";
/// The store root a child process opens.
const CHILD_ROOT: &str = "KILN_STORE_WRITES_ROOT";

/// The source key stored beside kernel `number`'s own.
fn source_key(number: u32) -> StoreKey {
    StoreKey::for_source(
        &kiln_engine::fake::FakeCompiler::default_key_components(),
        &FakeKernel::new(number).artifact_id(),
        None,
        &format!("source of {number}"),
    )
}

/// Every file under `folder`, however deep.
fn files_under(folder: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![folder.to_path_buf()];
    while let Some(folder) = pending.pop() {
        let Ok(entries) = fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => pending.push(path),
                Ok(_) => found.push(path),
                Err(_) => {}
            }
        }
    }
    found
}

/// Bytes the store's files of entries take: objects and records, what its
/// size limit counts.
fn entry_bytes(root: &Path) -> u64 {
    ["objects", "records"]
        .iter()
        .flat_map(|tree| files_under(&root.join(tree)))
        .map(|path| fs::metadata(path).map_or(0, |found| found.len()))
        .sum()
}

fn hit(store: &DiskStore, key: &StoreKey) -> Option<Vec<u8>> {
    match store.lookup(key) {
        Lookup::Hit { artifact, .. } => Some(artifact),
        Lookup::Miss(Miss::Absent) => None,
        Lookup::Miss(miss) => panic!("a lookup after a failed write found a bad entry: {miss}"),
    }
}

#[test]
fn p5_a_write_past_the_file_size_limit_fails_and_the_process_lives() {
    // P5: the process runs under RLIMIT_FSIZE with SIGXFSZ at its default,
    // which kills a process that writes past the limit.
    if child::is_child(CHILD, "file-size-limit") {
        let root = PathBuf::from(std::env::var(CHILD_ROOT).expect("the parent names the root"));
        let store = DiskStore::open(StoreConfig {
            collects_automatically: false,
            ..StoreConfig::at(root)
        })
        .expect("the store opens under the limit");
        let small = pattern(1, 0, 1000);
        assert!(matches!(
            store.put(&fake_key(1), None, &small, Duration::ZERO),
            StoreOutcome::Stored { .. }
        ));
        let large = pattern(2, 0, 64 << 10);
        let outcome = store.put(&fake_key(2), None, &large, Duration::ZERO);
        assert!(
            matches!(outcome, StoreOutcome::Failed { .. }),
            "{outcome:?}"
        );
        assert_eq!(store.statistics().put_failures, 1);
        let failures = store.write_failures();
        assert_eq!(
            failures
                .iter()
                .map(|failure| (failure.cause, failure.count))
                .collect::<Vec<_>>(),
            [(WriteCause::FileSizeLimit, 1)],
            "{failures:?}"
        );
        assert!(
            hit(&store, &fake_key(1)) == Some(small),
            "the lookup found other bytes"
        );
        assert!(
            hit(&store, &fake_key(2)).is_none(),
            "the kernel's lookup misses"
        );
        return;
    }
    let scratch = Scratch::new("file-size-limit");
    let root = scratch.join("store");
    drop(open_store(&root));
    let mut child = child::rerun(
        "p5_a_write_past_the_file_size_limit_fails_and_the_process_lives",
        CHILD,
        "file-size-limit",
    );
    child.env(CHILD_ROOT, &root);
    child::limit(&mut child, Limit::FileSize(8192));
    let output = child.output().expect("the child runs");
    assert!(
        output.status.success(),
        "the child {}: {}{}",
        match output.status.signal() {
            Some(signal) => format!("was killed by signal {signal}"),
            None => format!("failed ({})", output.status),
        },
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn p5_a_full_disk_fails_a_write_with_its_cause_and_leaves_no_partial_entry() {
    // P3, P5: puts fill a 2 MB file system; those that do not fit fail,
    // say why, and leave nothing half-written.
    let scratch = Scratch::new("full-disk");
    let Some(mount) = Tmpfs::mount_or_skip("the full-disk test", &scratch.join("mnt"), "2m") else {
        return;
    };
    let store = DiskStore::open(StoreConfig {
        collects_automatically: false,
        ..StoreConfig::at(mount.path().join("store"))
    })
    .expect("the store opens");
    let mut stored = Vec::new();
    let mut failed = Vec::new();
    for number in 1..=40 {
        let bytes = pattern(number, 0, 100 << 10);
        match store.put(
            &fake_key(number),
            Some(&source_key(number)),
            &bytes,
            Duration::ZERO,
        ) {
            StoreOutcome::Stored { .. } => stored.push((number, bytes)),
            StoreOutcome::Failed { detail } => failed.push((number, detail)),
            StoreOutcome::Skipped => panic!("a writable store skipped a write"),
        }
    }
    assert!(!stored.is_empty() && !failed.is_empty(), "{failed:?}");
    for (_, detail) in &failed {
        assert!(detail.starts_with("disk full"), "{detail}");
    }
    assert_eq!(store.statistics().put_failures, failed.len() as u64);
    match store.write_failures().as_slice() {
        [
            WriteFailure {
                cause: WriteCause::DiskFull,
                detail,
                count,
            },
        ] => {
            assert_eq!(*count, failed.len() as u64);
            assert!(detail.contains("os error 28"), "{detail}");
        }
        other => panic!("one cause, a full disk: {other:?}"),
    }

    let root = store.root();
    assert_eq!(
        files_under(&root.join("staging")),
        Vec::<PathBuf>::new(),
        "no staging debris"
    );
    assert_eq!(
        files_under(&root.join("objects")).len(),
        stored.len(),
        "an object for every stored entry and none else"
    );
    assert_eq!(
        files_under(&root.join("records")).len(),
        2 * stored.len(),
        "two records for every stored entry and none else"
    );
    for (number, bytes) in &stored {
        assert!(
            hit(&store, &fake_key(*number)).as_ref() == Some(bytes),
            "the lookup found other bytes"
        );
        assert!(
            hit(&store, &source_key(*number)).as_ref() == Some(bytes),
            "the lookup found other bytes"
        );
    }
    for (number, _) in &failed {
        assert!(
            hit(&store, &fake_key(*number)).is_none(),
            "a failed put left an entry"
        );
        assert!(
            hit(&store, &source_key(*number)).is_none(),
            "a failed put left an entry"
        );
    }
}

/// A store holding kernels 1 to 3 on a tmpfs made read-only after, or
/// `None` after saying why there can be none.
fn read_only_store(scratch: &Scratch, what: &str) -> Option<(Tmpfs, PathBuf)> {
    let mount = Tmpfs::mount_or_skip(what, &scratch.join("mnt"), "8m")?;
    let root = mount.path().join("store");
    let store = open_store(&root);
    let mut loader = loader_on(&store);
    for number in 1..=3 {
        load(&mut loader, number);
    }
    drop(loader);
    drop(store);
    mount.remount_read_only();
    Some((mount, root))
}

#[test]
fn p5_a_store_on_a_read_only_mount_serves_hits_and_skips_writes() {
    // P5: a store baked into an image or on a read-only volume is read.
    let scratch = Scratch::new("read-only-mount");
    let Some((_mount, root)) = read_only_store(&scratch, "the read-only mount test") else {
        return;
    };
    let store = DiskStore::open(StoreConfig::at(&root)).expect("a read-only store opens");
    assert!(store.is_read_only(), "found read-only by itself");
    let mut loader = loader_on(&store);
    for number in [1, 2, 3, 9] {
        assert_eq!(load(&mut loader, number), fake_text(number));
    }
    let outcomes: Vec<KernelOutcome> = loader
        .records()
        .iter()
        .flat_map(|batch| batch.records.iter().map(|record| record.outcome))
        .collect();
    assert_eq!(
        outcomes,
        [
            KernelOutcome::FromStore,
            KernelOutcome::FromStore,
            KernelOutcome::FromStore,
            KernelOutcome::Compiled
        ]
    );
    let statistics = store.statistics();
    assert_eq!(statistics.hits, 3);
    assert_eq!(statistics.put_failures, 0, "{statistics:?}");
    assert_eq!(statistics.writes_skipped, 1, "{statistics:?}");
    assert_eq!(store.write_failures(), []);
    assert_eq!(loader.statistics().store_errors, 0);
    assert!(matches!(
        store.claim(&fake_key(10), ClaimWait::Patiently),
        Claim::Uncoordinated
    ));
    assert_eq!(store.usage().entries, 3, "what it holds can be read");
    let mut listed = 0;
    store.entries(&mut |_| listed += 1).expect("lists");
    assert_eq!(listed, 6, "a kernel record and a source record each");
    assert_eq!(store.targets().len(), 1);
    assert!(matches!(
        store.explain(&fake_key(1)),
        kiln_engine::Explanation::Held { .. }
    ));
}

#[test]
fn p5_a_store_asked_to_be_read_only_writes_nothing() {
    // P5: KILN_CACHE_READ_ONLY=1 on a store that could be written.
    let scratch = Scratch::new("read-only-asked");
    let root = scratch.join("store");
    let mut loader = loader_on(&open_store(&root));
    load(&mut loader, 1);
    drop(loader);
    let listing = |root: &Path| {
        let mut files: Vec<(PathBuf, Vec<u8>, Option<std::time::SystemTime>)> = files_under(root)
            .into_iter()
            .map(|path| {
                let found = fs::metadata(&path).expect("a file");
                let bytes = fs::read(&path).expect("readable");
                (path, bytes, found.modified().ok())
            })
            .collect();
        files.sort();
        files
    };
    let before = listing(&root);

    let store = DiskStore::open(StoreConfig {
        read_only: true,
        ..StoreConfig::at(&root)
    })
    .expect("opens");
    assert!(store.is_read_only());
    let mut loader = loader_on(&store);
    for number in [1, 2, 2] {
        assert_eq!(load(&mut loader, number), fake_text(number));
    }
    assert_eq!(store.statistics().hits, 1);
    assert_eq!(store.statistics().writes_skipped, 1);
    drop(loader);
    assert_eq!(listing(&root), before, "not a byte nor a time changed");
}

#[test]
fn p5_a_read_only_open_refuses_a_folder_that_holds_files_and_no_store() {
    // P5 and the store's ownership rule: a read-only open adopts by the
    // rules of a writable one, and writes nothing.
    let scratch = Scratch::new("read-only-project");
    let project = scratch.join("project");
    fs::create_dir_all(project.join("records")).expect("the project's folders");
    fs::write(project.join("README"), b"a project").expect("the project's file");
    let before = files_under(&project);
    let error = DiskStore::open(StoreConfig {
        read_only: true,
        ..StoreConfig::at(&project)
    })
    .expect_err("a project is no store");
    assert!(matches!(error, Error::NotAStore { .. }), "{error}");
    assert_eq!(files_under(&project), before, "nothing was written");
}

#[test]
fn p5_an_empty_read_only_folder_is_no_store_and_says_so() {
    // P5: nothing to read and nowhere to write: the caller runs storeless.
    let scratch = Scratch::new("read-only-empty");
    let Some(mount) = Tmpfs::mount_or_skip("the read-only empty test", &scratch.join("mnt"), "1m")
    else {
        return;
    };
    mount.remount_read_only();
    for root in [mount.path().to_path_buf(), mount.path().join("store")] {
        let error = DiskStore::open(StoreConfig::at(&root)).expect_err("no store, none to make");
        assert!(matches!(error, Error::ReadOnlyEmpty { .. }), "{error}");
    }
}

#[test]
fn p2_a_put_replaces_an_object_of_the_right_length_and_the_wrong_bytes() {
    // P2: an object damaged in place is not trusted by the next put.
    let scratch = Scratch::new("flipped-object");
    let store = open_store(&scratch.join("store"));
    let bytes = pattern(1, 0, 64 << 10);
    store.put(&fake_key(1), None, &bytes, Duration::ZERO);
    let record = store.record(&fake_key(1)).expect("stored");
    let object = store.object_path(&record.object);
    let mut damaged = fs::read(&object).expect("the object");
    damaged[40_000] ^= 0x10;
    fs::write(&object, &damaged).expect("damaged in place");
    // Another process publishing the same bytes: its put finds the object.
    assert!(matches!(
        store.put(&fake_key(1), None, &bytes, Duration::ZERO),
        StoreOutcome::Stored { .. }
    ));
    assert!(
        hit(&store, &fake_key(1)) == Some(bytes),
        "the lookup found other bytes"
    );
}

#[test]
fn p2_a_folder_in_place_of_a_record_or_an_object_is_replaced_by_the_next_put() {
    // P2, P5: what is not a file at an entry's path is removed, without
    // following a link out of the store, and the entry written.
    let scratch = Scratch::new("folder-entries");
    let store = open_store(&scratch.join("store"));
    let outside = scratch.join("outside");
    fs::create_dir_all(&outside).expect("a folder outside the store");
    fs::write(outside.join("keep"), b"not the store's").expect("a file outside");

    let bytes = pattern(1, 0, 64 << 10);
    store.put(&fake_key(1), None, &bytes, Duration::ZERO);
    let record_path = store.record_path(&fake_key(1));
    let object_path = store.object_path(&store.record(&fake_key(1)).expect("stored").object);
    fs::remove_file(&record_path).expect("removed");
    fs::create_dir(&record_path).expect("a folder for the record");
    fs::write(record_path.join("inside"), b"x").expect("a file in it");
    std::os::unix::fs::symlink(&outside, record_path.join("link")).expect("a link out");
    fs::remove_file(&object_path).expect("removed");
    fs::create_dir(&object_path).expect("a folder for the object");

    for round in 0..2 {
        assert!(
            matches!(
                store.put(&fake_key(1), None, &bytes, Duration::ZERO),
                StoreOutcome::Stored { .. }
            ),
            "round {round}"
        );
        assert!(
            hit(&store, &fake_key(1)).as_ref() == Some(&bytes),
            "the lookup found other bytes"
        );
    }
    assert_eq!(
        fs::read(outside.join("keep")).expect("still there"),
        b"not the store's"
    );
}

#[test]
fn p3_a_put_that_cannot_finish_takes_back_what_it_published() {
    // P3: the source record cannot be written (a file stands where its
    // shard folder belongs), after the object and the kernel's record were.
    let scratch = Scratch::new("take-back");
    let store = open_store(&scratch.join("store"));
    let shard = store
        .record_path(&source_key(1))
        .parent()
        .expect("a shard folder")
        .to_path_buf();
    fs::create_dir_all(shard.parent().expect("a shard above")).expect("the upper shard");
    fs::write(&shard, b"in the way").expect("a file in the way");
    let outcome = store.put(
        &fake_key(1),
        Some(&source_key(1)),
        &pattern(1, 0, 64 << 10),
        Duration::ZERO,
    );
    assert!(
        matches!(outcome, StoreOutcome::Failed { .. }),
        "{outcome:?}"
    );
    assert!(
        hit(&store, &fake_key(1)).is_none(),
        "the kernel's record went"
    );
    assert_eq!(
        files_under(&store.root().join("objects")),
        Vec::<PathBuf>::new(),
        "the object went"
    );
    assert_eq!(
        files_under(&store.root().join("staging")),
        Vec::<PathBuf>::new()
    );
    assert_eq!(store.usage().entries, 0);
}

#[test]
fn p6_the_store_is_within_its_size_limit_at_the_end_of_every_batch() {
    // P6: a batch that stores more than the limit ends within it.
    let scratch = Scratch::new("batch-limit");
    let max_bytes = 200 << 10;
    let store = DiskStore::open(StoreConfig {
        max_bytes,
        ..StoreConfig::at(scratch.join("store"))
    })
    .expect("the store opens");
    let mut loader = loader_on(&store);
    for batch in 0..3u32 {
        for number in batch * 24..(batch + 1) * 24 {
            let text = format!("{}\n", fake_text(number)).repeat(1500);
            loader.enqueue(Box::new(FakeKernel::new(number).sharing_source(&text)), ());
        }
        loader.compile_queued();
        let held = entry_bytes(store.root());
        assert!(
            held <= max_bytes,
            "batch {batch} ended with {held} bytes, over the limit of {max_bytes}"
        );
        assert!(store.usage().bytes <= max_bytes, "{:?}", store.usage());
    }
}
