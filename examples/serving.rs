//! A server loop on the fake target: requests arrive at a fixed rate, and
//! the shapes they need arrive unannounced, each a specialization that
//! takes the compiler seconds. Served once with `load`, which compiles a
//! missing kernel before it answers, and once with `load_or`, which answers
//! a generic fallback at once and compiles the specialization in a
//! background batch; it prints each run's request latency percentiles
//! (from a request's arrival to its answer, so a stall delays the requests
//! queued behind it too).
//!
//! ```text
//! cargo run --release -p kiln --features testing --example serving
//! cargo run --release -p kiln --features testing --example serving -- --quick --json
//! ```
//!
//! `--quick` serves 400 requests over 2 s with 8 shapes of 0.5 s each
//! instead of 1,000 over 5 s with 20 shapes of 2 s; `--json` prints one
//! JSON object instead of the table.

use std::time::{Duration, Instant};

use kiln::fake::{FakeKernel, FakeTarget};
use kiln::{ArtifactId, KernelLoader};

/// One serving run's shape.
#[derive(Clone, Copy)]
struct Plan {
    requests: u32,
    over: Duration,
    shapes: u32,
    compile: Duration,
}

/// What one run measured.
struct Run {
    latencies: Vec<Duration>,
    fallback_loads: u64,
    request_path_compiles: u64,
    request_path_seconds: f64,
}

impl Run {
    fn percentile(&self, fraction: f64) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable();
        let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
        sorted.get(index).copied().unwrap_or_default()
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let quick = arguments.iter().any(|argument| argument == "--quick");
    let json = arguments.iter().any(|argument| argument == "--json");
    let plan = if quick {
        Plan {
            requests: 400,
            over: Duration::from_secs(2),
            shapes: 8,
            compile: Duration::from_millis(500),
        }
    } else {
        Plan {
            requests: 1000,
            over: Duration::from_secs(5),
            shapes: 20,
            compile: Duration::from_secs(2),
        }
    };
    let blocking = serve(plan, false)?;
    let background = serve(plan, true)?;
    let ms = |duration: Duration| duration.as_secs_f64() * 1e3;
    if json {
        let row = |run: &Run| {
            format!(
                "{{\"p50_ms\": {:.3}, \"p99_ms\": {:.3}, \"max_ms\": {:.3}, \
                 \"fallback_loads\": {}, \"request_path_compiles\": {}, \
                 \"request_path_seconds\": {:.3}}}",
                ms(run.percentile(0.5)),
                ms(run.percentile(0.99)),
                ms(run.percentile(1.0)),
                run.fallback_loads,
                run.request_path_compiles,
                run.request_path_seconds
            )
        };
        println!(
            "{{\"requests\": {}, \"seconds\": {}, \"shapes\": {}, \"compile_seconds\": {}, \
             \"load\": {}, \"load_or\": {}}}",
            plan.requests,
            plan.over.as_secs_f64(),
            plan.shapes,
            plan.compile.as_secs_f64(),
            row(&blocking),
            row(&background)
        );
        return Ok(());
    }
    println!(
        "{} requests over {:?}, {} shapes arriving unannounced, {:?} a compile (fake target)\n",
        plan.requests, plan.over, plan.shapes, plan.compile
    );
    println!(
        "{:<8} {:>10} {:>10} {:>10} {:>15} {:>22}",
        "", "p50", "p99", "max", "fallback loads", "request-path compiles"
    );
    for (name, run) in [("load", &blocking), ("load_or", &background)] {
        println!(
            "{:<8} {:>7.2} ms {:>7.1} ms {:>7.1} ms {:>15} {:>11} ({:.1} s)",
            name,
            ms(run.percentile(0.5)),
            ms(run.percentile(0.99)),
            ms(run.percentile(1.0)),
            run.fallback_loads,
            run.request_path_compiles,
            run.request_path_seconds
        );
    }
    Ok(())
}

/// Serves `plan`'s requests with `load` or with `load_or`.
fn serve(plan: Plan, with_fallback: bool) -> Result<Run, Box<dyn std::error::Error>> {
    let mut loader = KernelLoader::new(FakeTarget::storeless());
    // The generic kernel every shape can fall back on, loaded once at
    // start, before the first request.
    let generic = FakeKernel::new(0);
    let generic_id = generic.artifact_id();
    loader.load(&generic, &generic_id)?;
    let before = loader.statistics().health;

    let shapes: Vec<FakeKernel> = (1..=plan.shapes)
        .map(|number| FakeKernel::new(number).sleeping(plan.compile))
        .collect();
    let ids: Vec<ArtifactId<()>> = shapes.iter().map(FakeKernel::artifact_id).collect();
    let gap = plan.over / plan.requests;
    let per_shape = (plan.requests / plan.shapes).max(1);
    let mut latencies = Vec::with_capacity(plan.requests as usize);
    let started = Instant::now();
    for request in 0..plan.requests {
        let due = started + gap * request;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        // A new shape every `per_shape` requests; every other request asks
        // for one seen before.
        let newest = (request / per_shape).min(plan.shapes - 1) as usize;
        let shape = if request % 2 == 0 {
            newest
        } else {
            (request as usize / 2) % (newest + 1)
        };
        let served = if with_fallback {
            loader.load_or(&shapes[shape], &ids[shape], &generic_id)?
        } else {
            loader.load(&shapes[shape], &ids[shape])?
        };
        std::hint::black_box(served);
        latencies.push(due.elapsed());
    }
    let health = loader.statistics().health;
    Ok(Run {
        latencies,
        fallback_loads: health.fallback_loads - before.fallback_loads,
        request_path_compiles: health.request_path_compiles - before.request_path_compiles,
        request_path_seconds: health.request_path_seconds - before.request_path_seconds,
    })
}
