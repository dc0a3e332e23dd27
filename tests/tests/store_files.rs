//! The disk store against real files in one process: corruption, the source
//! index, explanations, generations, LRU order and bundles. Each test names
//! the rule it proves.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Result;
use kiln_engine::fake::{FakeArtifact, FakeCompiler, FakeKernel, FakeTarget};
use kiln_engine::{
    ArtifactStore, ArtifactStoreExt, BoundStore, Claim, ClaimWait, Claims, CompilationTarget,
    Explanation, KernelLoader, KernelOutcome, KeyComponent, KeyComponents, LoaderConfig, Lookup,
    Miss,
};
use kiln_store::{DiskStore, Error, Limits};
use kiln_test_support::Scratch;
use kiln_tests::{fake_key, fake_text, load, load_kernel, loader_on, open_store, pattern};

/// How large the artifacts of a test's kernels are, which decides where a
/// hit by kernel id reads their bytes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Size {
    /// A few bytes: the kernel's record carries them (inline), and a hit
    /// by id opens only the record.
    Small,
    /// Past the inline limit: the kernel's record points at the object,
    /// and a hit by id reads the object.
    Large,
}

/// Kernel `number` with artifacts of `size`, and the text it loads as.
fn sized_kernel(number: u32, size: Size) -> (FakeKernel, String) {
    match size {
        Size::Small => (FakeKernel::new(number), fake_text(number)),
        Size::Large => {
            let text = format!("{}\n", fake_text(number)).repeat(4000);
            (FakeKernel::new(number).sharing_source(&text), text)
        }
    }
}

/// A store holding kernels 1 and 2 of `size`, and the paths of kernel 1's
/// record and object.
fn stored_pair(scratch: &Scratch, size: Size) -> (DiskStore, PathBuf, PathBuf) {
    let store = open_store(&scratch.join("store"));
    let mut loader = loader_on(&store);
    for number in [1, 2] {
        let (kernel, text) = sized_kernel(number, size);
        assert_eq!(load_kernel(&mut loader, &kernel), text);
    }
    let record = store.record(&fake_key(1)).expect("kernel 1 is stored");
    (
        store.clone(),
        store.record_path(&fake_key(1)),
        store.object_path(&record.object),
    )
}

/// How the loader gets kernel 1 back after its entry was damaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recovery {
    /// Its object was bad, so every record of it misses: it compiles.
    Compiles,
    /// Only its id record was bad: its source record, verified, still
    /// points at a good object, which the loader takes (P7).
    FromSource,
}

/// Damages the entry of kernel 1 of `size` with `damage`, then checks that
/// a lookup misses for `reason`, removes the entry, and that the loader
/// gets kernel 1 back as `recovery` says and loads the right text, never
/// the damaged one (P2).
fn damaged_entry_is_a_removed_miss(
    test: &str,
    size: Size,
    damage: impl FnOnce(&DiskStore, &PathBuf, &PathBuf),
    reason: fn(&Miss) -> bool,
    removed: fn(&Path, &Path) -> Vec<PathBuf>,
    recovery: Recovery,
) {
    let scratch = Scratch::new(test);
    let (store, record, object) = stored_pair(&scratch, size);
    damage(&store, &record, &object);
    match store.lookup(&fake_key(1)) {
        Lookup::Miss(miss) => assert!(reason(&miss), "unexpected miss: {miss:?}"),
        Lookup::Hit { .. } => panic!("a damaged entry was served"),
    }
    for path in removed(&record, &object) {
        assert!(!path.exists(), "{} was removed", path.display());
    }
    let mut loader = loader_on(&store);
    let (kernel, text) = sized_kernel(1, size);
    assert_eq!(
        load_kernel(&mut loader, &kernel),
        text,
        "the right artifact loads"
    );
    let compiled = loader.target().fake_compiler().finalized();
    match recovery {
        Recovery::Compiles => assert_eq!(compiled, 1, "it compiled again"),
        Recovery::FromSource => assert_eq!(compiled, 0, "it was taken by its source"),
    }
    assert_eq!(
        loader.target().loaded(),
        1,
        "the device saw only the good artifact"
    );
    let report = store.verify(&mut |_| {}).expect("verify runs");
    assert_eq!(report.bad_objects + report.bad_records, 0, "{report:?}");
}

