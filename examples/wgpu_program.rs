//! A wgpu program that adopts kiln: it keeps its own instance, device,
//! queue, buffers and command encoder, and asks kiln for 100
//! specializations of one WGSL kernel (pipeline-overridable constants),
//! compiled in one parallel batch (or read from the store, with the
//! driver's pipeline cache), then records all 100 dispatches into one
//! encoder of its own and checks every result.
//!
//! ```text
//! cargo run --release -p kiln --features wgpu --example wgpu_program
//! ```
//!
//! Without a Vulkan adapter it says why, compiles the 100 kernels with
//! naga alone, and exits 0; `KILN_REQUIRE_DEVICE=1` makes a missing adapter
//! a failure instead.

use std::future::Future;
use std::pin::pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

use kiln::wgpu::wgpu;
use kiln::wgpu::{WgpuDevice, WgpuTarget, WgpuVariant, WgslKernel};
use kiln::{ArtifactId, Kernel, KernelId, KernelLoader, Store};

/// One kernel: specialization `k` writes its results at `BASE`, so that
/// every dispatch of the encoder has a slice of the output of its own.
const AFFINE: &str = "
override SCALE: f32 = 1.0;
override OFFSET: f32 = 0.0;
override BASE: u32 = 0u;

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&x) {
        y[BASE + id.x] = x[id.x] * SCALE + OFFSET;
    }
}
";

const SPECIALIZATIONS: u32 = 100;
const ELEMENTS: u32 = 4096;

fn constants(number: u32) -> (f32, f32) {
    ((number % 7 + 1) as f32, number as f32)
}

fn specialization(number: u32) -> WgslKernel {
    let (scale, offset) = constants(number);
    WgslKernel::builder(
        KernelId::named("wgpu_program.affine").parameter(&number),
        "main",
    )
    .label(format!("affine {number}"))
    .constant("SCALE", f64::from(scale))
    .constant("OFFSET", f64::from(offset))
    .constant("BASE", f64::from(number * ELEMENTS))
    .source(AFFINE)
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("wgpu_program: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let kernels: Vec<WgslKernel> = (0..SPECIALIZATIONS).map(specialization).collect();
    let (device, queue) = match open_device() {
        Ok(opened) => opened,
        Err(no_adapter) => {
            if std::env::var("KILN_REQUIRE_DEVICE").is_ok_and(|value| value == "1") {
                return Err(format!("KILN_REQUIRE_DEVICE=1 and {no_adapter}").into());
            }
            println!("wgpu_program: skipping the dispatches: {no_adapter}");
            return compile_without_a_device(&kernels);
        }
    };

    // The program's buffers.
    let input: Vec<f32> = (0..ELEMENTS).map(|index| (index % 1000) as f32).collect();
    let output_bytes = u64::from(SPECIALIZATIONS * ELEMENTS) * 4;
    let x = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("x"),
        size: u64::from(ELEMENTS) * 4,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    queue.write_buffer(&x, 0, &floats_to_bytes(&input));
    let y = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("y"),
        size: output_bytes,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let readback = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("readback"),
        size: output_bytes,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });

    // Adopting kiln: a target on the program's device and the default
    // store (which keeps the driver's pipeline cache too), every
    // specialization queued, compiled in one batch.
    let target = WgpuTarget::on_device(WgpuDevice::new(device.clone(), queue.clone()))
        .with_optional_store(Store::from_env()?);
    let mut loader = KernelLoader::new(target);
    for kernel in &kernels {
        loader.enqueue(Box::new(kernel.clone()), WgpuVariant);
    }
    let started = Instant::now();
    loader.compile_queued();
    let compiled_in = started.elapsed();

    // One encoder of the program's, all 100 dispatches in one pass, then
    // the copy back: wgpu orders them as recorded.
    let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
        label: Some("wgpu_program"),
    });
    {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("affine"),
            timestamp_writes: None,
        });
        for kernel in &kernels {
            let pipeline = loader.load(kernel, &ArtifactId::new(kernel.id(), WgpuVariant))?;
            let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(pipeline.label()),
                layout: pipeline.bind_group_layout(0)?,
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: x.as_entire_binding(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 1,
                        resource: y.as_entire_binding(),
                    },
                ],
            });
            let compute = pipeline
                .pipeline()
                .ok_or("a kernel of an on-device target has a pipeline")?;
            pass.set_pipeline(compute);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(ELEMENTS.div_ceil(pipeline.workgroup_size()[0]), 1, 1);
        }
    }
    encoder.copy_buffer_to_buffer(&y, 0, &readback, 0, output_bytes);
    queue.submit([encoder.finish()]);

    let output = read_back(&device, &readback)?;
    let mut wrong = 0usize;
    for number in 0..SPECIALIZATIONS {
        let (scale, offset) = constants(number);
        let slice = &output[(number * ELEMENTS) as usize..((number + 1) * ELEMENTS) as usize];
        wrong += input
            .iter()
            .zip(slice)
            .filter(|&(&x, &y)| y != x * scale + offset)
            .count();
    }
    let statistics = loader.statistics();
    println!(
        "wgpu_program: {SPECIALIZATIONS} specializations on {}: {} compiled, {} from the store, \
         in {compiled_in:.2?}; pipeline cache: {}; all dispatched from the program's encoder",
        device.adapter_info().name,
        statistics.compiled,
        statistics.hits,
        loader.target().pipeline_cache_state(),
    );
    if wrong > 0 {
        return Err(format!("{wrong} results differ from the CPU's").into());
    }
    println!("wgpu_program: every result matches the CPU's");
    Ok(())
}

