//! `PendingKernel::resolve` of a built kernel, from 1 and from 16 threads at
//! once: the launch path of a program that shares one device's kernels
//! across its threads. Each thread resolves its own clone of the handle, as
//! request threads do; the time reported is per resolve on one thread, so a
//! flat line from 1 to 16 threads means the path scales.

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use kiln_engine::fake::{FakeKernel, FakeTarget};
use kiln_engine::{DeviceId, KernelCache};

const DEVICE: DeviceId = DeviceId::new("fake", 0);

fn resolve(c: &mut Criterion) {
    let cache = KernelCache::new(DEVICE, FakeTarget::storeless());
    // Other kernels around the one measured, so the cache is not trivially
    // small; resolving does not look any of them up.
    for number in 0..1_000 {
        cache.request(FakeKernel::new(number), ());
    }
    let pending = cache.request(FakeKernel::new(500), ());
    pending.resolve(DEVICE).expect("fake kernels compile");

    let mut group = c.benchmark_group("handle_resolve");
    for threads in [1usize, 16] {
        group.bench_with_input(
            BenchmarkId::new("threads", threads),
            &threads,
            |bencher, &threads| {
                bencher.iter_custom(|iterations| {
                    let start = Barrier::new(threads);
                    let elapsed: Vec<Duration> = std::thread::scope(|scope| {
                        let workers: Vec<_> = (0..threads)
                            .map(|_| {
                                let (pending, start) = (pending.clone(), &start);
                                scope.spawn(move || {
                                    start.wait();
                                    let began = Instant::now();
                                    for _ in 0..iterations {
                                        let loaded =
                                            pending.resolve(black_box(DEVICE)).expect("built");
                                        black_box(loaded);
                                    }
                                    began.elapsed()
                                })
                            })
                            .collect();
                        workers
                            .into_iter()
                            .map(|worker| worker.join().expect("a resolve does not panic"))
                            .collect()
                    });
                    // The slowest thread: every thread's resolves are done
                    // only when it is.
                    elapsed.into_iter().max().unwrap_or_default()
                });
            },
        );
    }
    group.finish();
}

criterion_group!(benches, resolve);
criterion_main!(benches);