fn corrupt(miss: &Miss) -> bool {
    matches!(miss, Miss::Corrupt { .. })
}

fn both(record: &Path, object: &Path) -> Vec<PathBuf> {
    vec![record.to_path_buf(), object.to_path_buf()]
}

#[test]
fn p2_a_flipped_byte_in_an_object_is_a_miss_and_recompiles() {
    damaged_entry_is_a_removed_miss(
        "flip",
        Size::Large,
        |_, _, object| {
            let mut bytes = fs::read(object).expect("the object");
            let middle = bytes.len() / 2;
            bytes[middle] ^= 0x20;
            fs::write(object, bytes).expect("rewritten");
        },
        corrupt,
        both,
        Recovery::Compiles,
    );
}

#[test]
fn p2_a_truncated_object_is_a_miss_and_recompiles() {
    damaged_entry_is_a_removed_miss(
        "truncate",
        Size::Large,
        |_, _, object| {
            let bytes = fs::read(object).expect("the object");
            fs::write(object, &bytes[..bytes.len() / 2]).expect("rewritten");
        },
        corrupt,
        both,
        Recovery::Compiles,
    );
}

#[test]
fn p2_an_empty_object_is_a_miss_and_recompiles() {
    damaged_entry_is_a_removed_miss(
        "empty",
        Size::Large,
        |_, _, object| fs::write(object, b"").expect("emptied"),
        corrupt,
        both,
        Recovery::Compiles,
    );
}

#[test]
fn p2_two_swapped_objects_are_misses_and_recompile() {
    damaged_entry_is_a_removed_miss(
        "swap",
        Size::Large,
        |store, _, object| {
            let other = store.record(&fake_key(2)).expect("kernel 2 is stored");
            let other = store.object_path(&other.object);
            let mine = fs::read(object).expect("the object");
            fs::write(object, fs::read(&other).expect("the other object")).expect("swapped");
            fs::write(&other, mine).expect("swapped");
            assert!(corrupt(&match store.lookup(&fake_key(2)) {
                Lookup::Miss(miss) => miss,
                Lookup::Hit { .. } => panic!("a swapped object was served"),
            }));
        },
        corrupt,
        both,
        Recovery::Compiles,
    );
}

#[test]
fn p2_a_record_of_another_key_is_a_removed_miss_and_the_verified_source_entry_serves() {
    damaged_entry_is_a_removed_miss(
        "foreign-record",
        Size::Small,
        |store, record, _| {
            fs::copy(store.record_path(&fake_key(2)), record).expect("copied");
        },
        |miss| match miss {
            Miss::ForeignKey { detail } => detail.contains("kernel"),
            _ => false,
        },
        |record, _| vec![record.to_path_buf()],
        Recovery::FromSource,
    );
}

#[test]
fn p2_a_damaged_record_is_a_removed_miss_and_the_verified_source_entry_serves() {
    damaged_entry_is_a_removed_miss(
        "damaged-record",
        Size::Small,
        |_, record, _| {
            let mut bytes = fs::read(record).expect("the record");
            bytes[20] ^= 1;
            fs::write(record, bytes).expect("rewritten");
        },
        corrupt,
        |record, _| vec![record.to_path_buf()],
        Recovery::FromSource,
    );
}

#[test]
fn p2_a_flipped_byte_in_the_bytes_a_record_carries_is_a_removed_miss_and_the_source_entry_serves() {
    // P2: a small artifact's bytes are read from its kernel's record, and
    // verified there as an object's are.
    damaged_entry_is_a_removed_miss(
        "flip-inline",
        Size::Small,
        |_, record, _| {
            // The record starts with the artifact: its text's length, then
            // "fake kernel 1".
            let mut bytes = fs::read(record).expect("the record");
            assert_eq!(&bytes[1..5], b"fake", "the artifact comes first");
            bytes[2] ^= 0x20;
            fs::write(record, bytes).expect("rewritten");
        },
        corrupt,
        |record, _| vec![record.to_path_buf()],
        Recovery::FromSource,
    );
}

