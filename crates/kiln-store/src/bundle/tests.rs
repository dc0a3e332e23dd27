//! Bundles against real stores: compression, versions, damage, names.

use std::fs::{self, File};
use std::path::Path;
use std::time::Duration;

use kiln_engine::ArtifactStore;
use kiln_engine::ArtifactStoreExt;
use kiln_engine::fake::{FakeCompiler, FakeKernel};
use kiln_engine::store::StoreKey;

use super::format::*;
use super::transfer::{Search, scan};
use super::*;
use crate::config::StoreConfig;
use crate::disk::DiskStore;
use crate::error::Error;
use crate::partial::PartialFile;

#[test]
fn a_name_is_found_across_the_pieces_it_arrives_in_and_a_near_miss_is_not() {
    // P8: an entry point split by a chunk boundary still counts.
    let bytes = b"..aab_aaab_kernel..";
    for split in 0..bytes.len() {
        let mut search = Search::new(b"aaab_kernel");
        search.feed(&bytes[..split]);
        search.feed(&bytes[split..]);
        assert!(search.is_found(), "split at {split}");
    }
    let mut near = Search::new(b"aaab_kernel");
    near.feed(b"aaab_kerne aab_kernel aaab_kernal");
    assert!(!near.is_found());
    assert!(Search::new(b"").is_found());
    let (digest, found) =
        scan(&mut &bytes[..], bytes.len() as u64, &[b"kernel", b"other"]).expect("reads");
    assert_eq!(digest, *blake3::hash(bytes).as_bytes());
    assert_eq!(found, [true, false]);
}

#[test]
fn p8_a_record_that_carries_its_bytes_travels_without_them_and_carries_them_again() {
    // P8: the bundle holds each artifact once, as its object.
    let base = std::env::temp_dir().join(format!("kiln-bundle-inline-{}", std::process::id()));
    let _ = fs::remove_dir_all(&base);
    // The records compared are files: a packed record has no path.
    let open = |name: &str| {
        DiskStore::open(StoreConfig {
            collects_automatically: false,
            pack_below: 0,
            ..StoreConfig::at(base.join(name))
        })
        .expect("a store")
    };
    let (source, destination) = (open("source"), open("destination"));
    let key = StoreKey::for_artifact(
        &FakeCompiler::default_key_components(),
        &FakeKernel::new(1).artifact_id(),
        None,
    );
    let artifact = vec![5u8; 3000];
    source.put(&key, None, &artifact, Duration::from_millis(3));
    let bundle = base.join("warm.kiln");
    let exported = source.export(&bundle, None, &mut |_| {}).expect("exports");
    assert!(
        exported.bytes < 2 * artifact.len() as u64,
        "the bytes are in it once: {exported:?}"
    );
    destination
        .import(&bundle, None, &mut |_| {})
        .expect("imports");
    let record = |store: &DiskStore| fs::read(store.record_path(&key)).expect("a record");
    assert_eq!(record(&destination), record(&source));
    assert!(record(&destination).starts_with(&artifact));
    let _ = fs::remove_dir_all(&base);
}

