//! A wgpu program that tunes one WGSL kernel's workgroup size with kiln:
//! six candidates compiled in one batch, each timed on the device (warm-up
//! launches, then the median of device-timed launches), the fastest kept
//! in the store. Run it twice: the second run takes the answer from the
//! store and measures nothing.
//!
//! ```text
//! cargo run --release -p kiln --features wgpu --example wgpu_tune
//! kiln tunes
//! ```
//!
//! Without a Vulkan adapter it says why and exits 0;
//! `KILN_REQUIRE_DEVICE=1` makes a missing adapter a failure instead.

use std::process::ExitCode;

use kiln::tune::{Candidate, Measure, Origin, TuneKey};
use kiln::wgpu::{WgpuDevice, WgpuPipeline, WgpuTarget, WgpuVariant, WgslKernel};
use kiln::{KernelId, KernelLoader, Store};

/// Each invocation smooths one element a few hundred times: enough work
/// that the workgroup size shows.
const SMOOTH: &str = "
override WORKGROUP: u32 = 64;

@group(0) @binding(0) var<storage, read_write> data: array<f32>;

@compute @workgroup_size(WORKGROUP)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i < arrayLength(&data) {
        var value = data[i];
        for (var step = 0u; step < 256u; step++) {
            value = value * 0.99 + 0.01;
        }
        data[i] = value;
    }
}
";

const ELEMENTS: u32 = 1 << 18;
const WORKGROUPS: [u32; 6] = [8, 16, 32, 64, 128, 256];

fn candidate(workgroup: u32) -> Candidate<WgpuTarget> {
    let kernel = WgslKernel::builder(
        KernelId::named("wgpu_tune.smooth").parameter(&workgroup),
        "main",
    )
    .label(format!("smooth wg={workgroup}"))
    .constant("WORKGROUP", f64::from(workgroup))
    .source(SMOOTH);
    Candidate::new(Box::new(kernel), WgpuVariant)
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("wgpu_tune: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let device = match WgpuDevice::open() {
        Ok(device) => device,
        Err(no_adapter) => {
            if std::env::var("KILN_REQUIRE_DEVICE").is_ok_and(|value| value == "1") {
                return Err(format!("KILN_REQUIRE_DEVICE=1 and {no_adapter}").into());
            }
            println!("no device to tune on: {no_adapter}");
            return Ok(());
        }
    };
    let target = WgpuTarget::on_device(device.clone()).with_optional_store(Store::from_env()?);
    let mut loader = KernelLoader::new(target);
    let candidates: Vec<_> = WORKGROUPS.into_iter().map(candidate).collect();
    let data = device.storage_buffer("data", &vec![0u8; ELEMENTS as usize * 4])?;
    let mut launch = |pipeline: &WgpuPipeline| {
        let groups = ELEMENTS.div_ceil(pipeline.workgroup_size()[0]);
        device
            .dispatch(pipeline, &[(0, 0, &data)], [groups, 1, 1])
            .map_err(|error| error.to_string())
    };
    let key = TuneKey::new("wgpu_tune.smooth").parameter("elements", ELEMENTS);
    let measure = Measure::Timed {
        launch: &mut launch,
        warm_up: 2,
        runs: 7,
    };
    let tuned = loader.tune(&key, &candidates, measure)?;
    for (workgroup, result) in WORKGROUPS.iter().zip(&tuned.answer.candidates) {
        match result.time() {
            Some(time) => println!("workgroup {workgroup:>3}: {time:?}"),
            None => println!("workgroup {workgroup:>3}: {:?}", result.outcome),
        }
    }
    let how = match tuned.origin {
        Origin::Measured => "measured now",
        Origin::Stored => "from the store, nothing measured",
        Origin::Waited => "measured by another process",
    };
    println!(
        "fastest: workgroup {} ({how}; {}) on {}",
        tuned.loaded.workgroup_size()[0],
        tuned.answer.method,
        tuned.answer.device
    );
    // The winner is loaded: launch it as the program would.
    let groups = ELEMENTS.div_ceil(tuned.loaded.workgroup_size()[0]);
    device.dispatch(&tuned.loaded, &[(0, 0, &data)], [groups, 1, 1])?;
    let values = device.read(&data)?;
    if values.len() < 4 {
        return Err("the data buffer read back empty".into());
    }
    Ok(())
}