#[test]
fn p2_a_damaged_object_never_reaches_a_hit_by_id_and_verify_removes_it_with_its_records() {
    // P2: the hit by id serves the verified copy its record carries; the
    // damaged object is found by verify, which removes it and every record
    // of it, the copy-carrying one included.
    let scratch = Scratch::new("inline-object");
    let (store, record, object) = stored_pair(&scratch, Size::Small);
    fs::write(&object, b"not the artifact").expect("damaged");
    let mut loader = loader_on(&store);
    assert_eq!(load(&mut loader, 1), fake_text(1));
    assert_eq!(loader.target().fake_compiler().finalized(), 0, "a hit");
    let report = store.verify(&mut |_| {}).expect("verify runs");
    assert_eq!(report.bad_objects, 1, "{report:?}");
    assert_eq!(report.dangling_records, 2, "{report:?}");
    assert!(!object.exists() && !record.exists());
    assert!(matches!(
        store.lookup(&fake_key(1)),
        Lookup::Miss(Miss::Absent)
    ));
}

#[test]
fn p5_an_unreadable_object_is_a_miss_the_kernel_loads_and_its_put_rewrites_it() {
    // P5: the object's path is a folder, so reading it fails; the kernel
    // still loads, and its put replaces what is not a file (a failed write
    // being counted is held by `store_writes`, on a full disk and under a
    // file size limit).
    let scratch = Scratch::new("unreadable");
    let (store, _, object) = stored_pair(&scratch, Size::Large);
    fs::remove_file(&object).expect("removed");
    fs::create_dir(&object).expect("a folder in its place");
    assert!(matches!(
        store.lookup(&fake_key(1)),
        Lookup::Miss(Miss::Unreadable { .. })
    ));
    let mut loader = loader_on(&store);
    let (kernel, text) = sized_kernel(1, Size::Large);
    assert_eq!(load_kernel(&mut loader, &kernel), text);
    assert_eq!(loader.statistics().store_errors, 0, "the write succeeded");
    assert!(object.is_file(), "the folder was replaced by the object");
    assert!(matches!(store.lookup(&fake_key(1)), Lookup::Hit { .. }));
}

#[test]
fn p7_a_rebuilt_program_with_new_ids_and_the_same_text_skips_the_compiler() {
    // P7, L5c across processes' lifetimes: the source index on disk.
    let scratch = Scratch::new("source-index");
    let store = open_store(&scratch.join("store"));
    let mut first = loader_on(&store);
    let old = FakeKernel::new(1).sharing_source("shared text");
    first.load(&old, &old.artifact_id()).expect("loads");
    assert_eq!(first.target().fake_compiler().finalized(), 1);

    let mut rebuilt = loader_on(&store);
    let new = FakeKernel::new(1001).sharing_source("shared text");
    let module = rebuilt.load(&new, &new.artifact_id()).expect("loads");
    assert_eq!(module.text, "shared text");
    assert_eq!(
        rebuilt.target().fake_compiler().finalized(),
        0,
        "no compile"
    );
    let record = &rebuilt.records()[0].records[0];
    assert_eq!(record.outcome, KernelOutcome::Rekeyed);
}