#[test]
fn p8_a_bundle_is_compressed_and_one_written_before_compression_still_imports() {
    // P8: version 3 is a manifest, then a zstd stream of version 1; a
    // version 1 file, written by the plain writer as every bundle was
    // before, imports.
    let base = std::env::temp_dir().join(format!("kiln-bundle-versions-{}", std::process::id()));
    let _ = fs::remove_dir_all(&base);
    let open = |name: &str| {
        DiskStore::open(StoreConfig {
            collects_automatically: false,
            ..StoreConfig::at(base.join(name))
        })
        .expect("a store")
    };
    let source = open("source");
    let entries: Vec<(StoreKey, Vec<u8>)> = (0..8)
        .map(|seed| {
            let key = StoreKey::for_artifact(
                &FakeCompiler::default_key_components(),
                &FakeKernel::new(seed).artifact_id(),
                None,
            );
            let text = format!(".visible .entry kernel_{seed}(.param .u64 p) {{ ret; }}\n");
            (key, text.repeat(400).into_bytes())
        })
        .collect();
    for (key, artifact) in &entries {
        source.put(key, None, artifact, Duration::from_millis(3));
    }
    let compressed = base.join("new.kiln");
    let exported = source
        .export(&compressed, None, &mut |_| {})
        .expect("exports");
    let plain = base.join("old.kiln");
    let partial = PartialFile::beside(&plain).expect("a file");
    let components = FakeCompiler::default_key_components();
    let written = source
        .write_bundle(partial.file(), &components, &mut |_| {}, None, false)
        .expect("writes the plain form")
        .report;
    partial.rename_over(&plain).expect("renames");

    let head = |path: &Path| fs::read(path).expect("a bundle")[..12].to_vec();
    assert_eq!(
        head(&compressed),
        [MAGIC.as_slice(), &BUNDLE_VERSION.to_le_bytes()].concat()
    );
    assert_eq!(
        head(&plain),
        [MAGIC.as_slice(), &1u32.to_le_bytes()].concat()
    );
    assert_eq!(exported.bytes, fs::metadata(&compressed).expect("it").len());
    assert!(
        exported.bytes * 5 < written.bytes,
        "compressed {exported:?}, plain {written:?}"
    );
    let header =
        |path: &Path| read_header(path, &mut File::open(path).expect("opens")).expect("a header");
    assert_eq!(header(&compressed).components, components);
    assert_eq!(header(&plain).components, components);

    for (name, bundle) in [("from-new", &compressed), ("from-old", &plain)] {
        let destination = open(name);
        let report = destination
            .import(bundle, None, &mut |_| {})
            .expect("imports");
        assert_eq!(report.records, entries.len() as u64, "{name}");
        for (key, artifact) in &entries {
            match destination.lookup(key) {
                kiln_engine::store::Lookup::Hit {
                    artifact: found, ..
                } => {
                    assert_eq!(&found, artifact, "{name}");
                }
                kiln_engine::store::Lookup::Miss(miss) => panic!("{name}: {miss:?}"),
            }
        }
        let staging = base.join(name).join("staging");
        let left = fs::read_dir(&staging).map_or(0, Iterator::count);
        assert_eq!(left, 0, "{name}: the plain form leaves nothing in staging");
    }
}

#[test]
fn p8_a_truncated_compressed_bundle_is_refused_and_imports_nothing() {
    // P8: a damaged zstd stream is damage, named, and nothing lands.
    let base = std::env::temp_dir().join(format!("kiln-bundle-truncated-{}", std::process::id()));
    let _ = fs::remove_dir_all(&base);
    let open = |name: &str| {
        DiskStore::open(StoreConfig {
            collects_automatically: false,
            ..StoreConfig::at(base.join(name))
        })
        .expect("a store")
    };
    let source = open("source");
    let key = StoreKey::for_artifact(
        &FakeCompiler::default_key_components(),
        &FakeKernel::new(3).artifact_id(),
        None,
    );
    source.put(&key, None, &[7u8; 50_000], Duration::from_millis(3));
    let bundle = base.join("warm.kiln");
    source.export(&bundle, None, &mut |_| {}).expect("exports");
    let bytes = fs::read(&bundle).expect("it");
    fs::write(&bundle, &bytes[..bytes.len() - 10]).expect("truncates");
    let destination = open("destination");
    let refused = destination.import(&bundle, None, &mut |_| {});
    assert!(
        matches!(refused, Err(Error::DamagedBundle { .. })),
        "{refused:?}"
    );
    assert!(matches!(
        destination.lookup(&key),
        kiln_engine::store::Lookup::Miss(_)
    ));
    let _ = fs::remove_dir_all(&base);
}
