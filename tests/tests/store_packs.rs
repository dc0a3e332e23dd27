//! Packed entries (F10) against real files: what a store of many small
//! kernels weighs, and the damage cases of `store_files.rs` and
//! `store_writes.rs` (flips, truncations, swaps, a torn index, a full
//! disk, a read-only mount) on entries that live in packs. Each test names
//! the rule it proves.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kiln_engine::{ArtifactStore, ArtifactStoreExt, Lookup, Miss, StoreKey, StoreOutcome};
use kiln_store::{DiskStore, Limits, StoreConfig};
use kiln_test_support::{Scratch, Tmpfs};
use kiln_tests::{fake_key, fake_text, load, loader_on, open_store_packing, pattern};

/// Every artifact of these tests is packed.
const PACK_BELOW: u64 = 64 << 10;

fn packed_store(root: &Path) -> DiskStore {
    open_store_packing(root, PACK_BELOW)
}

fn hit(store: &DiskStore, key: &StoreKey) -> Option<Vec<u8>> {
    match store.lookup(key) {
        Lookup::Hit { artifact, .. } => Some(artifact),
        Lookup::Miss(_) => None,
    }
}

fn put(store: &DiskStore, number: u32, bytes: &[u8]) {
    assert!(matches!(
        store.put(&fake_key(number), None, bytes, Duration::ZERO),
        StoreOutcome::Stored { .. }
    ));
}

/// Every file and folder under `root`, the bytes they take on disk, and
/// the bytes the files hold.
fn weigh(root: &Path) -> (u64, u64, u64) {
    let (mut inodes, mut allocated, mut length) = (0, 0, 0);
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in fs::read_dir(&folder).expect("lists") {
            let path = entry.expect("an entry").path();
            let found = fs::symlink_metadata(&path).expect("a status");
            inodes += 1;
            allocated += found.blocks() * 512;
            if found.is_dir() {
                folders.push(path);
            } else {
                length += found.len();
            }
        }
    }
    (inodes, allocated, length)
}

/// The pack file that holds `bytes`, and where.
fn find_in_packs(root: &Path, bytes: &[u8]) -> Vec<(PathBuf, usize)> {
    let mut found = Vec::new();
    for entry in fs::read_dir(root.join("packs")).expect("a packs folder") {
        let path = entry.expect("an entry").path();
        if path
            .extension()
            .is_some_and(|extension| extension == "pack")
        {
            let held = fs::read(&path).expect("a pack");
            found.extend(
                held.windows(bytes.len())
                    .enumerate()
                    .filter(|(_, window)| *window == bytes)
                    .map(|(at, _)| (path.clone(), at)),
            );
        }
    }
    assert!(!found.is_empty(), "no pack holds the bytes");
    found
}

/// Applies `damage` to every copy of `bytes` in the packs of `root` (a
/// small artifact is held twice: in its object's frame and in its kernel
/// record's, which a hit reads), each pack read and written once.
fn damage_every_copy(root: &Path, bytes: &[u8], damage: impl Fn(&mut Vec<u8>, usize)) {
    let mut packs: Vec<(PathBuf, Vec<usize>)> = Vec::new();
    for (pack, at) in find_in_packs(root, bytes) {
        match packs.iter_mut().find(|(path, _)| *path == pack) {
            Some((_, places)) => places.push(at),
            None => packs.push((pack, vec![at])),
        }
    }
    for (pack, places) in packs {
        let mut held = fs::read(&pack).expect("a pack");
        // From the end, so that a cut leaves the earlier places to cut.
        for at in places.into_iter().rev() {
            damage(&mut held, at);
        }
        fs::write(&pack, held).expect("damaged");
    }
}