#[test]
fn p9_a_miss_names_the_component_that_changed_or_says_never_seen() {
    // P9, and P1: a changed compiler version gives another key.
    let scratch = Scratch::new("explain");
    let store = open_store(&scratch.join("store"));
    let mut loader = loader_on(&store);
    load(&mut loader, 1);

    let upgraded = FakeCompiler::default().with_key_components(KeyComponents::new(
        "fake",
        "kiln-fake 2",
        "fake_1",
        "",
    ));
    let shared: Arc<dyn ArtifactStore> = Arc::new(store.clone());
    let target = FakeTarget::on_store(shared.clone()).with_compiler(upgraded);
    let bound = BoundStore::new(shared.clone(), target.fake_compiler());
    let id = FakeKernel::new(1).artifact_id();
    match bound.explain(target.fake_compiler(), &id) {
        Explanation::Changed { difference, .. } => {
            assert_eq!(difference.component, KeyComponent::Compiler);
            assert_eq!(difference.stored, "kiln-fake 1");
            assert_eq!(difference.asked, "kiln-fake 2");
        }
        other => panic!("expected a changed compiler, got {other:?}"),
    }
    let never = FakeKernel::new(99).artifact_id();
    assert_eq!(
        bound.explain(target.fake_compiler(), &never),
        Explanation::NeverSeen
    );

    let mut upgraded_loader = KernelLoader::with_config(target, LoaderConfig::default());
    load(&mut upgraded_loader, 1);
    assert_eq!(
        upgraded_loader.target().fake_compiler().finalized(),
        1,
        "a new key misses"
    );
    let target = upgraded_loader.target();
    let bound = upgraded_loader.bound_store().expect("on a store");
    assert!(matches!(
        bound.explain(target.fake_compiler(), &id),
        Explanation::Held { .. }
    ));
}

#[test]
fn l10_opening_another_root_makes_the_loader_load_from_it() {
    // L10
    let scratch = Scratch::new("switch-root");
    let first = open_store(&scratch.join("a"));
    let second = open_store(&scratch.join("b"));
    let mut loader = loader_on(&first);
    load(&mut loader, 1);
    let generation =
        |target: &FakeTarget| target.store().expect("on a store").generation().current();
    let before = generation(loader.target());
    let target = std::mem::replace(loader.target_mut(), FakeTarget::storeless());
    *loader.target_mut() = target.switch_to(Arc::new(second.clone()));
    assert_ne!(generation(loader.target()), before);
    load(&mut loader, 1);
    assert_eq!(
        loader.target().fake_compiler().finalized(),
        2,
        "reloaded from the new root"
    );
    assert!(matches!(second.lookup(&fake_key(1)), Lookup::Hit { .. }));
}

fn bound(store: &DiskStore) -> (FakeCompiler, BoundStore<FakeCompiler>) {
    let compiler = FakeCompiler::default();
    let bound = BoundStore::new(Arc::new(store.clone()), &compiler);
    (compiler, bound)
}

#[test]
fn p8_a_bundle_carries_a_store_to_another_root_and_l10_an_import_that_replaces_content_reloads() {
    // P8, L10
    let scratch = Scratch::new("bundle");
    let source = open_store(&scratch.join("source"));
    let mut loader = loader_on(&source);
    for number in 0..5 {
        load(&mut loader, number);
    }
    let bundle = scratch.join("warm.kiln");
    let exported = source.export(&bundle, None, &mut |_| {}).expect("exports");
    assert_eq!(
        exported.records, 10,
        "five id records and five source records"
    );

    let destination = open_store(&scratch.join("destination"));
    let imported = destination
        .import(
            &bundle,
            Some(&FakeCompiler::default_key_components()),
            &mut |_| {},
        )
        .expect("imports");
    assert_eq!(imported.records, 10);
    let mut warm = loader_on(&destination);
    for number in 0..5 {
        assert_eq!(load(&mut warm, number), fake_text(number));
    }
    assert_eq!(
        warm.target().fake_compiler().finalized(),
        0,
        "warm: nothing compiled"
    );

    // Another machine's kernel 1 holds other bytes: importing it replaces
    // content, and the running loader drops what it loaded.
    let other = open_store(&scratch.join("other"));
    let (compiler, other_bound) = bound(&other);
    let replaced = FakeArtifact {
        text: "rebuilt kernel 1".into(),
        refused: false,
    };
    other_bound.put(
        &compiler,
        &FakeKernel::new(1).artifact_id(),
        &replaced,
        None,
        None,
        false,
        Duration::ZERO,
        None,
    );
    let second_bundle = scratch.join("replacing.kiln");
    other
        .export(&second_bundle, None, &mut |_| {})
        .expect("exports");
    let generation = |warm: &KernelLoader<FakeTarget>| {
        warm.bound_store()
            .expect("the loader bound the store")
            .generation()
    };
    let before = generation(&warm);
    let report = destination
        .import(&second_bundle, None, &mut |_| {})
        .expect("imports");
    assert_eq!(report.replaced, 1);
    assert_ne!(generation(&warm), before);
    assert_eq!(
        load(&mut warm, 1),
        "rebuilt kernel 1",
        "reloaded from the new content"
    );
}

