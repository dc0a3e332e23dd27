//! F1 / L2: a launch of a loaded kernel with nothing queued, with 10, 1,000
//! and 100,000 kernels loaded. The figure should be tens of nanoseconds and
//! flat in the number held.
//!
//! ```text
//! cargo bench -p kiln-benches --bench loader_hot_path
//! ```

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kiln_engine::fake::{FakeKernel, FakeTarget};
use kiln_engine::{ArtifactId, KernelLoader, LoaderConfig};

/// How many loaded kernels one measured iteration launches in turn, as an
/// inference loop launches its few dozen kernels over and over.
const LAUNCHED: usize = 16;

fn hot_path(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("loader_hot_path");
    group.throughput(Throughput::Elements(LAUNCHED as u64));
    for held in [10usize, 1_000, 100_000] {
        let mut loader =
            KernelLoader::with_config(FakeTarget::storeless(), LoaderConfig::default());
        for number in 0..held {
            let number = u32::try_from(number).expect("fewer than 2^32 kernels");
            loader.enqueue(Box::new(FakeKernel::new(number)), ());
        }
        loader.compile_queued();
        assert_eq!(loader.loaded_len(), held, "every kernel loaded");

        // Kernels spread over the whole map, so that a larger map is really
        // walked rather than one hot bucket.
        let launched: Vec<(FakeKernel, ArtifactId<()>)> = (0..LAUNCHED)
            .map(|slot| {
                let number = u32::try_from(slot * held / LAUNCHED).expect("small");
                let kernel = FakeKernel::new(number);
                let id = kernel.artifact_id();
                (kernel, id)
            })
            .collect();

        group.bench_function(BenchmarkId::from_parameter(held), |bencher| {
            bencher.iter(|| {
                for (kernel, id) in &launched {
                    black_box(loader.load(kernel, id).expect("loaded"));
                }
            });
        });
    }
    group.finish();
}

criterion_group!(benches, hot_path);
criterion_main!(benches);
