//! F3 / P2: a warm store hit — record read and checked, object read and
//! re-digested — against a plain `fs::read` of the same object, for 4 KiB,
//! 64 KiB and 1 MiB artifacts, in the same run. Goal: at most 1.5× the
//! plain read.
//!
//! ```text
//! cargo bench -p kiln-benches --bench store_hit -- --warm-up-time 1 --measurement-time 3
//! ```

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kiln_core::fake::{FakeCompiler, FakeKernel};
use kiln_core::{ArtifactStore, Lookup, StoreKey};
use kiln_store::{DiskStore, StoreConfig};

fn store_hit(criterion: &mut Criterion) {
    let root = std::env::temp_dir().join(format!("kiln-bench-store-hit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let store = DiskStore::open(StoreConfig {
        durable: false,
        collects_automatically: false,
        ..StoreConfig::at(&root)
    })
    .expect("a scratch store");
    let components = FakeCompiler::default_key_components();

    let mut group = criterion.benchmark_group("store_hit");
    for (label, length) in [
        ("4KiB", 4usize << 10),
        ("64KiB", 64 << 10),
        ("1MiB", 1 << 20),
    ] {
        let number = u32::try_from(length).expect("small");
        let key = StoreKey::for_artifact(&components, &FakeKernel::new(number).artifact_id(), None);
        let bytes: Vec<u8> = (0..length).map(|index| (index * 31 % 251) as u8).collect();
        store.put(&key, None, &bytes, Duration::ZERO);
        let object = store.object_path(&store.record(&key).expect("stored").object);
        group.throughput(Throughput::Bytes(length as u64));
        group.bench_function(BenchmarkId::new("lookup", label), |bencher| {
            bencher.iter(|| match store.lookup(black_box(&key)) {
                Lookup::Hit { artifact, .. } => black_box(artifact),
                Lookup::Miss(miss) => panic!("a warm entry missed: {miss}"),
            });
        });
        group.bench_function(BenchmarkId::new("fs_read", label), |bencher| {
            bencher.iter(|| black_box(std::fs::read(black_box(&object)).expect("the object")));
        });
    }
    group.finish();
    let _ = std::fs::remove_dir_all(&root);
}

criterion_group!(benches, store_hit);
criterion_main!(benches);