#[test]
fn p8_a_foreign_or_damaged_bundle_is_refused_and_names_why() -> Result<()> {
    // P8
    let scratch = Scratch::new("foreign-bundle");
    let source = open_store(&scratch.join("source"));
    load(&mut loader_on(&source), 1);
    let bundle = scratch.join("warm.kiln");
    source.export(&bundle, None, &mut |_| {})?;

    let destination = open_store(&scratch.join("destination"));
    let elsewhere = KeyComponents::new("fake", "kiln-fake 1", "fake_2", "");
    let error = destination
        .import(&bundle, Some(&elsewhere), &mut |_| {})
        .expect_err("built for another architecture");
    assert!(matches!(
        error,
        Error::ForeignBundle {
            component: KeyComponent::Architecture,
            ..
        }
    ));
    assert!(error.to_string().contains("architecture"), "{error}");

    let mut bytes = fs::read(&bundle)?;
    let last = bytes.len() - 60;
    bytes[last] ^= 1;
    let damaged = scratch.join("damaged.kiln");
    fs::write(&damaged, &bytes)?;
    let error = destination
        .import(&damaged, None, &mut |_| {})
        .expect_err("damaged");
    assert!(matches!(error, Error::DamagedBundle { .. }), "{error}");
    fs::write(&damaged, &bytes[..bytes.len() / 2])?;
    assert!(matches!(
        destination.import(&damaged, None, &mut |_| {}),
        Err(Error::DamagedBundle { .. })
    ));
    assert_eq!(destination.usage().entries, 0, "nothing was imported");
    Ok(())
}

#[test]
fn p6_the_least_recently_used_entries_go_first_and_limits_hold_in_bytes_and_entries() {
    // P6: access times are set explicitly, so `noatime` changes nothing.
    // Artifacts of 8 KiB: each kernel's record carries a copy, and a hit
    // reads only the record, which must still move the entry up.
    least_recently_used_go_first("lru", 8 << 10, 2);
}

#[test]
fn p6_the_least_recently_used_entries_go_first_when_hits_read_objects() {
    // P6: artifacts of 24 KiB, which records point at without a copy.
    least_recently_used_go_first("lru-objects", 24 << 10, 1);
}

/// Stores ten kernels of `length` bytes, each held `copies` times (object,
/// and the record's copy), ages them, reads the oldest and evicts by
/// entries, then by bytes.
fn least_recently_used_go_first(test: &str, length: usize, copies: u64) {
    let scratch = Scratch::new(test);
    let store = open_store(&scratch.join("store"));
    let now = SystemTime::now();
    for number in 0..10u32 {
        store.put(
            &fake_key(number),
            None,
            &pattern(number, 0, length),
            Duration::ZERO,
        );
        let record = store.record(&fake_key(number)).expect("stored");
        let object = fs::File::open(store.object_path(&record.object)).expect("the object");
        let age = Duration::from_secs(3600 * (10 - u64::from(number)));
        object
            .set_times(fs::FileTimes::new().set_accessed(now - age))
            .expect("an access time");
    }
    // Kernel 0 is the oldest; reading it makes it the newest.
    assert!(matches!(store.lookup(&fake_key(0)), Lookup::Hit { .. }));

    let by_entries = Limits {
        max_bytes: u64::MAX,
        max_entries: 7,
    };
    let report = store.collect(by_entries, &mut |_| {}).expect("collects");
    assert_eq!(report.evicted, 3);
    let kept = |number| matches!(store.lookup(&fake_key(number)), Lookup::Hit { .. });
    assert!(kept(0), "the entry read last stays");
    assert!(
        !kept(1) && !kept(2) && !kept(3),
        "the least recently used go"
    );
    assert!(kept(4) && kept(9));

    // The limit counts the blocks the files take (F10): seven alike
    // entries are left, each taking a seventh of the recount.
    let held = store.usage();
    assert_eq!(held.entries, 7);
    assert!(
        held.bytes >= 7 * copies * length as u64,
        "each entry holds its bytes {copies} times: {held:?}"
    );
    let per_entry = held.allocated_bytes / 7;
    let by_bytes = Limits {
        max_bytes: 3 * per_entry + per_entry / 2,
        max_entries: u64::MAX,
    };
    let report = store.collect(by_bytes, &mut |_| {}).expect("collects");
    assert!(
        report.after.allocated_bytes <= by_bytes.max_bytes,
        "{report:?}"
    );
    assert_eq!(report.after.entries, 3);
    assert!(kept(0), "still the most recently read");
}