#[test]
fn f10_small_entries_live_in_a_few_files_and_every_one_is_found() {
    // F10: 20,000 small entries with their records and histories take
    // about two files per shard, none of them in the file trees.
    let scratch = Scratch::new("packs-weigh");
    let root = scratch.join("store");
    // What the store weighs does not depend on syncing, which would make
    // 80,000 appends take minutes.
    let store = DiskStore::open(StoreConfig {
        collects_automatically: false,
        durable: false,
        pack_below: PACK_BELOW,
        ..StoreConfig::at(&root)
    })
    .expect("the store opens");
    let entries = 20_000u32;
    for number in 0..entries {
        let bytes = pattern(number, 0, 600);
        assert!(matches!(
            store.put(
                &fake_key(number),
                Some(&kiln_tests::fake_key(number + 1_000_000)),
                &bytes,
                Duration::from_millis(1)
            ),
            StoreOutcome::Stored { .. }
        ));
    }
    for tree in ["objects", "records", "kernels"] {
        assert_eq!(
            fs::read_dir(root.join(tree)).expect("a tree").count(),
            0,
            "{tree} holds no file"
        );
    }
    let (inodes, allocated, length) = weigh(&root);
    let shards = 512;
    assert!(
        inodes <= 2 * shards + 32,
        "{inodes} files and folders for {entries} entries"
    );
    let logical = store.usage().bytes;
    eprintln!(
        "{entries} entries: {inodes} inodes, {allocated} bytes allocated, {length} in files, {logical} counted ({:.2}x)",
        allocated as f64 / logical as f64
    );
    assert!(
        allocated as f64 <= 1.3 * logical as f64,
        "{allocated} bytes allocated for {logical} counted"
    );
    for number in (0..entries).step_by(97) {
        assert_eq!(
            hit(&store, &fake_key(number)),
            Some(pattern(number, 0, 600))
        );
    }
    // Another process sees the same.
    let other = packed_store(&root);
    assert_eq!(hit(&other, &fake_key(7)), Some(pattern(7, 0, 600)));
    let report = store.verify(&mut |_| {}).expect("verifies");
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.objects, u64::from(entries));
    assert_eq!(report.records, 2 * u64::from(entries));
}

/// Stores kernels 1 and 2 (loaded, so with their histories), damages the
/// pack with `damage`, and checks that kernel 1 misses as corrupt, that
/// the miss removed it, and that the loader compiles it again and loads
/// the right text (P2).
fn damaged_packed_entry_is_a_removed_miss(test: &str, damage: impl FnOnce(&Path)) {
    let scratch = Scratch::new(test);
    let root = scratch.join("store");
    let store = packed_store(&root);
    let mut loader = loader_on(&store);
    for number in [1, 2] {
        assert_eq!(load(&mut loader, number), fake_text(number));
    }
    drop(loader);
    damage(&root);
    // A fresh process's view of the damaged files: a store that read the
    // index before the damage answers from the index it holds, whose
    // entries still verify.
    let store = packed_store(&root);
    let before = store.statistics();
    match store.lookup(&fake_key(1)) {
        Lookup::Miss(Miss::Corrupt { .. }) => {}
        other => panic!("a damaged packed entry: {other:?}"),
    }
    assert_eq!(
        store.statistics().corrupt,
        before.corrupt + 1,
        "the damaged entry is counted"
    );
    assert!(
        matches!(store.lookup(&fake_key(1)), Lookup::Miss(Miss::Absent)),
        "the damaged entry was removed"
    );
    let mut loader = loader_on(&store);
    assert_eq!(
        load(&mut loader, 1),
        fake_text(1),
        "the right artifact loads"
    );
    assert_eq!(
        loader.target().fake_compiler().finalized(),
        1,
        "it compiled again"
    );
    assert_eq!(load(&mut loader, 2), fake_text(2));
    let report = store.verify(&mut |_| {}).expect("verify runs");
    assert!(report.is_clean(), "{report:?}");
}

/// The artifact of kernel 1 as its put stored it.
fn artifact_of(root: &Path, number: u32) -> Vec<u8> {
    let store = packed_store(root);
    let record = store.record(&fake_key(number)).expect("stored");
    store.object_bytes(&record).expect("whole")
}

