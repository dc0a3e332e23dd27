//! F10: a store of small packed entries at 10, 10,000 and 100,000 entries
//! (`KILN_BENCH_PACKS`, comma-separated, adds 1,000,000 where the disk and
//! the time allow): the files and folders it takes, the bytes allocated
//! against the bytes it counts, and a hit of a 2 KiB artifact (goal: flat,
//! as F4). Each size's weight is a record of `records.jsonl`
//! (`store_packs`, case `weight`); the hits are criterion's.
//!
//! The stores are filled by `DiskStore::fill_scratch_packed` (kiln-store's
//! `bench` feature): each entry's object, record and history appended to
//! the packs as a packed put appends them, without syncing. They are kept
//! under the target folder and reused while whole.
//!
//! Then a remote tier's write-back (`store_packs_write_back`): 64 copies of
//! 4 KiB artifacts put into a durable store one `put_copy` at a time
//! (`one_by_one`) against one `put_many` (`batched`).
//!
//! ```text
//! cargo bench -p kiln-benches --bench store_packs -- --warm-up-time 1 --measurement-time 2
//! ```

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use kiln_benches::{BenchRecord, append_record, cores};
use kiln_engine::fake::{FakeCompiler, FakeKernel};
use kiln_engine::{ArtifactStore, ArtifactStoreExt, Lookup, Origin, Put, StoreKey, StoreOutcome};
use kiln_store::{DiskStore, StoreConfig};

/// Keys looked up in turn by one iteration, spread over the whole store.
const LOOKED_UP: usize = 16;

/// The packs' shards (kiln-store's `pack::SHARDS`).
const SHARDS: u64 = 512;

fn key(number: usize) -> StoreKey {
    let number = u32::try_from(number).expect("fewer than 2^32 entries");
    StoreKey::for_artifact(
        &FakeCompiler::default_key_components(),
        &FakeKernel::new(number).artifact_id(),
        None,
    )
}

fn open(root: &Path) -> DiskStore {
    DiskStore::open(StoreConfig {
        durable: false,
        collects_automatically: false,
        pack_below: 64 << 10,
        ..StoreConfig::at(root)
    })
    .expect("a scratch store")
}

fn artifact(number: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; 2 << 10];
    bytes[..8].copy_from_slice(&(number as u64).to_le_bytes());
    bytes
}

/// The store of `entries` entries at `root`: the one a run left there when
/// it is whole, else a new one.
fn filled(root: &Path, entries: usize, looked_up: &[StoreKey]) -> DiskStore {
    let store = open(root);
    let hits = |store: &DiskStore| {
        looked_up
            .iter()
            .all(|key| matches!(store.lookup(key), Lookup::Hit { .. }))
    };
    if store.usage().entries == entries as u64 && hits(&store) {
        eprintln!("{entries} entries: the store of an earlier run");
        return store;
    }
    drop(store);
    let _ = std::fs::remove_dir_all(root);
    let store = open(root);
    let filling = Instant::now();
    let filled = store
        .fill_scratch_packed((0..entries).map(|number| (key(number), artifact(number))))
        .expect("the scratch store fills");
    assert_eq!(filled, entries as u64);
    assert!(hits(&store), "a filled store serves its keys");
    eprintln!("{entries} entries: filled in {:?}", filling.elapsed());
    store
}

