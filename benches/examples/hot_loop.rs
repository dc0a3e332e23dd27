//! L2 without system calls, checked from outside: loads 1,000 kernels, then
//! launches them `N` times over (the first argument). Run it under `strace`
//! with `N = 0` and with `N = 1000` and compare the counts: every system
//! call belongs to start-up and the batch, none to the hot loop.
//!
//! ```text
//! cargo build --release -p kiln-benches --example hot_loop
//! strace -f -c -o /tmp/zero.txt target/release/examples/hot_loop 0
//! strace -f -c -o /tmp/many.txt target/release/examples/hot_loop 1000
//! ```

use std::hint::black_box;

use kiln_engine::fake::{FakeKernel, FakeTarget};
use kiln_engine::{KernelLoader, LoaderConfig};

fn main() {
    let rounds: u64 = std::env::args()
        .nth(1)
        .map(|text| {
            text.parse()
                .expect("the first argument is a number of rounds")
        })
        .unwrap_or(1000);
    let mut loader = KernelLoader::with_config(FakeTarget::persisting(), LoaderConfig::default());
    let kernels: Vec<FakeKernel> = (0..1_000).map(FakeKernel::new).collect();
    let ids: Vec<_> = kernels.iter().map(FakeKernel::artifact_id).collect();
    for kernel in &kernels {
        loader.enqueue(Box::new(kernel.clone()), ());
    }
    loader.compile_queued();
    for _ in 0..rounds {
        for (kernel, id) in kernels.iter().zip(&ids) {
            black_box(loader.load(kernel, id).expect("loaded by the batch"));
        }
    }
    println!("{} launches", rounds * 1_000);
}
