//! F4: a store hit of a 4 KiB artifact with 10, 10,000 and 100,000 entries
//! in the store. Goal: flat.
//!
//! The stores are filled without syncing (a scratch store), which keeps the
//! setup to seconds and changes nothing a lookup does.
//!
//! ```text
//! cargo bench -p kiln-benches --bench store_scale -- --warm-up-time 1 --measurement-time 3
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use kiln_core::fake::{FakeCompiler, FakeKernel};
use kiln_core::{ArtifactStore, Lookup, StoreKey};
use kiln_store::{DiskStore, StoreConfig};

/// Keys looked up in turn by one iteration, spread over the whole store.
const LOOKED_UP: usize = 16;

fn store_scale(criterion: &mut Criterion) {
    let components = FakeCompiler::default_key_components();
    let key = |number: usize| {
        let number = u32::try_from(number).expect("fewer than 2^32 entries");
        StoreKey::for_artifact(&components, &FakeKernel::new(number).artifact_id(), None)
    };
    let mut group = criterion.benchmark_group("store_scale");
    for entries in [10usize, 10_000, 100_000] {
        let root = std::env::temp_dir().join(format!(
            "kiln-bench-store-scale-{entries}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        let store = DiskStore::open(StoreConfig {
            durable: false,
            collects_automatically: false,
            ..StoreConfig::at(&root)
        })
        .expect("a scratch store");
        let filling = Instant::now();
        let mut bytes = vec![0u8; 4 << 10];
        for number in 0..entries {
            bytes[..8].copy_from_slice(&(number as u64).to_le_bytes());
            store.put(&key(number), None, &bytes, Duration::ZERO);
        }
        eprintln!("filled {entries} entries in {:?}", filling.elapsed());
        let looked_up: Vec<StoreKey> = (0..LOOKED_UP)
            .map(|slot| key(slot * entries / LOOKED_UP))
            .collect();
        group.throughput(criterion::Throughput::Elements(LOOKED_UP as u64));
        group.bench_function(BenchmarkId::from_parameter(entries), |bencher| {
            bencher.iter(|| {
                for key in &looked_up {
                    match store.lookup(black_box(key)) {
                        Lookup::Hit { artifact, .. } => {
                            black_box(artifact);
                        }
                        Lookup::Miss(miss) => panic!("a stored entry missed: {miss}"),
                    }
                }
            });
        });
        drop(store);
        let _ = std::fs::remove_dir_all(&root);
    }
    group.finish();
}

criterion_group!(benches, store_scale);
criterion_main!(benches);
