//! The packed store repairs what it refuses (P2): a pack whose header is
//! damaged, cut or emptied, a pipe in place of a pack, a folder or a link
//! in place of an index. Each case is then stored and found again by the
//! next process, instead of compiling on every run in silence; what was in
//! the way and is not kiln's is moved aside, never followed or removed.
//! Orphan packs are swept by a gc.

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kiln_engine::{ArtifactStore, ArtifactStoreExt, Lookup, StoreOutcome};
use kiln_store::{DiskStore, Limits};
use kiln_test_support::Scratch;
use kiln_tests::{fake_key, open_store_packing};

const KEYS: u32 = 6;

fn open(root: &Path) -> DiskStore {
    open_store_packing(root, 64 << 10)
}

fn bytes_of(number: u32) -> Vec<u8> {
    vec![number as u8 + 1; 500]
}

fn put_all(store: &DiskStore) {
    for number in 0..KEYS {
        assert!(matches!(
            store.put(&fake_key(number), None, &bytes_of(number), Duration::ZERO),
            StoreOutcome::Stored { .. }
        ));
    }
}

/// How many of the keys a fresh store (the next process) finds.
fn found(root: &Path) -> u32 {
    let store = open(root);
    (0..KEYS)
        .filter(|number| matches!(store.lookup(&fake_key(*number)), Lookup::Hit { .. }))
        .count() as u32
}

fn files_ending(root: &Path, ending: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(root.join("packs"))
        .expect("a packs folder")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.to_string_lossy().ends_with(ending))
        .collect();
    found.sort();
    found
}

/// Damages every shard with `damage`, then checks that the keys are gone,
/// that storing them again keeps them, and that the next process finds
/// them all.
fn repaired_after(case: &str, damage: impl Fn(&Path)) -> PathBuf {
    let scratch = Scratch::new(&format!("repair-{case}"));
    let root = scratch.folder("store");
    put_all(&open(&root));
    assert_eq!(found(&root), KEYS, "{case}: stored");
    damage(&root);
    assert!(found(&root) < KEYS, "{case}: the damage loses entries");
    put_all(&open(&root));
    assert_eq!(
        found(&root),
        KEYS,
        "{case}: stored again, every entry is found by the next process"
    );
    // Kept for the caller's checks: the scratch folder goes with it.
    let kept = std::env::temp_dir().join(format!("kiln-repair-kept-{case}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&kept);
    fs::rename(scratch.path(), &kept).expect("keeps the folder");
    kept.join("store")
}

fn mkfifo(path: &Path) {
    let name = CString::new(path.as_os_str().as_bytes()).expect("no NUL");
    // SAFETY: `name` is a NUL-terminated path alive for the call.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o644) }, 0, "{path:?}");
}

#[test]
fn p2_a_pack_whose_header_is_damaged_cut_or_emptied_is_started_afresh() {
    for (case, cut) in [("flipped", None), ("cut", Some(10)), ("emptied", Some(0))] {
        let root = repaired_after(case, |root| {
            for pack in files_ending(root, ".pack") {
                match cut {
                    Some(length) => {
                        let file = fs::OpenOptions::new()
                            .write(true)
                            .open(&pack)
                            .expect("opens");
                        file.set_len(length).expect("cuts");
                    }
                    None => {
                        let mut bytes = fs::read(&pack).expect("reads");
                        bytes[3] ^= 0x20;
                        fs::write(&pack, bytes).expect("writes");
                    }
                }
            }
        });
        drop(fs::remove_dir_all(root.parent().expect("a parent")));
    }
}

#[test]
fn p2_a_pipe_in_place_of_a_pack_is_moved_aside_and_the_shard_starts_afresh() {
    let root = repaired_after("fifo", |root| {
        for pack in files_ending(root, ".pack") {
            fs::remove_file(&pack).expect("removes");
            mkfifo(&pack);
        }
    });
    let aside = files_ending(&root, "")
        .into_iter()
        .filter(|path| path.to_string_lossy().contains(".not-kiln-"));
    let pipes = aside
        .filter(|path| {
            use std::os::unix::fs::FileTypeExt;
            fs::symlink_metadata(path).is_ok_and(|found| found.file_type().is_fifo())
        })
        .count();
    assert!(pipes > 0, "the pipes were moved aside, not removed");
    drop(fs::remove_dir_all(root.parent().expect("a parent")));
}

#[test]
fn p2_a_folder_or_link_in_place_of_an_index_is_moved_aside_never_followed() {
    let outside = Scratch::new("repair-outside");
    let target = outside.join("someone-elses-file");
    fs::write(&target, b"not kiln's").expect("writes");
    for case in ["folder", "link"] {
        let target = target.clone();
        let root = repaired_after(case, move |root| {
            for index in files_ending(root, ".idx") {
                fs::remove_file(&index).expect("removes");
                if case == "folder" {
                    fs::create_dir(&index).expect("a folder");
                    fs::write(index.join("inside"), b"kept").expect("a file inside");
                } else {
                    std::os::unix::fs::symlink(&target, &index).expect("a link");
                }
            }
        });
        let moved: Vec<PathBuf> = files_ending(&root, "")
            .into_iter()
            .filter(|path| path.to_string_lossy().contains(".idx.not-kiln-"))
            .collect();
        assert!(!moved.is_empty(), "{case}: moved aside");
        if case == "folder" {
            assert!(moved.iter().any(|path| path.join("inside").exists()));
        }
        drop(fs::remove_dir_all(root.parent().expect("a parent")));
    }
    assert_eq!(fs::read(&target).expect("reads"), b"not kiln's");
}

#[test]
fn p2_a_pack_no_index_names_is_swept_by_a_gc() {
    let scratch = Scratch::new("repair-orphan");
    let root = scratch.folder("store");
    let store = open(&root);
    put_all(&store);
    let pack = files_ending(&root, ".pack").remove(0);
    let name = pack
        .file_name()
        .expect("a name")
        .to_string_lossy()
        .into_owned();
    // What a full disk leaves: a pack of a generation its index never came
    // to name.
    let orphan = root
        .join("packs")
        .join(format!("{}-{:016x}.pack", &name[..3], 0x5eed_u64));
    fs::write(&orphan, b"kilnpack").expect("an orphan");
    let limits = Limits {
        max_bytes: u64::MAX,
        max_entries: u64::MAX,
    };
    store.collect(limits, &mut |_| {}).expect("collects");
    assert!(!orphan.exists(), "the orphan pack was swept");
    assert_eq!(found(&root), KEYS);
}
