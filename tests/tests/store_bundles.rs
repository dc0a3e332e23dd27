//! Bundles from people who are not the store (P8): hostile lengths under an
//! address-space limit, records without their objects, records re-sealed to
//! point at another kernel's artifact, and the file an export writes before
//! it renames it into place. Each test names the rule it proves.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use kiln_engine::fake::{FakeCompiler, FakeKernel};
use kiln_engine::{ArtifactStore, ArtifactStoreExt, Lookup, StoreKey};
use kiln_store::{DiskStore, Error};
use kiln_test_support::{Limit, Scratch, child};
use kiln_tests::open_store;

/// Set in the child process of the address-space test: the bundle it
/// imports.
const HOSTILE_BUNDLE: &str = "KILN_TEST_HOSTILE_BUNDLE";

/// The key of kernel `number` of the fake compiler, under a compiler that
/// names the entry point apart from the source.
fn entry_key(number: u32, entry: &str) -> StoreKey {
    StoreKey::for_artifact(
        &FakeCompiler::default_key_components(),
        &FakeKernel::new(number).artifact_id(),
        Some(entry.to_owned()),
    )
}

/// An artifact that names its entry point, as every real one does (a
/// cubin's symbol table, a code object's, a PTX `.entry`, a WGSL
/// `@compute fn`).
fn artifact_of(entry: &str, length: usize) -> Vec<u8> {
    let mut bytes = format!("image of the entry point {entry}\0").into_bytes();
    bytes.resize(length, 0x5a);
    bytes
}

/// The entry points of the two kernels the tests store: of one length, so
/// their artifacts are of one length too.
const ENTRY_A: &str = "saxpy_f32";
const ENTRY_B: &str = "scale_f32";

/// A store at `root` holding kernels 1 (`ENTRY_A`) and 2 (`ENTRY_B`).
fn store_of_two(root: &Path) -> DiskStore {
    let store = open_store(root);
    for (number, entry) in [(1, ENTRY_A), (2, ENTRY_B)] {
        store.put(
            &entry_key(number, entry),
            None,
            &artifact_of(entry, 1000),
            Duration::from_millis(3),
        );
    }
    store
}

/// A bundle's plain form: a compressed one (version 3: the magic, the
/// version, the manifest, the signature, then a zstd stream of a whole
/// plain bundle) unpacked, as anyone with zstd can. A forger writes the
/// plain form back, which kiln still imports, so every check below faces
/// the bytes it would be handed.
fn plain(bytes: Vec<u8>) -> Vec<u8> {
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4"));
    match u32_at(8) {
        1 => bytes,
        2 => zstd::stream::decode_all(&bytes[12..]).expect("the bundle's zstd stream unpacks"),
        3 => {
            let signature_at = 16 + u32_at(12) as usize + 12;
            let stream_at = signature_at + u32_at(signature_at - 4) as usize;
            zstd::stream::decode_all(&bytes[stream_at..]).expect("the bundle's zstd stream unpacks")
        }
        other => panic!("a bundle of version {other}, which this test does not know"),
    }
}

/// A bundle taken apart the way someone editing one by hand would: the
/// head (magic, version, sealed header) and each section whole, tag first.
struct Opened {
    head: Vec<u8>,
    sections: Vec<Vec<u8>>,
}

impl Opened {
    fn read(path: &Path) -> Self {
        let bytes = plain(fs::read(path).expect("the bundle reads"));
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4"));
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8"));
        let head_length = 16 + u32_at(12) as usize;
        let mut sections = Vec::new();
        let mut at = head_length;
        loop {
            let length = match bytes[at] {
                b'O' => 1 + 32 + 8 + u64_at(at + 33) as usize,
                b'R' => 1 + 4 + u32_at(at + 1) as usize,
                b'E' => break,
                other => panic!("an unknown section {other}"),
            };
            sections.push(bytes[at..at + length].to_vec());
            at += length;
        }
        Self {
            head: bytes[..head_length].to_vec(),
            sections,
        }
    }

    /// Writes it to `path` with the counts and closing digest made again,
    /// as a forger would: a bundle is checksummed, not signed.
    fn write(&self, path: &Path) {
        let count = |tag: u8| self.sections.iter().filter(|s| s[0] == tag).count() as u64;
        let mut bytes = self.head.clone();
        for section in &self.sections {
            bytes.extend_from_slice(section);
        }
        bytes.push(b'E');
        let digest = blake3::hash(&bytes);
        bytes.extend_from_slice(&count(b'O').to_le_bytes());
        bytes.extend_from_slice(&count(b'R').to_le_bytes());
        bytes.extend_from_slice(digest.as_bytes());
        fs::write(path, bytes).expect("the forged bundle writes");
    }
}

