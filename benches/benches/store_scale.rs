//! F4: a store hit of a 4 KiB artifact with 10, 10,000 and 100,000 entries
//! in the store. Goal: flat.
//!
//! The stores are filled by `DiskStore::fill_scratch` (behind kiln-store's
//! `bench` feature, which only this crate turns on), which writes the files
//! a put writes, in place, without staging, syncing or kernel histories:
//! seconds instead of minutes, and nothing a lookup reads differs. They are
//! kept under the target folder and used again by the next run when every
//! key it looks up still hits (a store written by an older kiln misses, and
//! is filled again): on a file system that scans recently freed inodes when
//! it creates one (ext4 without a journal does, for minutes after a
//! deletion), removing 200,000 files makes the next fill of them several
//! times slower. `cargo clean` removes them.
//!
//! ```text
//! cargo bench -p kiln-benches --bench store_scale -- --warm-up-time 1 --measurement-time 3
//! ```

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use kiln_engine::fake::{FakeCompiler, FakeKernel};
use kiln_engine::{ArtifactStore, Lookup, StoreKey};
use kiln_store::{DiskStore, StoreConfig};

/// Keys looked up in turn by one iteration, spread over the whole store.
const LOOKED_UP: usize = 16;

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
        ..StoreConfig::at(root)
    })
    .expect("a scratch store")
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
    // One filler per core: new files spread over the shard folders, and
    // their creations run side by side.
    let fillers = std::thread::available_parallelism().map_or(1, usize::from);
    let filled: u64 = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..fillers)
            .map(|filler| {
                let store = &store;
                scope.spawn(move || {
                    store.fill_scratch((filler..entries).step_by(fillers).map(|number| {
                        let mut bytes = vec![0u8; 4 << 10];
                        bytes[..8].copy_from_slice(&(number as u64).to_le_bytes());
                        (key(number), bytes)
                    }))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .expect("a filler finishes")
                    .expect("the scratch store fills")
            })
            .sum()
    });
    assert_eq!(filled, entries as u64);
    assert!(hits(&store), "a filled store serves its keys");
    eprintln!("{entries} entries: filled in {:?}", filling.elapsed());
    store
}

fn store_scale(criterion: &mut Criterion) {
    let stores: Vec<(usize, DiskStore, Vec<StoreKey>)> = [10usize, 10_000, 100_000]
        .into_iter()
        .map(|entries| {
            let looked_up: Vec<StoreKey> = (0..LOOKED_UP)
                .map(|slot| key(slot * entries / LOOKED_UP))
                .collect();
            let root =
                Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("store-scale-{entries}"));
            (entries, filled(&root, entries, &looked_up), looked_up)
        })
        .collect();

    let mut group = criterion.benchmark_group("store_scale");
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

criterion_group!(benches, store_scale);
criterion_main!(benches);
