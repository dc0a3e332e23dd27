//! Bundles that inflate past what they say (P8): refused having staged at
//! most what their manifest gives, on a small file system of their own
//! when the test may mount one.

use std::fs::{self, File};
use std::path::Path;
use std::time::{Duration, Instant};

use kiln_engine::ArtifactStore;
use kiln_engine::ArtifactStoreExt;
use kiln_engine::fake::{FakeCompiler, FakeKernel};
use kiln_engine::store::{Lookup, StoreKey};
use kiln_test_support::{Scratch, Tmpfs};

use super::format::*;
use super::transfer::write_head;
use super::*;
use crate::config::StoreConfig;
use crate::disk::DiskStore;
use crate::error::Error;
use crate::{envelope, record};

/// 16 GiB of zeros: 128 frames of 128 MiB, each compressed once.
const FRAMES: usize = 128;
const FRAME: usize = 128 << 20;

fn key(seed: u32) -> StoreKey {
    StoreKey::for_artifact(
        &FakeCompiler::default_key_components(),
        &FakeKernel::new(seed).artifact_id(),
        None,
    )
}

/// A zstd stream of a real plain head (magic, version, sealed header),
/// then 16 GiB of zeros: about half a megabyte.
fn bomb_stream(header: &BundleHeader) -> Vec<u8> {
    let mut head = Vec::new();
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&PLAIN_VERSION.to_le_bytes());
    let sealed = envelope::seal(HEADER_TAG, &record::encode(header));
    head.extend_from_slice(&(sealed.len() as u32).to_le_bytes());
    head.extend_from_slice(&sealed);
    let mut stream = zstd::bulk::compress(&head, 1).expect("compresses");
    let zeros = zstd::bulk::compress(&vec![0u8; FRAME], 1).expect("compresses");
    for _ in 0..FRAMES {
        stream.extend_from_slice(&zeros);
    }
    stream
}

/// A version 3 bundle of `stream` whose manifest says it inflates to
/// `claimed` bytes: consistent but for that, as a forger would write it.
fn bundle_of(header: &BundleHeader, stream: &[u8], claimed: u64) -> Vec<u8> {
    let manifest = Manifest {
        header: header.clone(),
        plain_length: claimed,
        stream_length: stream.len() as u64,
        stream_digest: *blake3::hash(stream).as_bytes(),
    };
    let sealed = envelope::seal(MANIFEST_TAG, &record::encode(&manifest));
    let mut bytes = Vec::new();
    write_head(&mut bytes, &sealed, None).expect("writes");
    bytes.extend_from_slice(stream);
    bytes
}

fn open(root: &Path, max_bytes: u64) -> DiskStore {
    DiskStore::open(StoreConfig {
        collects_automatically: false,
        max_bytes,
        ..StoreConfig::at(root)
    })
    .expect("a store")
}

fn trusting(_: &BundleSeal<'_>) -> std::result::Result<(), String> {
    Ok(())
}

/// What the file system of `path` has free, in bytes.
fn free_bytes(path: &Path) -> u64 {
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL");
    // SAFETY: a statvfs is plain data, valid all zeros.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c_path` is NUL-terminated and `stats` a live statvfs.
    let status = unsafe { libc::statvfs(c_path.as_ptr(), &mut stats) };
    assert_eq!(status, 0, "statvfs of {path:?}");
    stats.f_bavail * stats.f_frsize
}