// P4: a kernel that fails is never stored, so nothing would release its
// claim but its failure: another process claims it at once instead of after
// a timeout, while the loader that failed it still reports the failure.
#[test]
fn p4_the_claim_of_a_kernel_that_failed_is_released_with_its_failure() {
    let scratch = Scratch::new("failed-claim");
    let store = open_store(&scratch.join("store"));
    let mut loader = loader_on(&store);
    let failing = FakeKernel::new(1).failing();
    loader.enqueue(Box::new(failing.clone()), ());
    loader.enqueue(Box::new(FakeKernel::new(2)), ());
    loader.compile_queued();
    let compiler = FakeCompiler::default();
    let bound = BoundStore::new(Arc::new(store.clone()), &compiler);
    let key = bound.artifact_key(&compiler, &failing.artifact_id());
    assert!(
        matches!(store.claim(&key, ClaimWait::Once), Claim::Held(_)),
        "no claim outlives its kernel's failure"
    );
    loader
        .load(&failing, &failing.artifact_id())
        .expect_err("the failure is still reported by its own load");
}

#[test]
fn f2_a_batch_hands_out_first_what_the_store_s_records_say_took_longest() -> Result<()> {
    // F2: kernels compiled before (here under an older compiler) go by the
    // compile times the store's batch records keep, not by their hints.
    let scratch = Scratch::new("past-work");
    let store = open_store(&scratch.join("store"));
    let kernels = [
        // Claims to be the costlier, and is the quicker.
        FakeKernel::new(1)
            .sleeping(Duration::from_millis(2))
            .hinting(1_000),
        FakeKernel::new(2)
            .sleeping(Duration::from_millis(120))
            .hinting(1),
    ];
    let compile_order = |compiler: FakeCompiler, log: &Path| -> Result<Vec<u32>> {
        let target = FakeTarget::on_store(Arc::new(store.clone()))
            .with_compiler(compiler.logging_compiles_to(log));
        let mut loader = KernelLoader::with_config(
            target,
            LoaderConfig {
                parallelism: std::num::NonZeroUsize::MIN,
                ..LoaderConfig::default()
            },
        )
        .with_worker_mode(kiln_engine::WorkerMode::Threads);
        for kernel in &kernels {
            loader.enqueue(Box::new(kernel.clone()), ());
        }
        loader.compile_queued();
        Ok(FakeCompiler::read_compile_log(log)?
            .into_iter()
            .map(|(_, number)| number)
            .collect())
    };
    let first = compile_order(FakeCompiler::default(), &scratch.join("first.log"))?;
    assert_eq!(first, [1, 2], "no records yet: by the hints");
    let newer = FakeCompiler::default().with_key_components(kiln_engine::KeyComponents::new(
        "fake",
        "kiln-fake 2",
        "fake_1",
        "",
    ));
    let second = compile_order(newer, &scratch.join("second.log"))?;
    assert_eq!(
        second,
        [2, 1],
        "compiled again under a new compiler: the longest recorded first"
    );
    Ok(())
}