#[test]
fn p2_f10_a_flipped_byte_in_a_packed_object_is_a_miss_and_recompiles() {
    damaged_packed_entry_is_a_removed_miss("packs-flip", |root| {
        let artifact = artifact_of(root, 1);
        damage_every_copy(root, &artifact, |held, at| {
            held[at + artifact.len() / 2] ^= 0x40;
        });
    });
}

#[test]
fn p2_f10_a_truncated_pack_is_a_miss_and_recompiles() {
    damaged_packed_entry_is_a_removed_miss("packs-truncate", |root| {
        let artifact = artifact_of(root, 1);
        damage_every_copy(root, &artifact, |held, at| {
            held.truncate(at + artifact.len() / 2);
        });
    });
}

/// What one slot of an index says: where it lies in the index, its kind
/// code, and the frame it names. Only whole slots (their check holds).
struct SlotAt {
    at: usize,
    kind: u8,
    offset: u32,
    length: u32,
}

/// The whole slots of the index `held` (its bytes), per the layout in
/// `kiln-store/src/pack/format.rs`: a 32-byte header, then 32-byte slots
/// of key [16], offset u32, length u32, kind u8, check [3], accessed u32.
fn slots(held: &[u8]) -> Vec<SlotAt> {
    let word = |slot: &[u8], at: usize| u32::from_le_bytes(slot[at..at + 4].try_into().unwrap());
    held.chunks_exact(32)
        .enumerate()
        .skip(1)
        .filter(|(_, slot)| blake3::hash(&slot[..25]).as_bytes()[..3] == slot[25..28])
        .map(|(number, slot)| SlotAt {
            at: number * 32,
            kind: slot[24],
            offset: word(slot, 16),
            length: word(slot, 20),
        })
        .collect()
}

