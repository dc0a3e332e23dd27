//! R1: a server loop's request latency with `load_or` against `load`, on
//! real compilers. Requests arrive at a fixed rate; the shapes they need
//! arrive unannounced, each a specialization no loader has seen. With
//! `load`, a request for a new shape waits for its compile (and the
//! requests queued behind it wait too); with `load_or`, it is answered at
//! once with a generic kernel loaded before the first request, and the
//! specialization compiles in a background batch.
//!
//! - `wgpu`: WGSL matmuls and softmaxes through naga to a compute pipeline
//!   on the first Vulkan adapter (lavapipe on a machine without a GPU).
//! - `cuda`: GEMM kernels through NVRTC, loaded on GPU 0; compile-only
//!   for sm_90 on a machine without one (the latency is then the compile's
//!   and the artifact's description, no module load).
//!
//! A third run serves with `load` kernels all loaded before the first
//! request: the loop's floor on the machine (its sleeps' overshoot, other
//! processes), which no compile can explain.
//!
//! Each run leaves a record (`serving`, case `TARGET/load`,
//! `TARGET/load_or` or `TARGET/loaded`) whose note is a JSON object: the latency percentiles
//! (from a request's arrival to its answer), the loader's health counts,
//! and how many specializations were served after their background batch.
//! `KILN_BENCH_SERVING` is `requests:seconds:shapes` (default
//! `1000:5:20`); `KILN_BENCH_SERVING_TARGETS` picks `wgpu`, `cuda` or both
//! (default both); `KILN_BENCH_SERVING_SLOWEST=1` prints each run's five
//! slowest calls with their request numbers (a new shape every
//! `requests / shapes`) and how long each was on a processor and waiting
//! for one.
//!
//! ```text
//! cargo bench -p kiln-benches --bench serving
//! ```

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kiln_benches::{BenchRecord, KernelSize, append_record, cores, cuda_target};
use kiln_engine::{ArtifactId, CompilationTarget, Kernel, KernelId, KernelLoader, KernelOf};
use kiln_engine::{Loading, VariantOf};
use kiln_test_support::wgsl;
use kiln_wgpu::{WgpuDevice, WgpuTarget, WgpuVariant, WgslKernel};

/// How long a run may wait for its last background batch.
const SETTLE: Duration = Duration::from_secs(300);

/// One serving run's shape.
#[derive(Debug, Clone, Copy)]
struct Plan {
    requests: u32,
    over: Duration,
    shapes: u32,
}

impl Plan {
    fn from_env() -> Self {
        let default = Self {
            requests: 1000,
            over: Duration::from_secs(5),
            shapes: 20,
        };
        let Ok(text) = std::env::var("KILN_BENCH_SERVING") else {
            return default;
        };
        let numbers: Vec<f64> = text
            .split(':')
            .filter_map(|part| part.trim().parse().ok())
            .collect();
        match numbers[..] {
            [requests, seconds, shapes] if requests >= 1.0 && seconds > 0.0 && shapes >= 1.0 => {
                Self {
                    requests: requests as u32,
                    over: Duration::from_secs_f64(seconds),
                    shapes: shapes as u32,
                }
            }
            _ => {
                eprintln!("serving: KILN_BENCH_SERVING={text:?} is not requests:seconds:shapes");
                default
            }
        }
    }
}

/// What one run measured.
struct Run {
    latencies: Vec<Duration>,
    /// Each request's time in the `load` or `load_or` call alone: what
    /// kiln held it for, without the wait behind earlier requests or for
    /// the processor.
    calls: Vec<Duration>,
    fallback_loads: u64,
    request_path_compiles: u64,
    request_path_seconds: f64,
    /// Specializations loaded once the last background batch landed.
    specialized: u32,
    /// The compiles' summed work and count, from the batch records.
    compile_work: Duration,
    compiled: usize,
}

impl Run {
    fn percentile(&self, fraction: f64) -> Duration {
        percentile(&self.latencies, fraction)
    }
}

/// This thread's nanoseconds on a processor and waiting for one, so far
/// (zero where the kernel does not say).
fn schedule() -> (u64, u64) {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|text| {
            let mut parts = text.split_whitespace().map(|part| part.parse().ok());
            Some((parts.next()??, parts.next()??))
        })
        .unwrap_or_default()
}

fn percentile(durations: &[Duration], fraction: f64) -> Duration {
    let mut sorted = durations.to_vec();
    sorted.sort_unstable();
    let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted.get(index).copied().unwrap_or_default()
}

