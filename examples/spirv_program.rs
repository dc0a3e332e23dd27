//! A wgpu program whose kernels were written in GLSL: glslangValidator
//! compiled them to SPIR-V (kiln-spirv-kernels does it when it builds, from
//! its `glsl/` folder; a program of its own would `include_bytes!` its
//! `.spv` files), and kiln validates them with naga, keeps them in the
//! store with the driver's pipeline cache, and hands back compute
//! pipelines. It runs three specializations of `scale_bias.comp` (its
//! specialization constants set by name and by number) and both entries of
//! a module of two, and checks every number against the CPU.
//!
//! ```text
//! cargo run --release -p kiln --features wgpu,store --example spirv_program
//! ```
//!
//! Without a Vulkan adapter it says why, validates the kernels with naga
//! alone, and exits 0; `KILN_REQUIRE_DEVICE=1` makes a missing adapter a
//! failure instead.

use std::process::ExitCode;

use kiln::wgpu::{WgpuDevice, WgpuTarget, WgpuVariant, WgslKernel, spirv_compute_entries};
use kiln::{ArtifactId, Kernel, KernelId, KernelLoader, Store};

const ELEMENTS: usize = 10_000;

/// Specialization constants, by name or number, and their values.
type Constants = &'static [(&'static str, f64)];

/// `(constants, factor, bias)`: FACTOR is specialization constant 0 and
/// BIAS constant 1 of scale_bias.comp, set by name or by number.
const SPECIALIZATIONS: [(Constants, f32, f32); 3] = [
    (&[("FACTOR", 3.0), ("BIAS", 1.0)], 3.0, 1.0),
    (&[("0", -0.5), ("1", 4.0)], -0.5, 4.0),
    (&[], 2.0, 0.0),
];

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("spirv_program: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let scale_bias = kiln_spirv_kernels::module("scale_bias")?;
    let passes = kiln_spirv_kernels::module("passes")?;

    let mut kernels: Vec<(WgslKernel, f32, f32)> = SPECIALIZATIONS
        .iter()
        .enumerate()
        .map(|(number, (constants, factor, bias))| {
            let mut builder = WgslKernel::builder(
                KernelId::named("spirv_program.scale_bias").parameter(&number),
                "main",
            )
            .label("scale_bias.spv");
            for (name, value) in *constants {
                builder = builder.constant(*name, *value);
            }
            (builder.spirv(scale_bias), *factor, *bias)
        })
        .collect();
    // Every compute entry of the two-entry module is a kernel of its own:
    // `forward` doubles, `backward` halves.
    for entry in spirv_compute_entries(passes).map_err(|failure| failure.to_string())? {
        let factor = if entry == "forward" { 2.0 } else { 0.5 };
        let kernel = WgslKernel::builder(KernelId::named("spirv_program.passes"), entry.as_str())
            .label("passes.spv")
            .spirv(passes);
        kernels.push((kernel, factor, 0.0));
    }

    let device = match WgpuDevice::open() {
        Ok(device) => device,
        Err(no_adapter) => {
            if std::env::var("KILN_REQUIRE_DEVICE").is_ok_and(|value| value == "1") {
                return Err(format!("KILN_REQUIRE_DEVICE=1 and {no_adapter}").into());
            }
            println!("spirv_program: skipping the dispatches: {no_adapter}");
            let mut loader = KernelLoader::new(WgpuTarget::compile_only());
            for (kernel, _, _) in &kernels {
                loader.load(kernel, &ArtifactId::new(kernel.id(), WgpuVariant))?;
            }
            println!(
                "spirv_program: validated {} SPIR-V kernels with naga alone",
                kernels.len()
            );
            return Ok(());
        }
    };

    let target = WgpuTarget::on_device(device.clone()).with_optional_store(Store::from_env()?);
    let mut loader = KernelLoader::new(target);
    for (kernel, _, _) in &kernels {
        loader.enqueue(Box::new(kernel.clone()), WgpuVariant);
    }
    loader.compile_queued();

    let input: Vec<f32> = (0..ELEMENTS)
        .map(|index| (index % 977) as f32 * 0.25 - 100.0)
        .collect();
    let bytes: Vec<u8> = input.iter().flat_map(|value| value.to_le_bytes()).collect();
    let mut wrong = 0usize;
    for (kernel, factor, bias) in &kernels {
        let pipeline = loader.load(kernel, &ArtifactId::new(kernel.id(), WgpuVariant))?;
        let data = device.storage_buffer("data", &bytes)?;
        let groups = (ELEMENTS as u32).div_ceil(pipeline.workgroup_size()[0]);
        device.dispatch(&pipeline, &[(0, 0, &data)], [groups, 1, 1])?;
        let output = device.read(&data)?;
        wrong += input
            .iter()
            .zip(output.chunks_exact(4))
            .filter(|(x, word)| {
                let y = f32::from_le_bytes([word[0], word[1], word[2], word[3]]);
                y != *x * factor + bias
            })
            .count();
        println!(
            "spirv_program: {} `{}` ({}): checked {ELEMENTS} results",
            kernel.label(),
            kernel.entry(),
            kernel.constants().canonical(),
        );
    }
    let statistics = loader.statistics();
    println!(
        "spirv_program: {} SPIR-V kernels on {}: {} compiled, {} from the store; pipeline \
         cache: {}",
        kernels.len(),
        device.describe(),
        statistics.compiled,
        statistics.hits,
        loader.target().pipeline_cache_state(),
    );
    if wrong > 0 {
        return Err(format!("{wrong} results differ from the CPU's").into());
    }
    println!("spirv_program: every result matches the CPU's");
    Ok(())
}