/// Replaces `from` by `to` in the record section `section` and seals it
/// again: a record's seal is a plain digest, which anyone can recompute.
fn reseal_record(section: &mut [u8], from: &[u8; 32], to: &[u8; 32]) {
    let sealed = &mut section[5..];
    let at = sealed
        .windows(32)
        .position(|window| window == from)
        .expect("the record names the object");
    sealed[at..at + 32].copy_from_slice(to);
    let covered = sealed.len() - 32;
    let digest = blake3::hash(&sealed[..covered]);
    sealed[covered..].copy_from_slice(digest.as_bytes());
}

/// Whether a store holds nothing at all: no usage, no record, no object.
fn holds_nothing(store: &DiskStore, keys: &[StoreKey]) -> bool {
    store.usage().entries == 0 && keys.iter().all(|key| !store.record_path(key).exists())
}

#[test]
fn p8_a_bundle_claiming_more_bytes_than_it_holds_is_refused_under_an_address_space_limit()
-> Result<()> {
    // P8: every length read from a bundle is checked against what is left
    // of the file before anything is allocated, so a 4 GiB claim in a tiny
    // file is an error, not an allocation the system refuses (an abort).
    if let Some(bundle) = std::env::var_os(HOSTILE_BUNDLE) {
        // The child: import and say how it went through the exit status.
        let bundle = PathBuf::from(bundle);
        let store = open_store(&bundle.with_extension("store"));
        match store.import(&bundle, None, &mut |_| {}) {
            Ok(report) => {
                eprintln!("imported {report:?}");
                std::process::exit(3);
            }
            Err(error) => {
                eprintln!("refused: {error}");
                std::process::exit(0);
            }
        }
    }

    let scratch = Scratch::new("hostile-length");
    let honest = scratch.join("honest.kiln");
    store_of_two(&scratch.join("source")).export(&honest, None, &mut |_| {})?;
    let mut hostile = Opened::read(&honest).head;
    hostile.push(b'O');
    hostile.extend_from_slice(&[7u8; 32]);
    hostile.extend_from_slice(&(4u64 << 30).to_le_bytes());
    hostile.extend_from_slice(b"and then it ends");
    let bundle = scratch.join("hostile.kiln");
    fs::write(&bundle, &hostile)?;

    let here = open_store(&scratch.join("here"));
    let error = here
        .import(&bundle, None, &mut |_| {})
        .expect_err("a bundle that claims more than it holds");
    assert!(matches!(error, Error::DamagedBundle { .. }), "{error}");
    assert!(holds_nothing(&here, &[entry_key(1, ENTRY_A)]));

    let mut child = child::rerun(
        "p8_a_bundle_claiming_more_bytes_than_it_holds_is_refused_under_an_address_space_limit",
        HOSTILE_BUNDLE,
        &bundle,
    );
    child::limit(&mut child, Limit::AddressSpace(1 << 30));
    let output = child.output()?;
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the child under a 1 GiB address-space limit: {:?}\n{said}",
        output.status
    );
    assert!(said.contains("refused"), "{said}");
    Ok(())
}

#[test]
fn p8_a_record_whose_object_neither_the_bundle_nor_the_store_holds_is_refused_whole() -> Result<()>
{
    // P8: importing it would publish a record that points at nothing.
    let scratch = Scratch::new("dangling-record");
    let source = store_of_two(&scratch.join("source"));
    let bundle = scratch.join("warm.kiln");
    source.export(&bundle, None, &mut |_| {})?;
    let object_b = source.record(&entry_key(2, ENTRY_B)).expect("b").object;

    let mut opened = Opened::read(&bundle);
    opened
        .sections
        .retain(|section| !(section[0] == b'O' && section[1..33] == object_b));
    let without = scratch.join("without.kiln");
    opened.write(&without);

    let keys = [entry_key(1, ENTRY_A), entry_key(2, ENTRY_B)];
    let destination = open_store(&scratch.join("destination"));
    let error = destination
        .import(&without, None, &mut |_| {})
        .expect_err("a record without its object");
    assert!(matches!(error, Error::InconsistentBundle { .. }), "{error}");
    assert!(error.to_string().contains("neither"), "{error}");
    assert!(
        holds_nothing(&destination, &keys),
        "nothing was imported, not even kernel 1"
    );
    assert!(!destination.object_path(&object_b).exists());

    // A store that already holds the object completes the bundle.
    let holding = open_store(&scratch.join("holding"));
    holding.put(&keys[1], None, &artifact_of(ENTRY_B, 1000), Duration::ZERO);
    holding.import(&without, None, &mut |_| {})?;
    for key in &keys {
        assert!(matches!(holding.lookup(key), Lookup::Hit { .. }));
    }
    Ok(())
}