/// The program's own device: Vulkan, with the driver's pipeline cache
/// where the adapter has one.
fn open_device() -> Result<(wgpu::Device, wgpu::Queue), String> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::VULKAN,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapter = wait(instance.request_adapter(&wgpu::RequestAdapterOptions::default()))
        .map_err(|error| format!("no Vulkan adapter: {error}"))?;
    wait(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("wgpu_program"),
        required_features: adapter.features() & wgpu::Features::PIPELINE_CACHE,
        ..wgpu::DeviceDescriptor::default()
    }))
    .map_err(|error| format!("the adapter opened no device: {error}"))
}

/// `buffer`'s contents, as floats, once the work submitted has finished.
fn read_back(device: &wgpu::Device, buffer: &wgpu::Buffer) -> Result<Vec<f32>, String> {
    let (sender, receiver) = std::sync::mpsc::channel();
    buffer.map_async(wgpu::MapMode::Read, .., move |mapped| {
        let _ = sender.send(mapped);
    });
    device
        .poll(wgpu::PollType::Wait {
            submission_index: None,
            timeout: None,
        })
        .map_err(|error| format!("waiting for the device: {error}"))?;
    receiver
        .recv()
        .map_err(|_| "the mapping never answered".to_owned())?
        .map_err(|error| format!("mapping the output: {error}"))?;
    let bytes = buffer
        .get_mapped_range(..)
        .map_err(|error| format!("reading the output: {error}"))?
        .chunks_exact(4)
        .map(|word| f32::from_le_bytes([word[0], word[1], word[2], word[3]]))
        .collect();
    buffer.unmap();
    Ok(bytes)
}

fn floats_to_bytes(values: &[f32]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|value| value.to_le_bytes())
        .collect()
}

/// What the program can do without an adapter: validate its kernels with
/// naga, ready for a store that serves devices later.
fn compile_without_a_device(kernels: &[WgslKernel]) -> Result<(), Box<dyn std::error::Error>> {
    let mut loader = KernelLoader::new(WgpuTarget::compile_only());
    for kernel in kernels {
        loader.enqueue(Box::new(kernel.clone()), WgpuVariant);
    }
    let started = Instant::now();
    loader.compile_queued();
    for kernel in kernels {
        loader.load(kernel, &ArtifactId::new(kernel.id(), WgpuVariant))?;
    }
    println!(
        "wgpu_program: compiled {} specializations with naga alone in {:.2?}",
        kernels.len(),
        started.elapsed()
    );
    Ok(())
}

/// Runs a future of wgpu's to its end on this thread: on native backends
/// they are ready at once or when the device answers.
fn wait<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        match future.as_mut().poll(&mut context) {
            Poll::Ready(output) => return output,
            Poll::Pending => std::thread::park(),
        }
    }
}