/// Serves `plan`'s requests on a fresh loader of `target`, with `load_or`
/// (mode `load_or`), with `load` (`load`), or with `load` of kernels all
/// loaded before the first request (`loaded`: the loop's floor on this
/// machine, no compile anywhere).
fn serve<T: CompilationTarget + 'static>(
    target: T,
    generic: &KernelOf<T>,
    shapes: &[KernelOf<T>],
    variant: &VariantOf<T>,
    plan: Plan,
    mode: &str,
) -> Result<Run, String>
where
    KernelOf<T>: Clone + Sized,
{
    let mut loader = KernelLoader::new(target).without_profile();
    let generic_id = ArtifactId::new(generic.id(), variant.clone());
    loader
        .load(generic, &generic_id)
        .map_err(|error| format!("the generic kernel: {error}"))?;
    let ids: Vec<ArtifactId<VariantOf<T>>> = shapes
        .iter()
        .map(|shape| ArtifactId::new(shape.id(), variant.clone()))
        .collect();
    if mode == "loaded" {
        for shape in shapes {
            loader.enqueue(Box::new(shape.clone()), variant.clone());
        }
        loader.compile_queued();
    }
    let before = loader.statistics().health;
    let count = u32::try_from(shapes.len()).unwrap_or(u32::MAX).max(1);
    let gap = plan.over / plan.requests;
    let per_shape = (plan.requests / count).max(1);
    let mut latencies = Vec::with_capacity(plan.requests as usize);
    let mut calls = Vec::with_capacity(plan.requests as usize);
    // With the slowest calls asked for: each call's time on a processor
    // and waiting for one, from the thread's scheduler statistics.
    let scheduled = std::env::var_os("KILN_BENCH_SERVING_SLOWEST").is_some();
    let mut schedules = Vec::new();
    let started = Instant::now();
    for request in 0..plan.requests {
        let due = started + gap * request;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        // A new shape every `per_shape` requests; every other request asks
        // for one seen before.
        let newest = (request / per_shape).min(count - 1) as usize;
        let shape = if request % 2 == 0 {
            newest
        } else {
            (request as usize / 2) % (newest + 1)
        };
        let before = if scheduled { schedule() } else { (0, 0) };
        let called = Instant::now();
        if mode == "load_or" {
            let served = loader
                .load_or(&shapes[shape], &ids[shape], &generic_id)
                .map_err(|error| error.to_string())?;
            std::hint::black_box(served);
        } else {
            let served = loader
                .load(&shapes[shape], &ids[shape])
                .map_err(|error| format!("shape {shape}: {error}"))?;
            std::hint::black_box(served);
        }
        calls.push(called.elapsed());
        if scheduled {
            let after = schedule();
            schedules.push((
                after.0.saturating_sub(before.0),
                after.1.saturating_sub(before.1),
            ));
        }
        latencies.push(due.elapsed());
    }
    if scheduled {
        let mut slowest: Vec<(Duration, usize)> = calls.iter().copied().zip(0..).collect();
        slowest.sort_unstable_by(|a, b| b.cmp(a));
        for &(took, request) in &slowest[..5.min(slowest.len())] {
            let (running, waiting) = schedules.get(request).copied().unwrap_or_default();
            eprintln!(
                "serving: {mode}: request {request} took {took:?}: on a processor {} µs, \
                 waiting for one {} µs",
                running / 1000,
                waiting / 1000
            );
        }
    }
    let health = loader.statistics().health;
    if !loader.wait_for_background(SETTLE) {
        return Err(format!(
            "the background batches did not land within {SETTLE:?}"
        ));
    }
    let specialized = shapes
        .iter()
        .zip(&ids)
        .filter(|(shape, id)| matches!(loader.try_load(shape, id), Loading::Ready(_)))
        .count();
    let failures = loader.take_background_failures();
    if !failures.is_empty() {
        return Err(format!("a specialization failed: {failures:?}"));
    }
    let (mut compile_work, mut compiled) = (Duration::ZERO, 0);
    for batch in loader.records() {
        for record in &batch.records {
            if record.outcome == kiln_engine::KernelOutcome::Compiled {
                compile_work += record.work;
                compiled += 1;
            }
        }
    }
    Ok(Run {
        latencies,
        calls,
        fallback_loads: health.fallback_loads - before.fallback_loads,
        request_path_compiles: health.request_path_compiles - before.request_path_compiles,
        request_path_seconds: health.request_path_seconds - before.request_path_seconds,
        specialized: u32::try_from(specialized).unwrap_or(u32::MAX),
        compile_work,
        compiled,
    })
}