/// Every index of the store at `root` with its pack (the shard's one
/// generation), as paths.
fn indexes_and_packs(root: &Path) -> Vec<(PathBuf, PathBuf)> {
    let folder = root.join("packs");
    let names: Vec<String> = fs::read_dir(&folder)
        .expect("a packs folder")
        .map(|entry| {
            entry
                .expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names
        .iter()
        .filter_map(|name| name.strip_suffix(".idx"))
        .map(|shard| {
            let pack = names
                .iter()
                .find(|name| name.starts_with(&format!("{shard}-")) && name.ends_with(".pack"))
                .expect("the shard's pack");
            (folder.join(format!("{shard}.idx")), folder.join(pack))
        })
        .collect()
}

/// The kind code of a record slot.
const RECORD: u8 = 2;

#[test]
fn p2_f10_a_flipped_byte_in_a_packed_record_is_a_miss_and_recompiles() {
    // P2: a record frame's payload is sealed; a flip in it is damage.
    damaged_packed_entry_is_a_removed_miss("packs-record-flip", |root| {
        for (index, pack) in indexes_and_packs(root) {
            let mut held = fs::read(&pack).expect("a pack");
            for slot in slots(&fs::read(&index).expect("an index")) {
                if slot.kind == RECORD {
                    held[(slot.offset + 32 + slot.length / 2) as usize] ^= 0x08;
                }
            }
            fs::write(&pack, held).expect("damaged");
        }
    });
}

#[test]
fn p2_f10_an_index_slot_resealed_to_name_another_frame_is_a_miss_never_that_entry() {
    // P2: the worst an index can say, a slot whose check holds and that
    // names another entry's whole frame (its offset and length), reads as
    // damage: the frame's header repeats the key and kind it is for.
    damaged_packed_entry_is_a_removed_miss("packs-slot-redirect", |root| {
        for (index, _) in indexes_and_packs(root) {
            let mut held = fs::read(&index).expect("an index");
            let found = slots(&held);
            for slot in found.iter().filter(|slot| slot.kind == RECORD) {
                let (offset, length) = found
                    .iter()
                    .find(|other| other.offset != slot.offset)
                    .map_or((slot.offset + 32, slot.length), |other| {
                        (other.offset, other.length)
                    });
                let bytes = &mut held[slot.at..slot.at + 32];
                bytes[16..20].copy_from_slice(&offset.to_le_bytes());
                bytes[20..24].copy_from_slice(&length.to_le_bytes());
                let check = blake3::hash(&bytes[..25]);
                bytes[25..28].copy_from_slice(&check.as_bytes()[..3]);
            }
            fs::write(&index, held).expect("redirected");
        }
    });
}

#[test]
fn p2_f10_a_flipped_byte_in_an_index_slot_hides_the_entry_and_it_recompiles() {
    // P2, P3: a slot whose check fails is no slot: its entry is absent,
    // never another's, and the loader compiles it again.
    let scratch = Scratch::new("packs-slot-flip");
    let root = scratch.join("store");
    let store = packed_store(&root);
    let mut loader = loader_on(&store);
    for number in [1, 2] {
        assert_eq!(load(&mut loader, number), fake_text(number));
    }
    drop(loader);
    for (index, _) in indexes_and_packs(&root) {
        let mut held = fs::read(&index).expect("an index");
        for slot in slots(&held) {
            held[slot.at + 18] ^= 0x01;
        }
        fs::write(&index, held).expect("damaged");
    }
    let other = packed_store(&root);
    for number in [1, 2] {
        assert!(
            matches!(other.lookup(&fake_key(number)), Lookup::Miss(_)),
            "a slot that does not check is not read"
        );
    }
    let mut loader = loader_on(&other);
    for number in [1, 2] {
        assert_eq!(load(&mut loader, number), fake_text(number));
    }
    assert_eq!(
        loader.target().fake_compiler().finalized(),
        2,
        "both compiled again"
    );
    let fresh = packed_store(&root);
    assert!(matches!(fresh.lookup(&fake_key(1)), Lookup::Hit { .. }));
    assert!(fresh.verify(&mut |_| {}).expect("verifies").is_clean());
}

#[test]
fn p2_f10_two_swapped_packed_objects_are_misses_and_never_each_other() {
    // P2: same-length objects swapped in place read as damaged, never as
    // the other's bytes.
    let scratch = Scratch::new("packs-swap");
    let root = scratch.join("store");
    let store = packed_store(&root);
    let (first, second) = (pattern(1, 0, 3000), pattern(2, 0, 3000));
    put(&store, 1, &first);
    put(&store, 2, &second);
    // Every copy of each (object and record frames) takes the other's bytes.
    let seconds = find_in_packs(&root, &second);
    damage_every_copy(&root, &first, |held, at| {
        held[at..at + 3000].copy_from_slice(&second);
    });
    for (pack, at) in seconds {
        let mut held = fs::read(&pack).expect("a pack");
        held[at..at + 3000].copy_from_slice(&first);
        fs::write(&pack, held).expect("swapped");
    }
    for number in [1, 2] {
        assert!(matches!(
            store.lookup(&fake_key(number)),
            Lookup::Miss(Miss::Corrupt { .. })
        ));
        assert!(matches!(
            store.lookup(&fake_key(number)),
            Lookup::Miss(Miss::Absent)
        ));
    }
    put(&store, 1, &first);
    assert_eq!(hit(&store, &fake_key(1)), Some(first));
}

#[test]
fn p3_f10_a_torn_index_slot_hides_nothing_before_it_and_the_next_put_is_found() {
    // P3: what a writer killed in the middle of a slot leaves.
    let scratch = Scratch::new("packs-torn");
    let root = scratch.join("store");
    let store = packed_store(&root);
    for number in 0..200 {
        put(&store, number, &pattern(number, 0, 100));
    }
    for entry in fs::read_dir(root.join("packs")).expect("packs") {
        let path = entry.expect("an entry").path();
        if path.extension().is_some_and(|extension| extension == "idx") {
            let mut held = fs::read(&path).expect("an index");
            held.extend_from_slice(&[0xab; 13]);
            fs::write(&path, held).expect("torn");
        }
    }
    let other = packed_store(&root);
    for number in 0..200 {
        assert_eq!(
            hit(&other, &fake_key(number)),
            Some(pattern(number, 0, 100))
        );
    }
    put(&other, 500, &pattern(500, 0, 100));
    assert_eq!(hit(&store, &fake_key(500)), Some(pattern(500, 0, 100)));
    assert!(store.verify(&mut |_| {}).expect("verifies").is_clean());
}

#[test]
fn p6_f10_eviction_of_packed_entries_holds_the_entry_limit_and_compacts() {
    // P6: packed entries are evicted as files are; what stays is whole.
    let scratch = Scratch::new("packs-evict");
    let root = scratch.join("store");
    let store = packed_store(&root);
    for number in 0..300 {
        put(&store, number, &pattern(number, 0, 2000));
    }
    let report = store
        .collect(
            Limits {
                max_bytes: u64::MAX,
                max_entries: 100,
            },
            &mut |_| {},
        )
        .expect("collects");
    assert_eq!(report.evicted, 200, "{report:?}");
    assert_eq!(report.records_removed, 200, "{report:?}");
    assert_eq!(store.usage().entries, 100);
    let held = (0..300)
        .filter(|number| hit(&store, &fake_key(*number)) == Some(pattern(*number, 0, 2000)))
        .count();
    assert_eq!(held, 100);
    let mut listed = 0;
    store.entries(&mut |_| listed += 1).expect("lists");
    assert_eq!(listed, 100);
    let (_, allocated, _) = weigh(&root.join("packs"));
    assert!(
        allocated < 100 * 3000 + 1024 * 4096,
        "the packs were compacted: {allocated}"
    );
    assert!(store.verify(&mut |_| {}).expect("verifies").is_clean());
}

#[test]
fn p8_f10_packed_entries_travel_in_a_bundle() {
    let scratch = Scratch::new("packs-bundle");
    let store = packed_store(&scratch.join("from"));
    for number in 0..20 {
        put(&store, number, &pattern(number, 0, 500));
    }
    let bundle = scratch.join("bundle");
    let exported = store.export(&bundle, None, &mut |_| {}).expect("exports");
    assert_eq!((exported.objects, exported.records), (20, 20));
    let other = packed_store(&scratch.join("to"));
    other.import(&bundle, None, &mut |_| {}).expect("imports");
    for number in 0..20 {
        assert_eq!(
            hit(&other, &fake_key(number)),
            Some(pattern(number, 0, 500))
        );
    }
}

#[test]
fn f10_a_store_of_layout_2_is_upgraded_in_place_and_its_files_still_serve() {
    let scratch = Scratch::new("packs-upgrade");
    let root = scratch.join("store");
    let files = open_store_packing(&root, 0);
    for number in 0..10 {
        put(&files, number, &pattern(number, 0, 400));
    }
    drop(files);
    fs::write(root.join("LAYOUT"), "kiln store layout 2\n").expect("an older marker");
    let store = packed_store(&root);
    assert_eq!(
        fs::read_to_string(root.join("LAYOUT"))
            .expect("a marker")
            .trim(),
        "kiln store layout 3"
    );
    for number in 0..10 {
        assert_eq!(
            hit(&store, &fake_key(number)),
            Some(pattern(number, 0, 400))
        );
    }
    // A put of a key held as a file replaces it with a packed entry.
    put(&store, 3, &pattern(3, 1, 400));
    assert!(!store.record_path(&fake_key(3)).exists());
    assert_eq!(hit(&store, &fake_key(3)), Some(pattern(3, 1, 400)));
    assert!(store.verify(&mut |_| {}).expect("verifies").is_clean());
    // `kiln gc` packs the rest: the file trees empty, every entry served.
    let report = store
        .collect(Limits::of(store.config()), &mut |_| {})
        .expect("collects");
    assert_eq!(report.evicted, 0, "{report:?}");
    for tree in ["objects", "records", "kernels"] {
        let (files, _, _) = weigh(&root.join(tree));
        let folders_only = fs::read_dir(root.join(tree))
            .expect("a tree")
            .all(|entry| entry.expect("an entry").path().is_dir());
        assert!(
            folders_only,
            "{tree}: {files} files and folders, no file left"
        );
    }
    for number in 0..10 {
        let round = u32::from(number == 3);
        assert_eq!(
            hit(&store, &fake_key(number)),
            Some(pattern(number, round, 400))
        );
    }
    // The object kernel 3 held before its new put stays an entry until it
    // is evicted, as it would among files.
    assert_eq!(store.usage().entries, 11);
    assert!(store.verify(&mut |_| {}).expect("verifies").is_clean());
}

#[test]
fn p5_f10_a_full_disk_fails_an_append_and_leaves_no_partial_entry() {
    // P3, P5: appends fill a 2 MB file system; those that do not fit fail
    // as a full disk, and every entry that says it is stored is whole.
    let scratch = Scratch::new("packs-full");
    let Some(mount) = Tmpfs::mount_or_skip("the packed full-disk test", &scratch.join("mnt"), "2m")
    else {
        return;
    };
    let store = packed_store(&mount.path().join("store"));
    let (mut stored, mut failed) = (Vec::new(), Vec::new());
    for number in 1..=120 {
        let bytes = pattern(number, 0, 30 << 10);
        match store.put(&fake_key(number), None, &bytes, Duration::ZERO) {
            StoreOutcome::Stored { .. } => stored.push((number, bytes)),
            StoreOutcome::Failed { detail } => failed.push((number, detail)),
            StoreOutcome::Skipped => panic!("a writable store skipped a write"),
        }
    }
    assert!(!stored.is_empty() && !failed.is_empty(), "{failed:?}");
    for (_, detail) in &failed {
        assert!(detail.starts_with("disk full"), "{detail}");
    }
    for (number, bytes) in &stored {
        assert_eq!(hit(&store, &fake_key(*number)).as_ref(), Some(bytes));
    }
    for (number, _) in &failed {
        assert!(
            hit(&store, &fake_key(*number)).is_none(),
            "a failed put left an entry"
        );
    }
}

#[test]
fn p5_f10_a_packed_store_on_a_read_only_mount_serves_hits_and_skips_writes() {
    let scratch = Scratch::new("packs-read-only");
    let Some(mount) = Tmpfs::mount_or_skip("the packed read-only test", &scratch.join("mnt"), "8m")
    else {
        return;
    };
    let root = mount.path().join("store");
    let store = packed_store(&root);
    for number in 1..=3 {
        put(&store, number, &pattern(number, 0, 700));
    }
    drop(store);
    mount.remount_read_only();
    let store = DiskStore::open(StoreConfig {
        pack_below: PACK_BELOW,
        ..StoreConfig::at(&root)
    })
    .expect("a read-only store opens");
    assert!(store.is_read_only());
    for number in 1..=3 {
        assert_eq!(
            hit(&store, &fake_key(number)),
            Some(pattern(number, 0, 700))
        );
    }
    assert!(matches!(
        store.put(&fake_key(9), None, b"new", Duration::ZERO),
        StoreOutcome::Skipped
    ));
    // Verify reads every packed entry of a read-only store, and writes
    // nothing.
    let report = store.verify(&mut |_| {}).expect("verifies");
    assert_eq!((report.objects, report.records), (3, 3), "{report:?}");
    let mut listed = 0;
    store.entries(&mut |_| listed += 1).expect("lists");
    assert_eq!(listed, 3);
}