#[test]
fn p8_a_record_resealed_to_name_another_kernels_artifact_is_refused() -> Result<()> {
    // P8, P2: the bundle's checksums all hold, but kernel 1's record now
    // names kernel 2's bytes, of the right digest and size. The bytes name
    // their own entry point, and it is not the one kernel 1's key asks for.
    let scratch = Scratch::new("resealed-record");
    let source = store_of_two(&scratch.join("source"));
    let bundle = scratch.join("warm.kiln");
    source.export(&bundle, None, &mut |_| {})?;
    let (key_a, key_b) = (entry_key(1, ENTRY_A), entry_key(2, ENTRY_B));
    let object_a = source.record(&key_a).expect("a").object;
    let object_b = source.record(&key_b).expect("b").object;

    let mut opened = Opened::read(&bundle);
    let record_a = opened
        .sections
        .iter_mut()
        .find(|section| section[0] == b'R' && section.windows(32).any(|window| window == object_a))
        .expect("kernel 1's record");
    reseal_record(record_a, &object_a, &object_b);
    let forged = scratch.join("forged.kiln");
    opened.write(&forged);

    let destination = open_store(&scratch.join("destination"));
    let imported = destination.import(&forged, None, &mut |_| {});
    if let Lookup::Hit { artifact, .. } = destination.lookup(&key_a) {
        assert!(
            artifact != artifact_of(ENTRY_B, 1000),
            "kernel 1 was served kernel 2's artifact"
        );
    }
    let error = imported.expect_err("a record that names another kernel's artifact");
    assert!(matches!(error, Error::InconsistentBundle { .. }), "{error}");
    assert!(error.to_string().contains(ENTRY_A), "{error}");
    assert!(holds_nothing(&destination, &[key_a, key_b]));
    Ok(())
}

#[test]
fn p8_an_export_leaves_files_named_like_its_partial_file_untouched() -> Result<()> {
    // P8: an export writes only a file it created itself, and removes only
    // such a file.
    let scratch = Scratch::new("partial-bystander");
    let bundle = scratch.join("warm.kiln");
    let bystanders = [
        scratch.join("warm.partial"),
        scratch.join("warm.kiln.partial"),
    ];
    for bystander in &bystanders {
        fs::write(bystander, b"someone else's file")?;
    }
    let untouched = |when: &str| {
        for bystander in &bystanders {
            let found = fs::read(bystander).ok();
            assert!(
                found.as_deref() == Some(&b"someone else's file"[..]),
                "{} {when}: {}",
                bystander.display(),
                found.map_or("removed".into(), |found| format!("{} bytes", found.len()))
            );
        }
    };

    let empty = open_store(&scratch.join("empty"));
    let nothing = empty.export(
        &bundle,
        Some(&FakeCompiler::default_key_components()),
        &mut |_| {},
    );
    assert!(
        matches!(nothing, Err(Error::NothingToExport)),
        "{nothing:?}"
    );
    untouched("after an export that found nothing");

    store_of_two(&scratch.join("source")).export(&bundle, None, &mut |_| {})?;
    untouched("after an export");
    let destination = open_store(&scratch.join("destination"));
    assert_eq!(destination.import(&bundle, None, &mut |_| {})?.records, 2);

    let mut left: Vec<String> = fs::read_dir(scratch.path())?
        .map(|entry| entry.map(|entry| entry.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    left.sort();
    assert_eq!(
        left,
        [
            "destination",
            "empty",
            "source",
            "warm.kiln",
            "warm.kiln.partial",
            "warm.partial"
        ],
        "the export left no file of its own behind"
    );
    Ok(())
}

#[test]
fn p8_an_export_never_writes_through_a_link_named_like_its_partial_file_or_its_bundle() -> Result<()>
{
    // P8: a link where the export writes is replaced or avoided, never
    // followed into a file elsewhere.
    let scratch = Scratch::new("partial-link");
    let elsewhere = scratch.join("elsewhere");
    fs::create_dir(&elsewhere)?;
    let decoy = elsewhere.join("decoy");
    let old_bundle = elsewhere.join("old.kiln");
    fs::write(&decoy, b"precious")?;
    fs::write(&old_bundle, b"precious too")?;
    let links = [
        scratch.join("warm.partial"),
        scratch.join("warm.kiln.partial"),
    ];
    for link in &links {
        symlink(&decoy, link)?;
    }
    let bundle = scratch.join("warm.kiln");
    symlink(&old_bundle, &bundle)?;

    store_of_two(&scratch.join("source")).export(&bundle, None, &mut |_| {})?;

    assert!(fs::read(&decoy)? == b"precious", "the decoy was written");
    assert!(
        fs::read(&old_bundle)? == b"precious too",
        "the link's target was written"
    );
    for link in &links {
        assert!(fs::symlink_metadata(link)?.file_type().is_symlink());
    }
    assert!(
        fs::symlink_metadata(&bundle)?.file_type().is_file(),
        "the bundle replaced the link"
    );
    let destination = open_store(&scratch.join("destination"));
    assert_eq!(destination.import(&bundle, None, &mut |_| {})?.records, 2);
    Ok(())
}
