//! The home shard (F10): a new store's small entries in two files, and a
//! shard that gets files of its own taking its entries along.

use std::path::Path;

use kiln_test_support::Scratch;

use crate::pack::home::{HOME, HOME_ROOM};
use crate::pack::{Frame, Kind, Read, SHARDS, UNIT, shard_of};
use crate::{DiskStore, StoreConfig};

fn open(root: &Path) -> DiskStore {
    DiskStore::open(StoreConfig {
        collects_automatically: false,
        ..StoreConfig::at(root)
    })
    .expect("the store opens")
}

/// A key of `shard`, told apart by `number`.
fn key_of(shard: usize, number: u32) -> [u8; 16] {
    let mut key = [0u8; 16];
    key[..2].copy_from_slice(&u16::try_from(shard).expect("a shard").to_be_bytes());
    key[2..6].copy_from_slice(&number.to_le_bytes());
    key[6] = 0x5a;
    assert_eq!(shard_of(&key), shard);
    key
}

fn payload(key: &[u8; 16]) -> Vec<u8> {
    let mut bytes = b"payload of ".to_vec();
    bytes.extend_from_slice(key);
    bytes
}

fn found(store: &DiskStore, key: &[u8; 16]) -> Option<Vec<u8>> {
    match store.inner.files.packs.read(Kind::Record, key) {
        Read::Found { payload, .. } => Some(payload),
        _ => None,
    }
}

/// The names in the store's packs folder.
fn pack_files(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root.join("packs"))
        .expect("a packs folder")
        .map(|entry| {
            entry
                .expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".idx") || name.ends_with(".pack"))
        .collect();
    names.sort();
    names
}

/// Appends one record frame for each key, as one batch.
fn put_batch(store: &DiskStore, keys: &[[u8; 16]]) {
    let payloads: Vec<Vec<u8>> = keys.iter().map(payload).collect();
    let frames: Vec<Frame<'_>> = keys
        .iter()
        .zip(&payloads)
        .map(|(key, payload)| Frame {
            kind: Kind::Record,
            key: *key,
            payload,
        })
        .collect();
    let files = &store.inner.files;
    files
        .packs
        .append_batch(&files.locks, &frames)
        .expect("the batch appends");
}

fn put_one(store: &DiskStore, key: &[u8; 16]) {
    let bytes = payload(key);
    let files = &store.inner.files;
    files
        .packs
        .append(
            &files.locks,
            shard_of(key),
            &[Frame {
                kind: Kind::Record,
                key: *key,
                payload: &bytes,
            }],
            &[],
        )
        .expect("the entry appends");
}

/// Fills the home shard past its room with entries of shards other than
/// `spared`, in batches.
fn fill_home(store: &DiskStore, spared: &[usize]) {
    let slots = usize::try_from(HOME_ROOM / UNIT).expect("a count");
    let keys: Vec<[u8; 16]> = (0..u32::try_from(slots).expect("a count"))
        .map(|number| {
            let shard = 1 + (number as usize % (SHARDS - 1));
            let shard = if spared.contains(&shard) { HOME } else { shard };
            key_of(shard, 1_000_000 + number)
        })
        .collect();
    for chunk in keys.chunks(256) {
        put_batch(store, chunk);
    }
}

#[test]
fn f10_a_new_store_keeps_a_batch_of_entries_of_many_shards_in_two_files() {
    // A cold batch's entries fall in as many shards as it has entries:
    // the home shard takes them all, in one pack and one index.
    let scratch = Scratch::new("home-two-files");
    let root = scratch.join("store");
    let store = open(&root);
    let keys: Vec<[u8; 16]> = (0..188)
        .map(|number| key_of(1 + number * 2, number as u32))
        .collect();
    put_batch(&store, &keys);
    put_one(&store, &key_of(400, 7));
    let names = pack_files(&root);
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(
        names.iter().all(|name| name.starts_with("000")),
        "{names:?}"
    );
    // Another process reads each entry where it is.
    let other = open(&root);
    for key in keys.iter().chain([&key_of(400, 7)]) {
        assert_eq!(found(&other, key), Some(payload(key)));
    }
    assert_eq!(found(&other, &key_of(401, 7)), None);
}

#[test]
fn f10_a_shard_put_to_once_the_home_shard_is_full_gets_its_files_and_takes_its_entries() {
    let scratch = Scratch::new("home-move");
    let root = scratch.join("store");
    let store = open(&root);
    // Entries of shards 5 (one at a time) and 9 (in a batch), held by the
    // home shard while it has room.
    let early = [key_of(5, 1), key_of(9, 1)];
    put_one(&store, &early[0]);
    put_batch(&store, &early[1..]);
    fill_home(&store, &[5, 9]);
    assert!(!pack_files(&root).iter().any(|name| name.starts_with("005")));
    // The home shard is full: the next entries of shards 5 and 9 start
    // them, and what the home shard held of them moves along.
    let late = [key_of(5, 2), key_of(9, 2)];
    put_one(&store, &late[0]);
    put_batch(&store, &late[1..]);
    let names = pack_files(&root);
    for shard in ["005", "009"] {
        assert_eq!(
            names.iter().filter(|name| name.starts_with(shard)).count(),
            2,
            "shard {shard} has its own pack and index: {names:?}"
        );
    }
    let other = open(&root);
    for key in early.iter().chain(&late) {
        assert_eq!(found(&other, key), Some(payload(key)), "{key:02x?}");
    }
    // The home shard's copies are gone: it holds none of shard 5 or 9.
    let (home, _) = other
        .inner
        .files
        .packs
        .live(HOME)
        .expect("the home shard reads");
    assert!(
        !home
            .iter()
            .any(|slot| [5, 9].contains(&shard_of(&slot.key))),
        "the home shard still names moved entries"
    );
}

#[test]
fn f10_p3_copies_left_in_the_home_shard_by_a_killed_move_are_never_read_and_a_rewrite_drops_them() {
    // What a process killed between a shard's start and the home shard's
    // tombstones leaves: an entry in both places.
    let scratch = Scratch::new("home-leftover");
    let root = scratch.join("store");
    let store = open(&root);
    let key = key_of(12, 1);
    put_one(&store, &key);
    let newer = b"the shard's own copy".to_vec();
    let files = &store.inner.files;
    let folder = files.packs.folder_to_write().expect("the packs folder");
    files
        .packs
        .append_in(
            &folder,
            12,
            &[Frame {
                kind: Kind::Record,
                key,
                payload: &newer,
            }],
            &[],
        )
        .expect("the shard starts");
    let other = open(&root);
    assert_eq!(
        found(&other, &key),
        Some(newer.clone()),
        "its own shard is read"
    );
    let report = other
        .inner
        .files
        .packs
        .rewrite(&other.inner.files.locks, HOME, &mut |_| true)
        .expect("the home shard rewrites");
    assert_eq!(report.dropped, 1, "{report:?}");
    assert_eq!(found(&open(&root), &key), Some(newer));
}