#[test]
fn p8_a_bundle_bomb_is_refused_having_staged_at_most_what_its_manifest_gives() {
    let scratch = Scratch::new("bundle-bomb");
    let source = open(&scratch.folder("source"), DEFAULT_LIMIT);
    source.put(&key(1), None, &[7u8; 4000], Duration::from_millis(3));
    let real = scratch.join("real.kiln");
    source.export(&real, None, &mut |_| {}).expect("exports");
    let header = read_header(&real, &mut File::open(&real).expect("opens")).expect("a header");
    let stream = bomb_stream(&header);
    assert!(stream.len() < 1 << 20, "a bomb of {} bytes", stream.len());

    // The store on a 64 MiB file system of its own when the test may mount
    // one: a bomb that staged past its manifest would fill it.
    let mount = Tmpfs::mount_or_skip(
        "the bomb's store on a 64 MiB file system (it runs on the scratch folder instead)",
        &scratch.folder("small"),
        "64m",
    );
    let root = match &mount {
        Some(mount) => mount.path().join("store"),
        None => scratch.folder("store"),
    };
    let destination = open(&root, DEFAULT_LIMIT);
    let free_before = free_bytes(&root);
    let import = |bundle: &[u8], store: &DiskStore, judge: &dyn Fn(&BundleSeal<'_>) -> _| {
        let path = scratch.join("bomb.kiln");
        fs::write(&path, bundle).expect("writes the bomb");
        let began = Instant::now();
        let result = store.import_checked(&path, None, &mut |_| {}, judge);
        assert!(began.elapsed() < Duration::from_secs(10), "{result:?}");
        result
    };

    // Its manifest tells the truth: over the store's limit, refused before
    // a byte is decompressed.
    let honest = bundle_of(&header, &stream, (FRAMES * FRAME) as u64 + 100);
    let refused = import(&honest, &destination, &trusting);
    assert!(
        matches!(refused, Err(Error::OversizedBundle { .. })),
        "{refused:?}"
    );

    // Its manifest lies: refused once the stream passes the length given,
    // having written no more than that.
    let claimed = 1 << 20;
    let lying = bundle_of(&header, &stream, claimed);
    let refused = import(&lying, &destination, &trusting);
    match &refused {
        Err(Error::DamagedBundle { detail }) => {
            assert!(detail.contains("inflates past 1048576 bytes"), "{detail}");
        }
        other => panic!("a bomb is refused as damage: {other:?}"),
    }

    // Unsigned, on an import that wants a signature: refused before any
    // decompression at all.
    let judged = std::cell::Cell::new(0);
    let refusing = |seal: &BundleSeal<'_>| {
        judged.set(judged.get() + 1);
        assert!(seal.signature.is_none());
        Err("unsigned".to_owned())
    };
    let refused = import(&lying, &destination, &refusing);
    assert!(
        matches!(refused, Err(Error::UntrustedBundle { .. })),
        "{refused:?}"
    );
    assert_eq!(judged.get(), 1);

    // A version 2 bomb (a bare stream, no manifest): bounded by the
    // store's limit.
    let small = open(&root, 16 << 20);
    let mut legacy = Vec::new();
    legacy.extend_from_slice(MAGIC);
    legacy.extend_from_slice(&STREAM_VERSION.to_le_bytes());
    legacy.extend_from_slice(&stream);
    let refused = import(&legacy, &small, &trusting);
    match &refused {
        Err(Error::DamagedBundle { detail }) => {
            assert!(detail.contains("inflates past"), "{detail}");
        }
        other => panic!("a version 2 bomb is refused as damage: {other:?}"),
    }

    assert!(matches!(destination.lookup(&key(1)), Lookup::Miss(_)));
    let staged = fs::read_dir(root.join("staging")).map_or(0, Iterator::count);
    assert_eq!(staged, 0, "the staged plain forms are gone");
    let free_after = free_bytes(&root);
    assert!(
        free_after + (4 << 20) >= free_before,
        "free space {free_before} before, {free_after} after"
    );
    drop((destination, small));
    drop(mount);
}

/// The default size limit, for a store the test does not limit.
const DEFAULT_LIMIT: u64 = 10 << 30;

#[test]
fn p8_a_signed_bundle_signs_its_manifest_and_a_changed_stream_is_refused_unread() {
    let scratch = Scratch::new("bundle-manifest");
    let source = open(&scratch.folder("source"), DEFAULT_LIMIT);
    source.put(&key(2), None, &[9u8; 9000], Duration::from_millis(3));
    let bundle = scratch.join("signed.kiln");
    let sign = |covered: &[u8]| blake3::hash(covered).as_bytes().to_vec();
    source
        .export_signed(&bundle, None, &mut |_| {}, Some(&sign))
        .expect("exports");
    let checking = |seal: &BundleSeal<'_>| {
        let expected = blake3::hash(seal.signed).as_bytes().to_vec();
        if seal.signature == Some(expected.as_slice()) && seal.signed.starts_with(MANIFEST_TAG) {
            Ok(())
        } else {
            Err("not signed over its manifest".to_owned())
        }
    };
    let destination = open(&scratch.folder("destination"), DEFAULT_LIMIT);
    destination
        .import_checked(&bundle, None, &mut |_| {}, &checking)
        .expect("imports");
    assert!(matches!(destination.lookup(&key(2)), Lookup::Hit { .. }));

    // One byte of the stream changed: its digest no longer matches the
    // signed manifest, refused before the judge is asked.
    let mut bytes = fs::read(&bundle).expect("reads");
    let last = bytes.len() - 5;
    bytes[last] ^= 0x40;
    fs::write(&bundle, &bytes).expect("writes");
    let other = open(&scratch.folder("other"), DEFAULT_LIMIT);
    let refused = other.import_checked(&bundle, None, &mut |_| {}, &|_| {
        panic!("the judge is not asked about a stream that does not match its manifest")
    });
    assert!(
        matches!(refused, Err(Error::DamagedBundle { .. })),
        "{refused:?}"
    );
}
