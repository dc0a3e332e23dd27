//! F3 / P2: a warm store hit — record read and checked, artifact bytes read
//! and digested — against two baselines on the same object file, for
//! 4 KiB, 64 KiB and 1 MiB artifacts, in the same run:
//!
//! - `lookup`: a hit by kernel id, the warm path (a kernel's record carries
//!   an artifact of at most 16 KiB, so the 4 KiB hit opens one file);
//! - `lookup_source`: a hit by source key, whose record points at the
//!   object: two files, whatever the size;
//! - `fs_read`: a plain `fs::read` of the bytes;
//! - `fs_read_blake3`: `fs::read` and a BLAKE3 of the bytes, what F3 calls
//!   reading and verifying them (P2 forbids a hit without the digest).
//!
//! Goal: at most 1.5× the baseline. Ratios are lookup / baseline medians.
//!
//! ```text
//! cargo bench -p kiln-benches --bench store_hit -- --warm-up-time 1 --measurement-time 3
//! ```

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kiln_engine::fake::{FakeCompiler, FakeKernel};
use kiln_engine::{ArtifactStore, ArtifactStoreExt, Lookup, StoreKey};
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
        let id = FakeKernel::new(number).artifact_id();
        let key = StoreKey::for_artifact(&components, &id, None);
        let source_key = StoreKey::for_source(&components, &id, None, label);
        let bytes: Vec<u8> = (0..length).map(|index| (index * 31 % 251) as u8).collect();
        store.put(&key, Some(&source_key), &bytes, Duration::ZERO);
        let object = store.object_path(&store.record(&key).expect("stored").object);
        group.throughput(Throughput::Bytes(length as u64));
        group.bench_function(BenchmarkId::new("lookup", label), |bencher| {
            bencher.iter(|| match store.lookup(black_box(&key)) {
                Lookup::Hit { artifact, .. } => black_box(artifact),
                Lookup::Miss(miss) => panic!("a warm entry missed: {miss}"),
            });
        });
        group.bench_function(BenchmarkId::new("lookup_source", label), |bencher| {
            bencher.iter(|| match store.lookup(black_box(&source_key)) {
                Lookup::Hit { artifact, .. } => black_box(artifact),
                Lookup::Miss(miss) => panic!("a warm entry missed: {miss}"),
            });
        });
        group.bench_function(BenchmarkId::new("fs_read", label), |bencher| {
            bencher.iter(|| black_box(std::fs::read(black_box(&object)).expect("the object")));
        });
        group.bench_function(BenchmarkId::new("fs_read_blake3", label), |bencher| {
            bencher.iter(|| {
                let bytes = std::fs::read(black_box(&object)).expect("the object");
                black_box(blake3::hash(&bytes));
                black_box(bytes)
            });
        });
    }
    group.finish();
    let _ = std::fs::remove_dir_all(&root);
}

criterion_group!(benches, store_hit);
criterion_main!(benches);