/// Records and prints one run.
fn report(target: &str, device: &str, mode: &str, plan: Plan, run: &Run) {
    let ms = |duration: Duration| duration.as_secs_f64() * 1e3;
    let compile_mean = if run.compiled == 0 {
        0.0
    } else {
        run.compile_work.as_secs_f64() / run.compiled as f64
    };
    let note = serde_json::json!({
        "device": device,
        "requests": plan.requests,
        "seconds": plan.over.as_secs_f64(),
        "shapes": plan.shapes,
        "p50_ms": ms(run.percentile(0.5)),
        "p99_ms": ms(run.percentile(0.99)),
        "max_ms": ms(run.percentile(1.0)),
        "call_p99_us": percentile(&run.calls, 0.99).as_secs_f64() * 1e6,
        "call_max_us": percentile(&run.calls, 1.0).as_secs_f64() * 1e6,
        "fallback_loads": run.fallback_loads,
        "request_path_compiles": run.request_path_compiles,
        "request_path_seconds": run.request_path_seconds,
        "specialized": run.specialized,
        "compile_mean_ms": compile_mean * 1e3,
    });
    println!(
        "serving {target:<5} {mode:<8} p50 {:>8.2} ms  p99 {:>8.1} ms  max {:>8.1} ms  \
         call p99 {:>9.1} µs max {:>9.1} µs  fallback loads {:>4}  request-path compiles \
         {:>3} ({:.2} s)  specialized {}/{}  a compile {:.0} ms",
        ms(run.percentile(0.5)),
        ms(run.percentile(0.99)),
        ms(run.percentile(1.0)),
        percentile(&run.calls, 0.99).as_secs_f64() * 1e6,
        percentile(&run.calls, 1.0).as_secs_f64() * 1e6,
        run.fallback_loads,
        run.request_path_compiles,
        run.request_path_seconds,
        run.specialized,
        plan.shapes,
        compile_mean * 1e3,
    );
    append_record(&BenchRecord {
        bench: "serving".into(),
        case: format!("{target}/{mode}"),
        kernels: plan.shapes as usize,
        wall: run.percentile(0.99).as_secs_f64(),
        summed_work: run.compile_work.as_secs_f64(),
        slowest: run.percentile(1.0).as_secs_f64(),
        mode: "threads".into(),
        cores: cores(),
        compiled: Some(run.compiled),
        note: Some(note.to_string()),
        ..BenchRecord::default()
    });
}

/// Serves `plan` with `load`, then with `load_or`, on targets `make` gives,
/// with kernels `kernels(round)` gives (a round no earlier run compiled).
fn compare<T: CompilationTarget + 'static>(
    name: &str,
    device: &str,
    plan: Plan,
    make: impl Fn() -> Option<T>,
    kernels: impl Fn(u64) -> (KernelOf<T>, Vec<KernelOf<T>>),
    variant: &VariantOf<T>,
) where
    KernelOf<T>: Clone + Sized,
{
    // The clock's seconds: no earlier process compiled these kernels
    // either, should a driver cache what it saw.
    let base = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs() % 1_000_000)
        * 10;
    for (offset, mode) in [(1, "load"), (2, "load_or"), (3, "loaded")] {
        let Some(target) = make() else { return };
        let (generic, shapes) = kernels(base + offset);
        match serve(target, &generic, &shapes, variant, plan, mode) {
            Ok(run) => report(name, device, mode, plan, &run),
            Err(error) => {
                eprintln!("serving: {name} {mode} did not finish: {error}");
                return;
            }
        }
    }
}

fn wgpu(plan: Plan) {
    let device = match WgpuDevice::open() {
        Ok(device) => device,
        Err(error) => {
            eprintln!("serving: wgpu skipped, no Vulkan adapter: {error}");
            return;
        }
    };
    println!("serving: wgpu on {}", device.info().name);
    let kernels = |round: u64| {
        let mut all = wgsl::salted(round as usize, plan.shapes as usize + 1, |salt, source| {
            WgslKernel::builder(KernelId::named("bench.serving").parameter(&salt), "main")
                .source(source)
        });
        let generic = all.remove(0);
        (generic, all)
    };
    compare(
        "wgpu",
        &device.info().name,
        plan,
        || Some(WgpuTarget::on_device(device.clone()).without_store()),
        kernels,
        &WgpuVariant,
    );
}

fn cuda(plan: Plan) {
    let Some(probe) = cuda_target("serving", true) else {
        return;
    };
    let variant = probe.variant();
    let device = if probe.is_compile_only() {
        format!("compile-only for {}", probe.architecture())
    } else {
        format!("on GPU 0, {}", probe.architecture())
    };
    println!("serving: cuda {device}");
    drop(probe);
    let kernels = |round: u64| {
        let salt = |index: u64| round * 1_000 + index;
        let generic = KernelSize::Gemm.kernel(salt(0));
        let shapes = (1..=u64::from(plan.shapes))
            .map(|index| KernelSize::Gemm.kernel(salt(index)))
            .collect();
        (generic, shapes)
    };
    compare(
        "cuda",
        &device,
        plan,
        || cuda_target("serving", true).map(kiln_cuda::CudaTarget::without_store),
        kernels,
        &variant,
    );
}

fn main() {
    kiln_engine::worker::run_if_worker(&[kiln_cuda::worker_entry()]);
    let plan = Plan::from_env();
    let targets = std::env::var("KILN_BENCH_SERVING_TARGETS").unwrap_or_default();
    let wants = |name: &str| targets.is_empty() || targets.split(',').any(|t| t.trim() == name);
    println!(
        "serving: {} requests over {:?}, {} shapes arriving unannounced",
        plan.requests, plan.over, plan.shapes
    );
    if wants("wgpu") {
        wgpu(plan);
    }
    if wants("cuda") {
        cuda(plan);
    }
}