fn store_packs(criterion: &mut Criterion) {
    let sizes: Vec<usize> = std::env::var("KILN_BENCH_PACKS")
        .ok()
        .map(|text| {
            text.split(',')
                .filter_map(|size| size.trim().parse().ok())
                .collect()
        })
        .unwrap_or_else(|| vec![10, 10_000, 100_000]);
    let stores: Vec<(usize, DiskStore, Vec<StoreKey>)> = sizes
        .into_iter()
        .map(|entries| {
            let looked_up: Vec<StoreKey> = (0..LOOKED_UP)
                .map(|slot| key(slot * entries / LOOKED_UP))
                .collect();
            let root =
                Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("store-packs-{entries}"));
            (entries, filled(&root, entries, &looked_up), looked_up)
        })
        .collect();

    for (entries, store, _) in &stores {
        let footprint = store.footprint();
        let counted = store.usage().bytes;
        let bound = 1.1 * (SHARDS as f64 + *entries as f64 / 1000.0);
        eprintln!(
            "{entries} entries: {} files and folders (F10 bound {bound:.0}), {} bytes allocated, \
             {counted} counted ({:.2}x)",
            footprint.files,
            footprint.allocated_bytes,
            footprint.allocated_bytes as f64 / counted as f64
        );
        append_record(&BenchRecord {
            bench: "store_packs".to_owned(),
            case: "weight".to_owned(),
            size: Some(entries.to_string()),
            kernels: *entries,
            wall: 0.0,
            summed_work: 0.0,
            slowest: 0.0,
            workers: 1,
            mode: "packs".to_owned(),
            cores: cores(),
            host_peak_bytes: None,
            worker_peak_bytes: Vec::new(),
            compiled: None,
            note: Some(format!(
                "files={} allocated={} counted={counted}",
                footprint.files, footprint.allocated_bytes
            )),
        });
    }

    let mut group = criterion.benchmark_group("store_packs");
    for (entries, store, looked_up) in &stores {
        group.throughput(criterion::Throughput::Elements(LOOKED_UP as u64));
        group.bench_function(BenchmarkId::from_parameter(entries), |bencher| {
            bencher.iter(|| {
                for key in looked_up {
                    match store.lookup(black_box(key)) {
                        Lookup::Hit { artifact, .. } => {
                            black_box(artifact);
                        }
                        Lookup::Miss(miss) => panic!("a stored entry missed: {miss}"),
                    }
                }
            });
        });
    }
    group.finish();
}

/// Copies a write-back puts at once: a warm start's batch.
const WRITTEN_BACK: usize = 64;

/// 64 remote hits written back into a durable store, one by one against
/// one batch: what the syncs cost (F10, P10's remote warm start).
fn write_back(criterion: &mut Criterion) {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("store-packs-write-back");
    let _ = std::fs::remove_dir_all(&root);
    let store = DiskStore::open(StoreConfig {
        collects_automatically: false,
        ..StoreConfig::at(&root)
    })
    .expect("a durable store");
    let mut next = 0usize;
    let mut batch = || {
        let entries: Vec<(StoreKey, Vec<u8>)> = (next..next + WRITTEN_BACK)
            .map(|number| {
                let mut bytes = vec![0u8; 4 << 10];
                bytes[..8].copy_from_slice(&(number as u64).to_le_bytes());
                (key(number), bytes)
            })
            .collect();
        next += WRITTEN_BACK;
        entries
    };
    let mut group = criterion.benchmark_group("store_packs_write_back");
    group.sample_size(10);
    group.throughput(criterion::Throughput::Elements(WRITTEN_BACK as u64));
    for case in ["one_by_one", "batched"] {
        group.bench_function(BenchmarkId::new(case, WRITTEN_BACK), |bencher| {
            bencher.iter_custom(|iterations| {
                let mut total = std::time::Duration::ZERO;
                for _ in 0..iterations {
                    let entries = batch();
                    let started = Instant::now();
                    let outcomes: Vec<StoreOutcome> = if case == "batched" {
                        let copies: Vec<Put<'_>> = entries
                            .iter()
                            .map(|(key, bytes)| Put {
                                key,
                                bytes,
                                work: std::time::Duration::ZERO,
                                origin: Origin::Copied,
                            })
                            .collect();
                        store.put_many(&copies)
                    } else {
                        entries
                            .iter()
                            .map(|(key, bytes)| {
                                store.put_copy(key, bytes, std::time::Duration::ZERO)
                            })
                            .collect()
                    };
                    total += started.elapsed();
                    assert!(
                        outcomes
                            .iter()
                            .all(|outcome| matches!(outcome, StoreOutcome::Stored { .. })),
                        "every copy is stored"
                    );
                }
                total
            });
        });
    }
    group.finish();
    drop(store);
    let _ = std::fs::remove_dir_all(&root);
}

criterion_group!(benches, store_packs, write_back);
criterion_main!(benches);
