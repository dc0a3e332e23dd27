//! A batch of 200 kernels through the fake target: queue them, compile them
//! in one parallel batch at the first launch, then launch each from memory.
//!
//! ```text
//! cargo run --release -p kiln --features testing --example quickstart
//! ```
//!
//! The fake compiler sleeps a few milliseconds per kernel, as a small real
//! compile would, so the table shows what batching on every core buys.

use std::time::{Duration, Instant};

use kiln::fake::{FakeKernel, FakeTarget};
use kiln::{KernelLoader, KernelOutcome, StatisticsCollector};

fn main() -> Result<(), kiln::KernelError> {
    let mut loader = KernelLoader::new(FakeTarget::persisting());
    let collector = StatisticsCollector::new();
    let scope = collector.open();

    // 200 kernels: most distinct, every tenth sharing one source text (as
    // shape specializations that generate the same code do), and two that
    // fail to compile.
    let kernels: Vec<FakeKernel> = (0..200)
        .map(|number| {
            let kernel =
                FakeKernel::new(number).sleeping(Duration::from_millis(2 + u64::from(number % 7)));
            match number {
                13 | 113 => kernel.failing(),
                number if number % 10 == 0 => kernel.sharing_source("elementwise add, f32"),
                _ => kernel,
            }
        })
        .collect();
    for kernel in &kernels {
        loader.enqueue(Box::new(kernel.clone()), ());
    }

    let started = Instant::now();
    let mut failures = Vec::new();
    for kernel in &kernels {
        if let Err(error) = loader.load(kernel, &kernel.artifact_id()) {
            failures.push(error);
        }
    }
    let first_pass = started.elapsed();

    let started = Instant::now();
    for kernel in kernels
        .iter()
        .filter(|kernel| !kernel.behaviour.fails_to_finalize)
    {
        loader.load(kernel, &kernel.artifact_id())?;
    }
    let hot_pass = started.elapsed();
    drop(scope);

    let batch = &loader.records()[0];
    let counts = collector.counts();
    let statistics = loader.statistics();
    println!("kiln quickstart: 200 kernels through the fake target\n");
    println!("{:<28} {:>12}", "batch", "");
    println!("{:<28} {:>12}", "  kernels", batch.kernels);
    println!("{:<28} {:>12}", "  workers", batch.workers);
    println!(
        "{:<28} {:>12}",
        "  compiled",
        batch.count(KernelOutcome::Compiled)
    );
    println!(
        "{:<28} {:>12}",
        "  rekeyed (shared source)",
        batch.count(KernelOutcome::Rekeyed)
    );
    println!(
        "{:<28} {:>12}",
        "  failed",
        batch.count(KernelOutcome::Failed)
    );
    println!("{:<28} {:>12.1?}", "  wall", batch.wall);
    println!("{:<28} {:>12.1?}", "  summed work", batch.summed_work());
    println!(
        "{:<28} {:>11.1}x",
        "  speedup over one worker",
        batch.summed_work().as_secs_f64() / batch.wall.as_secs_f64()
    );
    println!("{:<28} {:>12}", "collector", "");
    println!("{:<28} {:>12}", "  registered", counts.registered);
    println!("{:<28} {:>12}", "  stored", counts.stored);
    println!("{:<28} {:>12}", "loader totals", "");
    println!("{:<28} {:>12}", "  store misses", statistics.misses);
    println!("{:<28} {:>12}", "  bytes written", statistics.bytes_written);
    println!("{:<28} {:>12.1?}", "first pass (compiles)", first_pass);
    println!(
        "{:<28} {:>12.1?}",
        "hot pass, per launch",
        hot_pass / u32::try_from(200 - failures.len()).expect("fewer than 2^32 kernels")
    );
    println!("\nfailures, each reported by its own launch:");
    for failure in &failures {
        println!("  {failure}");
    }
    Ok(())
}
